"""Run tags named once (radt/tags.py), and the kind of each run decided once from them."""

from __future__ import annotations

import ast
import importlib.util
import json
import re

from conftest import REPO
from radt.frontend.data import run_info

from radt.tags import (
    JOB_ROLE,
    LOADER_ROLE,
    MLFLOW_PARENT_RUN_ID,
    MODES,
    NODE_ROLE,
    RADT_GROUP_ROLE,
    RADT_LETTER,
    RADT_NODE_RANK,
    RADT_ROLE,
    RADT_WORKLOAD_RUNS,
    Mode,
    RunKind,
    RunTree,
    run_kind,
    tag_filter,
)

NOT_TAGS = {
    ("radt/tracking.py", "mlflow.db"): "the store's file name",
    ("radt/tracking.py", "mlflow.store.db.utils"): "MLflow's logger",
    ("radt/quantities.py", "radt.listeners"): "the listeners' entry-point group",
    ("radt/restclient.py", "mlflow.request_header_provider"): "MLflow's entry-point group",
    ("radt/restclient.py", "mlflow.request_auth_provider"): "MLflow's entry-point group",
    ("radt/record/compact.py", "radt.samples.layout"): "a Parquet metadata key",
    ("radt/record/compact.py", "radt.samples.keys"): "a Parquet metadata key",
    ("radt/analysis/load.py", "radt.source"): "a DataFrame.attrs key",
    ("frontend/data.py", "radt.window"): "a DataFrame.attrs key",
    ("frontend/pages/timeseries.py", "radt.window"): "a DataFrame.attrs key",
    ("frontend/pages/timeseries.py", "radt.source"): "a DataFrame.attrs key",
}
_NAME = re.compile(r"^(?:radt|mlflow)\.[A-Za-z_][\w.]*$")
_IN_FILTER = re.compile(r"tags\.`(?:radt|mlflow)\.")


def tag_literals(source: str) -> list[str]:
    """The strings in ``source`` that spell a ``radt.``/``mlflow.`` name or a search filter on
    one (f-strings' literal parts included; docstrings and messages with spaces are not)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip()
            if _NAME.match(text) or _IN_FILTER.search(text):
                found.append(text)
    return found


def names_a_module(text: str) -> bool:
    """``text`` is an importable module's dotted name (``radt.cli``), which no tag is."""
    try:
        return importlib.util.find_spec(text) is not None
    except (ImportError, ValueError):
        return False


def test_a_module_name_is_not_a_tag():
    """The exemption below could fail: a tag's name is no module's."""
    assert names_a_module("radt.cli") and names_a_module("mlflow.tracking")
    assert not names_a_module("radt.letter") and not names_a_module("mlflow.parentRunId")


def test_the_scan_finds_a_tag_spelled_out():
    """The check below could fail: it finds a plain literal, an f-string's and a filter's."""
    source = 'a = tags["radt.letter"]\nb = f"radt.nvml.x.{gpu}"\nc = f"tags.`mlflow.user` = {u}"\n'
    assert tag_literals(source) == ["radt.letter", "radt.nvml.x.", "tags.`mlflow.user` ="]
    assert tag_literals('raise TypeError("radt.phase needs a name")') == []


def test_no_product_module_but_radt_tags_spells_a_tag():
    """Every ``radt.*`` and ``mlflow.*`` tag is named in radt/tags.py and imported elsewhere."""
    spelled = []
    for folder in ("radt", "listeners", "frontend"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel == "radt/tags.py":
                continue
            for text in tag_literals(path.read_text()):
                if (rel, text) not in NOT_TAGS and not names_a_module(text):
                    spelled.append(f"{rel}: {text!r}")
    assert spelled == []


def test_tag_filter_is_mlflows_search_syntax():
    assert tag_filter(MLFLOW_PARENT_RUN_ID, "abc") == "tags.`mlflow.parentRunId` = 'abc'"
    assert tag_filter("radt.probe", "", "!=") == "tags.`radt.probe` != ''"
    assert tag_filter("radt.slurm.array_task_id", 3) == "tags.`radt.slurm.array_task_id` = '3'"
    assert tag_filter("radt.job", "it's") == "tags.`radt.job` = 'it''s'"


def test_each_kind_of_run_is_told_apart_the_same_way_by_the_analysis_and_the_ui(workspace):
    """A lone run, a workload, its training run and its shared loader, as a plan records
    them in a real store: run_kind, RunTree and the UI's RunInfo agree (the UI used to call
    the loader a client)."""
    client = workspace.client()
    experiment = client.create_experiment("kinds")
    lone = client.create_run(experiment).info.run_id
    workload = client.create_run(experiment, tags={RADT_WORKLOAD_RUNS: "2"}).info.run_id
    loader = client.create_run(
        experiment,
        tags={MLFLOW_PARENT_RUN_ID: workload, RADT_LETTER: "L", RADT_ROLE: LOADER_ROLE},
    ).info.run_id
    training = client.create_run(
        experiment, tags={MLFLOW_PARENT_RUN_ID: workload, RADT_LETTER: "A"}
    ).info.run_id
    child_of_lone = client.create_run(experiment, tags={MLFLOW_PARENT_RUN_ID: lone}).info.run_id
    runs = {run_id: client.get_run(run_id) for run_id in (lone, workload, loader, training)}
    expected = {
        lone: RunKind.LONE,
        workload: RunKind.WORKLOAD,
        loader: RunKind.LOADER,
        training: RunKind.TRAINING,
    }
    assert {i: run_kind(run.data.tags) for i, run in runs.items()} == expected
    assert {i: run_info(run).level for i, run in runs.items()} == {
        lone: "run",
        workload: "provider",
        loader: "loader",
        training: "client",
    }

    everything = [*runs.values(), client.get_run(child_of_lone)]
    tree = RunTree(everything)
    assert [k.info.run_id for k in tree.kids(workload)] == [training, loader]  # loader last
    assert [k.info.run_id for k in tree.kids(lone)] == [child_of_lone]
    assert tree.kids(training) == []
    # a run that others name their parent is a workload whatever its tags
    assert tree.kind(runs[lone]) == RunKind.WORKLOAD
    assert tree.kind(client.get_run(child_of_lone)) == RunKind.TRAINING
    assert f"{RunKind.LOADER}" == str(RunKind.LOADER) == "loader"

    # a job run's node runs by node rank, whichever started first (rank 10 after rank 2)
    job = client.create_run(experiment, tags={RADT_GROUP_ROLE: JOB_ROLE}).info.run_id
    ranks = ("10", "2", "0")  # created, and so started, in this order
    nodes = {
        rank: client.create_run(
            experiment,
            tags={MLFLOW_PARENT_RUN_ID: job, RADT_GROUP_ROLE: NODE_ROLE, RADT_NODE_RANK: rank},
        ).info.run_id
        for rank in ranks
    }
    tree = RunTree([client.get_run(i) for i in nodes.values()])
    assert [k.info.run_id for k in tree.kids(job)] == [nodes["0"], nodes["2"], nodes["10"]]


def test_a_mode_is_its_plan_spelling_wherever_a_str_is():
    """Plans read a Collocation cell into a Mode; it prints, hashes, compares and serialises
    as the plan's word, so tags, CSV and JSON keep the user's spelling."""
    from radt.plans.read import parse_collocation

    assert MODES == ("none", "naive", "mps", "mig")
    cells = ("-", "none", "naive", "mps", "mps:50", "3g.40gb", "mig 1g.10gb")
    assert [parse_collocation(cell).mode for cell in cells] == [
        Mode.NONE,
        Mode.NONE,
        Mode.NAIVE,
        Mode.MPS,
        Mode.MPS,
        Mode.MIG,
        Mode.MIG,
    ]
    assert parse_collocation("mps:50").mode is Mode.MPS
    assert "mig" in {Mode.MIG} and Mode.MIG in {"mig"} and {"mps": 1}[Mode.MPS] == 1
    assert f"{Mode.NAIVE} x2" == "naive x2" and str(Mode.MIG) == "mig"
    assert json.dumps({"mode": Mode.MIG}) == '{"mode": "mig"}'
    assert Mode("mps") is Mode.MPS
