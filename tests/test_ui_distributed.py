"""A distributed training in the UI (issue 21): the runs grid shows the job with its nodes
beneath, the time-series page overlays a key across the nodes. A real group recorded by radT
itself: two "nodes" on this host (``RADT_NODE`` a / b, node ranks 0 / 1, ``--group``), each
its own radT process in a real SQLite store; the trainings meet at a file barrier, as ranks
meet at a rendezvous, so the nodes train at the same time."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import dataclass

import pandas as pd
import pytest
from conftest import Workspace, default_signals, kill_quietly, new_workspace
from radt.frontend.data import Store
from radt.frontend.pages.runs import JOB_FIELDS, grid_columns, grid_rows, runs_note
from radt.frontend.pages.timeseries import _labels
from radt.frontend.series import RunLabel, timeseries_figure

EXPERIMENT = "ui-dist"
STEPS = 20
BATCH = 8
"""Each node counts STEPS × BATCH examples."""
POWER_W = {"a": 200, "b": 300}
"""Each node's (constant) GPU power, so that its trace is told apart."""
TRAIN = """\
import os, sys, time
from pathlib import Path

import radt

node = os.environ["RADT_NODE"]
Path(f"ready-{node}").write_text("")
deadline = time.time() + 240
while not all(Path(f"ready-{n}").exists() for n in "ab"):  # the rendezvous of both nodes
    if time.time() > deadline:
        sys.exit("the other node never came")
    time.sleep(0.05)
for step in range(int(sys.argv[1])):
    time.sleep(0.05)
    radt.log_examples(int(sys.argv[2]))
"""


@dataclass
class Job:
    """The store a recorded 2-node job is in, its job run's id and its node runs' ids by node."""

    ws: Workspace
    job_id: str
    nodes: dict[str, str]


def record_job(ws: Workspace, group: str = "ddp") -> Job:
    """Record one distributed job of two nodes, a and b, each under its own radT (started at
    once, as ``srun -N2`` starts them); every node's GPU is ``constpower``'s."""
    ws.script("train.py", TRAIN)
    processes = []
    try:
        for rank, node in enumerate("ab"):
            env = {
                **ws.env,
                "RADT_NODE": node,
                "RADT_NODE_RANK": str(rank),
                "RADT_NODES": "2",
                "RADT_TEST_POWER_W": str(POWER_W[node]),
            }
            argv = ws.argv(
                ["-e", EXPERIMENT, "-l", "constpower", "--group", group, "--"]
                + [sys.executable, "train.py", str(STEPS), str(BATCH)]
            )
            processes.append(
                subprocess.Popen(
                    argv,
                    cwd=ws.root,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    preexec_fn=default_signals,
                )
            )
        outputs = [p.communicate(timeout=300)[0] for p in processes]
    finally:
        for process in processes:
            kill_quietly(process.pid)
    assert [p.returncode for p in processes] == [0, 0], outputs
    runs = ws.runs(EXPERIMENT)
    (job,) = [r for r in runs if r.data.tags.get("radt.group.role") == "job"]
    nodes = {
        r.data.tags["radt.node"]: r.info.run_id
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == job.info.run_id
    }
    assert sorted(nodes) == ["a", "b"] and job.info.status == "FINISHED", outputs
    return Job(ws, job.info.run_id, nodes)


@pytest.fixture(scope="module")
def job(tmp_path_factory, template_db) -> Job:
    return record_job(new_workspace(tmp_path_factory.mktemp("ui-dist"), template_db))


@pytest.mark.slow
def test_grid_shows_the_job_with_its_figures_and_its_nodes_beneath(job):
    store = Store(job.ws.uri)
    (experiment,) = [e.id for e in store.experiments() if e.name == EXPERIMENT]
    rows = grid_rows(store.summary(experiment), store.scaling_baselines(experiment))
    assert [(row["name"], row["kind"]) for row in rows] == [
        ("ddp", "job"),
        ("↳ a", "node"),
        ("↳ b", "node"),
    ]
    job_row, a, b = rows
    assert job_row["run_id"] == job.job_id
    assert (a["run_id"], b["run_id"]) == (job.nodes["a"], job.nodes["b"])
    assert (job_row["nodes"], job_row["gpus"]) == (2, 2)  # one constpower GPU on each node
    assert job_row["configuration"] == "2 nodes, 2 GPUs"  # as `radt runs` says it
    assert job_row["examples_total"] == 2 * STEPS * BATCH  # every node's count, summed
    assert job_row["examples_per_s"] > 0
    assert job_row["examples_per_s_per_gpu"] == pytest.approx(job_row["examples_per_s"] / 2)
    assert job_row["scaling_efficiency"] is None  # no run of this job on fewer nodes
    # each node row has the node's own figures, and none of the job's
    for row in (a, b):
        assert row["configuration"] == "none"  # its GPU to itself, not "none x2"
        assert row["examples_total"] == STEPS * BATCH
        assert row["examples_per_s"] > 0
        assert all(row[field] is None for field in JOB_FIELDS)
    assert {"a": a["power_mean_w"], "b": b["power_mean_w"]} == pytest.approx(POWER_W)
    shown = {c["field"] for c in grid_columns(rows) if not c.get("hide")}
    assert {"nodes", "gpus", "examples_per_s_per_gpu"} <= shown
    assert "scaling_efficiency" not in shown  # shown only when a job has one
    note = runs_note(EXPERIMENT, [row["kind"] for row in rows])
    assert note.startswith(f"{EXPERIMENT}: 1 distributed job, 2 node runs in them.")


@pytest.mark.slow
def test_a_ticked_job_overlays_a_key_across_its_nodes_one_trace_per_node(job):
    store = Store(job.ws.uri)
    runs = store.runs([job.job_id])  # the job alone brings its nodes: they hold the series
    assert set(runs) == {job.job_id, *job.nodes.values()}
    assert {r.node for r in runs.values()} == {None, "a", "b"}
    labels = _labels(runs)
    starts = {labels[job.nodes[n]].start_us for n in "ab"}
    assert starts == {runs[job.job_id].start_us}  # the nodes on their job's time axis
    key = "nvml/gpu0/power_w"
    frame = store.samples(list(runs.values()), [key])
    fig, stats = timeseries_figure(frame, labels, [key])
    assert sorted(t.name for t in fig.data) == [f"node a · {key}", f"node b · {key}"]
    assert stats.traces == 2
    levels = {t.name[5]: set(t.y) for t in fig.data}
    assert levels == {"a": {200.0}, "b": {300.0}}
    # ticking one node of the job draws that node alone (its job comes along, without power)
    one = store.runs([job.nodes["b"]])
    assert set(one) == {job.job_id, job.nodes["b"]}
    fig, _ = timeseries_figure(store.samples(list(one.values()), [key]), _labels(one), [key])
    assert [t.name for t in fig.data] == [f"node b · {key}"]


def test_nodes_share_their_jobs_time_axis_so_a_lag_shows():
    """Node b started 3 s after its job, a 1 s after: the same sample time of each, relative to
    the job's start, lies 2 s apart (on each run's own start both would be at 0)."""
    t0 = pd.Timestamp("2026-01-01T00:00:00Z")
    us = int(t0.value // 1000)
    labels = {
        "j": RunLabel("j", "ddp", us, job=True),
        "a": RunLabel("a", "a", us, node="a"),
        "b": RunLabel("b", "b", us, node="b"),
    }
    frame = pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "b"],
            "key": ["nvml/gpu0/power_w"] * 4,
            "timestamp": [t0 + pd.Timedelta(seconds=s) for s in (1, 2, 3, 4)],
            "value": [100.0, 110.0, 100.0, 110.0],
        }
    )
    fig, _ = timeseries_figure(frame, labels, ["nvml/gpu0/power_w"])
    xs = {t.name: list(t.x) for t in fig.data}
    assert xs == {
        "node a · nvml/gpu0/power_w": [1.0, 2.0],
        "node b · nvml/gpu0/power_w": [3.0, 4.0],
    }
    assert fig.layout.xaxis.title.text == "seconds since the run started (a node's: its job's)"
    assert labels["j"].label == "ddp (job)" and labels["a"].label == "node a"


def test_scaling_efficiency_shows_when_a_job_has_one_and_names_its_baseline():
    from radt.analysis.summary import COLUMNS

    frame = pd.DataFrame(
        [
            {"level": "job", "run_id": "j2", "run_name": "two", "nodes": 2.0, "gpus": 2.0},
            {"level": "node", "run_id": "n1", "run_name": "a", "parent_run_id": "j2"},
        ],
        columns=list(COLUMNS),
    )
    rows = grid_rows(frame, {"j2": "j1 (1 node)"})
    assert rows[0]["configuration"] == "2 nodes, 2 GPUs"
    shown = {c["field"] for c in grid_columns(rows) if not c.get("hide")}
    assert "scaling_efficiency" not in shown and rows[0]["scaling_baseline"] == "j1 (1 node)"
    frame.loc[0, "scaling_efficiency"] = 5 / 6  # docs/analysis.md's worked example: 6.667 / 8
    rows = grid_rows(frame, {"j2": "j1 (1 node)"})
    (column,) = [c for c in grid_columns(rows) if c["field"] == "scaling_efficiency"]
    assert not column.get("hide") and rows[0]["scaling_efficiency"] == pytest.approx(0.8333, 1e-4)
    assert (
        "'examples/s per GPU over that of ' + params.data.scaling_baseline"
        in (column["tooltipValueGetter"]["function"])
    )
    assert "scaling_baseline" not in rows[1]  # a node has none


@pytest.mark.slow
def test_exporting_a_ticked_job_gives_its_nodes_samples_and_rows(job):
    store = Store(job.ws.uri)
    samples = pd.read_csv(io.BytesIO(store.export("samples", "csv", None, [job.job_id])))
    assert set(job.nodes.values()) <= set(samples["run_id"])  # the job run holds none itself
    power = samples[samples["key"].str.endswith("power_w")].groupby("run_id")["value"].mean()
    assert power[job.nodes["a"]] == pytest.approx(POWER_W["a"])
    summary = pd.read_csv(io.BytesIO(store.export("summary", "csv", None, [job.job_id])))
    assert sorted(summary["level"]) == ["job", "node", "node"]


@pytest.mark.slow
def test_radt_export_and_load_of_a_job_run_give_its_node_runs_as_the_ui_does(job):
    """Issue 29: ``radt export --runs <job run>`` and ``radt.load(runs=[job run])`` bring the
    job's node runs (their samples, their node rows), as the UI's export of a ticked job."""
    import radt

    nodes = set(job.nodes.values())
    done = job.ws.run(["export", "--runs", job.job_id, "-o", "job.csv"])
    assert done.returncode == 0, done.stderr
    samples = pd.read_csv(job.ws.root / "job.csv")
    assert set(samples["run_id"]) == {*nodes, job.job_id}  # the job run: only its figures
    power = samples[samples["key"] == "nvml/gpu0/power_w"].groupby("run_id")["value"].mean()
    assert power.to_dict() == pytest.approx({job.nodes[n]: POWER_W[n] for n in "ab"})
    done = job.ws.run(["export", "--runs", job.job_id, "--summary", "-o", "rows.csv"])
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(job.ws.root / "rows.csv")
    assert sorted(zip(rows["level"], rows["run_id"], strict=True)) == sorted(
        [("job", job.job_id), *(("node", n) for n in nodes)]
    )
    where = {"tracking_uri": job.ws.uri, "cache_dir": job.ws.home / "cache"}
    loaded = radt.load(runs=[job.job_id], keys=["nvml/gpu0/power_w"], **where)
    assert set(loaded["run_id"]) == nodes
    one = radt.load(runs=[job.nodes["a"]], keys=["nvml/gpu0/power_w"], **where)
    assert set(one["run_id"]) == {job.nodes["a"]}  # a node brings no other node
