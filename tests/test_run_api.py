"""The run API end to end: scripts calling radt.log_examples/log_epoch/start_window under a real
radT process, on a real SQLite store, through the real datagram channel; and the sending side on
its own, against a socket nobody drains."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import uuid

import pandas as pd
import pytest
from conftest import kill_quietly, pid_alive, wait_for

from radt.record.events import EPOCH_KEY, EXAMPLES_KEY, WINDOW_KEY


def samples(workspace, run_id: str, tmp_path) -> pd.DataFrame:
    local = workspace.client().download_artifacts(run_id, "radt/samples.parquet", str(tmp_path))
    return pd.read_parquet(local)


def series(table: pd.DataFrame, key: str) -> list[tuple[int, float]]:
    """(timestamp in µs, value) of ``key``, in time order."""
    rows = table[table.key == key].sort_values("timestamp", kind="stable")
    return [(ts.value // 1000, value) for ts, value in zip(rows.timestamp, rows.value, strict=True)]


def micros(t: float) -> int:
    return round(t * 1e6)


# ------------------------------------------------------------------ nothing reported is lost

SIX_CALLS = """
import os, sys, time, radt
radt.log_examples(100)  # sent at once
time.sleep(1.2)
radt.log_examples(100)  # due: sent (200)
for i in range(4):
    radt.log_examples(100)  # within the second: only the exit sends 600
how = os.environ["HOW"]
if how == "exit":
    sys.exit(0)
if how == "raise":
    raise RuntimeError("boom after the last batch")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "status", "code"),
    [("end", "FINISHED", 0), ("exit", "FINISHED", 0), ("raise", "FAILED", 1)],
)
def test_every_example_reported_before_exit_is_recorded(workspace, tmp_path, how, status, code):
    workspace.script("six_calls.py", SIX_CALLS)
    done = workspace.run(["-l", "none", "six_calls.py"], env={**workspace.env, "HOW": how})
    assert done.returncode == code, done.stderr
    output = done.stdout + done.stderr
    assert "cannot schedule new futures" not in output
    assert "Failed to submit batch" not in output
    run = workspace.only_run()
    assert run.info.status == status
    assert run.data.metrics["examples"] == 600
    counts = [
        value for _, value in series(samples(workspace, run.info.run_id, tmp_path), EXAMPLES_KEY)
    ]
    assert counts[0] == 100 and counts[-1] == 600
    assert counts == sorted(counts)
    if how == "raise":
        assert "boom after the last batch" in done.stderr


# ------------------------------------------------------------------ exact timeline

# The script reads its own clock through a wrapper, so it knows the exact time.time() value each
# radT call used (one read per call), and writes them to calls.json, even when --max-epochs ends it.
TIMELINE = """
import json, sys, time
real = time.time
reads = []
def clock():
    t = real()
    if sys._getframe(1).f_globals.get("__name__") == "radt.run_api":  # not logging's own
        reads.append(t)
    return t
time.time = clock
import radt
calls = []
def call(kind, fn, *args):
    first = len(reads)
    try:
        fn(*args)
    finally:
        calls.append([kind, args[0] if args else None, reads[first:]])
try:
    call("examples", radt.log_examples, 32)
    time.sleep(0.3)
    call("examples", radt.log_examples, 32)
    time.sleep(0.8)
    call("examples", radt.log_examples, 32)
    call("examples", radt.log_examples, 32)
    call("epoch", radt.log_epoch, 0)
    time.sleep(0.2)
    call("window", radt.start_window)
    call("examples", radt.log_examples, 16)
    time.sleep(0.2)
    call("examples", radt.log_examples, 16)
    call("epoch", radt.log_epoch, 1)
    call("examples", radt.log_examples, 1000)
finally:
    with open("calls.json", "w") as f:
        json.dump(calls, f)
"""


def expected_records(calls: list) -> tuple[list, list, list]:
    """What the run API promises to send for ``calls``: the counter at the first call, at most
    once a second after it (at the call that makes it due), at every epoch and window mark (the
    count not sent yet at its last call's time, then the count at the mark's), and at exit when
    changed (at its last call's time); the marks at their calls. Times in µs."""
    counter, epochs, windows = [], [], []
    total, made, sent_t, sent_total, last_t = 0, 0, -math.inf, 0, None
    for kind, value, reads in calls:
        assert len(reads) == 1, f"{kind} read the clock {len(reads)} times"
        t = reads[0]
        if kind == "examples":
            total, made, last_t = total + value, made + 1, t
            if made > 1 and 0 <= t - sent_t < 1.0:
                continue
        elif not made:
            continue
        elif total != sent_total:  # a mark: the count as at the last call that made it
            counter.append((micros(last_t), float(total)))
        counter.append((micros(t), float(total)))
        sent_t, sent_total = t, total
        if kind == "epoch":
            epochs.append((micros(t), float(value)))
        if kind == "window":
            windows.append((micros(t), 1.0))
    if total != sent_total:
        counter.append((micros(last_t), float(total)))
    return counter, epochs, windows


@pytest.mark.slow
def test_samples_carry_the_scripts_own_times_and_counts(workspace, tmp_path):
    workspace.script("timeline.py", TIMELINE)
    done = workspace.run(["-l", "none", "--max-epochs", "2", "timeline.py"])
    assert done.returncode == 0, done.stderr
    assert "--max-epochs 2 reached" in done.stderr
    calls = json.loads((workspace.root / "calls.json").read_text())
    assert [kind for kind, _, _ in calls][-1] == "epoch", "--max-epochs ended it at epoch 1"
    counter, epochs, windows = expected_records(calls)
    assert counter[0][1] == 32 and counter[-1][1] == 160 and len(counter) >= 4
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    table = samples(workspace, run.info.run_id, tmp_path)
    assert series(table, EXAMPLES_KEY) == counter
    assert series(table, EPOCH_KEY) == epochs
    assert series(table, WINDOW_KEY) == windows
    # In MLflow: the plain metrics, not system/script/...
    client = workspace.client()
    history = client.get_metric_history(run.info.run_id, "epoch")
    assert sorted((m.step, m.value, m.timestamp) for m in history) == [
        (0, 0.0, epochs[0][0] // 1000),
        (1, 1.0, epochs[1][0] // 1000),
    ]
    assert run.data.metrics["examples"] == 160
    # a count sent twice in one millisecond (at the last call and at the mark just after it)
    # is one point of MLflow's history
    assert {
        (m.timestamp, m.value) for m in client.get_metric_history(run.info.run_id, "examples")
    } == {(t // 1000, value) for t, value in counter}
    assert not any(key.startswith("system/script") for key in run.data.metrics)
    # The command's own start and end, around what the script saw.
    start, end = (float(run.data.tags[f"radt.command_{x}_s"]) for x in ("start", "end"))
    first_t, last_t = calls[0][2][0], calls[-1][2][0]
    assert start <= first_t <= last_t <= end
    assert abs(run.info.end_time - end * 1000) <= 1


# ------------------------------------------------------------------ processes

FAMILY = """
import os, socket, subprocess, sys, radt
radt.log_examples(100)
spawned = subprocess.Popen(
    [sys.executable, "-c", "import radt; radt.log_examples(30); radt.log_examples(20)"]
)
silent = os.fork()
if silent == 0:
    sys.exit(0)  # a fork (a DataLoader worker) that never logs: it must send nothing
os.waitpid(silent, 0)
worker = os.fork()
if worker == 0:
    radt.log_examples(7)  # a fork that logs counts only its own
    sys.exit(0)
os.waitpid(worker, 0)
assert spawned.wait() == 0
stray = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
stray.sendto(b"hello radt\\n", "\\0" + os.environ["RADT_EVENTS"][1:])
radt.start_window()
radt.log_examples(100)
"""


@pytest.mark.slow
def test_processes_of_a_run_sum_and_a_fork_does_not_count_twice(workspace, tmp_path):
    workspace.script("family.py", FAMILY)
    done = workspace.run(["-l", "none", "family.py"])
    assert done.returncode == 0, done.stderr
    assert "ignored 1 malformed run-API record" in done.stderr
    run = workspace.only_run()
    assert run.data.metrics["examples"] == 257
    table = samples(workspace, run.info.run_id, tmp_path)
    counts = [value for _, value in series(table, EXAMPLES_KEY)]
    assert counts[0] == 100 and counts[-1] == 257 and max(counts) == 257
    assert len(series(table, WINDOW_KEY)) == 1


KILLED = """
import os, time, radt
radt.log_examples(64)
radt.log_epoch(0)
radt.log_examples(64)  # within the second: not sent yet, lost with the process
with open("ready", "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


@pytest.mark.slow
def test_a_command_killed_by_sigkill_keeps_what_it_had_sent(workspace, tmp_path):
    workspace.script("killed.py", KILLED)
    radt = workspace.start(["-l", "none", "killed.py"])
    try:
        ready = workspace.root / "ready"
        pid = int(wait_for(lambda: ready.exists() and ready.read_text().strip(), timeout=120))
        os.kill(pid, signal.SIGKILL)
        _, err = radt.communicate(timeout=120)
    finally:
        kill_quietly(radt.pid)
    assert radt.returncode == 128 + signal.SIGKILL, err
    run = workspace.only_run()
    assert run.info.status == "KILLED"
    assert run.data.metrics["examples"] == 64
    table = samples(workspace, run.info.run_id, tmp_path)
    assert [value for _, value in series(table, EXAMPLES_KEY)] == [64, 64]
    assert [value for _, value in series(table, EPOCH_KEY)] == [0]
    assert not pid_alive(pid)


# ------------------------------------------------------------------ job and warm-up inputs


@pytest.mark.slow
def test_job_and_warmup_options_become_tags(workspace):
    workspace.script("one.py", "import radt\nradt.log_examples(1)\n")
    done = workspace.run(
        [
            "-l",
            "none",
            "--job",
            "resnet18-cifar",
            "--job-ignore",
            "--data-seed",
            "--job-ignore=--workers",
            "--warmup-s",
            "2.5",
            "--manual",
            "one.py",
            "--seed",
            "3",
        ]
    )
    assert done.returncode == 0, done.stderr
    tags = workspace.only_run().data.tags
    assert tags["radt.job"] == "resnet18-cifar"
    assert tags["radt.job_ignore"] == "--data-seed --workers"
    assert tags["radt.warmup_s"] == "2.5"
    assert tags["radt.manual"] == "1"  # its window rule, which its baselines must share
    assert "radt.warmup_epochs" not in tags
    start, end = float(tags["radt.command_start_s"]), float(tags["radt.command_end_s"])
    assert 0 < start <= end


@pytest.mark.slow
def test_without_overrides_there_are_no_job_or_warmup_tags(workspace):
    done = workspace.run(["-l", "none", "--warmup-epochs", "3", "--", "true"])
    assert done.returncode == 0, done.stderr
    tags = workspace.only_run().data.tags
    assert tags["radt.warmup_epochs"] == "3"
    assert not {"radt.job", "radt.job_ignore", "radt.warmup_s", "radt.manual"} & set(tags)


# ------------------------------------------------------------------ the sending side alone

MANY_CALLS = """
import radt
for _ in range(100_000):
    radt.log_examples(1)
radt.log_epoch(0)
radt.start_window()
print("done", flush=True)
"""


def _full_socket() -> tuple[socket.socket, str]:
    """A bound datagram socket nobody reads, its queue already full."""
    name = f"radt-test-{uuid.uuid4().hex}"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind("\0" + name)
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
    filled = 0
    while True:
        try:
            sender.sendto(b"filler", "\0" + name)
        except BlockingIOError:
            break
        filled += 1
    sender.close()
    assert filled > 0
    return receiver, name


def test_sending_never_blocks_when_radt_does_not_drain(tmp_path):
    receiver, name = _full_socket()
    script = tmp_path / "many.py"
    script.write_text(MANY_CALLS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}
    env.update(RADT_EVENTS="@" + name, RADT_RUN_ID="0" * 32)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        receiver.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    assert "Traceback" not in done.stderr


KEPT = """
import json, os, socket, radt
name = f"radt-kept-{os.getpid()}"
radt_side = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
radt_side.bind("\\0" + name)
os.environ["RADT_EVENTS"] = "@" + name
filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
while True:
    try:
        filler.sendto(b"filler", "\\0" + name)
    except BlockingIOError:
        break

def drain():
    got = []
    while True:
        try:
            got.append(radt_side.recv(65536).decode())
        except BlockingIOError:
            return got

radt.log_examples(5)  # the first call; radT's queue is full, so it is kept
before = drain()
radt.log_epoch(0)  # the next send takes the kept record first
after = drain()
print(json.dumps({"before": before, "after": after, "pid": os.getpid()}))
"""


def test_a_record_radt_could_not_take_goes_with_the_next_send(tmp_path):
    script = tmp_path / "kept.py"
    script.write_text(KEPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"] and set(seen["before"]) == {"filler"}
    lines = "".join(seen["after"]).splitlines()
    fields = [line.split() for line in lines]
    assert [(f[0], f[1], f[3], f[4]) for f in fields] == [
        ("radt1", str(seen["pid"]), "source", "3"),  # the script counts its own examples
        ("radt1", str(seen["pid"]), "examples", "5"),
        ("radt1", str(seen["pid"]), "examples", "5"),
        ("radt1", str(seen["pid"]), "epoch", "0"),
    ]
    source, first, at_epoch, epoch = (float(f[2]) for f in fields)
    assert source == first < at_epoch == epoch


def test_without_radt_every_call_is_a_no_op_after_one_notice(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(
        "import radt\nfor e in range(3):\n    radt.log_examples(10)\n    radt.log_epoch(e)\n"
        "radt.start_window()\nwith radt.Run() as run:\n    run.log_examples(1)\n"
        "print('run id', run.run_id)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**env, "RADT_MAX_EPOCHS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("radt: not running under radT") == 1
    assert done.stdout == "run id None\n"
    assert not (tmp_path / "mlflow.db").exists()


# ------------------------------------------------------------------ the receiving side alone


def test_receiver_sums_processes_keeps_one_mark_per_epoch_and_counts_malformed_records():
    from radt.record.events import EventReceiver

    got, warnings = [], []
    receiver = EventReceiver(f"test-{uuid.uuid4().hex}", got.extend, warnings.append)
    address = "\0" + receiver.variable[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as script:
        for datagram in (
            b"radt1 10 100.5 examples 64\n",
            b"radt1 11 100.75 examples 32\nradt1 11 100.75 epoch 0\n",
            b"radt1 10 101.0 examples 128\nradt1 10 101.0 epoch 0\n",  # epoch 0 again: no mark
            b"radt1 10 101.25 window 1\n",
            b"radt1 10 101.5 examples -1\nradt1 10 nan examples 1\nradt1 x 1.0 examples 1\n",
            b"radt1 10 101.5 bogus 1\nradt2 10 101.5 examples 1\nradt1 10 101.5 epoch 0.5\n",
            b"\xff\xfe not text",
        ):
            script.sendto(datagram, address)
    receiver.close()
    receiver.close()  # safe twice
    assert got == [
        (100.5, EXAMPLES_KEY, 64.0),
        (100.75, EXAMPLES_KEY, 96.0),
        (100.75, EPOCH_KEY, 0.0),
        (101.0, EXAMPLES_KEY, 160.0),
        (101.25, WINDOW_KEY, 1.0),
    ]
    assert receiver.records == 6 and receiver.malformed == 7
    assert warnings == [
        f"ignored 7 malformed run-API records on {receiver.variable} (something other than "
        "radt.log_examples/log_epoch/start_window wrote there)"
    ]
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as late:
        late.sendto(b"radt1 10 102.0 examples 1\n", address)  # closed: nobody listens
