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
