"""Faults and bad input end to end: real full disks, read-only folders, broken stores, dead
terminals, escaping daemons, concurrent syncs. Each fault is made for real (a small tmpfs or
RLIMIT_FSIZE, a read-only mount, a pseudo-terminal that goes away, a double-forking daemon)
and radT runs as a real process against a real SQLite store.

The promise under test: every error a user can cause is one ``radt: error:`` line that says
what to do (never a traceback), and a fault in radT's surroundings never stops the training.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Workspace, kill_quietly, pid_alive, wait_for

PY = "print(1)\n"


def one_error(done: subprocess.CompletedProcess, fragment: str) -> str:
    """The single ``radt: error:`` line of a refused radT, which must hold ``fragment``."""
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("radt: error:")]
    assert len(errors) == 1, done.stderr
    assert fragment in errors[0], done.stderr
    return errors[0]


# --------------------------------------------------------------------------- real faults


class ReadOnly:
    """Makes folders read-only for real, root included: a read-only bind mount where
    mounting is allowed, else file modes (which bind everyone but root)."""

    def __init__(self) -> None:
        self.mounted: list[Path] = []
        self.chmodded: list[Path] = []

    def __call__(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        if _mount(["--bind", str(folder), str(folder)]):
            self.mounted.append(folder)
            if not _mount(["-o", "remount,bind,ro", str(folder)]):
                pytest.skip("cannot remount a bind mount read-only here")
        else:
            for path in [folder, *folder.rglob("*")]:
                path.chmod(0o555 if path.is_dir() else 0o444)
                self.chmodded.append(path)
        if os.access(folder, os.W_OK):
            pytest.skip("cannot make a folder read-only here (root without mount rights)")
        return folder

    def undo(self) -> None:
        for folder in reversed(self.mounted):
            subprocess.run(["umount", str(folder)], check=False, capture_output=True)
        for path in self.chmodded:
            with contextlib.suppress(OSError):
                path.chmod(0o755)


def _mount(args: list[str]) -> bool:
    if shutil.which("mount") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.fixture
def readonly():
    """``readonly(folder)`` makes ``folder`` read-only until the test ends."""
    maker = ReadOnly()
    yield maker
    maker.undo()


class FullDisk:
    """A folder on a real, nearly full filesystem: a 256 KiB tmpfs with 32 KiB free where
    mounting is allowed; elsewhere an ordinary folder, and radT runs under RLIMIT_FSIZE (a
    write past the limit fails with EFBIG, as a write to a full disk fails with ENOSPC)."""

    TMPFS_BYTES = 256 * 1024
    FREE_BYTES = 32 * 1024
    """Room for the run's own small files (its state, the environment's files: a 4 KiB tmpfs
    page each, written in the background from the start) and the output's first line, in
    whichever order they come; with 12 KiB, an environment capture that came first (as it does
    with the installed distributions already read) left the log no page at all."""
    RLIMIT_BYTES = 4 * 1024 * 1024  # above the SQLite store's size: only radT's files hit it

    def __init__(self, folder: Path, how: str) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.mounted = how == "tmpfs" and _mount(
            ["-t", "tmpfs", "-o", f"size={self.TMPFS_BYTES}", "tmpfs", str(folder)]
        )
        if self.mounted:
            filler = folder / "filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                f.write(b"\0" * (self.TMPFS_BYTES - self.FREE_BYTES))
            stat = os.statvfs(folder)
            assert stat.f_bavail * stat.f_frsize <= 2 * self.FREE_BYTES
            self.room = stat.f_bavail * stat.f_frsize
        else:
            import resource  # noqa: F401  (Linux and macOS: the fallback is always there)

            self.room = self.RLIMIT_BYTES

    def preexec(self):
        """For radT's process: nothing on the tmpfs, the file-size limit elsewhere."""
        if self.mounted:
            return None

        def limit() -> None:
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (self.RLIMIT_BYTES, self.RLIMIT_BYTES))

        return limit

    def undo(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.folder)], check=False, capture_output=True)


@pytest.fixture(params=["tmpfs", "rlimit"])
def full_disk(request, tmp_path):
    """A nearly full disk for ``RADT_HOME`` (see FullDisk): a real small tmpfs where radT's
    tests may mount one (skipped elsewhere, with the reason), and RLIMIT_FSIZE everywhere."""
    disk = FullDisk(tmp_path / "full", request.param)
    if request.param == "tmpfs" and not disk.mounted:
        pytest.skip("cannot mount a tmpfs here (needs root with mount rights); RLIMIT_FSIZE runs")
    yield disk
    disk.undo()


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--grace", "-5"], "--grace must be 0 or more, got -5"),
        (["--window", "0"], "--window must be at least 0.001 s, got 0"),
        (["--window", "0.0000001"], "--window must be at least 0.001 s, got 1e-07"),
        (["-e", ""], "-e/--experiment needs a name or an id"),
        (["-e", "  "], "-e/--experiment needs a name or an id"),
        (["-l", "none", "-o", "nosuch.key=1"], "-o nosuch.key=1: listener nosuch is not running"),
        (["-l", "counter", "-o", "top.per_core=1"], "listener top is not running"),
        (["--modes", "mgi"], "unknown mode 'mgi' in --modes"),
    ],
)
def test_bad_arguments_are_one_line_and_rc_2(workspace: Workspace, args, fragment):
    workspace.script("s.py", PY)
    done = workspace.run([*args, "s.py"])
    assert done.returncode == 2, done.stderr
    one_error(done, fragment)
    assert workspace.runs() == []


@pytest.mark.slow
def test_a_listener_option_for_a_running_listener_is_taken(workspace: Workspace):
    workspace.script("s.py", PY)
    done = workspace.run(["-l", "counter", "-o", "counter.step=2", "s.py"])
    assert done.returncode == 0, done.stderr
    assert workspace.only_run().info.status == "FINISHED"


@pytest.mark.slow
def test_modes_typo_in_a_plan_is_named(workspace: Workspace):
    workspace.script("s.py", PY)
    (workspace.root / "plan.csv").write_text(
        "Experiment, Workload, Collocation, File, Listeners\nstudy, w, none, s.py, none\n"
    )
    done = workspace.run(["--modes", "none+mgi", "plan.csv"])
    assert done.returncode == 2
    one_error(done, "unknown mode 'mgi' in --modes; choose from none, naive, mps, mig")
    done = workspace.run(["-o", "top.per_core=1", "plan.csv"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "-o top.per_core=1: listener top is not running" in done.stderr
    assert workspace.runs("study") == []


# --------------------------------------------------------------------------- broken stores


@pytest.mark.slow
def test_a_read_only_sqlite_store_is_one_line(workspace: Workspace, readonly, template_db):
    workspace.script("s.py", PY)
    store = workspace.root / "ro"
    store.mkdir()
    shutil.copy(template_db, store / "mlflow.db")
    readonly(store)
    env = {**workspace.env, "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlflow.db'}"}
    done = workspace.run(["-l", "none", "s.py"], env=env)
    assert done.returncode == 2
    line = one_error(done, "attempt to write a readonly database")
    assert str(store / "mlflow.db") in line and "sqlite:////" not in line
    assert len(done.stderr.splitlines()) <= 3, done.stderr
    assert not (workspace.home / "runs").exists() or not any((workspace.home / "runs").iterdir())


@pytest.mark.slow
def test_random_bytes_as_the_sqlite_store_is_one_line(workspace: Workspace):
    workspace.script("s.py", PY)
    junk = workspace.root / "junk.db"
    junk.write_bytes(os.urandom(100_000))
    env = {**workspace.env, "MLFLOW_TRACKING_URI": f"sqlite:///{junk}"}
    done = workspace.run(["-l", "none", "s.py"], env=env)
    assert done.returncode == 2
    one_error(done, "file is not a database")


@pytest.mark.slow
def test_an_unsupported_tracking_uri_is_one_line(workspace: Workspace):
    workspace.script("s.py", PY)
    done = workspace.run(
        ["-l", "none", "s.py"], env={**workspace.env, "MLFLOW_TRACKING_URI": "foo://bar"}
    )
    assert done.returncode == 2
    one_error(done, "MLflow has no tracking store for foo://bar")


@pytest.mark.slow
def test_an_experiment_id_that_does_not_exist_is_one_line(workspace: Workspace):
    workspace.script("s.py", PY)
    done = workspace.run(
        ["-l", "none", "s.py"], env={**workspace.env, "MLFLOW_EXPERIMENT_ID": "424242"}
    )
    assert done.returncode == 2
    one_error(done, "MLFLOW_EXPERIMENT_ID=424242 names no experiment")
    assert workspace.runs() == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["a file", "read-only"])
def test_radt_home_that_cannot_hold_run_folders_is_one_line_and_no_run(
    workspace: Workspace, readonly, tmp_path, kind
):
    workspace.script("s.py", PY)
    home = tmp_path / "home"
    if kind == "a file":
        home.write_text("not a folder")
    else:
        readonly(home)
    done = workspace.run(["-l", "none", "s.py"], env={**workspace.env, "RADT_HOME": str(home)})
    assert done.returncode == 2
    one_error(done, f"cannot keep run folders in {home}")
    assert workspace.runs() == []


# --------------------------------------------------------------------------- export, ui


@pytest.fixture
def one_run(workspace: Workspace) -> Workspace:
    workspace.script("s.py", PY)
    assert workspace.run(["-l", "counter", "s.py"]).returncode == 0
    return workspace


@pytest.mark.slow
def test_export_to_a_read_only_folder_or_onto_a_folder_is_one_line(one_run, readonly, tmp_path):
    ro = readonly(tmp_path / "ro")
    done = one_run.run(["export", "-e", "Default", "-o", str(ro / "out.csv")])
    assert done.returncode == 2
    one_error(done, f"cannot write {ro / 'out.csv'}")
    (one_run.root / "adir.csv").mkdir()
    done = one_run.run(["export", "-e", "Default", "-o", "adir.csv"])
    assert done.returncode == 2
    one_error(done, "adir.csv is a folder")


def test_ui_on_a_busy_port_is_one_line_of_radts_own(one_run):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = one_run.run(["ui", "--port", str(port)], timeout=60)
    assert done.returncode == 2
    assert "http://" not in done.stdout
    one_error(done, f"port {port} on 127.0.0.1 is in use")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_version_and_help_do_not_import_mlflow(workspace: Workspace):
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['radt'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('radt', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('MLFLOW' if 'mlflow' in sys.modules else 'CLEAN', "
        "'PANDAS' if 'pandas' in sys.modules else '')\n"
    )
    for args in (["--version"], ["--help"], []):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args],
            cwd=workspace.root,
            env=workspace.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip().splitlines()[-1].split()[0] == "CLEAN", (args, done.stdout)
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_new_store_is_said_once_in_radts_words(workspace: Workspace, tmp_path):
    workspace.script("s.py", PY)
    fresh = tmp_path / "fresh" / "mlflow.db"
    fresh.parent.mkdir()
    done = workspace.run(
        ["-l", "none", "s.py"], env={**workspace.env, "MLFLOW_TRACKING_URI": f"sqlite:///{fresh}"}
    )
    assert done.returncode == 0, done.stderr
    assert "INFO" not in done.stderr and "mlflow.store" not in done.stderr, done.stderr
    assert "sqlite:///" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if str(fresh) in line]
    assert said == [f"radt: tracking store {fresh} (new)"], done.stderr


# --------------------------------------------------------------------------- exit codes

# Waits to be interrupted; ``CATCH=1`` catches it and exits 1 (as many training loops do).
# The handler is set explicitly: the test must not depend on the SIGINT disposition it
# inherited (a suite started with `cmd &` ignores SIGINT).
INTERRUPTIBLE = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
Path("ready").write_text(str(os.getpid()))
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    if os.environ.get("CATCH"):
        sys.exit(1)
    raise
"""


@pytest.mark.slow
@pytest.mark.parametrize("catch", ["", "1"], ids=["dies-of-sigint", "catches-and-exits-1"])
def test_exit_code_tag_line_and_rc_agree_after_ctrl_c(workspace: Workspace, catch):
    workspace.script("wait.py", INTERRUPTIBLE)
    workspace.env["CATCH"] = catch
    radt = workspace.start(["-l", "none", "--grace", "20", "wait.py"])
    try:
        wait_for(lambda: (workspace.root / "ready").exists(), timeout=90)
        radt.send_signal(signal.SIGINT)
        out, err = radt.communicate(timeout=90)
    finally:
        radt.kill()
    assert radt.returncode == 130, err
    assert "interrupted" in out
    run = workspace.only_run()
    assert f"radt: run {run.info.run_id} KILLED (exit code 130)" in err
    assert run.info.status == "KILLED"
    assert run.data.tags["radt.exit_code"] == "130"
    assert run.data.tags["radt.signal"] == "SIGINT"


@pytest.mark.slow
def test_exit_code_tag_of_a_command_that_dies_of_a_signal(workspace: Workspace):
    workspace.script("die.py", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    done = workspace.run(["-l", "none", "die.py"])
    assert done.returncode == 137
    run = workspace.only_run()
    assert "KILLED (exit code 137)" in done.stderr
    assert run.data.tags["radt.exit_code"] == "137"
    assert run.data.tags["radt.signal"] == "SIGKILL"


@pytest.mark.slow
def test_exit_code_tag_of_a_failing_command_has_no_signal(workspace: Workspace):
    workspace.script("fail.py", "import sys; sys.exit(3)\n")
    done = workspace.run(["-l", "none", "fail.py"])
    assert done.returncode == 3
    run = workspace.only_run()
    assert run.data.tags["radt.exit_code"] == "3" and "radt.signal" not in run.data.tags


@pytest.mark.slow
def test_exit_code_tags_of_plan_rows_and_the_workload_after_ctrl_c(workspace: Workspace):
    workspace.script("wait.py", INTERRUPTIBLE)
    workspace.env["CATCH"] = "1"
    (workspace.root / "plan.csv").write_text(
        "Experiment, Workload, Collocation, File, Listeners\nstudy, w, none, wait.py, none\n"
    )
    radt = workspace.start(["--grace", "20", "plan.csv"])
    try:
        wait_for(lambda: (workspace.root / "ready").exists(), timeout=90)
        radt.send_signal(signal.SIGINT)
        _, err = radt.communicate(timeout=90)
    finally:
        radt.kill()
    assert radt.returncode == 130, err
    runs = workspace.runs("study")
    assert len(runs) == 2
    for run in runs:
        assert run.info.status == "KILLED"
        assert run.data.tags["radt.exit_code"] == "130", run.data.tags
        assert run.data.tags["radt.signal"] == "SIGINT"
    assert "KILLED" in (workspace.root / "plan.csv").read_text()
    assert "workload study/w: KILLED (exit code 130)" in err


# --------------------------------------------------------------------------- terminals

# Prints numbered lines until stopped (or CHATTY_LINES of them); each number goes to `printed`
# after it was printed, so the test knows every line the command wrote to radT before it ended.
# Not LINES: that is a terminal's height, which pytest-xdist's workers have in their environment
# (LINES=24), and the command inherits it.
CHATTY = """
import os, sys, time
from pathlib import Path
Path("ready").write_text(str(os.getpid()))
with open("printed", "w") as record:
    for n in range(int(os.environ.get("CHATTY_LINES", "1000000"))):
        print(f"line {n:06d} " + "x" * 60, flush=True)
        record.write(f"{n}\\n")
        record.flush()
        time.sleep(float(os.environ.get("CHATTY_PAUSE", "0.005")))
"""


def _drain(fd: int, until, timeout: float = 90.0) -> bytes:
    """Read ``fd`` until ``until()`` holds (so the writer never blocks on a full buffer)."""
    import select
    import time

    seen = b""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out waiting: " + seen[-2000:].decode("replace")
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            seen += chunk
    return seen


def _log_lines(workspace: Workspace, run_id: str, dest: Path) -> list[str]:
    local = workspace.client().download_artifacts(run_id, "radt/output.log", str(dest))
    return [line for line in Path(local).read_text().splitlines() if line.startswith("line ")]


def _on_a_terminal(workspace: Workspace, args: list[str], hup: object) -> subprocess.Popen:
    """radT as the session leader of a new pseudo-terminal (as a login shell's command is),
    with SIGHUP's disposition ``hup`` (SIG_IGN: as under `nohup`) and SIGINT's default.
    Returns radT and the terminal's master side (``radt.master``)."""
    import fcntl
    import termios

    master, slave = os.openpty()

    def on_the_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, hup)

    radt = subprocess.Popen(
        workspace.argv(args),
        cwd=workspace.root,
        env=workspace.env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=on_the_terminal,
    )
    os.close(slave)
    radt.master = master  # type: ignore[attr-defined]
    return radt


@pytest.mark.slow
@pytest.mark.parametrize("nohup", [False, True], ids=["terminal", "nohup"])
def test_a_terminal_that_goes_away_ends_the_run_killed_by_sighup_with_the_whole_log(
    workspace: Workspace, tmp_path, nohup
):
    workspace.script("chatty.py", CHATTY)
    if nohup:  # under `nohup`, radT and its command carry on to the end
        workspace.env.update(CHATTY_LINES="600", CHATTY_PAUSE="0.005")
    hup = signal.SIG_IGN if nohup else signal.SIG_DFL
    radt = _on_a_terminal(workspace, ["-l", "counter", "--grace", "20", "chatty.py"], hup)
    try:
        printed = workspace.root / "printed"
        _drain(radt.master, lambda: printed.exists() and len(printed.read_text().split()) >= 50)
        os.close(radt.master)  # the terminal goes away: hang-up
        assert radt.wait(timeout=120) == (0 if nohup else 128 + signal.SIGHUP)
    finally:
        radt.kill()
        if (workspace.root / "ready").exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int((workspace.root / "ready").read_text()), signal.SIGKILL)
    run = workspace.only_run()
    assert "radt.note" not in run.data.tags
    wrote = len((workspace.root / "printed").read_text().split())
    logged = _log_lines(workspace, run.info.run_id, tmp_path)
    assert len(logged) >= wrote and logged[:wrote] == [
        f"line {n:06d} " + "x" * 60 for n in range(wrote)
    ]
    if nohup:
        assert run.info.status == "FINISHED" and wrote == 600
        return
    assert run.info.status == "KILLED", run.data.tags
    assert run.data.tags["radt.exit_code"] == "129"
    assert run.data.tags["radt.signal"] == "SIGHUP"
    assert run.data.tags["radt.stop_reason"] == "radT received SIGHUP"


@pytest.mark.slow
def test_a_reader_that_goes_away_does_not_stop_the_training(workspace: Workspace, tmp_path):
    workspace.script("chatty.py", CHATTY)
    workspace.env.update(CHATTY_LINES="3000", CHATTY_PAUSE="0")
    radt = subprocess.Popen(
        workspace.argv(["-l", "none", "chatty.py"]),
        cwd=workspace.root,
        env=workspace.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert radt.stdout is not None and radt.stderr is not None
        radt.stdout.readline()
        radt.stdout.close()  # as `radt train.py | head -1`
        radt.stderr.close()
        assert radt.wait(timeout=120) == 0
    finally:
        radt.kill()
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert len(_log_lines(workspace, run.info.run_id, tmp_path)) == 3000


# --------------------------------------------------------------------------- full disk

# Prints one line, waits until radT has logged it, then prints BYTES more in lines of 100.
LOUD = """
import os, sys, time
from pathlib import Path
log = Path(os.environ["RADT_HOME"], "runs", os.environ["RADT_RUN_ID"], "artifacts", "radt",
           "output.log")
print("line 000000 " + "x" * 87, flush=True)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not (log.exists() and log.stat().st_size >= 100):
    time.sleep(0.02)
for n in range(1, int(os.environ["BYTES"]) // 100 + 1):
    print(f"line {n:06d} " + "x" * 87)
print("done", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_a_full_disk_is_a_warning_and_the_training_goes_on(
    workspace: Workspace, full_disk, tmp_path
):
    workspace.script("loud.py", LOUD)
    expected_bytes = 300_000 if full_disk.mounted else 6 * 1024 * 1024
    env = {**workspace.env, "RADT_HOME": str(full_disk.folder), "BYTES": str(expected_bytes)}
    done = subprocess.run(
        workspace.argv(["-l", "counter", "loud.py"]),
        cwd=workspace.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # before the fix the command blocked forever on a full pipe
        preexec_fn=full_disk.preexec(),
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.count("\n") == expected_bytes // 100 + 1  # the terminal got everything
    warnings = [line for line in done.stderr.splitlines() if "cannot write the output log" in line]
    assert len(warnings) == 1, done.stderr
    assert "the command goes on" in warnings[0]
    run = workspace.only_run()
    assert run.info.status == "FINISHED", run.data.tags
    assert run.data.tags["radt.exit_code"] == "0"
    # Whatever fitted is kept: a prefix of the output, cut at most inside its last line.
    local = workspace.client().download_artifacts(run.info.run_id, "radt/output.log", str(tmp_path))
    kept = Path(local).read_text()
    assert kept.startswith("line 000000 ")
    assert 100 <= len(kept) <= full_disk.room
    full_lines = kept.splitlines()[:-1]
    assert full_lines == [f"line {n:06d} " + "x" * 87 for n in range(len(full_lines))]
    names = [a.path for a in workspace.client().list_artifacts(run.info.run_id, "radt")]
    assert "radt/samples.parquet" in names


# --------------------------------------------------------------------------- radt sync


def _orphan(workspace: Workspace, name: str):
    """A run folder as a radT killed mid-run leaves it: state RUNNING, its radT gone, a
    spool chunk of 20 samples. Returns the folder."""
    from radt.listener import Sample
    from radt.record.runfolder import RunFolder, RunState
    from radt.record.spool import SpoolWriter

    client = workspace.client()
    run = client.create_run("0", run_name=name)
    gone = subprocess.Popen(["true"])
    gone.wait()
    started_s = run.info.start_time / 1000
    state = RunState(
        run_id=run.info.run_id,
        experiment_id="0",
        tracking_uri=workspace.uri,
        pid=gone.pid,
        started_s=started_s,
        window_s=1.0,
    )
    folder = RunFolder(workspace.home / "runs" / run.info.run_id)
    folder.path.mkdir(parents=True)
    folder.save(state)
    spool = SpoolWriter(folder.spool)
    spool.append([Sample(started_s + 0.05 * i, "counter/seq/n", float(i)) for i in range(20)])
    spool.close()
    return folder


@pytest.mark.slow
def test_a_garbled_run_folder_is_one_line_and_the_others_sync(workspace: Workspace):
    good = _orphan(workspace, "good")
    bad = _orphan(workspace, "bad")
    (bad.path / "run.json").write_text('{"run_id": "abc", "garbled')
    done = workspace.run(["sync"])
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    about_bad = [line for line in done.stderr.splitlines() if bad.path.name in line]
    assert len(about_bad) == 1, done.stderr
    assert "is damaged" in about_bad[0] and "skipped" in about_bad[0]
    assert f"run {good.path.name} synced (FAILED)" in done.stderr
    assert workspace.client().get_run(good.path.name).info.status == "FAILED"
    assert not good.path.exists() and bad.path.exists()


@pytest.mark.slow
def test_two_syncs_at_once_finish_each_run_once(workspace: Workspace):
    folders = [_orphan(workspace, f"r{n}") for n in range(4)]
    syncs = [
        subprocess.Popen(
            workspace.argv(["sync"]),
            cwd=workspace.root,
            env=workspace.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [sync.communicate(timeout=240) for sync in syncs]
    said = "".join(err for _, err in outputs)
    assert "Traceback" not in said and "Error" not in said, said
    assert [sync.returncode for sync in syncs] == [0, 0], said
    client = workspace.client()
    for folder in folders:
        run_id = folder.path.name
        assert said.count(f"run {run_id} synced (FAILED)") == 1, said
        run = client.get_run(run_id)
        assert run.info.status == "FAILED"
        artifacts = [a.path for a in client.list_artifacts(run_id, "radt")]
        assert artifacts == ["radt/samples.parquet", "radt/summary.csv"], artifacts
        assert not folder.path.exists()


# --------------------------------------------------------------------------- plans


@pytest.mark.slow
def test_a_plan_in_a_read_only_folder_runs_and_its_status_goes_to_a_copy(
    workspace: Workspace, readonly
):
    workspace.script("s.py", PY)
    folder = workspace.root / "plans"
    folder.mkdir()
    plan = folder / "plan.csv"
    text = "Experiment, Workload, Collocation, File, Listeners\nstudy, w, none, s.py, none\n"
    plan.write_text(text)
    readonly(folder)
    done = workspace.run(["plans/plan.csv"])
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    runs = workspace.runs("study")
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    warnings = [line for line in done.stderr.splitlines() if "cannot update" in line]
    assert len(warnings) == 1, done.stderr
    assert str(plan) in warnings[0] or "plans/plan.csv" in warnings[0]
    copy = Path(warnings[0].split(" written to ")[1].split()[0])
    assert copy.is_relative_to(workspace.home), warnings[0]
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert f"FINISHED, {child.info.run_id}" in copy.read_text()
    assert plan.read_text() == text


# --------------------------------------------------------------------------- daemons

# Double-forks a daemon that calls setsid and points its stdio at /dev/null (it leaves the
# command's process group and session, and outlives the command), then exits.
DAEMONIZES = """
import os, sys, time
from pathlib import Path
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork():
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    Path("daemon.pid").write_text(str(os.getpid()))
    while True:
        time.sleep(0.1)
os.waitpid(first, 0)
deadline = time.monotonic() + 60
while not Path("daemon.pid").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
print("command exits, its daemon runs on", flush=True)
"""


def _daemon_pid(root: Path) -> int:
    return int(
        wait_for(
            lambda: (root / "daemon.pid").exists() and (root / "daemon.pid").read_text(), timeout=60
        )
    )


@pytest.mark.slow
def test_a_double_forking_daemon_does_not_outlive_radt(workspace: Workspace):
    workspace.script("daemonizes.py", DAEMONIZES)
    daemon = None
    try:
        done = workspace.run(["-l", "none", "daemonizes.py"])
        daemon = _daemon_pid(workspace.root)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: not pid_alive(daemon), timeout=10)
    finally:
        if daemon is not None:
            kill_quietly(daemon)
    ended = [line for line in done.stderr.splitlines() if "left running" in line]
    assert len(ended) == 1, done.stderr
    assert f"(pid {daemon})" in ended[0] and "ended 1 process" in ended[0]
    assert workspace.only_run().info.status == "FINISHED"


# The same in a process of its own, with the cgroup way switched off: the polled tree and
# the child subreaper must find the daemon alone.
WITHOUT_CGROUP = """
import os, sys
from pathlib import Path
from radt.console import install_lines
from radt.launch import tree
from radt.launch.child import Child
install_lines()  # radT's lines on stderr, as the command line prints them
tree.cgroup_base = lambda: None
child = Child([sys.executable, "daemonizes.py"], {**os.environ, "RADT_RUN_ID": "r1"},
              Path("out.log"))
child.start()
while child.poll() is None:
    import time; time.sleep(0.05)
child.reap_group(grace_s=2.0)
child.join_output()
print("way", child.tree.way)
"""


def test_without_a_cgroup_the_watched_tree_ends_the_daemon(workspace: Workspace):
    workspace.script("daemonizes.py", DAEMONIZES)
    workspace.script("without_cgroup.py", WITHOUT_CGROUP)
    daemon = None
    try:
        done = subprocess.run(
            [sys.executable, "without_cgroup.py"],
            cwd=workspace.root,
            env=workspace.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        daemon = _daemon_pid(workspace.root)
        assert done.returncode == 0, done.stderr
        assert "way watch" in done.stdout
        wait_for(lambda: not pid_alive(daemon), timeout=10)
    finally:
        if daemon is not None:
            kill_quietly(daemon)
    assert "ended 1 process the command left running: python" in done.stderr, done.stderr
