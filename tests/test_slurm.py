"""radT on a real single-node Slurm (tests/slurmcluster.py): runs know their job; studies as jobs.

The module starts munged, slurmctld and slurmd once (four fake MIG-typed GPUs)
and skips when Slurm is not installed, unless ``CI`` is set: CI installs it
(`.ci/run`), and there that is a failure.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAKES, Workspace, default_signals
from slurmcluster import SlurmCluster, missing_reason

pytestmark = pytest.mark.slurm

SLEEPER = "import sys, time\ntime.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 2)\n"


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    reason = missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {reason}")
        pytest.skip(reason)
    with SlurmCluster(gpus=4) as cluster:
        yield cluster


@pytest.fixture
def ws(workspace: Workspace, slurm: SlurmCluster) -> Iterator[Workspace]:
    """A workspace whose radT and Slurm commands talk to the test cluster; no job outlives it."""
    workspace.env.update(slurm.client_env())
    for name in [n for n in workspace.env if n.startswith("SLURM_") and n != "SLURM_CONF"]:
        del workspace.env[name]
    yield workspace
    slurm.cancel_all()


def slurm_run(ws: Workspace, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        cwd=ws.root,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def test_srun_radt_tags_the_run_with_its_job(ws, slurm):
    ws.script("sleeper.py", SLEEPER)
    done = slurm_run(
        ws, ["srun", "-n1", "-J", "tagged", *ws.argv(["-l", "none", "sleeper.py", "0.5"])]
    )
    assert done.returncode == 0, done.stderr
    run = ws.only_run()
    jobs = slurm.command(["scontrol", "show", "job", "-o"]).stdout.splitlines()
    (line,) = [j for j in jobs if "JobName=tagged " in j]
    job_id = line.split()[0].removeprefix("JobId=")
    tags = run.data.tags
    assert tags["radt.slurm.job_id"] == job_id
    assert tags["radt.slurm.node"] == slurm.node
    assert tags["radt.slurm.partition"] == "debug"
    assert "radt.slurm.array_job_id" not in tags
    assert run.info.status == "FINISHED"


def test_a_run_outside_slurm_has_no_slurm_tags(ws):
    ws.script("sleeper.py", SLEEPER)
    done = ws.run(["-l", "none", "sleeper.py", "0.1"])
    assert done.returncode == 0, done.stderr
    assert not [t for t in ws.only_run().data.tags if t.startswith("radt.slurm.")]


def test_gres_give_each_job_its_own_gpu_and_its_listeners_record_only_that_one(ws, slurm):
    ws.script("sleeper.py", SLEEPER)
    ws.env["PATH"] = f"{FAKES}{os.pathsep}{ws.env['PATH']}"
    ws.env["FAKE_NVIDIA_SMI_GPUS"] = "4"
    ws.env.pop("CUDA_VISIBLE_DEVICES", None)
    radt = " ".join(ws.argv(["-l", "smi", "--interval", "0.2", "sleeper.py", "3"]))
    for i in range(2):
        done = slurm_run(
            ws, ["sbatch", "--parsable", "--gres=gpu:1", "-o", f"job{i}.out", "--wrap", radt]
        )
        assert done.returncode == 0, done.stderr
    slurm.wait_idle(timeout_s=180)
    runs = ws.runs()
    assert len(runs) == 2, [(ws.root / f"job{i}.out").read_text() for i in range(2)]
    gpus = []
    for run in runs:
        assert run.info.status == "FINISHED"
        recorded = {k.split("/")[2] for k in run.data.metrics if k.startswith("system/smi/")}
        assert recorded == {f"gpu{run.data.tags['radt.slurm.gpus']}"}
        gpus.append(run.data.tags["radt.slurm.gpus"])
    assert len(set(gpus)) == 2  # ran at once: Slurm gave them different GPUs


def test_slurm_job_gpus_stand_in_for_cuda_visible_devices():
    from radt.slurm.jobenv import job_gpus, job_tags

    in_job = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "2,3", "SLURM_ARRAY_TASK_ID": "1"}
    assert job_gpus(in_job) == ["2", "3"]
    assert job_gpus({**in_job, "CUDA_VISIBLE_DEVICES": "0"}) == ["0"]
    assert job_gpus({"SLURM_JOB_GPUS": "2"}) == []  # not inside a job
    assert job_tags(in_job) == {
        "radt.slurm.job_id": "7",
        "radt.slurm.array_task_id": "1",
        "radt.slurm.gpus": "2,3",
    }


# --------------------------------------------------------------------------- studies and plans

WORK = r"""
import argparse, os, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=1)
parser.add_argument("--fail", type=int, default=0)
args = parser.parse_args()
if args.fail and not os.path.exists("healed"):
    print("ValueError: the data folder is missing", flush=True)
    sys.exit(3)
time.sleep(args.seconds)
"""

STUDY = """\
name: cluster
experiment: cluster
file: work.py
listeners: none
parameters:
  seconds:
    values: [{values}]
slurm:
  max_parallel: 2
{more}"""


def study(ws: Workspace, values: str = "1, 1.5, 2, 2.5", more: str = "") -> str:
    ws.script("work.py", WORK)
    ws.script("study.yaml", STUDY.format(values=values, more=more))
    return "study.yaml"


def workload_runs(ws: Workspace, experiment: str = "cluster") -> list:
    return [r for r in ws.runs(experiment) if "radt.plan_line" in r.data.tags]


def study_runs(ws: Workspace, experiment: str = "cluster") -> list:
    return [r for r in ws.runs(experiment) if "mlflow.parentRunId" not in r.data.tags]


def status_block(ws: Workspace) -> dict[int, str]:
    import yaml

    return yaml.safe_load((ws.root / "study.yaml").read_text()).get("status", {})


def test_a_study_runs_as_a_throttled_job_array_and_writes_its_status(ws, slurm):
    done = ws.run([study(ws), "--slurm"], timeout=300)
    assert done.returncode == 0, done.stderr
    runs = workload_runs(ws)
    assert len(runs) == 4
    assert {r.info.status for r in runs} == {"FINISHED"}
    jobs = {r.data.tags["radt.slurm.array_task_id"] for r in runs}
    assert jobs == {"0", "1", "2", "3"}
    assert len({r.data.tags["radt.slurm.array_job_id"] for r in runs}) == 1
    assert len({r.data.tags["radt.slurm.job_id"] for r in runs}) == 4
    # never more than two at once: at every run's start, at most two runs are open
    spans = [(r.info.start_time, r.info.end_time) for r in runs]
    for start, _ in spans:
        assert sum(s <= start < e for s, e in spans) <= 2
    statuses = status_block(ws)
    assert len(statuses) == 4
    assert all(text.startswith("FINISHED ") for text in statuses.values())
    assert "Slurm job" in done.stderr and "4 finished" in done.stderr
    assert "shared filesystem" in done.stderr  # the one warning for a SQLite store


def test_a_failed_workload_is_resubmitted_with_rerun_only(ws, slurm):
    ws.script("work.py", WORK)
    ws.script("study.yaml", STUDY.format(values="0.5", more="") + "")
    study_text = (
        (ws.root / "study.yaml")
        .read_text()
        .replace("    values: [0.5]", "    values: [0.5]\n  fail:\n    values: [0, 1]")
    )
    (ws.root / "study.yaml").write_text(study_text)
    done = ws.run(["study.yaml", "--slurm"], timeout=300)
    assert done.returncode == 1, done.stderr
    statuses = sorted(t.split()[0] for t in status_block(ws).values())
    assert statuses == ["FAILED", "FINISHED"]
    again = ws.run(["study.yaml", "--slurm"], timeout=300)
    assert "nothing to run" in again.stderr, again.stderr
    (ws.root / "healed").write_text("")
    again = ws.run(["study.yaml", "--slurm", "--rerun"], timeout=300)
    assert again.returncode == 0, again.stderr
    assert sorted(t.split()[0] for t in status_block(ws).values()) == ["FINISHED", "FINISHED"]
    assert len(workload_runs(ws)) == 3  # the finished workload was not submitted again


def test_an_unknown_partition_is_one_line_and_nothing_is_submitted(ws, slurm):
    done = ws.run([study(ws), "--slurm", "--slurm-option", "partition=nosuch"], timeout=300)
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if "error" in line]
    # sbatch's own message, after radT's one-line prefix
    assert line.startswith("radt: error: sbatch refused the job: ")
    assert "Invalid partition name specified" in line
    assert "Traceback" not in done.stderr
    assert slurm.idle()
    assert not status_block(ws)
    assert ws.runs("cluster") == []  # refused: no study run either
    assert "parent:" not in (ws.root / "study.yaml").read_text()


def test_an_unknown_slurm_option_names_the_known_ones(ws):
    done = ws.run([study(ws), "--slurm", "--slurm-option", "colour=red"])
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "unknown Slurm option 'colour'" in line and "max_parallel" in line


def test_dry_run_prints_the_sbatch_line_and_submits_nothing(ws, slurm):
    done = ws.run([study(ws), "--slurm", "--dry-run", "--slurm-option", "time=0:10:00"])
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("sbatch ")]
    assert "--array=0-3%2" in line and "--time=0:10:00" in line
    assert slurm.idle()


def test_a_time_limit_ends_the_workload_killed_with_timeout_named(ws, slurm):
    more = '  time: "0:00:05"\n'
    done = ws.run([study(ws, values="90", more=more), "--slurm"], timeout=300)
    assert done.returncode == 1, done.stderr
    (run,) = workload_runs(ws)
    assert run.info.status == "KILLED"
    assert run.data.tags["radt.slurm.state"] == "TIMEOUT"
    assert "TIMEOUT" in run.data.tags["radt.stop_reason"]
    assert "TIMEOUT" in done.stderr
    (text,) = status_block(ws).values()
    assert text.startswith("KILLED ")
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "FAILED"  # not every workload finished
    assert (
        "radt: study cluster: FAILED, 0 of 1 workloads finished (others: 1 KILLED (TIMEOUT)); "
        "1 left: run `radt study.yaml --slurm` again to go on"
    ) in done.stderr.splitlines()


def test_ctrl_c_while_waiting_cancels_the_jobs_and_their_runs_end_killed(ws, slurm):
    import signal

    from conftest import wait_for

    process = ws.start([study(ws, values="60, 60, 60"), "--slurm"])
    try:
        wait_for(lambda: len(workload_runs(ws)) >= 1, timeout=180, interval=0.5)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "cancelling 3 Slurm jobs" in stderr
    # scancel returns at once; a cancelled job stays COMPLETING until its steps end (KillWait
    # 5 s). Uncancelled, the 60 s workloads would still be in the queue after 45 s.
    slurm.wait_idle(timeout_s=45)
    runs = workload_runs(ws)
    assert runs and {r.info.status for r in runs} == {"KILLED"}
    statuses = [t.split()[0] for t in status_block(ws).values()]
    assert statuses and set(statuses) == {"KILLED"}  # the pending one has no entry: it never ran


def test_detach_returns_and_the_same_command_later_waits_without_resubmitting(ws, slurm):
    done = ws.run([study(ws, values="1, 1"), "--slurm", "--detach"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert "detached: 2 workloads in Slurm" in done.stderr
    assert {t.split()[0] for t in status_block(ws).values()} <= {"PENDING", "RUNNING"}
    again = ws.run(["study.yaml", "--slurm"], timeout=300)
    assert again.returncode == 0, again.stderr
    assert not re.search(r"^radt: workload \S+: Slurm job \d+_\d+$", again.stderr, re.M)
    runs = workload_runs(ws)
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.tags["radt.slurm.array_job_id"] for r in runs}) == 1
    assert {t.split()[0] for t in status_block(ws).values()} == {"FINISHED"}


def test_a_detached_study_run_is_closed_by_its_last_job_when_nobody_looks(ws, slurm):
    done = ws.run([study(ws, values="1"), "--slurm", "--detach"], timeout=300)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "detached:" in line]
    closer = re.search(r"Slurm job (\d+) closes the runs when they end", line).group(1)
    assert line.endswith("`radt study.yaml --slurm` shows where they stand")
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "RUNNING"
    slurm.wait_idle(timeout_s=300)  # the workload's job, then the closing job
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "FINISHED"
    assert study_run.data.tags["radt.study_progress"] == "1/1"
    assert [t.split()[0] for t in status_block(ws).values()] == ["FINISHED"]
    output = (ws.root / "study.plan.csv.slurm" / "logs" / f"close-{closer}.out").read_text()
    assert "radt: study cluster: FINISHED, 1 of 1 workloads finished" in output


def test_a_held_job_says_why_and_sigterm_leaves_it_to_the_closing_job(ws, slurm, tmp_path):
    """Issue 30: Slurm's reason reaches the user once; SIGTERM to the waiting radT detaches."""
    import signal

    from conftest import wait_for

    study(ws, values="1")
    stderr_path = tmp_path / "stderr"
    argv = ["study.yaml", "--slurm", "--slurm-option", "extra=--hold"]
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            ws.argv(argv),
            cwd=ws.root,
            env=ws.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=default_signals,
        )
    try:
        wait_for(lambda: "JobHeldUser" in stderr_path.read_text(), timeout=240, interval=0.5)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    said = stderr_path.read_text()
    assert process.returncode == 128 + signal.SIGTERM, said
    (held,) = [line for line in said.splitlines() if "JobHeldUser" in line]
    job = re.search(r"\((\d+_0) JobHeldUser\)", held).group(1)
    assert held.startswith(f"radt: slurm: 1 pending ({job} JobHeldUser), 0 running")
    (line,) = [line for line in said.splitlines() if line.startswith("radt: SIGTERM:")]
    assert f"Slurm goes on with 1 job ({job}) and Slurm job " in line
    assert line.endswith(f"`radt {shlex.join(argv)}` shows where they stand")
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "RUNNING"
    slurm.command(["scontrol", "release", job])
    slurm.wait_idle(timeout_s=300)
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "FINISHED"
    assert [t.split()[0] for t in status_block(ws).values()] == ["FINISHED"]


@pytest.mark.parametrize(
    ("more", "said"),
    [
        ("nodes: 2\n", "nodes: 2, but Slurm partition debug gives a job at most 1 node"),
        ("  gres: gpu:9\n", "sbatch refused the job: Requested node configuration is not"),
    ],
)
def test_what_the_partition_can_never_give_is_refused_before_any_run(ws, slurm, more, said):
    ws.script("work.py", WORK)
    text = STUDY.format(values="1", more=more if more.startswith(" ") else "")
    ws.script("study.yaml", text + ("" if more.startswith(" ") else more))
    done = ws.run(["study.yaml", "--slurm"], timeout=300)
    assert done.returncode != 0
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("radt: error:")]
    assert said in line, done.stderr
    assert slurm.idle()
    assert ws.runs("cluster") == []
    assert "parent:" not in (ws.root / "study.yaml").read_text()


def test_a_job_cancelled_while_pending_runs_again_and_the_study_run_ends_killed(ws, slurm):
    from conftest import wait_for

    study(ws, values="20, 1")
    process = ws.start(["study.yaml", "--slurm", "--slurm-option", "max_parallel=1"])
    try:
        wait_for(
            lambda: [t.split()[0] for t in status_block(ws).values()] == ["RUNNING", "PENDING"],
            timeout=240,
            interval=0.5,
        )
        pending = status_block(ws)[2].split()[1].removeprefix("slurm:")
        slurm.command(["scancel", pending])
        _, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    assert [t.split()[0] for t in status_block(ws).values()] == ["FINISHED"]  # no entry: again
    (study_run,) = study_runs(ws)
    assert study_run.info.status == "KILLED"
    assert "1 of 2 workloads finished (others: 1 CANCELLED)" in stderr
    assert len(workload_runs(ws)) == 1


@pytest.mark.slow
def test_a_requeued_job_is_a_new_attempt_and_its_first_runs_end_killed(ws, slurm):
    from conftest import wait_for

    study(ws, values="20")
    process = ws.start(["study.yaml", "--slurm"])
    try:
        wait_for(lambda: len(workload_runs(ws)) == 1, timeout=240, interval=0.5)
        job = status_block(ws)[1].split()[1].removeprefix("slurm:")
        assert slurm.command(["scontrol", "requeue", job]).returncode == 0
        wait_for(lambda: "Restarts=1" in slurm.command(["scontrol", "show", "job", job]).stdout)
        # Slurm holds a requeued job back a while (BeginTime): let it start now
        slurm.command(["scontrol", "update", f"jobid={job}", "StartTime=now"])
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    runs = {r.data.tags.get("radt.slurm.attempt", "1"): r for r in workload_runs(ws)}
    assert sorted(runs) == ["1", "2"]
    assert runs["1"].info.status == "KILLED"
    assert runs["1"].data.tags["radt.slurm.state"] == "REQUEUED"
    assert runs["1"].data.tags["radt.stop_reason"] == (
        f"Slurm requeued job {job}: attempt 1 ended, a later one ran"
    )
    assert runs["2"].info.status == "FINISHED"
    assert [t.split()[:2] for t in status_block(ws).values()] == [
        ["FINISHED", runs["2"].data.tags["mlflow.parentRunId"]]
    ]


PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
gpus, first, , , 0, none, work.py, smi, --seconds 4
gpus, second, , , 0, none, work.py, smi, --seconds 4
"""


def test_a_plan_on_devices_0_runs_each_workload_on_its_own_job_gpu(ws, slurm):
    ws.script("work.py", WORK)
    (ws.root / "plan.csv").write_text(PLAN)
    ws.env.update(PATH=f"{FAKES}{os.pathsep}{ws.env['PATH']}", FAKE_NVIDIA_SMI_GPUS="4")
    ws.env.pop("CUDA_VISIBLE_DEVICES", None)
    done = ws.run(["plan.csv", "--slurm", "--interval", "0.2"], timeout=300)
    assert done.returncode == 0, done.stderr
    runs = workload_runs(ws, "gpus")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    gpus = {r.data.tags["radt.slurm.gpus"] for r in runs}
    assert len(gpus) == 2  # both ran at once (gpu:1 each, derived), on different GPUs
    for run in runs:
        gpu = run.data.tags["radt.slurm.gpus"]
        assert run.data.tags["radt.devices"] == gpu  # Devices 0 = the job's first GPU
    text = (ws.root / "plan.csv").read_text()
    assert text.count("FINISHED") == 2 and all(r.info.run_id in text for r in runs)


def test_mig_repartitioning_is_refused_before_submitting_unless_exclusive(ws, slurm):
    ws.script("work.py", WORK)
    (ws.root / "plan.csv").write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
        "mig, halves, , , 0, 3g.20gb, work.py, none, --seconds 1\n"
    )
    ws.env.update(PATH=f"{FAKES}{os.pathsep}{ws.env['PATH']}", FAKE_NVIDIA_SMI_MIG="1")
    done = ws.run(["plan.csv", "--slurm"])
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert "re-partitions MIG" in line and "exclusive: true" in line
    assert slurm.idle()
    dry = ws.run(["plan.csv", "--slurm", "--dry-run", "--slurm-option", "exclusive=true"])
    assert dry.returncode == 0, dry.stderr
    assert "--exclusive" in dry.stdout and "--gres=gpu:1" in dry.stdout


def test_scontrol_and_sacct_lines_give_each_array_task_its_state():
    from radt.slurm.commands import parse_sacct, parse_scontrol

    shown = (
        "JobId=12 ArrayJobId=11 ArrayTaskId=1 JobName=radt-plan UserId=root(0) "
        "JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15\n"
        "JobId=11 ArrayJobId=11 ArrayTaskId=2-3%2 JobName=radt-plan UserId=root(0) "
        "JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) ExitCode=0:0\n"
    )
    tasks = {t.job_id: t for t in parse_scontrol(shown)}
    assert sorted(tasks) == ["11_1", "11_2", "11_3"]
    assert tasks["11_1"].state == "TIMEOUT" and not tasks["11_1"].active
    assert tasks["11_3"].state == "PENDING" and tasks["11_3"].active
    found = parse_sacct("11_0|COMPLETED|0:0\n11_1|CANCELLED by 0|0:15\n11|RUNNING|0:0\n")
    assert [(t.job_id, t.state) for t in found] == [("11_0", "COMPLETED"), ("11_1", "CANCELLED")]


def test_the_node_gets_radts_options_less_the_submitting_ones():
    from radt.cli.run import node_args

    own = ["--slurm", "--slurm-option", "time=1:00", "--rerun", "-l", "smi", "--modes=none"]
    assert node_args([*own, "--interval", "0.5", "--detach"]) == ["-l", "smi", "--interval", "0.5"]


def test_a_node_without_what_the_workload_needs_fails_it_with_the_nodes_reason(ws, slurm):
    from conftest import path_without_nvidia_tools

    ws.script("work.py", WORK)
    (ws.root / "plan.csv").write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
        "nodes, watched, , , , none, work.py, smi, --seconds 1\n"
    )
    ws.env["PATH"] = path_without_nvidia_tools()  # the login node does not check: the node does
    done = ws.run(["plan.csv", "--slurm"], timeout=300)
    assert done.returncode == 1, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "before radT started" in line]
    assert "listener not available here: smi" in line
    assert "FAILED" in (ws.root / "plan.csv").read_text().splitlines()[1]
    assert not ws.runs("nodes")


@pytest.mark.slow
def test_srun_of_two_radt_tasks_is_one_job_run_from_slurms_variables(ws, slurm):
    """Issue 21: no --group, no RADT_NODE_RANK: the group is the Slurm step, each task a node."""
    from servers import free_port

    from radt.launch import group

    train = Path(__file__).resolve().parents[1] / "examples" / "ddp_train.py"
    torchrun = ws.argv(
        ["-l", "none", "--", sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"]
    )
    node = (
        f"RADT_NODE=t$SLURM_PROCID exec {shlex.join(torchrun)} --node-rank $SLURM_PROCID "
        f"--nproc-per-node 1 --master-addr 127.0.0.1 --master-port {free_port()} "
        f"{shlex.quote(str(train))} --steps 6"
    )
    done = slurm_run(ws, ["srun", "--ntasks=2", "-J", "ddp", "bash", "-c", node], timeout=300)
    assert done.returncode == 0, done.stderr
    runs = ws.runs()
    (job,) = [r for r in runs if r.data.tags.get(group.ROLE_TAG) == "job"]
    nodes = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id]
    job_id = job.data.tags["radt.slurm.job_id"]
    assert job.data.tags[group.GROUP_TAG] == f"slurm-{job_id}.0"
    assert job.data.tags[group.NODES_TAG] == "2"
    assert sorted(n.data.tags[group.NODE_TAG] for n in nodes) == ["t0", "t1"]
    assert sorted(n.data.tags[group.NODE_RANK_TAG] for n in nodes) == ["0", "1"]
    assert job.info.status == "FINISHED" and job.data.metrics["examples"] == 2 * 6 * 16


@pytest.mark.slow
def test_a_study_of_nodes_2_runs_as_one_job_of_two_radt_tasks(ws, slurm):
    """Issue 21: `nodes: 2` is one Slurm job whose srun starts radT per task; the tests' Slurm
    has one node, so `extra` asks for both tasks there, each named from its task id."""
    import yaml

    from radt.launch import group

    train = Path(__file__).resolve().parents[1] / "examples" / "ddp_train.py"
    ws.script(
        "ddp.yaml",
        "name: ddp\nexperiment: ddp\nlisteners: none\nnodes: 2\n"
        f"file: {sys.executable} -m torch.distributed.run --nproc-per-node 1 {train}\n"
        "parameters:\n  steps: {values: [4]}\n",
    )
    extra = "extra=--nodes=1;--ntasks-per-node=2"
    done = ws.run(["ddp.yaml", "--slurm", "--slurm-option", extra], timeout=300)
    assert done.returncode == 0, done.stderr
    runs = ws.runs("ddp")
    (job,) = [r for r in runs if r.data.tags.get(group.ROLE_TAG) == "job"]
    nodes = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id]
    (study_run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert job.data.tags["mlflow.parentRunId"] == study_run.info.run_id
    assert job.data.tags[group.GROUP_TAG] == f"slurm-{job.data.tags['radt.slurm.job_id']}.0"
    assert job.data.tags[group.NODES_TAG] == "2"
    assert sorted(n.data.tags[group.NODE_TAG] for n in nodes) == [
        f"{slurm.node}-0",
        f"{slurm.node}-1",
    ]
    assert job.info.status == "FINISHED" and job.data.metrics["examples"] == 2 * 4 * 16
    status = yaml.safe_load((ws.root / "ddp.yaml").read_text())["status"]
    assert status == {1: f"FINISHED {job.info.run_id} (--steps 4 | 2 nodes)"}
    assert f"FINISHED, {job.info.run_id}" in (ws.root / "ddp.plan.csv").read_text()
