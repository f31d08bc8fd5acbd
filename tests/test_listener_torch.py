"""The ``torch`` listener: the PyTorch profiler inside real training scripts on the CPU under a
real radT process and SQLite store; its schedule, artifacts, metrics and option errors; and
that without it the run API never imports the profiler."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO
from radt.listeners.torch import TorchListener

from radt.analysis.phases import UNMARKED, phases
from radt.launch.registry import discover, select

pytest.importorskip("torch")


def artifact(workspace, run_id: str, path: str, tmp_path: Path) -> Path:
    return Path(workspace.client().download_artifacts(run_id, path, str(tmp_path)))


def trace_events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        trace = json.load(f)  # valid JSON, gzipped
    assert isinstance(trace["traceEvents"], list)
    return trace["traceEvents"]


def annotations(events: list[dict]) -> Counter:
    return Counter(e["name"] for e in events if e.get("cat") == "user_annotation")


def steps_of(events: list[dict]) -> list[str]:
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


# ------------------------------------------------------------------ options


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("torch.steps=0", "-o torch.steps=0: steps takes a whole number ≥ 1"),
        ("torch.skip=x", "-o torch.skip=x: skip takes a whole number ≥ 0"),
        ("torch.every=3", "-o torch.every=3: torch has no option every; its options: skip, steps"),
    ],
)
def test_a_bad_option_is_one_line_before_anything_starts(workspace, option, said):
    done = workspace.run(["-l", "torch", "-o", option, "--", "true"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("radt: error: -o torch.")
    assert said in lines[0]
    assert "Traceback" not in done.stderr
    assert workspace.runs() == []


def test_the_profiler_is_opt_in():
    found = discover()
    assert found["torch"].reason is None
    assert "torch" not in {listener.name for listener in select(None, found)}
    listener = TorchListener()
    listener.configure({"steps": "2", "skip": "0", "top": "5"})
    assert listener.available() is None


# ------------------------------------------------------------------ the example, profiled


@pytest.mark.slow
def test_the_example_is_profiled_on_its_schedule_and_its_phases_get_energy_shares(
    workspace, tmp_path
):
    """examples/train.py (10 steps) under ``-l torch+constpower``: steps 0-1 skipped, step 2
    warms up, steps 3-5 are recorded; its four phases are in the trace (once per recorded
    step) and in radt.phases, with the energy of a constant 250 W."""
    done = workspace.run(
        [
            "-l",
            "torch+constpower",
            "-o",
            "torch.skip=2",
            "-o",
            "torch.steps=3",
            str(REPO / "examples" / "train.py"),
            "--epochs",
            "1",
            "--examples",
            "640",
            "--batch-size",
            "64",
            "--threads",
            "1",
        ],
        timeout=280,
        env={**workspace.env, "RADT_TEST_POWER_W": "250"},
    )
    assert done.returncode == 0, done.stderr
    assert "listener torch" not in done.stderr  # no warning
    run = workspace.only_run()
    run_id = run.info.run_id
    listed = {a.path for a in workspace.client().list_artifacts(run_id, "radt/torch")}
    assert listed == {"radt/torch/trace.json.gz", "radt/torch/ops.csv"}

    events = trace_events(artifact(workspace, run_id, "radt/torch/trace.json.gz", tmp_path))
    assert steps_of(events) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    seen = annotations(events)
    assert {name: seen[name] for name in ("data", "forward", "backward", "step")} == {
        "data": 3,
        "forward": 3,
        "backward": 3,
        "step": 3,
    }
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::addmm" for e in events)

    ops_csv = artifact(workspace, run_id, "radt/torch/ops.csv", tmp_path).read_text()
    ops = list(csv.DictReader(io.StringIO(ops_csv)))
    names = [r["name"] for r in ops]
    # the model's layers: convolutions, max pooling, the linear layers (addmm)
    assert {"aten::convolution_backward", "aten::max_pool2d_with_indices", "aten::addmm"} <= set(
        names
    )
    assert not {"data", "forward", "backward", "step"} & set(names)  # phases are not operators
    assert not any(n.startswith("ProfilerStep") for n in names)
    assert len(ops) <= 30
    cpu_us = [float(r["self_cpu_time_us"]) for r in ops]
    assert cpu_us == sorted(cpu_us, reverse=True) and cpu_us[0] > 0
    assert {r["self_cuda_time_us"] for r in ops} == {""}  # no CUDA here

    metrics, tags = run.data.metrics, run.data.tags
    assert metrics["system/torch/capture/steps"] == 3
    assert metrics["system/torch/ops/self_cpu_time_ms"] > 0
    assert metrics["system/torch/ops/calls"] >= sum(int(r["calls"]) for r in ops)
    assert metrics["system/torch/capture/wall_ms"] > 0
    assert "system/torch/ops/self_cuda_time_ms" not in metrics
    assert tags["radt.torch.activities"] == "cpu"
    assert tags["radt.torch.schedule"] == "skip 2, record 3"

    table = phases(runs=[run_id], tracking_uri=workspace.uri, cache_dir=workspace.home)
    assert set(table["phase"]) == {"data", "forward", "backward", "step", UNMARKED}
    marked = table[table["phase"] != UNMARKED]
    assert set(marked["count"]) == {10}
    for row in marked.itertuples():
        assert row.energy_share == pytest.approx(row.time_share, abs=1e-3), row
    assert table["time_share"].sum() == pytest.approx(1.0)


# ------------------------------------------------------------------ radt.step, partial profiles

STEPPED = """
import os, radt, torch
model = torch.nn.Linear(8, 2)
for i in range(int(os.environ.get("STEPS", "8"))):
    with radt.phase("fwd"):
        model(torch.randn(4, 8)).sum().backward()
    radt.log_examples(2)  # twice per step: radt.step() marks the steps, not these
    radt.log_examples(2)
    radt.step()
"""


@pytest.mark.slow
def test_radt_step_marks_the_steps_once_a_script_calls_it(workspace, tmp_path):
    workspace.script("stepped.py", STEPPED)
    done = workspace.run(["-l", "torch", "-o", "torch.skip=1", "-o", "torch.steps=2", "stepped.py"])
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    events = trace_events(
        artifact(workspace, run.info.run_id, "radt/torch/trace.json.gz", tmp_path)
    )
    assert steps_of(events) == ["ProfilerStep#2", "ProfilerStep#3"]
    assert annotations(events)["fwd"] == 2  # one per recorded step
    assert run.data.metrics["system/torch/capture/steps"] == 2


@pytest.mark.slow
def test_a_command_that_ends_early_keeps_the_steps_it_recorded(workspace, tmp_path):
    workspace.script("stepped.py", STEPPED)
    env = {**workspace.env, "STEPS": "4"}
    options = ["-o", "torch.skip=1", "-o", "torch.steps=5"]
    done = workspace.run(["-l", "torch", *options, "stepped.py"], env=env)
    assert done.returncode == 0, done.stderr
    assert "recorded 1 of 5 steps (the command ended first)" in done.stderr
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.metrics["system/torch/capture/steps"] == 1
    events = trace_events(
        artifact(workspace, run.info.run_id, "radt/torch/trace.json.gz", tmp_path)
    )
    assert "ProfilerStep#2" in steps_of(events)


@pytest.mark.slow
def test_a_script_that_never_steps_has_no_profile_and_says_why(workspace):
    workspace.script("idle.py", "import radt, torch\nprint('no steps')\n")
    done = workspace.run(["-l", "torch", "idle.py"])
    assert done.returncode == 0, done.stderr
    assert "listener torch: no profile (the script never called radt.step()" in done.stderr
    run = workspace.only_run()
    assert not [m for m in run.data.metrics if m.startswith("system/torch/")]


@pytest.mark.slow
def test_a_plan_row_gets_the_profiler_too(workspace, tmp_path):
    workspace.script("stepped.py", STEPPED)
    (workspace.root / "plan.csv").write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
        "profiled, alone, , , -, none, stepped.py, torch, \n"
    )
    done = workspace.run(["-o", "torch.skip=0", "-o", "torch.steps=2", "plan.csv"], timeout=200)
    assert done.returncode == 0, done.stderr
    child = [r for r in workspace.runs("profiled") if "mlflow.parentRunId" in r.data.tags]
    assert len(child) == 1
    run_id = child[0].info.run_id
    events = trace_events(artifact(workspace, run_id, "radt/torch/trace.json.gz", tmp_path))
    assert steps_of(events) == ["ProfilerStep#1", "ProfilerStep#2"]


# ------------------------------------------------------------------ off: nothing of the profiler

NO_TORCH = """
import json, os, sys, radt
for i in range(50):
    with radt.phase("work"):
        radt.log_examples(1)
    radt.step()
print(json.dumps({"profiler": "torch.profiler" in sys.modules, "torch": "torch" in sys.modules,
                  "dir": "RADT_TORCH_DIR" in os.environ}))
"""

WITH_TORCH = """
import json, radt, torch
from torch.autograd import profiler
enabled = []
for i in range(20):
    with radt.phase("work"):
        torch.ones(3).sum()
        enabled.append(profiler._is_profiler_enabled)
    radt.log_examples(1)
    radt.step()
print(json.dumps({"enabled": any(enabled), "profiler": radt.run_api._profiler is not None}))
"""


@pytest.mark.slow
def test_without_the_listener_the_profiler_is_never_imported_or_started(workspace):
    workspace.script("no_torch.py", NO_TORCH)
    workspace.script("with_torch.py", WITH_TORCH)
    done = workspace.run(["-l", "none", "no_torch.py"])
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"profiler": False, "torch": False, "dir": False}
    done = workspace.run(["-l", "none", "with_torch.py"])
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"enabled": False, "profiler": False}
    tables = phases(experiment="Default", tracking_uri=workspace.uri, cache_dir=workspace.home)
    counts = tables[tables["phase"] == "work"]["count"].tolist()
    assert sorted(counts) == [20, 50]  # the phases were recorded all the same
