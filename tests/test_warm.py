"""The warm launcher (radt/warm.py): a run forked from it is the caller's run, in every way the
caller can see; it is never needed, private to its user, and ends when idle."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import default_signals

from radt import warm

COMMAND = """
import os, sys
from pathlib import Path

def parent(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

radt = os.getppid()  # radT's process: a fork of a fork of the warm launcher
print("run", os.environ["MLFLOW_RUN_ID"], "cwd", os.getcwd(), flush=True)
print("only", os.environ.get("ONLY_THIS_CALL", "-"), flush=True)
print("nice", os.getpriority(os.PRIO_PROCESS, 0), flush=True)
print("ancestor", parent(parent(radt)), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(int(sys.argv[1]))
"""


def warm_env(ws, tmp_path: Path) -> dict[str, str]:
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    return {**ws.env, "RADT_WARM": "1", "RADT_WARM_IDLE_S": "60", "XDG_RUNTIME_DIR": str(runtime)}


def server_of(env: dict[str, str], timeout_s: float = 180) -> tuple[Path, int]:
    """The warm launcher's socket and pid, once it listens."""
    folder = Path(env["XDG_RUNTIME_DIR"]) / "radt"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for sock in folder.glob("warm-*.sock"):
            pid = warm.server_pid(sock)
            if pid:
                return sock, pid
        time.sleep(0.2)
    raise AssertionError(f"no warm launcher listened in {folder} within {timeout_s} s")


def warm_up(ws, env: dict[str, str], name: str = "warm-up") -> tuple[Path, int]:
    """A trivial run that starts the test's warm launcher (it runs here itself); the launcher's
    socket and pid once it listens."""
    made = ws.run(["-l", "none", "-n", name, "--", "python", "-c", "pass"], env=env)
    assert made.returncode == 0, made.stderr
    return server_of(env)


@contextlib.contextmanager
def ended(env: dict[str, str]):
    """End the test's warm launcher (by its pid) whatever the test did."""
    try:
        yield
    finally:
        for lock in (Path(env["XDG_RUNTIME_DIR"]) / "radt").glob("warm-*.lock"):
            pid = warm.server_pid(lock.with_suffix(".sock"))
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)


def test_a_run_through_the_warm_launcher_is_the_callers_run(workspace, tmp_path):
    ws = workspace
    ws.script("cmd.py", COMMAND)
    env = warm_env(ws, tmp_path)
    with ended(env):
        first = ws.run(["-l", "none", "-n", "first", "--", "python", "cmd.py", "0"], env=env)
        assert first.returncode == 0, first.stderr  # run here; a warm launcher starts meanwhile
        sock, server = server_of(env)
        assert sock.stat().st_mode & 0o777 == 0o600
        env2 = {**env, "ONLY_THIS_CALL": "yes"}
        args = ["-l", "none", "-n", "second", "--", "python", "cmd.py", "3"]
        done = subprocess.run(  # niced by 7: the run takes the caller's niceness
            ["nice", "-n", "7", sys.executable, "-m", "radt", *args],
            cwd=ws.root,
            env=env2,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 3, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["ancestor"] == str(server)  # forked from the warm launcher
    assert lines["only"] == "yes"  # the caller's environment, not the warm launcher's
    assert lines["nice"] == str(min(os.getpriority(os.PRIO_PROCESS, 0) + 7, 19))
    run_id, cwd = lines["run"].split(" cwd ")
    assert Path(cwd) == ws.root
    assert "to stderr" in done.stderr
    assert f"radt: run {run_id} FAILED (exit code 3)" in done.stderr
    run = ws.client().get_run(run_id)
    assert run.info.status == "FAILED" and run.info.run_name == "second"
    assert run.data.tags["radt.exit_code"] == "3"
    assert not (ws.home / "runs" / run_id).exists()  # finished, nothing left to sync


@pytest.mark.slow
def test_the_callers_signal_stops_its_run_and_a_gone_warm_launcher_is_not_needed(
    workspace, tmp_path
):
    ws = workspace
    ws.script("sleepy.py", "import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    env = warm_env(ws, tmp_path)
    with ended(env):
        _, server = warm_up(ws, env)
        ws.env = env
        proc = ws.start(["-l", "none", "--", "python", "sleepy.py"])
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "KILLED" in err
        os.kill(server, signal.SIGKILL)  # gone: the next run runs here, as without it
        done = ws.run(["-l", "none", "--", "python", "-c", "print('alone')"], env=env)
        assert done.returncode == 0 and done.stdout.strip() == "alone", done.stderr
        assert {r.info.status for r in ws.runs()} == {"FINISHED", "KILLED"}


@pytest.mark.slow
def test_a_signal_the_caller_ignores_is_ignored_by_its_run(workspace, tmp_path):
    """As under `nohup`: a SIGHUP to the caller neither reaches its run nor stops it."""
    ws = workspace
    ws.script("sleepy.py", "import time\nprint('ready', flush=True)\ntime.sleep(3)\n")
    env = warm_env(ws, tmp_path)
    with ended(env):
        warm_up(ws, env)

        def nohup() -> None:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        proc = subprocess.Popen(
            ws.argv(["-l", "none", "--", "python", "sleepy.py"]),
            cwd=ws.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=nohup,
        )
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "FINISHED" in err
    assert {r.info.status for r in ws.runs()} == {"FINISHED"}


def test_on_unless_turned_off_and_never_inside_slurm(monkeypatch):
    monkeypatch.setattr(warm, "_own_streams", lambda: True)  # pytest captures the streams
    monkeypatch.delenv("RADT_WARM", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert warm.enabled()
    for off in ("0", "off", "False", " no "):
        monkeypatch.setenv("RADT_WARM", off)
        assert not warm.enabled()
    said = "off (' no ' in RADT_WARM; unset it to start runs through one)"
    assert warm.describe() == (True, said)
    monkeypatch.setenv("RADT_WARM", "1")
    assert warm.enabled()
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert not warm.enabled()


IN_PROCESS = """
import contextlib, io, sys
from radt.cli import main

err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(["-l", "none", "-n", "in-process", "--", sys.executable, "-c", "pass"])
sys.__stdout__.write(f"code {code}\\n" + err.getvalue())
"""


def test_a_caller_that_redirected_the_streams_runs_the_command_itself(workspace, tmp_path):
    """``main()`` called in-process with sys.stderr redirected: radT's lines reach that stream
    (a warm launcher's fork would write them to fd 2), though a warm launcher is up."""
    ws = workspace
    env = warm_env(ws, tmp_path)
    with ended(env):
        warm_up(ws, env)
        done = subprocess.run(
            [sys.executable, "-c", IN_PROCESS],
            cwd=ws.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("code 0\n"), done.stdout
    assert "FINISHED" in done.stdout  # radT's own end line, in the redirected stream
    assert "FINISHED" not in done.stderr
    assert {r.info.status for r in ws.runs() if r.info.run_name == "in-process"} == {"FINISHED"}


def test_another_pythonpath_is_another_warm_launcher(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    plain = warm.socket_path()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake-pynvml"))
    assert warm.socket_path() not in (None, plain)
    monkeypatch.delenv("PYTHONPATH")
    assert warm.socket_path() == plain


def test_a_caller_elsewhere_is_told_apart():
    here = warm._place(os.getpid())
    assert here is not None and here == warm._place(os.getppid())
    assert warm._place(2**22 + 17) is None  # no such process: refused, never served


def test_a_fork_takes_the_callers_limits_or_refuses():
    # above fs.nr_open no process may set its open-file limit, root neither
    above = int(Path("/proc/sys/fs/nr_open").read_text()) + 1
    code = (
        "import resource\n"
        "from radt import warm\n"
        "warm._take_limits({'RLIMIT_NOFILE': (64, 128), 'RLIMIT_NOT_A_LIMIT': (1, 1)})\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "try:\n"
        f"    warm._take_limits({{'RLIMIT_NOFILE': ({above}, {above})}})\n"
        "except (OSError, ValueError):\n"
        "    print('refused')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["(64, 128)", "refused"], done.stderr


PLACED = """
import os, psutil
me = psutil.Process()
print("cpus", ",".join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)
print("io", int(me.ionice()[0]), int(me.ionice()[1]), flush=True)
print("ancestor", me.parent().parent().ppid(), flush=True)
"""


def placed(cpus: set[int], io: tuple[int, int] | None):
    """A child's ``preexec_fn``: run on ``cpus`` with I/O priority ``io`` (class, level), as
    ``taskset`` and ``ionice`` would start it."""
    import psutil

    def place() -> None:
        default_signals()
        os.sched_setaffinity(0, cpus)
        if io is not None:
            psutil.Process().ionice(*io)

    return place


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin apart")
def test_a_run_takes_the_callers_cpus_and_io_priority_not_the_warm_launchers(workspace, tmp_path):
    import psutil

    ws = workspace
    ws.script("placed.py", PLACED)
    env = warm_env(ws, tmp_path)
    mine = os.sched_getaffinity(0)
    first, second = sorted(mine)[:2]

    def radt(name: str, place) -> dict[str, str]:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "radt"), "-l", "none", "-n", name, "--",
             sys.executable, "placed.py"],
            cwd=ws.root, env=env, capture_output=True, text=True, timeout=120, preexec_fn=place,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return dict(line.split(" ", 1) for line in done.stdout.splitlines())

    with ended(env):
        # the warm launcher is started by a caller on one CPU at idle I/O priority: it keeps both
        radt("pinned", placed({first}, (psutil.IOPRIO_CLASS_IDLE, 0)))
        _, server = server_of(env)
        assert os.sched_getaffinity(server) == {first}
        unpinned = radt("unpinned", placed(mine, (psutil.IOPRIO_CLASS_BE, 4)))
        other = radt("other", placed({second}, (psutil.IOPRIO_CLASS_BE, 6)))
    assert unpinned["ancestor"] == other["ancestor"] == str(server)  # both served warm
    assert unpinned["cpus"] == ",".join(map(str, sorted(mine)))
    assert unpinned["io"] == f"{int(psutil.IOPRIO_CLASS_BE)} 4"
    assert other["cpus"] == str(second)
    assert other["io"] == f"{int(psutil.IOPRIO_CLASS_BE)} 6"


def test_a_caller_under_another_numa_memory_policy_runs_its_command_itself():
    here = warm.placement(os.getpid())
    assert here["cpus"] == sorted(os.sched_getaffinity(0)) and here["ionice"] is not None
    assert warm.placement(2**22 + 17) == {"cpus": None, "ionice": None, "memory_policy": None}
    with pytest.raises(ValueError, match="memory policy is bind:0"):
        warm._take_placement({**here, "memory_policy": "bind:0"})
    with pytest.raises(ValueError, match="CPUs cannot be read"):
        warm._take_placement({**here, "cpus": None})
    with pytest.raises(ValueError, match="I/O priority cannot be read"):  # readable here
        warm._take_placement({**here, "ionice": None})
    warm._take_placement(here)  # its own placement: nothing to change


def test_the_warm_launcher_imports_nothing_from_the_folder_it_was_started_in(workspace, tmp_path):
    ws = workspace
    env = warm_env(ws, tmp_path)
    project = tmp_path / "project"  # a module there named as one the warm launcher imports
    project.mkdir()
    (project / "psutil.py").write_text("raise ImportError('the caller folder psutil')\n")
    radt = str(Path(sys.executable).parent / "radt")
    with ended(env):
        made = subprocess.run(
            [radt, "-l", "none", "-n", "from-project", "--", "python", "-c", "pass"],
            cwd=project, env=env, capture_output=True, text=True, timeout=120,
            preexec_fn=default_signals,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        _, server = server_of(env)
        assert os.readlink(f"/proc/{server}/cwd") == "/"  # it holds no caller's folder
        ws.script("cmd.py", COMMAND)
        done = ws.run(["-l", "none", "-n", "served", "--", "python", "cmd.py", "0"], env=env)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["ancestor"] == str(server)


def test_its_folder_must_be_private(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = warm.private_folder()
    assert folder == tmp_path / "radt" and folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)  # others may enter: no socket there
    assert warm.private_folder() is None
    assert warm.socket_path() is None
    monkeypatch.setenv("RADT_WARM", "1")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert warm.describe() == (False, "no private folder for its socket")


def test_its_own_runs_are_refused_as_callers():
    assert warm._descends_from(os.getpid(), os.getppid())
    assert warm._descends_from(os.getpid(), os.getpid())
    assert not warm._descends_from(os.getppid(), os.getpid())


def test_the_caller_imports_neither_mlflow_nor_the_analysis():
    code = (
        "import sys, radt.cli, radt.cli.run, radt.warm\n"
        "heavy = ('mlflow', 'numpy', 'pandas', 'radt.analysis')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "import radt\n"
        "print(radt.summary.__module__, radt.run.__name__, radt.Listener.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    expected = ["[]", "radt.analysis.summary radt.run Listener"]
    assert done.stdout.splitlines() == expected, done.stderr


def test_radt_called_from_python_returns_instead_of_leaving():
    from radt.console import leave

    assert leave(3) == 3  # under pytest, not the radt command: no os._exit


def test_the_radt_command_leaves_with_a_thread_pool_still_alive():
    # MLflow's artifact uploads leave concurrent.futures workers waiting for work: leaving must
    # stop them as the interpreter's exit does (a join alone waited for ever, a group's node 0).
    code = (
        "import concurrent.futures, sys, types\n"
        "pool = concurrent.futures.ThreadPoolExecutor(2)\n"
        "pool.submit(print, 'uploaded').result()\n"
        "sys.modules['__main__'].__spec__ = types.SimpleNamespace(name='radt.__main__')\n"
        "from radt.console import leave\n"
        "leave(3)\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (3, "uploaded\n"), done.stderr


@pytest.mark.slow
def test_it_ends_when_idle_and_takes_its_socket_away(tmp_path):
    folder = tmp_path / "rt"
    folder.mkdir(mode=0o700)
    path = folder / "warm-test.sock"
    env = {**os.environ, "RADT_WARM_IDLE_S": "1"}
    server = subprocess.Popen([sys.executable, "-m", "radt.warm", str(path)], env=env)
    try:
        assert server.wait(timeout=180) == 0
    finally:
        if server.poll() is None:
            server.kill()
    assert not path.exists()
    assert warm.server_pid(path) == server.pid  # what it wrote in its lock file


def test_the_looks_sync_and_doctor_go_through_the_warm_launcher(workspace, tmp_path):
    """The looks, ``radt sync`` and ``radt doctor`` are served like runs: the same output, and
    the caller imports no MLflow."""
    ws = workspace
    env = warm_env(ws, tmp_path)
    with ended(env):
        warm_up(ws, env, "looked-at")
        cold = {**ws.env, "RADT_WARM": "0"}
        looks = (
            ["runs", "-e", "Default"],
            ["export", "-e", "Default", "-o", "x.csv"],
            ["sync", "--list"],
            ["doctor", "--json"],
        )
        for args in looks:
            here = ws.run(args, env=cold)
            served = subprocess.run(
                [sys.executable, "-X", "importtime", "-m", "radt", *args],
                cwd=ws.root,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert served.returncode == here.returncode == 0, served.stderr
            if args[0] == "doctor":  # the same rows but the warm launcher's own (off, running)
                rows = [json.loads(out.stdout) for out in (served, here)]
                assert [r for r in rows[0] if r["name"] != "warm"] == [
                    r for r in rows[1] if r["name"] != "warm"
                ]
                assert [r["why"] for r in rows[0] if r["name"] == "warm"][0].startswith("running")
            else:
                assert served.stdout == here.stdout
            imported = [line for line in served.stderr.splitlines() if "import time:" in line]
            assert imported and not [line for line in imported if " mlflow" in line], args
        # an error is the same one line, and its exit code comes back
        missing = subprocess.run(
            [sys.executable, "-m", "radt", "report", "-e", "no-such-experiment"],
            cwd=ws.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            missing.returncode
            == ws.run(["report", "-e", "no-such-experiment"], env=cold).returncode
        )
        assert missing.returncode != 0 and missing.stderr.startswith("radt: error: ")
        assert "Traceback" not in missing.stderr
