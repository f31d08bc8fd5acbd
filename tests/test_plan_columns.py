"""The table of plan columns: a column defined only in radt.plans.columns.TABLE is read,
checked, written back and reaches the row's run, with no other code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, default_signals

from radt.plans import columns
from radt.plans.columns import PlanColumn
from radt.plans.model import PlanError
from radt.plans.read import read_plan
from radt.plans.writeback import write_results
from radt.tags import RADT_JOB, RADT_JOB_IGNORE, RADT_WARMUP_EPOCHS, RADT_WARMUP_S


def parse_seed(value: str) -> int:
    """A test column's parser: a whole number."""
    if not value.isdigit():
        raise ValueError(f"{value!r} is not a whole number (e.g. 7)")
    return int(value)


SEED = PlanColumn("Seed", "seed", parse_seed, tag="radt.test_seed", env="RADT_TEST_SEED")

PLAN = """\
Experiment, Workload, File, Listeners, Seed
e, one, job.py, none, 7
e, two, job.py, none, -
"""

JOB = """\
import os
print("seed", os.environ.get("RADT_TEST_SEED"))
"""


@pytest.fixture
def seed_column(monkeypatch):
    monkeypatch.setattr(columns, "TABLE", (*columns.TABLE, SEED))


def test_a_column_only_in_the_table_is_read_and_its_problems_name_it(seed_column, tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    plan = tmp_path / "plan.csv"
    plan.write_text(PLAN)
    rows = read_plan(plan, cwd=tmp_path).rows
    assert [row.seed for row in rows] == [7, None]
    assert rows[0].values["seed"] == 7
    plan.write_text(PLAN.replace(", 7\n", ", seven\n").replace("Seed", "Sed"))
    with pytest.raises(PlanError) as info:
        read_plan(plan, cwd=tmp_path)
    assert "unknown column 'Sed' (allowed: Experiment, " in str(info.value)
    assert "Role, Autolog, Seed); did you mean 'Seed'?" in str(info.value)
    plan.write_text(PLAN.replace(", 7\n", ", seven\n"))
    with pytest.raises(PlanError) as info:
        read_plan(plan, cwd=tmp_path)
    assert str(info.value).splitlines()[1:] == [
        f"{plan} line 2: Seed 'seven' is not a whole number (e.g. 7)"
    ]


def test_a_column_only_in_the_table_is_kept_when_results_are_written_back(seed_column, tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    plan_path = tmp_path / "plan.csv"
    plan_path.write_text(PLAN)
    plan = read_plan(plan_path, cwd=tmp_path)
    first = plan.workloads[0]
    write_results(plan, first, {first.rows[0].line: ("FINISHED", "abc123")})
    assert plan_path.read_text().splitlines()[:2] == [
        "Experiment, Workload, File, Listeners, Seed, Status, Run",
        "e, one, job.py, none, 7, FINISHED, abc123",
    ]
    again = read_plan(plan_path, cwd=tmp_path).rows
    assert [(row.seed, row.status) for row in again] == [(7, "FINISHED"), (None, "")]


def test_a_column_only_in_the_table_becomes_the_runs_tag_and_the_commands_variable(
    seed_column, tmp_path
):
    (tmp_path / "job.py").write_text(JOB)
    plan = tmp_path / "plan.csv"
    plan.write_text(PLAN)
    given, empty = read_plan(plan, cwd=tmp_path).rows
    assert columns.run_tags(given.values, {RADT_JOB_IGNORE: "--lr"}) == {
        RADT_JOB_IGNORE: "--lr",
        "radt.test_seed": "7",
    }
    assert columns.run_env(given.values) == {"RADT_TEST_SEED": "7"}
    assert columns.run_tags(empty.values, {}) == {} and columns.run_env(empty.values) == {}


def test_a_rows_warm_up_replaces_both_of_the_command_lines_and_its_job_replaces_its_job():
    defaults = {RADT_JOB: "cli", RADT_WARMUP_S: "30"}
    assert columns.run_tags({"warmup_epochs": 2}, defaults) == {
        RADT_JOB: "cli",
        RADT_WARMUP_EPOCHS: "2",
    }
    assert columns.run_tags({"job": "cnn", "warmup_s": 1.5}, defaults) == {
        RADT_JOB: "cnn",
        RADT_WARMUP_S: "1.5",
    }
    assert columns.run_tags({"job": None, "warmup_s": None}, defaults) == defaults
    assert columns.both_given({"warmup_epochs": 1, "warmup_s": 0.0}) == [
        "give WarmupEpochs or WarmupS, not both"
    ]


class Options:
    autolog = True


def test_an_empty_autolog_cell_takes_the_command_lines_autolog():
    assert columns.launch_options({"autolog": False}, Options()) == {"autolog": True}
    assert columns.launch_options({"autolog": True}, object()) == {"autolog": True}
    assert columns.launch_options({}, object()) == {"autolog": False}


BOOT = """\
import sys
from radt.plans import columns
sys.path.insert(0, {tests!r})
from test_plan_columns import SEED
columns.TABLE = (*columns.TABLE, SEED)
from radt.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_column_only_in_the_table_reaches_the_run_of_a_real_plan(workspace):
    workspace.script("job.py", JOB)
    (workspace.root / "plan.csv").write_text(PLAN)
    boot = workspace.root / "boot.py"
    boot.write_text(BOOT.format(tests=str(Path(__file__).parent)))
    done = subprocess.run(
        [sys.executable, str(boot), "plan.csv"],
        cwd=workspace.root,
        env=workspace.env,
        capture_output=True,
        text=True,
        timeout=280,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr
    runs = {run.info.run_name: run for run in workspace.runs("e")}
    assert runs["one-A"].data.tags["radt.test_seed"] == "7"
    assert "radt.test_seed" not in runs["two-A"].data.tags
    assert "seed 7" in done.stdout and "seed None" in done.stdout


# A study's Job is derived per workload (from its file and params, or the study's job: key).
OWN_CODE = {("radt/plans/studyplan.py", "Job")}


def test_no_product_code_but_the_table_names_a_table_drawn_column():
    """The promise of docs/architecture.md's "How to add… a plan column": a column with a
    parser is named (as its header spelling or as ``row.<field>``) nowhere but in the table."""
    found = []
    for folder in ("radt", "listeners", "frontend"):
        for path in sorted((REPO / folder).rglob("*.py")):
            where = str(path.relative_to(REPO))
            if where == "radt/plans/columns.py":
                continue
            code = path.read_text()
            for column in columns.drawn():
                named = re.search(rf"[\"']{column.name}[\"']|\brow\.{column.field}\b", code)
                if named and (where, column.name) not in OWN_CODE:
                    found.append(f"{where}: {named.group()}")
    assert found == []
