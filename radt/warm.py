"""The warm launcher: radT and MLflow imported once per user, each run forked from it.

``radt COMMAND`` first asks the user's warm launcher, a process that has already imported radT,
MLflow and the store's modules (several seconds of CPU on a small machine), to run it. The warm
launcher forks; the fork takes the caller's working folder, environment, umask, niceness,
resource limits, CPUs (``taskset``), I/O priority (``ionice``) and standard streams, and runs
``radt COMMAND`` exactly as the caller would have (the same code: run created before the command
starts, the spool, the end of the run), while the caller waits, forwards its signals and exits
with the run's exit code.

It is never needed: when none answers, or it cannot take the caller's place (another cgroup or
namespace, a resource limit above its own, another NUMA memory policy), the caller runs the
command itself, and where none answers starts one in the background for the next run. It ends
when idle (``RADT_WARM_IDLE_S``, default 600 s); ``RADT_WARM=0`` turns it off. Its socket is in
a folder only its user may enter (``$XDG_RUNTIME_DIR/radt``, else ``/tmp/radt-UID``), and it
serves only callers of its own user id. Its name carries a fingerprint of this Python, the
variables that decide what it imports (``PYTHONPATH`` …) and radT's code, so an upgraded or
edited radT gets a new one. Not used inside a Slurm job (the fork would live in the warm
launcher's cgroup, outside the job's). Plans and studies go through it as runs do (a study's
``--slurm`` submitter included: its jobs run radT on the nodes, cold), and so do ``radt runs``,
``radt export``, ``radt report``, ``radt sync`` and ``radt doctor``."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import resource
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from radt.switches import turned_off

log = logging.getLogger(__name__)

ENV = "RADT_WARM"
"""``0``: run every command in the caller, never through a warm launcher (default: on)."""
ADVICE = "set XDG_RUNTIME_DIR to a folder only you can enter, or set RADT_WARM=0"
INTERPRETER_ENV = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONPLATLIBDIR",
)
"""The variables that decide which modules a Python imports: each value its own warm launcher."""
RLIMITS = tuple(
    name
    for name in (
        "RLIMIT_AS",
        "RLIMIT_CORE",
        "RLIMIT_CPU",
        "RLIMIT_DATA",
        "RLIMIT_FSIZE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_NOFILE",
        "RLIMIT_NPROC",
        "RLIMIT_STACK",
    )
    if hasattr(resource, name)
)
"""The caller's resource limits that its run takes over (``ulimit``)."""
IDLE_ENV = "RADT_WARM_IDLE_S"
IDLE_S = 600.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals a caller passes on to its run, as if it had received them itself."""
SAFE_PATH = ("-P",) if sys.version_info >= (3, 11) else ()
"""Python's flag that keeps the working folder off ``sys.path`` (3.11+; before it the warm
launcher starts in ``/``)."""
HEADER = struct.Struct("!I")
MAX_REQUEST = 16 * 2**20
PRELOAD = (
    "radt.cli",
    "radt.cli.run",
    "radt.cli.runs",
    "radt.cli.export",
    "radt.cli.report",
    "radt.cli.sync",
    "radt.cli.doctor",
    "radt.doctor.probes",
    "radt.doctor.measure",
    "radt.analysis.export",
    "radt.analysis.report",
    "plotly.graph_objects",
    "radt.launch.launcher",
    "radt.plans.runner",
    "radt.plans.studyrun",
    "radt.analysis.closing",
    "radt.analysis.summary",
    "radt.record.compact",
    "radt.record.sync",
    "psutil",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.tracking.rest_store",
)
"""What the warm launcher imports before it serves: the launch path, plans and studies, the end
of a run and the looks that go through it (:data:`radt.cli.WARM_LOOKS`)."""

_served = False
"""True in a fork of the warm launcher: it runs the command itself."""


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether this ``radt COMMAND`` may go through the warm launcher: not turned off, not in a
    Slurm job (a fork would live outside the job's cgroup) and with this process's own streams."""
    environ = os.environ if environ is None else environ
    if turned_off(ENV, environ) or _served or "SLURM_JOB_ID" in environ:
        return False
    return _own_streams()


def _own_streams() -> bool:
    """Whether ``sys.stdout`` and ``sys.stderr`` are this process's own (fds 1 and 2): the warm
    launcher's run writes to those, so a caller that redirected them (``radt.cli.main()`` called
    in-process, as the docs' command reference does) runs the command itself."""
    try:
        return sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def idle_s() -> float:
    """How long the warm launcher waits for a run before it ends."""
    try:
        value = float(os.environ.get(IDLE_ENV, IDLE_S))
    except ValueError:
        return IDLE_S
    return value if value > 0 else IDLE_S


def private_folder() -> Path | None:
    """The user's folder for the socket (made 0700), or None where it is not private."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "radt" if runtime else Path("/tmp") / f"radt-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, parents=bool(runtime), exist_ok=True)
        info = base.lstat()
    except OSError:
        return None
    private = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    return base if private and not info.st_mode & 0o077 else None


def fingerprint() -> str:
    """This Python, what decides its imports and radT's code, as a short hash: a changed radT
    or another ``PYTHONPATH`` is another warm launcher."""
    import radt

    roots = [Path(p) for p in radt.__path__]
    for name in ("radt.listeners", "radt.frontend"):
        spec = _spec(name)
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    newest = 0
    for root in roots:
        for path in root.rglob("*.py"):
            with contextlib.suppress(OSError):
                newest = max(newest, path.stat().st_mtime_ns)
    paths = "|".join(f"{name}={os.environ.get(name, '')}" for name in INTERPRETER_ENV)
    text = f"{sys.executable}|{radt.__version__}|{'|'.join(map(str, roots))}|{newest}|{paths}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _spec(name: str):
    import importlib.util

    with contextlib.suppress(ImportError, ValueError):
        return importlib.util.find_spec(name)
    return None


def socket_path() -> Path | None:
    """Where this user's warm launcher for this radT listens; None without a private folder."""
    folder = private_folder()
    return folder / f"warm-{fingerprint()}.sock" if folder is not None else None


def describe() -> tuple[bool, str]:
    """For ``radt doctor``: whether radT can use a warm launcher here, and in words (off, running
    with its pid, or started by the next run); False only where it is asked for and cannot be."""
    if turned_off(ENV):
        return True, f"off ({os.environ[ENV]!r} in {ENV}; unset it to start runs through one)"
    if "SLURM_JOB_ID" in os.environ:
        return True, "not used inside a Slurm job"
    path = socket_path()
    if path is None:
        return False, "no private folder for its socket"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(path))
    except OSError:
        return True, f"none running; the next run starts one at {path}"
    return True, f"running (pid {server_pid(path)}) at {path}"


def server_pid(path: Path) -> int | None:
    """The pid the warm launcher at ``path`` wrote into its lock file, if any."""
    try:
        return int(path.with_suffix(".lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# The caller: `radt COMMAND` asks the warm launcher.


def run(argv: list[str]) -> int | None:
    """Run ``radt ARGV`` through the warm launcher and return its exit code; None when there
    is none to ask (one is started for the next run) or it refused before the run began."""
    path = socket_path()
    if path is None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        _check_peer(conn)
        _send(conn, argv)
        lines = _Lines(conn)
        first = lines.next()
    except OSError as exc:
        conn.close()
        log.debug("warm launcher: not used (%s)", exc)
        start(path)
        return None
    if first is None or not first.startswith("pid "):
        conn.close()
        return None
    pid = int(first.split()[1])
    previous = {  # an ignored signal stays ignored (`nohup`): the run ignores it too
        sig: signal.signal(sig, lambda signum, _frame: _forward(pid, signum))
        for sig in FORWARDED
        if signal.getsignal(sig) != signal.SIG_IGN
    }
    try:
        while True:
            line = lines.next()
            if line is None:
                log.warning("the warm launcher's run %d ended without an exit status", pid)
                return 1
            if line.startswith("exit "):
                return int(line.split()[1])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        conn.close()


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _check_peer(conn: socket.socket) -> int:
    """The peer's pid; PermissionError for another user's process."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    if uid != os.getuid():
        raise PermissionError(f"the socket's owner is user {uid}, not this user")
    return pid


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``pid``'s parent chain reaches ``ancestor`` (from /proc)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
            pid = int(text.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def _place(pid: int) -> tuple[str, ...] | None:
    """Where a process lives: its cgroups and its mount, pid and network namespaces (None where
    unreadable). A run forked for a caller elsewhere would outlive its session's end or escape
    its memory limit, so such a caller runs its command itself."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        spaces = tuple(os.readlink(f"/proc/{pid}/ns/{name}") for name in ("mnt", "pid", "net"))
    except OSError:
        return None
    return (cgroup, *spaces)


def _send(conn: socket.socket, argv: list[str]) -> None:
    umask = os.umask(0)
    os.umask(umask)
    body = json.dumps(
        {
            "argv": argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "umask": umask,
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "ignored": [int(sig) for sig in FORWARDED if signal.getsignal(sig) == signal.SIG_IGN],
            "rlimits": {name: resource.getrlimit(getattr(resource, name)) for name in RLIMITS},
        }
    ).encode()
    message = HEADER.pack(len(body)) + body
    sent = socket.send_fds(conn, [message[:4096]], [0, 1, 2])
    conn.sendall(message[sent:])


class _Lines:
    """The warm launcher's answers, one per line (``pid N``, ``exit N``)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""

    def next(self) -> str | None:
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(256)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def start(path: Path) -> None:
    """Start a warm launcher at ``path`` in the background (it ends itself when idle)."""
    with contextlib.suppress(OSError):
        subprocess.Popen(  # imports nothing from the caller's folder, as the `radt` command
            [sys.executable, *SAFE_PATH, "-m", "radt.warm", str(path)],
            cwd="/",  # nor holds it: the folder may be unmounted while this serves
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )


# The warm launcher itself.


def serve(path: Path, idle: float, main: Callable[[list[str]], int]) -> int:
    """Preload radT and MLflow, then fork one launcher per caller until idle for ``idle`` s;
    each runs the caller's arguments through ``main`` (:func:`radt.cli.main`)."""
    import fcntl

    lock = open(path.with_suffix(".lock"), "a+")  # noqa: SIM115 - held for its whole life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another one is starting or serving
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # its pid, for `radt doctor` and for ending it by hand
    lock.flush()
    import importlib
    import threading

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from importlib.metadata import entry_points

    from radt.quantities import GROUP

    for ep in entry_points(group=GROUP):  # the listeners' modules, not their availability
        with contextlib.suppress(Exception):
            ep.load()
    from radt.launch.environment import installed_packages

    installed_packages()  # read once here; each run checks that sys.path has not changed
    if threading.active_count() > 1:
        return 1  # forking would copy another thread's locks: serve no one
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        server.bind(str(path))
    finally:
        os.umask(umask)
    server.listen(16)
    server.settimeout(idle)
    inode = path.stat().st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its forks are reaped by the kernel
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                return 0
            _serve_one(conn, server, lock, main)
    finally:
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:
                path.unlink()


def _serve_one(
    conn: socket.socket, server: socket.socket, lock, main: Callable[[list[str]], int]
) -> None:
    fds: list[int] = []
    try:
        conn.settimeout(10)
        peer = _check_peer(conn)
        if _descends_from(peer, os.getpid()):
            raise PermissionError("a caller started by one of its own runs")
        if _place(peer) != _place(os.getpid()):
            raise PermissionError("a caller in another cgroup or namespace")
        request, fds = _receive(conn)
        request["placement"] = placement(peer)
        conn.settimeout(None)
    except (OSError, ValueError, KeyError) as exc:
        log.debug("warm launcher: refused a caller (%s)", exc)
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    if os.fork() == 0:
        try:
            server.close()
            lock.close()
            code = _attend(conn, request, fds, main)
        except BaseException:
            code = 1
        os._exit(code)
    for fd in fds:
        os.close(fd)
    conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 4096, 3)
    if len(fds) != 3 or len(data) < HEADER.size:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its streams")
    (size,) = HEADER.unpack(data[: HEADER.size])
    if size > MAX_REQUEST:
        raise ValueError("a request too large")
    body = data[HEADER.size :]
    while len(body) < size:
        chunk = conn.recv(min(65536, size - len(body)))
        if not chunk:
            raise ValueError("a request cut short")
        body += chunk
    request = json.loads(body)
    for key in ("argv", "cwd", "env", "umask"):
        request[key]  # noqa: B018 - a KeyError refuses it
    return request, fds


def _attend(
    conn: socket.socket, request: dict, fds: list[int], main: Callable[[list[str]], int]
) -> int:
    """In a fork: run the caller's radT in a fork of its own, tell the caller its pid and,
    when it ends, its exit code; a caller that goes away hangs it up (SIGHUP)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        _take_limits(request.get("rlimits", {}))
        _take_placement(request["placement"])
    except (OSError, ValueError, TypeError) as exc:
        log.debug("warm launcher: cannot take the caller's limits or placement (%s)", exc)
        with contextlib.suppress(OSError):
            conn.sendall(b"refused\n")  # the caller runs its command itself
        return 0
    pid = os.fork()
    if pid == 0:
        conn.close()
        os._exit(_run_radt(request, fds, main))
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    watch = [conn]
    with contextlib.suppress(OSError, AttributeError):
        watch.append(os.pidfd_open(pid))
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        ready, _, _ = select.select(watch, [], [], 0.05 if len(watch) == 1 else None)
        if conn in ready and not conn.recv(64):  # the caller is gone: hang its run up
            _forward(pid, signal.SIGHUP)
            watch.remove(conn)
    code = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        conn.sendall(f"exit {128 - code if code < 0 else code}\n".encode())
    return 0


def _take_limits(rlimits: dict) -> None:
    """Set the caller's resource limits on this fork; ValueError or OSError where one is above
    what this process may raise it to."""
    for name, (soft, hard) in rlimits.items():
        if name not in RLIMITS:
            continue
        which = getattr(resource, name)
        if resource.getrlimit(which) != (soft, hard):
            resource.setrlimit(which, (soft, hard))


def placement(pid: int) -> dict:
    """Where process ``pid`` runs, beyond its cgroup: its CPUs (``taskset``), its I/O priority
    (``ionice``, as class and level) and its NUMA memory policy (``numactl``: the policy of its
    first mapping in ``/proc/PID/numa_maps``), each None where unreadable. A fork inherits
    the warm launcher's, which are those of whichever caller started it."""
    import psutil

    found: dict = {"cpus": None, "ionice": None, "memory_policy": memory_policy(pid)}
    with contextlib.suppress(OSError):
        found["cpus"] = sorted(os.sched_getaffinity(pid))
    with contextlib.suppress(psutil.Error, OSError, AttributeError):
        ioclass, level = psutil.Process(pid).ionice()
        found["ionice"] = [int(ioclass), int(level)]
    return found


def memory_policy(pid: int) -> str | None:
    """The NUMA memory policy process ``pid`` runs under (``default``, ``bind:0`` …), or None
    where the kernel keeps none (no NUMA) or it is unreadable."""
    try:
        with open(f"/proc/{pid}/numa_maps") as maps:
            fields = maps.readline().split()
    except OSError:
        return None
    return fields[1] if len(fields) > 1 else None


def _take_placement(theirs: dict) -> None:
    """Run this fork on the caller's CPUs with its I/O priority; ValueError where the caller's
    cannot be read or its memory policy differs (the fork cannot take that one on), OSError or
    psutil's error where the system refuses (the caller then runs its command itself)."""
    import psutil

    mine = placement(os.getpid())
    if theirs["memory_policy"] != mine["memory_policy"]:
        raise ValueError(f"the caller's memory policy is {theirs['memory_policy']}")
    if theirs["cpus"] is None:
        raise ValueError("the caller's CPUs cannot be read")
    if theirs["cpus"] != mine["cpus"]:
        os.sched_setaffinity(0, theirs["cpus"])
    if theirs["ionice"] == mine["ionice"]:  # also both unreadable (no ioprio_get in a sandbox)
        return
    if theirs["ionice"] is None:
        raise ValueError("the caller's I/O priority cannot be read")
    ioclass, level = theirs["ionice"]
    try:
        if ioclass in (psutil.IOPRIO_CLASS_NONE, psutil.IOPRIO_CLASS_IDLE):
            psutil.Process().ionice(ioclass)
        else:
            psutil.Process().ionice(ioclass, level)
    except psutil.Error as exc:
        raise OSError(f"cannot take the caller's I/O priority ({exc})") from exc


def _output(fd: int, unbuffered: bool, line_buffering: bool, errors: str) -> io.TextIOWrapper:
    """Standard output or error as the interpreter makes them at start-up: with
    ``PYTHONUNBUFFERED`` no buffer under the text layer (a signal handler that writes while the
    main thread is writing must not meet a buffer's lock), else a buffered writer."""
    raw = io.FileIO(fd, "w", closefd=False)
    binary = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        binary,
        encoding=sys.stdout.encoding if sys.stdout else None,
        errors=errors,
        line_buffering=line_buffering,
        write_through=unbuffered,
    )


def _run_radt(request: dict, fds: list[int], main: Callable[[list[str]], int]) -> int:
    """In the run's fork: become the caller (folder, environment, umask, streams), run radT."""
    global _served
    _served = True  # this fork runs the command itself: radt.cli must not ask again
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ignored = set(request.get("ignored", ()))
    for sig in FORWARDED:  # the caller's dispositions, as its exec would have inherited them
        if int(sig) in ignored:
            signal.signal(sig, signal.SIG_IGN)
        elif sig == signal.SIGINT:
            signal.signal(sig, signal.default_int_handler)
        else:
            signal.signal(sig, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    with contextlib.suppress(OSError, KeyError, TypeError):  # raising it needs no privilege
        os.setpriority(os.PRIO_PROCESS, 0, request["nice"])
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    random.seed()  # run names are drawn at random: not the same in every fork
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdout = _output(1, unbuffered, os.isatty(1), "strict")
    sys.stderr = _output(2, unbuffered, True, "backslashreplace")
    sys.argv = [sys.argv[0], *request["argv"]]
    try:
        code = main(list(request["argv"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # as the interpreter would: the traceback on stderr, exit status 1
        import traceback

        traceback.print_exc()
        code = 1
    import atexit

    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


if __name__ == "__main__":
    # radt.warm's own functions, not this __main__ copy's: a fork's _served must be the one
    # that `radt.cli` reads, else it would ask the warm launcher again
    from radt.cli import main as _main
    from radt.warm import idle_s as _idle_s
    from radt.warm import serve as _serve

    sys.exit(_serve(Path(sys.argv[1]), _idle_s(), _main))
