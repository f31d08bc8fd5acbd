"""The original radT's (0.2.30) example plans and scripts, as they are in its repository
(tests/fixtures/radt030, issue 22 items 13 and 14): its scripts' ``radt.run.RADTBenchmark``,
``run.log_metric`` and ``radt.log_metric``, and its plans' ``-`` rows that share a GPU.

This machine has no torchvision, CIFAR-10 or GPU: the scripts run as CPU stand-ins
(tests/fixtures/radt030/standin) that keep every line of the original that calls radT, and the
plans run on the stand-in nvidia-smi of tests/fakes, with their listeners unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import FAKES, FIXTURES

from radt.plans.read import read_plan

ORIGINAL = FIXTURES / "radt030"
SCRIPTS = ("cifar10.py", "cifar10_context.py")
NOTE = "means naive sharing, as in the original radT; write none for a baseline"


def radt_lines(text: str) -> list[str]:
    """The lines of a script that call radT, stripped."""
    return [line.strip() for line in text.splitlines() if "radt" in line or "run.log" in line]


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_stand_ins_keep_every_radt_line_of_the_originals(name):
    original = radt_lines((ORIGINAL / name).read_text())
    standin = radt_lines((ORIGINAL / "standin" / name).read_text())
    assert len(original) >= 3
    assert [line for line in standin if line in original] == original


@pytest.mark.parametrize("name", SCRIPTS)
def test_without_radt_the_original_calls_do_nothing(tmp_path, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}
    done = subprocess.run(
        [sys.executable, str(ORIGINAL / "standin" / name), "--batch-size", "16"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Finished Training" in done.stdout
    assert list(tmp_path.iterdir()) == []  # no mlruns/ nor mlflow.db: nothing was logged


def original_layout(workspace, env: dict[str, str] | None = None) -> None:
    """csv/ with the original plans, pytorch/ with the stand-in scripts, radT run from csv/."""
    (workspace.root / "csv").mkdir()
    for plan in ORIGINAL.glob("experiment_*.csv"):
        shutil.copy(plan, workspace.root / "csv" / plan.name)
    shutil.copytree(ORIGINAL / "standin", workspace.root / "pytorch")
    workspace.root = workspace.root / "csv"
    workspace.env.update(PATH=f"{FAKES}{os.pathsep}{workspace.env['PATH']}", **(env or {}))


def metric_steps(workspace, run, key: str) -> list[tuple[int, float]]:
    history = workspace.client().get_metric_history(run.info.run_id, key)
    return sorted((m.step, m.value) for m in history)


@pytest.mark.slow
def test_the_original_double_plan_shares_the_gpu_naively(workspace):
    """experiment_double.csv: two `-` rows of workload 1 run together, cifar10.py's
    radt.log_metric lands in each run."""
    original_layout(workspace)
    done = workspace.run(["experiment_double.csv"], timeout=300)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if NOTE in line]
    assert notes == ["radt: collocation - in 1 workload of several runs (0/1) " + NOTE], done.stderr
    runs = {r.info.run_name: r for r in workspace.runs("Default")}
    trainings = [runs["cifar collocated test run 1"], runs["cifar collocated test run 2"]]
    for run in trainings:
        assert run.info.status == "FINISHED"
        assert run.data.tags["radt.collocation"] == "naive"
        assert metric_steps(workspace, run, "ML - epoch") == [(0, 0.0), (1, 1.0)]
        assert [step for step, _ in metric_steps(workspace, run, "ML - loss")] == [0, 0, 1, 1]
    status = (workspace.root / "experiment_double.csv").read_text().splitlines()
    assert [line.split(",")[3] for line in status[1:]] == ["FINISHED", "FINISHED"]


@pytest.mark.slow
def test_the_original_collocation_plan_keeps_a_lone_row_as_the_baseline(workspace):
    """experiment_collocation.csv, workloads 1 (one `-` row: the baseline) and 2 (two `-` rows:
    naive sharing), with cifar10_context.py's RADTBenchmark and run.log_metric."""
    original_layout(workspace, {"FAKE_NVIDIA_SMI_GPUS": "3"})
    done = workspace.run(["experiment_collocation.csv", "--modes", "none+naive"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(NOTE) == 1
    runs = {r.info.run_name: r for r in workspace.runs("Default")}
    assert runs["no sharing"].data.tags["radt.collocation"] == "none"
    for name in ("shared gpu 1", "shared gpu 2"):
        assert runs[name].data.tags["radt.collocation"] == "naive"
        assert runs[name].info.status == "FINISHED"
    for name in ("no sharing", "shared gpu 1", "shared gpu 2"):
        assert metric_steps(workspace, runs[name], "ML - epoch") == [(0, 0.0), (1, 1.0)]
    assert "MPS shared gpu 1" not in runs  # workloads 3 and 4 were left to --modes


@pytest.mark.parametrize(
    ("plan", "modes"),
    [
        ("experiment_double.csv", [["naive", "naive"]]),
        ("experiment_double_context.csv", [["naive", "naive"]]),
        (
            "experiment_collocation.csv",
            [["none"], ["naive", "naive"], ["mps", "mps"], ["mig", "mig"]],
        ),
    ],
)
def test_the_original_plans_read_dash_as_naive_only_among_several_rows(tmp_path, plan, modes):
    shutil.copytree(ORIGINAL / "standin", tmp_path / "pytorch")
    (tmp_path / "csv").mkdir()
    read = read_plan(ORIGINAL / plan, cwd=tmp_path / "csv")
    assert [[row.collocation.mode for row in w.rows] for w in read.workloads] == modes
    assert [NOTE in note for note in read.notes] == [True]


def test_none_stays_the_baseline_among_several_rows(tmp_path):
    from radt.plans.model import PlanError

    (tmp_path / "job.py").write_text("print('ran')\n")
    (tmp_path / "plan.csv").write_text(
        "Experiment,Workload,Collocation,File\n0,1,none,job.py\n0,1,none,job.py\n"
    )
    with pytest.raises(PlanError) as caught:
        read_plan(tmp_path / "plan.csv", cwd=tmp_path)
    assert "collocation none means the run has its GPU to itself" in str(caught.value)
