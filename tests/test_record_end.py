"""The end of a record: signals after the command ended, `radt sync` for runs a store lost,
the last CPU sample, multi-GPU aggregates, total energy per example, radT's closing line."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import KeptPoints, Workspace, kill_quietly, pid_alive, wait_for

from radt.analysis.summary import summary
from radt.analysis.windows import cpu_between
from radt.launch.session import RecordedRun, RunParts
from radt.listener import Sample
from radt.record.decimate import Decimator
from radt.record.events import EventReceiver
from radt.record.phases import PhaseWriter, read_phase_stream
from radt.record.recorder import Recorder
from radt.record.runfolder import RunFolder, RunState
from radt.record.spool import SpoolWriter, read_spool

FOUR_HUNDRED = """
import os
from pathlib import Path
import radt
for _ in range(400):
    radt.log_examples(1)
Path("pid").write_text(str(os.getpid()))
print("done", flush=True)
"""


def _start_after_done(workspace: Workspace) -> tuple[subprocess.Popen, int]:
    """radT recording FOUR_HUNDRED with `top` every 10 ms, returned once the command printed
    `done` and has exited."""
    workspace.script("done.py", FOUR_HUNDRED)
    radt = workspace.start(["-l", "top", "--interval", "0.01", "done.py"])
    first = radt.stdout.readline()
    assert first == "done\n", first + radt.stderr.read()
    pid = int((workspace.root / "pid").read_text())
    wait_for(lambda: not pid_alive(pid), timeout=60)
    time.sleep(0.05)
    return radt, pid


@pytest.mark.parametrize(
    "signum",
    [
        signal.SIGINT,
        pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
        pytest.param(signal.SIGTERM, marks=pytest.mark.slow),
    ],
)
def test_a_signal_after_the_command_ended_does_not_stop_the_record(
    workspace: Workspace, signum: int
):
    radt, _ = _start_after_done(workspace)
    try:
        radt.send_signal(signum)
        _, err = radt.communicate(timeout=120)
    finally:
        kill_quietly(radt.pid)
    assert radt.returncode == 0, err
    name = signal.Signals(signum).name
    assert f"radt: received {name} after the command ended; finishing its record" in err
    assert "Traceback" not in err, err
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.exit_code"] == "0" and "radt.signal" not in run.data.tags
    assert run.data.metrics["examples"] == 400
    assert f"radt: run {run.info.run_id} FINISHED (exit code 0)" in err
    assert not (workspace.home / "runs" / run.info.run_id).exists()


def test_leaving_keeps_every_received_sample_and_record_and_waits_for_the_last_flush(tmp_path):
    # radT leaving on a second signal (`radt sync` finishes the record) keeps what it took
    # in: samples not yet flushed, records still queued on the run-API channel, phase
    # intervals held in memory; a handler that interrupted the taking in of the last records
    # lets it end first.
    folder = RunFolder(tmp_path / "run")
    recorder = Recorder(SpoolWriter(folder.spool), KeptPoints(), Decimator(1.0, 0.0), print, 600)
    recorder.start()
    warnings: list[str] = []
    phases = PhaseWriter(folder.path, warnings.append)
    events = EventReceiver(f"test-{uuid.uuid4().hex}", recorder.emit, warnings.append, phases)
    state = RunState("r", "0", "sqlite:///x", os.getpid(), 100.0, 1.0)
    run = RecordedRun(RunParts(None, SimpleNamespace(run_id="r"), state, folder, recorder, events))
    recorder.emit([Sample(100.5, "top/proc/cpu_pct", 50.0)])
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as script:
        script.sendto(
            b"radt1 10 100.6 examples 400\nradt1 10 100.5 phase 100.7 forward\n",
            "\0" + events.variable[1:],
        )
    ended: list[int] = []
    with run._taking_in_last():  # the handler came while radT took in the last records
        run.leave(lambda: ended.append(len(read_spool(folder.spool)[0])))
        assert ended == []
        recorder.emit([Sample(100.8, "top/proc/cpu_pct", 60.0)])
    assert ended == [3]  # both samples and the examples, spooled before radT ends
    table, problems = read_spool(folder.spool)
    assert problems == []
    assert sorted(
        zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True)
    ) == [
        ("script/run/examples", 400.0),
        ("top/proc/cpu_pct", 50.0),
        ("top/proc/cpu_pct", 60.0),
    ]
    batches, problem = read_phase_stream(folder.path / "phases" / "phases.arrows")
    assert problem is None and sum(batch.num_rows for batch in batches) == 1
    assert recorder.writer.points == []  # nothing was decimated for sending: sync does that
    events.close()
    recorder.stop()


@pytest.mark.slow
def test_the_closing_line_starts_a_line_of_its_own(workspace: Workspace):
    workspace.script(
        "partial.py", "import sys\nprint('partial-no-newline', end='', flush=True)\nsys.exit(3)\n"
    )
    done = subprocess.run(
        workspace.argv(["-l", "none", "partial.py"]),
        cwd=workspace.root,
        env=workspace.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout
    lines = done.stdout.splitlines()
    assert "partial-no-newline" in lines, done.stdout
    closing = [line for line in lines if "FAILED (exit code 3)" in line]
    assert len(closing) == 1 and closing[0].startswith("radt: run "), done.stdout


# --------------------------------------------------------------------------- CPU at the end


def test_the_cpu_counter_reaches_a_command_end_one_late_poll_after_its_last_sample():
    # 100 % of one core, sampled every 0.5 s from 0.5 to 10 s, counted from 0 s (rss):
    # the counter is 10 core-s at 10 s and grows 1 core-s per s beyond.
    seconds = np.arange(1, 21) * 0.5
    series = {
        ("top", "proc", "cpu_pct"): (seconds, np.full(20, 100.0)),
        ("top", "proc", "rss_mib"): (np.concatenate([[0.0], seconds]), np.full(21, 50.0)),
    }
    # the command ended 0.6 s after the last sample (one interval and 0.1 s of jitter)
    used, note = cpu_between(series, 0.0, 10.6)
    assert note is None and used == pytest.approx(10.6)
    # two intervals and more: not covered
    used, note = cpu_between(series, 0.0, 11.1)
    assert math.isnan(used) and note == "the CPU samples (top) do not cover the window"


BURN = """
import time
import radt
began = time.process_time()
for _ in range(30):
    spin = time.process_time()
    while time.process_time() - spin < 0.05:
        pass
    radt.log_examples(10)
print(f"cpu {time.process_time() - began:.3f}", flush=True)
"""


@pytest.mark.slow
def test_a_run_shorter_than_one_top_interval_has_its_cpu(workspace: Workspace):
    # top polls when the command starts and then every 30 s: only the last sample, taken
    # when the command ends, measures its CPU.
    workspace.script("burn.py", BURN)
    done = workspace.run(["-l", "top", "--interval", "30", "burn.py"])
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    row = summary("Default", tracking_uri=workspace.uri)
    row = row[row["run_id"] == run.info.run_id].iloc[0]
    spent = float(done.stdout.split("cpu ")[1])
    assert 0 < row["cpu_s"] <= spent + 1.0, (row["cpu_s"], spent, row["window_note"])


# --------------------------------------------------------------------------- runs a store lost

SLEEP = "import time\nfrom pathlib import Path\nPath('ready').write_text('1')\ntime.sleep(120)\n"


def _left_by_a_killed_radt(workspace: Workspace) -> str:
    """The id of a run whose radT was killed while its command ran: its folder is left."""
    workspace.env["RADT_WARM"] = "0"  # radT's own process records: the one this test kills
    workspace.script("sleep.py", SLEEP)
    radt = workspace.start(["-l", "none", "sleep.py"])
    try:
        wait_for(lambda: (workspace.root / "ready").exists(), timeout=90)
        radt.kill()
        radt.communicate(timeout=30)
    finally:
        kill_quietly(radt.pid)
    (folder,) = [p for p in (workspace.home / "runs").iterdir() if (p / "run.json").exists()]
    return folder.name


def _forget(workspace: Workspace, run_id: str) -> None:
    """`radt sync --list` names the waiting run and its store; `--forget` drops it for good."""
    listed = workspace.run(["sync", "--list"])
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert line.startswith(f"{run_id}  ") and f"to {workspace.root / 'mlflow.db'}" in line
    forgot = workspace.run(["sync", "--forget", run_id])
    assert forgot.returncode == 0, forgot.stderr
    assert f"dropped the folder of run {run_id}" in forgot.stderr
    assert not (workspace.home / "runs" / run_id).exists()
    again = workspace.run(["sync"])
    assert again.returncode == 0 and "nothing to sync" in again.stderr, again.stderr
    unknown = workspace.run(["sync", "--forget", run_id])
    assert unknown.returncode == 1 and "`radt sync --list` shows them" in unknown.stderr


@pytest.mark.slow
def test_sync_does_not_make_a_deleted_sqlite_store_anew(workspace: Workspace):
    run_id = _left_by_a_killed_radt(workspace)
    store = workspace.root / "mlflow.db"
    store.unlink()
    done = workspace.run(["sync"])
    assert done.returncode == 1, done.stderr
    assert not store.exists()
    said = [line for line in done.stderr.splitlines() if "store" in line]
    assert said == [
        f"radt: run {run_id}: its store {store} no longer exists; put the file back and run "
        f"`radt sync` again, or drop the run with `radt sync --forget {run_id}`"
    ], done.stderr
    _forget(workspace, run_id)
    assert not store.exists()


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["store made anew", "run deleted"])
def test_sync_of_a_run_its_store_no_longer_has_says_so(
    workspace: Workspace, template_db, lost: str
):
    import shutil

    run_id = _left_by_a_killed_radt(workspace)
    if lost == "store made anew":
        shutil.copy(template_db, workspace.root / "mlflow.db")
        why = "is not"
    else:
        workspace.client().delete_run(run_id)
        why = "was deleted"
    done = workspace.run(["sync"])
    assert done.returncode == 1, done.stderr
    assert "reachable" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    folder = workspace.home / "runs" / run_id
    assert (
        f"radt: run {run_id} {why} in its store {workspace.root / 'mlflow.db'}; nothing there "
        f"can finish it: `radt sync --forget {run_id}` drops its folder {folder}"
    ) in done.stderr.splitlines()
    assert folder.is_dir()
    _forget(workspace, run_id)


# --------------------------------------------------------------------------- several GPUs

TRAIN = """
import time
import radt
for _ in range(15):
    time.sleep(0.1)
    radt.log_examples(10)
"""


@pytest.mark.slow
def test_two_gpus_are_one_device_in_every_power_figure(workspace: Workspace, tmp_path):
    import json

    from conftest import FAKES, FIXTURES

    scenario = json.loads((FIXTURES / "nvml_h100.json").read_text())
    for gpu, milliwatts in zip(scenario["gpus"], (123450, 234560), strict=True):
        gpu.update(power_mw=milliwatts, power_instant_mw=milliwatts, power_average_mw=milliwatts)
    (tmp_path / "two.json").write_text(json.dumps(scenario))
    env = {k: v for k, v in workspace.env.items() if not k.startswith(("FAKE_", "CUDA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES / "pynvml"), env["PYTHONPATH"]])
    env["FAKE_PYNVML_SCENARIO"] = str(tmp_path / "two.json")
    workspace.script("train.py", TRAIN)
    done = workspace.run(["-l", "nvml", "--interval", "0.05", "train.py"], env=env)
    assert done.returncode == 0, done.stderr
    frame = summary("Default", tracking_uri=workspace.uri)
    (row,) = [r for _, r in frame.iterrows()]
    # 123.45 W + 234.56 W at every instant: mean and peak of the sum alike
    assert row["power_mean_w"] == pytest.approx(358.01, abs=1e-9)
    assert row["power_max_w"] == pytest.approx(358.01, abs=1e-9)
