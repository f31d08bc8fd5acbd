"""Outages and crashes: a real `mlflow server` killed and restarted, radT killed, a damaged spool.

Nothing is faked: radT runs as a real process against a real tracking server
(``tests/mlflow_server.py``) or a real SQLite store, and the `counter` test
listener makes every sample countable (0, 1, 2, … every 0.05 s), so a lost or
doubled sample shows as a gap or a repeat.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import Workspace, kill_quietly, pid_alive, wait_for
from mlflow_server import MlflowServer, ensure_running, server_fixture

from radt.listener import Sample
from radt.record.runfolder import STEPS, RunFolder, RunState
from radt.record.spool import SpoolWriter, read_spool
from radt.record.sync import ORPHAN_NOTE

COUNTER = "counter/seq/n"
WINDOW_US = 1_000_000  # radT's default --window of 1 s

# Trains until the test creates the file `stop` (at most MAX_S seconds), so the
# test decides when the run ends instead of guessing with sleeps.
TRAIN = """
import os, time
from pathlib import Path
Path("child.pid").write_text(str(os.getpid()))
print("training starts", os.getpid(), flush=True)
deadline = time.monotonic() + float(os.environ.get("MAX_S", "150"))
while not Path("stop").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("training done", flush=True)
"""

mlflow_server = server_fixture(scope="module")


@pytest.fixture
def server(mlflow_server: MlflowServer) -> MlflowServer:
    """The module's server, running (a test before may have left it down)."""
    return ensure_running(mlflow_server)


@pytest.fixture
def on_server(workspace: Workspace, server: MlflowServer) -> Workspace:
    """The workspace, with radT and its client pointed at the real server."""
    workspace.env["MLFLOW_TRACKING_URI"] = server.uri
    return workspace


class Radt:
    """A running radT whose stdout and stderr are read line by line as they come."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((process.stdout, self.out), (process.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def said(self, text: str) -> list[str]:
        """radT's stderr lines that contain ``text``."""
        return [line for line in list(self.err) if text in line]

    def wait_said(self, text: str, timeout: float) -> str:
        """Wait until radT says ``text`` on stderr; fail with its output otherwise."""
        try:
            return wait_for(lambda: self.said(text), timeout=timeout)[0]
        except AssertionError:
            raise AssertionError(
                f"radT did not say {text!r} within {timeout} s; stderr:\n" + "\n".join(self.err)
            ) from None

    @property
    def run_id(self) -> str:
        line = self.wait_said(" in experiment ", timeout=90)
        match = re.search(r"radt: run \S+ \(([0-9a-f]{32})\) in experiment", line)
        assert match, line
        return match.group(1)

    def wait(self, timeout: float) -> int:
        returncode = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        return returncode

    def stderr(self) -> str:
        return "\n".join(self.err)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def now_ms() -> int:
    return round(time.time() * 1000)


def child_pid(workspace: Workspace) -> int | None:
    try:
        return int((workspace.root / "child.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def cleanup(radt: Radt | None, workspace: Workspace) -> None:
    """Whatever a failed test left behind: radT, then its training process."""
    if radt is not None:
        radt.kill()
    (workspace.root / "stop").touch()
    pid = child_pid(workspace)
    if pid is not None:
        kill_quietly(pid)


NOT_ANSWERING = "tracking server not answering"
ANSWERS_AGAIN = "answers again"


def ride_out(
    ws: Workspace,
    radt: Radt,
    *,
    fault: Callable[[], object] | None,
    warning: str = NOT_ANSWERING,
    recovery: Callable[[], object] | None = None,
    all_clear: str | None = ANSWERS_AGAIN,
    before: Callable[[], object] | None = None,
    after: Callable[[], object] | None = None,
    wait_s: float = 90,
    timeout: float = 180,
) -> int:
    """Take radT's training through one fault (and back), end it, return radT's exit code.

    ``before()`` waits until there is something to lose; ``fault()`` breaks what radT
    depends on (None: it is in place from the start), and radT must say ``warning``
    and go on; ``recovery()`` mends it (None: it stays broken), and radT must say
    ``all_clear``; ``after()`` waits for what must follow. Then the training is told
    to stop (the file ``stop``) and radT must end within ``timeout``. Whatever fails,
    radT and its training are stopped.
    """
    try:
        if before is not None:
            before()
        if fault is not None:
            fault()
        radt.wait_said(warning, timeout=wait_s)
        assert radt.process.poll() is None, f"radT ended at the fault: {radt.stderr()}"
        if recovery is not None:
            recovery()
            if all_clear is not None:
                radt.wait_said(all_clear, timeout=wait_s)
        if after is not None:
            after()
        assert radt.process.poll() is None, f"radT ended before its training: {radt.stderr()}"
        (ws.root / "stop").touch()
        return radt.wait(timeout=timeout)
    finally:
        cleanup(radt, ws)


def counter_points(client, run_id: str) -> int:
    """How many points of the counter MLflow shows for the run now."""
    return len(client.get_metric_history(run_id, "system/" + COUNTER))


def wait_streamed(client, run_id: str, more_than: int = 0, timeout: float = 60) -> None:
    """Wait until MLflow shows more than ``more_than`` counter points of the run."""
    wait_for(lambda: counter_points(client, run_id) > more_than, timeout=timeout)


def samples_artifact(client, run_id: str, tmp_path: Path) -> pa.Table:
    local = client.download_artifacts(run_id, "radt/samples.parquet", str(tmp_path))
    table = pq.read_table(local)
    return table.set_column(1, "key", table["key"].cast(pa.string()))


def summary_stat(client, run_id: str, key: str, stat: str, tmp_path: Path) -> float:
    """A statistic of ``key`` in the run's closing table ``radt/summary.csv``."""
    import csv

    local = client.download_artifacts(run_id, "radt/summary.csv", str(tmp_path / "summary"))
    with open(local, newline="") as table:
        rows = {row["key"]: row for row in csv.DictReader(table)}
    return float(rows[key][stat])


def key_rows(table: pa.Table, key: str) -> pa.Table:
    return table.filter(pc.equal(table["key"], key))


def counter_values(table: pa.Table) -> list[float]:
    return key_rows(table, COUNTER)["value"].to_pylist()


def assert_counter_complete(table: pa.Table, at_least: int) -> int:
    """The counter series is 0, 1, …, n-1 in time order, n ≥ ``at_least``; return n."""
    values = counter_values(table)
    assert values == [float(i) for i in range(len(values))], (
        f"counter has gaps or repeats: {len(values)} values, "
        f"first wrong at {next(i for i, v in enumerate(values) if v != i)}"
    )
    assert len(values) >= at_least, f"only {len(values)} counter samples"
    return len(values)


def expected_points(table: pa.Table, key: str, started_ms: int) -> dict[int, tuple[float, int]]:
    """What radT's decimation makes of ``key`` in the samples: step → (mean, last ms).

    One point per window of 1 s; the step is the window's index counted from
    the window of the run's start, the timestamp that of the window's last sample.
    """
    rows = key_rows(table, key)
    micros = pc.cast(rows["timestamp"], pa.int64()).to_pylist()
    origin = started_ms * 1000 // WINDOW_US
    windows: dict[int, list] = {}
    for us, value in zip(micros, rows["value"].to_pylist(), strict=True):
        window = windows.setdefault(us // WINDOW_US - origin, [0.0, 0, 0])
        window[0] += value
        window[1] += 1
        window[2] = max(window[2], us // 1000)
    return {step: (total / n, last) for step, (total, n, last) in windows.items()}


def assert_history_matches(client, run, table: pa.Table, key: str = COUNTER) -> list[int]:
    """MLflow's history of ``system/<key>`` is one point per 1-s window of the samples,
    every window from the first to the last; return the points' timestamps in step order."""
    history = client.get_metric_history(run.info.run_id, "system/" + key)
    steps = [point.step for point in history]
    assert len(steps) == len(set(steps)), f"duplicate steps in the history: {sorted(steps)}"
    got = {point.step: (point.value, point.timestamp) for point in history}
    expected = expected_points(table, key, run.info.start_time)
    assert sorted(got) == sorted(expected), (
        f"steps in MLflow {sorted(got)} != windows in the samples {sorted(expected)}"
    )
    for step, (mean, last_ms) in expected.items():
        assert got[step][0] == pytest.approx(mean), f"step {step}"
        assert got[step][1] == last_ms, f"step {step}"
    first, last = min(got), max(got)
    assert sorted(got) == list(range(first, last + 1)), f"windows missing: {sorted(got)}"
    return [got[step][1] for step in sorted(got)]


def artifact_text(client, run_id: str, path: str, tmp_path: Path) -> str:
    return Path(client.download_artifacts(run_id, path, str(tmp_path))).read_text()


def spool_counter_rows(folder: Path) -> tuple[int, int]:
    """(all rows, counter rows) in a run folder's spool as ``radt sync`` will read it."""
    table, problems = read_spool(folder / "spool")
    assert problems == [], problems
    return table.num_rows, len(key_rows(table, COUNTER))


@pytest.mark.slow
def test_server_killed_and_restarted_mid_run_loses_nothing(on_server, server, tmp_path):
    ws = on_server
    ws.script("train.py", TRAIN)
    radt = Radt(ws.start(["-e", "outage-live", "-l", "counter+top", "train.py"]))
    client = ws.client()
    marks = {}

    def streaming() -> None:
        assert client.get_run(radt.run_id).info.status == "RUNNING"
        wait_streamed(client, radt.run_id, timeout=30)  # the live stream works before

    def crash() -> None:
        marks["killed_ms"] = now_ms()
        server.kill()

    def restart() -> None:
        server.start()
        marks["restarted_ms"] = now_ms()

    returncode = ride_out(ws, radt, before=streaming, fault=crash, recovery=restart, timeout=120)
    run_id = radt.run_id
    killed_ms, restarted_ms = marks["killed_ms"], marks["restarted_ms"]
    assert returncode == 0, radt.stderr()
    assert len(radt.said("tracking server not answering")) == 1, radt.stderr()
    assert len(radt.said("answers again")) == 1, radt.stderr()
    assert "training done" in radt.out
    assert not radt.said("radt sync"), radt.stderr()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.exit_code"] == "0"
    assert run.info.end_time >= restarted_ms
    table = samples_artifact(client, run_id, tmp_path)
    # 0.05 s a sample over a run longer than the restart of the server (seconds).
    n = assert_counter_complete(table, at_least=round((restarted_ms - killed_ms) / 50 / 2))
    stamps = assert_history_matches(client, run, table)
    assert summary_stat(client, run_id, COUNTER, "max", tmp_path) == n - 1
    # Contiguous windows from before the outage to after it: none lost inside it.
    assert stamps[0] < killed_ms and stamps[-1] > restarted_ms
    assert not (ws.home / "runs" / run_id).exists()


@pytest.mark.slow
def test_server_down_at_the_end_then_sync_completes_the_run(on_server, server, tmp_path):
    ws = on_server
    ws.script("train.py", TRAIN)
    radt = Radt(ws.start(["-e", "outage-end", "-l", "counter+top", "train.py"]))
    client = ws.client()
    # radT tries to send for its send timeout (30 s), then leaves the rest for sync.
    returncode = ride_out(
        ws,
        radt,
        before=lambda: wait_streamed(client, radt.run_id, timeout=30),
        fault=server.kill,
        timeout=180,
    )
    run_id = radt.run_id
    assert returncode == 0, radt.stderr()
    folder = ws.home / "runs" / run_id
    hints = radt.said("run `radt sync`")
    assert len(hints) == 1 and str(folder) in hints[0], radt.stderr()
    assert "training done" in radt.out
    state = RunFolder(folder).load()
    assert (state.status, state.exit_code) == ("FINISHED", 0)
    assert state.pending == list(STEPS)
    rows, counter_rows = spool_counter_rows(folder)
    assert counter_rows >= 10

    server.start()
    assert client.get_run(run_id).info.status == "RUNNING"  # not finished behind our back
    synced = ws.run(["sync"])
    assert synced.returncode == 0, synced.stderr
    assert f"run {run_id} synced (FINISHED)" in synced.stderr
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.exit_code"] == "0"
    table = samples_artifact(client, run_id, tmp_path)
    assert table.num_rows == rows
    assert assert_counter_complete(table, at_least=10) == counter_rows
    assert_history_matches(client, run, table)
    assert "training done" in artifact_text(client, run_id, "radt/output.log", tmp_path)
    assert not folder.exists()


# Prints `ready`, then ends when the test creates the file `stop`.
ENDS_ON_STOP = """
import time
from pathlib import Path
import radt
radt.log_examples(400)
print("ready", flush=True)
while not Path("stop").exists():
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_a_second_signal_while_the_server_hangs_leaves_the_record_to_sync_with_its_exit_code(
    on_server, server
):
    ws = on_server
    ws.script("ends.py", ENDS_ON_STOP)
    radt = Radt(ws.start(["-e", "outage-signals", "-l", "top", "ends.py"]))
    try:
        run_id = radt.run_id
        folder = RunFolder(ws.home / "runs" / run_id)
        wait_for(lambda: "ready" in radt.out, timeout=120)
        with server.paused():  # the record cannot be finished before both signals landed
            (ws.root / "stop").touch()
            wait_for(lambda: folder.load().status == "FINISHED", timeout=120)  # outcome kept
            radt.process.send_signal(signal.SIGTERM)
            radt.wait_said("after the command ended", timeout=60)
            radt.process.send_signal(signal.SIGTERM)
            returncode = radt.wait(timeout=120)
    finally:
        cleanup(radt, ws)
    assert returncode == 128 + signal.SIGTERM, radt.stderr()
    left = radt.said("received SIGTERM again")
    assert len(left) == 1, radt.stderr()
    assert left[0].startswith("radt: received SIGTERM again: stopped before the record")
    assert "`radt sync` will finish it (FINISHED, exit code 0" in left[0]
    assert not radt.said("FINISHED (exit code 0); "), radt.stderr()  # not finished by radT

    done = ws.run(["sync"])
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} synced (FINISHED)" in done.stderr
    run = ws.client().get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.exit_code"] == "0"
    assert "radt.stop_reason" not in run.data.tags
    assert run.data.metrics.get("examples") == 400, sorted(run.data.metrics)


@pytest.mark.slow
def test_radt_killed_mid_run_sync_adopts_the_orphan(workspace, tmp_path):
    workspace.env["RADT_WARM"] = "0"  # radT's own process records: the one this test kills
    workspace.script("train.py", TRAIN)
    radt = Radt(workspace.start(["-l", "counter", "train.py"]))
    try:
        run_id = radt.run_id
        folder = workspace.home / "runs" / run_id
        pid = wait_for(lambda: child_pid(workspace), timeout=60)
        assert pid_alive(pid)
        wait_for(lambda: _readable_counter_rows(folder) >= 20, timeout=30)
        killed_ms = now_ms()
        radt.process.send_signal(signal.SIGKILL)
        radt.wait(timeout=30)
        # PDEATHSIG: the training process goes with radT.
        wait_for(lambda: not pid_alive(pid), timeout=5)
    finally:
        cleanup(radt, workspace)
    client = workspace.client()
    assert client.get_run(run_id).info.status == "RUNNING"
    assert RunFolder(folder).load().status == "RUNNING"
    rows, counter_rows = spool_counter_rows(folder)

    synced = workspace.run(["sync"])
    assert synced.returncode == 0, synced.stderr
    assert f"run {run_id}: its radT is gone; marking it FAILED" in synced.stderr
    assert f"run {run_id} synced (FAILED)" in synced.stderr
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["radt.note"] == ORPHAN_NOTE
    assert run.data.tags["radt.stop_reason"] == "radT was killed"
    # Ended at its last spooled sample, not when sync ran.
    assert run.info.start_time < run.info.end_time <= killed_ms + 1000
    table = samples_artifact(client, run_id, tmp_path)
    assert table.num_rows == rows
    assert assert_counter_complete(table, at_least=20) == counter_rows
    assert_history_matches(client, run, table)
    assert "training starts" in artifact_text(client, run_id, "radt/output.log", tmp_path)
    assert not folder.exists()


def _readable_counter_rows(folder: Path) -> int:
    table, _ = read_spool(folder / "spool")
    return len(key_rows(table, COUNTER))


def _damage(path: Path, how: str, first_batch_end: int) -> None:
    data = path.read_bytes()
    if how == "cut in its second batch":
        path.write_bytes(data[: first_batch_end + (len(data) - first_batch_end) // 2])
    elif how == "overwritten with junk":
        path.write_bytes(b"\xde\xad\xbe\xef" * (len(data) // 4))
    elif how == "a garbled field name":
        path.write_bytes(data.replace(b"key", b"kez", 1))
    else:
        raise ValueError(how)


@pytest.mark.parametrize(
    ("how", "kept"),
    [
        ("cut in its second batch", 50),
        ("overwritten with junk", 0),
        pytest.param(
            "a garbled field name",
            0,
        ),
    ],
)
@pytest.mark.slow
def test_damaged_spool_chunk_is_reported_in_one_line_and_the_rest_uploaded(
    workspace, tmp_path, monkeypatch, how, kept
):
    # A run folder as a radT killed mid-run leaves it: state RUNNING, its radT
    # gone, two spool chunks; the last one is damaged.
    monkeypatch.setenv("RADT_HOME", str(workspace.home))
    client = workspace.client()
    run = client.create_run("0")
    started_s = run.info.start_time / 1000
    gone = subprocess.Popen(["true"])
    gone.wait()
    state = RunState(
        run_id=run.info.run_id,
        experiment_id="0",
        tracking_uri=workspace.uri,
        pid=gone.pid,
        started_s=started_s,
        window_s=1.0,
    )
    folder = RunFolder.create(state)

    def counter(first: int, last: int) -> list[Sample]:
        return [Sample(started_s + 0.05 * i, COUNTER, float(i)) for i in range(first, last)]

    first = SpoolWriter(folder.spool)
    first.append(counter(0, 50))
    first.close()
    second = SpoolWriter(folder.spool)
    second.append(counter(50, 100))
    chunk = sorted(folder.spool.iterdir())[-1]
    first_batch_end = chunk.stat().st_size
    second.append(counter(100, 150))  # not closed: radT died while writing it
    assert chunk.name == "chunk-000002.arrows"
    _damage(chunk, how, first_batch_end)

    synced = workspace.run(["sync"])
    assert synced.returncode == 0, synced.stderr
    damaged = [line for line in synced.stderr.splitlines() if "damaged spool chunk" in line]
    assert len(damaged) == 1, synced.stderr
    assert f"chunk-000002.arrows: kept {kept} samples" in damaged[0]
    assert "chunk-000001" not in synced.stderr
    lines = synced.stderr.splitlines()
    assert lines.index(damaged[0]) + 1 < len(lines), "the report is not followed by the rest"
    assert lines[lines.index(damaged[0]) + 1].startswith("radt: "), synced.stderr
    assert f"run {run.info.run_id} synced (FAILED)" in synced.stderr
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FAILED"
    table = samples_artifact(client, run.info.run_id, tmp_path)
    assert assert_counter_complete(table, at_least=1) == 50 + kept
    assert_history_matches(client, done, table)
    assert not folder.path.exists()


@pytest.mark.slow
def test_sync_skips_a_run_its_radt_is_still_recording(workspace, tmp_path):
    workspace.env["RADT_WARM"] = "0"  # radT's own process records: the one this test names
    workspace.script("train.py", TRAIN)
    radt = Radt(workspace.start(["-l", "counter", "train.py"]))
    try:
        run_id = radt.run_id
        folder = workspace.home / "runs" / run_id
        wait_for(lambda: child_pid(workspace), timeout=60)
        wait_for(lambda: _readable_counter_rows(folder) >= 5, timeout=30)
        synced = workspace.run(["sync"])
        assert radt.process.poll() is None
        assert synced.returncode == 0, synced.stderr
        skipped = [line for line in synced.stderr.splitlines() if "still being recorded" in line]
        assert len(skipped) == 1, synced.stderr
        assert run_id in skipped[0] and f"radT pid {radt.process.pid}" in skipped[0]
        assert "synced" not in synced.stderr and "FAILED" not in synced.stderr
        state = RunFolder(folder).load()
        assert state.status == "RUNNING" and state.note is None
        client = workspace.client()
        assert client.get_run(run_id).info.status == "RUNNING"
        (workspace.root / "stop").touch()
        returncode = radt.wait(timeout=120)
    finally:
        cleanup(radt, workspace)
    assert returncode == 0, radt.stderr()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert "radt.note" not in run.data.tags
    assert_counter_complete(samples_artifact(client, run_id, tmp_path), at_least=5)
    assert not folder.exists()
