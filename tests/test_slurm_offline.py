"""radT's Slurm side where no cluster is needed (the fast tier's tests of radt/slurm;
test_slurm.py runs the same paths against slurmctld and slurmd): the ``slurm:`` options, the
store warning, and a plan's ``--slurm --dry-run``, which prints the sbatch line and submits
nothing."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import FAKES, Workspace

from radt.errors import UsageError
from radt.slurm.dispatch import store_warning
from radt.slurm.options import slurm_options

PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
gpus, first, , , 0, none, work.py, smi, --seconds 4
gpus, second, , , 1, none, work.py, smi, --seconds 4
"""


def test_the_options_of_the_block_are_overridden_by_the_command_line():
    options = slurm_options(
        {"time": "0:10:00", "max_parallel": 2, "exclusive": "yes", "setup": "module load cuda"},
        {"time": "0:05:00", "extra": "--qos=short; --nice=10"},
    )
    assert (options.time, options.max_parallel, options.exclusive) == ("0:05:00", 2, True)
    assert options.setup == ["module load cuda"]
    assert options.extra == ["--qos=short", "--nice=10"]
    assert options.gres is None and options.partition is None


@pytest.mark.parametrize(
    ("block", "overrides", "said"),
    [
        ({"colour": "red"}, {}, "slurm:: unknown Slurm option 'colour'; known: partition, "),
        ({}, {"max_parallel": "0"}, "--slurm-option: Slurm option max_parallel must be a "),
        ({"exclusive": "maybe"}, {}, "slurm:: Slurm option exclusive is true or false, not "),
    ],
)
def test_a_wrong_option_is_one_line_naming_where_it_was(block, overrides, said):
    with pytest.raises(UsageError) as refused:
        slurm_options(block, overrides)
    assert str(refused.value).startswith(said)
    assert "\n" not in str(refused.value)


def test_only_a_store_that_is_a_local_file_is_warned_about(tmp_path):
    warning = store_warning(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert warning.startswith(f"the tracking store {tmp_path / 'mlflow.db'} is a local file")
    assert store_warning("http://mlflow.example:5000") is None


def test_a_plans_dry_run_prints_one_array_job_and_submits_nothing(workspace: Workspace):
    workspace.script("work.py", "print('ran')\n")
    (workspace.root / "plan.csv").write_text(PLAN)
    workspace.env.update(PATH=f"{FAKES}{os.pathsep}{workspace.env['PATH']}")
    workspace.env["FAKE_NVIDIA_SMI_GPUS"] = "4"
    done = workspace.run(["plan.csv", "--slurm", "--dry-run", "--slurm-option", "time=0:10:00"])
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("sbatch ")]
    assert "--array=0-1" in line and "--time=0:10:00" in line and "--gres=gpu:1" in line
    assert workspace.runs("gpus") == []
    assert not (workspace.root / "plan.csv.slurm" / "jobs.json").exists()


def test_submitting_without_slurms_commands_on_path_is_one_line(workspace: Workspace, tmp_path):
    bin_dir = tmp_path / "bin"  # python3 for the fakes' #! line, and no sbatch
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    workspace.script("work.py", "print('ran')\n")
    (workspace.root / "plan.csv").write_text(PLAN)
    workspace.env.update(PATH=f"{FAKES}{os.pathsep}{bin_dir}", FAKE_NVIDIA_SMI_GPUS="4")
    done = workspace.run(["plan.csv", "--slurm"])
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "radt: error: sbatch not found: --slurm needs Slurm's commands on PATH (run on a login "
        "node)"
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_given_a_task_its_array_does_not_have_says_so_in_one_line(workspace: Workspace):
    workspace.script("work.py", "print('ran')\n")
    (workspace.root / "plan.csv").write_text(PLAN)
    tasks = workspace.root / "tasks.json"
    tasks.write_text(json.dumps({"plan": str(workspace.root / "plan.csv"), "workloads": []}))
    env = {**workspace.env, "SLURM_ARRAY_TASK_ID": "0"}
    done = workspace.run(["--slurm-task", str(tasks), "plan.csv"], env=env)
    assert done.returncode != 0
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"radt: error: --slurm-task {tasks}: not a task of this job array (")


# --------------------------------------------------------------------------- Slurm's endings

ONE = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
ends, only, , , , none, work.py, none, --seconds 4
"""


def _dispatch(tmp_path, store, monkeypatch):
    from radt.plans.read import read_plan
    from radt.slurm.dispatch import Dispatch, SlurmRequest
    from radt.slurm.options import SlurmOptions

    (tmp_path / "plan.csv").write_text(ONE)
    (tmp_path / "work.py").write_text("print('ran')\n")
    monkeypatch.chdir(tmp_path)
    client, uri = store
    dispatch = Dispatch(tmp_path / "plan.csv", SlurmOptions(), SlurmRequest(), client, uri)
    return dispatch, read_plan(tmp_path / "plan.csv"), client


def _workload_runs(client, attempt: str | None = None) -> tuple[str, str]:
    """A workload's parent run and its row's run, RUNNING, as radT on a node of job 11_0
    leaves them when Slurm stops it."""
    exp = client.get_experiment_by_name("ends") or client.create_experiment("ends")
    exp = exp if isinstance(exp, str) else exp.experiment_id
    tags = {"radt.slurm.array_job_id": "11", "radt.slurm.array_task_id": "0"}
    if attempt:
        tags["radt.slurm.attempt"] = attempt
    parent = client.create_run(exp, tags=tags).info.run_id
    row = client.create_run(
        exp, tags={**tags, "radt.plan_line": "2", "mlflow.parentRunId": parent}
    ).info.run_id
    return parent, row


@pytest.mark.parametrize(
    "state", ["TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"]
)
def test_each_of_slurms_endings_ends_the_runs_killed_with_the_state_named(
    tmp_path, store, monkeypatch, state
):
    """The test cluster enforces no memory (no cgroups) and has no second node to fail: the
    endings come as scontrol and sacct report them; the runs are in a real store."""
    from radt.slurm.commands import parse_sacct

    dispatch, plan, client = _dispatch(tmp_path, store, monkeypatch)
    parent, row = _workload_runs(client)
    dispatch.jobs = {"ends/only": "11_0"}
    (task,) = parse_sacct(f"11_0|{state} by 0|0:9\n")
    dispatch._finish(plan, "ends/only", "11_0", task)
    for run_id in (parent, row):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED"
        assert run.data.tags["radt.slurm.state"] == state
        assert run.data.tags["radt.stop_reason"] == f"Slurm ended job 11_0: {state}"
    assert f"KILLED, {row}" in (tmp_path / "plan.csv").read_text()
    assert dispatch.endings == {"only": state}


def test_a_requeued_jobs_earlier_attempt_ends_killed_and_the_last_attempt_counts(
    tmp_path, store, monkeypatch
):
    dispatch, plan, client = _dispatch(tmp_path, store, monkeypatch)
    first_parent, first_row = _workload_runs(client)  # attempt 1, left RUNNING by the requeue
    last_parent, last_row = _workload_runs(client, attempt="2")
    for run_id in (last_row, last_parent):
        client.set_terminated(run_id, "FINISHED")
    dispatch.jobs = {"ends/only": "11_0"}
    (task,) = parse_sacct_line("11_0|COMPLETED|0:0")
    dispatch._finish(plan, "ends/only", "11_0", task)
    for run_id in (first_parent, first_row):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED"
        assert run.data.tags["radt.slurm.state"] == "REQUEUED"
        assert run.data.tags["radt.stop_reason"] == (
            "Slurm requeued job 11_0: attempt 1 ended, a later one ran"
        )
    assert f"FINISHED, {last_row}" in (tmp_path / "plan.csv").read_text()
    assert dispatch.ended == {"ends/only": "FINISHED"}


def parse_sacct_line(line: str):
    from radt.slurm.commands import parse_sacct

    return parse_sacct(line + "\n")


def test_a_job_cancelled_while_pending_gets_no_status_and_runs_again(tmp_path, store, monkeypatch):
    """Slurm keeps no record of an array task cancelled while pending (scontrol forgets it)."""
    dispatch, plan, client = _dispatch(tmp_path, store, monkeypatch)
    dispatch.jobs = {"ends/only": "11_0"}
    dispatch._finish(plan, "ends/only", "11_0", None)
    text = (tmp_path / "plan.csv").read_text()
    assert "FAILED" not in text and "KILLED" not in text
    assert dispatch.endings == {"only": "CANCELLED"}
    from radt.plans.read import read_plan

    assert [w.label for w in read_plan(tmp_path / "plan.csv").pending()] == ["ends/only"]


def test_slurm_times_read_as_minutes():
    from radt.slurm.commands import minutes

    assert minutes("90") == 90
    assert minutes("1:30") == 1.5
    assert minutes("0:00:05") == 5 / 60
    assert minutes("02:00:00") == 120
    assert minutes("2-00:00:00") == 2880
    assert minutes("1-12") == 1440 + 720
    assert minutes("UNLIMITED") is None and minutes("INFINITE") is None and minutes("") is None


# --------------------------------------------------------------------------- the command line


def test_slurm_option_extra_adds_up_and_the_hint_keeps_the_slurm_options(workspace: Workspace):
    workspace.script("work.py", "print('ran')\n")
    (workspace.root / "plan.csv").write_text(PLAN)
    workspace.env.update(PATH=f"{FAKES}{os.pathsep}{workspace.env['PATH']}")
    workspace.env["FAKE_NVIDIA_SMI_GPUS"] = "4"
    extra = ["--slurm-option", "extra=--qos=short", "--slurm-option", "extra=--nice=10"]
    done = workspace.run(["plan.csv", "--slurm", "--dry-run", *extra])
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("sbatch ")]
    assert "--qos=short --nice=10" in line


def test_the_command_to_go_on_keeps_slurm_and_its_options_but_not_the_one_offs():
    from radt.cli.run import again_command

    own = ["--slurm", "--detach", "--slurm-option", "partition=gpu", "--rerun", "-l", "smi"]
    assert again_command("study.yaml", own) == (
        "radt study.yaml --slurm --slurm-option partition=gpu -l smi"
    )


def test_a_plain_dry_run_refuses_an_unknown_slurm_key_as_slurm_does(workspace: Workspace):
    workspace.script("work.py", "print('ran')\n")
    workspace.script(
        "study.yaml",
        "name: s\nexperiment: s\nfile: work.py\nlisteners: none\n"
        "parameters:\n  seconds: {values: [1]}\nslurm:\n  partiton: gpu\n",
    )
    done = workspace.run(["study.yaml", "--dry-run"])
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "unknown Slurm option 'partiton'" in line and "known: partition" in line


def test_a_runs_slurm_job_is_named_as_the_submission_printed_it():
    """`radt runs` and the UI show an array task as squeue and `--slurm` print it (7_0)."""
    from radt.analysis.summary import slurm_job

    task = {"radt.slurm.job_id": "8", "radt.slurm.array_job_id": "7"}
    assert slurm_job({**task, "radt.slurm.array_task_id": "0"}) == "7_0"
    assert slurm_job({"radt.slurm.job_id": "4242"}) == "4242"
    assert slurm_job({}) is None
