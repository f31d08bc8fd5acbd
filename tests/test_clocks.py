"""Locked GPU clocks (radt/collocation/clocks.py) on the fake nvidia-smi: checked against the
supported clocks, locked, and reset after success, a failure and SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import test_study as study
import test_workload as workload
from conftest import default_signals, kill_quietly, wait_for
from test_collocation import FakeGpu, gpu, run_teardown  # noqa: F401 - gpu: a fixture

from radt.analysis.summary import summary
from radt.collocation import clocks, nvsmi
from radt.collocation.teardown import Teardown
from radt.errors import RadtError
from radt.plans.study import StudyError, read_study
from radt.plans.studyexpand import expand


@pytest.fixture
def fake_gpu(gpu: FakeGpu) -> FakeGpu:  # noqa: F811 - test_collocation's fixture
    """The fake nvidia-smi's state and call log under tmp_path (test_collocation's)."""
    return gpu


def the_gpu() -> nvsmi.GpuListing:
    return nvsmi.parse_list(nvsmi.run(["nvidia-smi", "-L"]).output)[0]


def test_supported_clocks_are_the_a100s(fake_gpu):
    supported = clocks.supported_mhz(0)
    assert supported[0] == 1410 and supported[-1] == 210 and len(supported) == 81


def test_clock_locked_and_reset(fake_gpu):
    before = fake_gpu.state()
    teardown = Teardown()
    line = clocks.setup_gpu(the_gpu(), 1200, teardown, "plan line 2")
    assert fake_gpu.state()["gpus"]["0"]["locked_clocks"] == [1200, 1200]
    assert line.startswith("GPU 0 (NVIDIA A100-SXM4-40GB): clock locked at 1200 MHz")
    assert teardown.pending() == ["reset the clocks of GPU 0"]
    assert run_teardown(teardown) == ([], [])
    assert fake_gpu.state() in (before, {})
    assert ["-i", "0", "-rgc"] in fake_gpu.smi_calls()


def test_a_lock_set_before_radt_is_put_back_not_reset(fake_gpu):
    fake_gpu.smi("-i", "0", "-lgc", "1410,1410")  # someone else's lock
    assert clocks.existing_lock_mhz(0, 210) == 1410  # idle at 1410 MHz, not at 210
    teardown = Teardown()
    line = clocks.setup_gpu(the_gpu(), 1200, teardown, "plan line 2")
    assert fake_gpu.state()["gpus"]["0"]["locked_clocks"] == [1200, 1200]
    assert line == (
        "GPU 0 (NVIDIA A100-SXM4-40GB): clock locked at 1200 MHz; it idled locked at 1410 MHz "
        "before, and is locked there again afterwards\n"
    )
    assert teardown.pending() == ["lock the clock of GPU 0 at 1410 MHz again"]
    assert run_teardown(teardown) == ([], [])
    assert fake_gpu.state()["gpus"]["0"]["locked_clocks"] == [1410, 1410]
    assert fake_gpu.smi_calls()[-1] == ["-i", "0", "-lgc", "1410,1410"]
    assert ["-i", "0", "-rgc"] not in fake_gpu.smi_calls()


def test_no_lock_is_seen_on_an_idle_gpu_at_its_lowest_clock(fake_gpu):
    assert clocks.existing_lock_mhz(0, 210) is None  # the fake idles at 210 MHz unlocked
    assert clocks.existing_lock_mhz(0, 100) == 210  # were 100 MHz its lowest: locked at 210


def test_unsupported_clock_is_refused_with_the_nearest(fake_gpu):
    problems = clocks.check_gpu(the_gpu(), 1201, "study.yaml gpu_clock[1]")
    assert problems == [
        "study.yaml gpu_clock[1]: GPU 0 (NVIDIA A100-SXM4-40GB) does not support a 1201 MHz "
        "clock; it supports 210-1410 MHz, the nearest is 1200 MHz"
    ]
    with pytest.raises(RadtError, match="does not support a 1201 MHz"):
        clocks.setup_gpu(the_gpu(), 1201, Teardown(), "study.yaml gpu_clock[1]")
    assert fake_gpu.state() == {}


def test_clock_needs_root(fake_gpu, monkeypatch):
    monkeypatch.setattr(clocks, "may_set_power_limit", lambda: False)
    assert clocks.check_gpu(the_gpu(), 1200, "plan line 3") == [
        "plan line 3: locking the clock of GPU 0 at 1200 MHz needs root; run radT as root, or "
        "have someone with root run `sudo nvidia-smi -i 0 -lgc 1200,1200` and leave the clock "
        "out of the plan"
    ]


def test_clock_refused_by_the_driver_leaves_nothing_to_undo(fake_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "lgc")
    teardown = Teardown()
    with pytest.raises(RadtError, match="Insufficient Permissions") as failed:
        clocks.setup_gpu(the_gpu(), 1200, teardown, "plan line 4")
    assert str(failed.value).startswith("plan line 4: locking the clock of GPU 0 at 1200 MHz")
    assert len(teardown) == 0 and fake_gpu.state() == {}


HOLDER = """
import sys, time
from radt.analysis.summary import summary
from radt.collocation import clocks, nvsmi
from radt.collocation.teardown import Teardown

teardown = Teardown()
try:
    fake_gpu = nvsmi.parse_list(nvsmi.run(["nvidia-smi", "-L"]).output)[0]
    if sys.argv[2] != "-":
        nvsmi.run(["nvidia-smi", "-i", "0", "-lgc", f"{sys.argv[2]},{sys.argv[2]}"])
    clocks.setup_gpu(fake_gpu, 1095, teardown, "test")
    print("locked", flush=True)
    if sys.argv[1] == "fail":
        raise RuntimeError("the run failed")
    time.sleep(120)
finally:
    teardown.run(print)
"""


@pytest.mark.parametrize("before", [None, 1410])
@pytest.mark.parametrize("how", ["fail", "sigint"])
def test_clock_reset_after_a_failure_and_sigint(fake_gpu, how, before):
    """Reset, or (a lock from before) locked at that clock again, on both paths."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, how, str(before or "-")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    assert holder.stdout.readline() == "locked\n"
    if how == "sigint":
        assert fake_gpu.state()["gpus"]["0"]["locked_clocks"] == [1095, 1095]
        holder.send_signal(signal.SIGINT)
    _, err = holder.communicate(timeout=120)
    # an uncaught KeyboardInterrupt ends Python by the signal itself
    assert holder.returncode == (-signal.SIGINT if how == "sigint" else 1)
    assert ("KeyboardInterrupt" if how == "sigint" else "RuntimeError: the run failed") in err
    if before is None:
        assert fake_gpu.state() == {}
        assert fake_gpu.smi_calls()[-1] == ["-i", "0", "-rgc"]
    else:
        assert fake_gpu.state()["gpus"]["0"]["locked_clocks"] == [before, before]
        assert fake_gpu.smi_calls()[-1] == ["-i", "0", "-lgc", f"{before},{before}"]


# --------------------------------------------------------------------------- GpuClock in plans

CLOCK_PLAN = (
    "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, "
    "GpuClock, Env\n"
    "study, clocked, , , 0, none, job.py, none, , {mhz}, JOB=a EXIT={code} SLEEP={sleep}\n"
)


def clock_calls(fake: workload.FakeGpu) -> list[list[str]]:
    return [argv for argv in fake.smi_calls() if {"-lgc", "-rgc"} & set(argv)]


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 3])
def test_plan_locks_the_clock_tags_the_runs_and_resets_it(tmp_path, template_db, code):
    ws = workload.new_workspace(tmp_path, template_db)
    fake = workload.with_fakes(ws)
    before = workload.someone_else_set_300_w(fake)
    workload.write_plan(ws, CLOCK_PLAN.format(mhz="1095 MHz", code=code, sleep=0))
    done = ws.run(["plan.csv"])
    assert done.returncode == code, done.stderr
    seen = workload.jobs(done.stdout)["a"][1]["gpu"]["gpus"]["0"]
    assert seen["locked_clocks"] == [1095, 1095]  # while the run ran
    assert fake.state_text() == before
    assert clock_calls(fake) == [["-i", "0", "-lgc", "1095,1095"], ["-i", "0", "-rgc"]]
    parents, children = workload.parents_and_children(workload.all_runs(ws))
    assert parents["clocked"].data.tags["radt.gpu_clock_mhz"] == "1095"
    assert children["clocked/A"].data.tags["radt.gpu_clock_mhz"] == "1095"
    assert children["clocked/A"].info.status == ("FINISHED" if code == 0 else "FAILED")
    frame = summary("study", tracking_uri=ws.uri)
    assert list(frame["gpu_clock_mhz"]) == ["1095", "1095"]  # the workload and its run


@pytest.mark.slow
def test_plan_resets_the_clock_after_sigint(tmp_path, template_db):
    ws = workload.new_workspace(tmp_path, template_db)
    fake = workload.with_fakes(ws)
    before = workload.someone_else_set_300_w(fake)
    workload.write_plan(ws, CLOCK_PLAN.format(mhz="1095", code=0, sleep=120))
    interrupt_while_locked(ws, fake)
    assert fake.state_text() == before
    assert clock_calls(fake)[-1] == ["-i", "0", "-rgc"]


def interrupt_while_locked(ws, fake):
    """Start the plan in ``ws`` and interrupt it (SIGINT) once run ``a`` runs with the GPU's
    clock locked at 1095 MHz; radT must exit with 128 + SIGINT."""
    radt = ws.start(["--grace", "2", "plan.csv"])
    pid = None
    try:
        pid = wait_for(lambda: workload.started_pid(ws, "a"), timeout=90)
        assert json.loads(fake.state_text())["gpus"]["0"]["locked_clocks"] == [1095, 1095]
        radt.send_signal(signal.SIGINT)
        _, err = radt.communicate(timeout=90)
        assert radt.returncode == 128 + signal.SIGINT, err
    finally:
        radt.kill()
        if pid:
            kill_quietly(pid)


def test_plan_with_an_unsupported_clock_is_refused_before_anything_starts(tmp_path, template_db):
    ws = workload.new_workspace(tmp_path, template_db)
    fake = workload.with_fakes(ws)
    workload.write_plan(ws, CLOCK_PLAN.format(mhz="1201", code=0, sleep=0))
    done = ws.run(["plan.csv"])
    assert done.returncode == 2
    assert (
        "plan.csv line 2: GPU 0 (NVIDIA A100-SXM4-40GB) does not support a 1201 MHz clock; "
        "it supports 210-1410 MHz, the nearest is 1200 MHz"
    ) in done.stderr
    assert clock_calls(fake) == []
    assert workload.started_pid(ws, "a") is None


# --------------------------------------------------------------------------- gpu_clock in studies

CLOCK_STUDY = "file: job.py\nlisteners: none\ndevices: 0\ngpu_clock: [default, {mhz}]\n"


@pytest.mark.slow
def test_study_gpu_clock_is_a_dimension_with_its_column(tmp_path, template_db):
    ws, fake, path = study.study_ws(tmp_path, template_db, CLOCK_STUDY.format(mhz=1095), mig=False)
    workloads = expand(read_study(path, cwd=ws.root))
    assert [(w.name, w.gpu_clock_mhz, w.descriptor) for w in workloads] == [
        ("001-default", None, ""),
        ("002-1095mhz", 1095, "1095 MHz"),
    ]
    done = ws.run(["study.yaml", "--dry-run", "--plan", "plan.csv"])
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in (ws.root / "plan.csv").read_text().splitlines() if ln[:1] != "#"]
    header = [cell.strip() for cell in lines[0].split(",")]
    column = header.index("GpuClock")
    assert header[column - 1] == "PowerLimit"
    assert [ln.split(",")[column].strip() for ln in lines[1:]] == ["-", "1095"]
    assert clock_calls(fake) == []


def test_study_gpu_clock_problems_are_found_before_anything_starts(tmp_path, template_db):
    ws, fake, path = study.study_ws(tmp_path, template_db, CLOCK_STUDY.format(mhz=1201), mig=False)
    done = ws.run(["study.yaml", "--dry-run"])
    assert done.returncode == 2
    assert (
        "study.yaml line 4: gpu_clock[1]: GPU 0 (NVIDIA A100-SXM4-40GB) does not support a "
        "1201 MHz clock; it supports 210-1410 MHz, the nearest is 1200 MHz"
    ) in done.stderr
    assert clock_calls(fake) == []
    path.write_text(CLOCK_STUDY.format(mhz="fast"))
    with pytest.raises(StudyError, match=r"gpu_clock\[1\]: 'fast' is not a positive whole number"):
        read_study(path, cwd=ws.root)


@pytest.mark.slow
def test_two_clocks_on_one_gpu_at_once_are_refused_with_one_line(tmp_path, template_db):
    ws = workload.new_workspace(tmp_path, template_db)
    fake = workload.with_fakes(ws)
    workload.write_plan(
        ws,
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, "
        "GpuClock, Env\n"
        "study, pair, , , 0, naive, job.py, none, , 1095, JOB=a EXIT=0 SLEEP=0\n"
        "study, pair, , , 0, naive, job.py, none, , 1200, JOB=b EXIT=0 SLEEP=0\n"
        "study, apart, , , 0, naive, job.py, none, , 1095, JOB=c EXIT=0 SLEEP=0\n"
        "study, apart, , , 0, naive, job.py, none, , -, JOB=d EXIT=0 SLEEP=0\n",
    )
    done = ws.run(["plan.csv"])
    assert done.returncode == 2
    assert done.stderr.splitlines()[:2] == [
        "radt: error: plan.csv has 1 problem; nothing was started:",
        "plan.csv line 3: GpuClock 1200 MHz differs from 1095 MHz on line 2 for GPU 0 (a "
        "locked clock applies to the whole GPU); give each clock a workload of its own",
    ], done.stderr
    assert "Traceback" not in done.stderr
    assert clock_calls(fake) == []
    assert workload.started_pid(ws, "a") is None


def someone_else_locked_1410(fake: workload.FakeGpu) -> str:
    """A clock lock set before radT; the fake's state with it."""
    fake.smi("-i", "0", "-lgc", "1410,1410")
    fake.smi_log.unlink()
    return fake.state_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["success", "sigint"])
def test_plan_puts_a_lock_from_before_back(tmp_path, template_db, how):
    ws = workload.new_workspace(tmp_path, template_db)
    fake = workload.with_fakes(ws)
    before = someone_else_locked_1410(fake)
    sleep = 0 if how == "success" else 120
    workload.write_plan(ws, CLOCK_PLAN.format(mhz="1095", code=0, sleep=sleep))
    if how == "success":
        done = ws.run(["plan.csv"])
        assert done.returncode == 0, done.stderr
        assert workload.jobs(done.stdout)["a"][1]["gpu"]["gpus"]["0"]["locked_clocks"] == [
            1095,
            1095,
        ]
    else:
        interrupt_while_locked(ws, fake)
    assert fake.state_text() == before  # locked at 1410 MHz again, not reset
    assert clock_calls(fake) == [["-i", "0", "-lgc", "1095,1095"], ["-i", "0", "-lgc", "1410,1410"]]
