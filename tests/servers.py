"""One way to run a server process for tests and benchmarks: start, wait until ready, stop.

A :class:`ServerProcess` runs its command in a session (and so a process group)
of its own, with its output appended to a log file. ``start()`` waits until the
subclass's readiness check passes, and fails with the log's tail when the
process exits first or the time runs out. ``stop()`` sends a signal (TERM by
default, to the whole group), waits a grace period, then KILLs whatever is left
of the group and returns once the group is gone and the port is free again;
``kill()`` is the same without the grace (a crash). Servers started and not
cleaned up are killed at interpreter exit, a last resort for a run that never
reached its teardown.

:class:`HttpServer` is the common case: a command that serves HTTP on
``127.0.0.1:<port>`` and is ready when ``GET <ready_path>`` answers 200.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

_LIVE: set[ServerProcess] = set()


@atexit.register
def _end_leftovers() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.cleanup()


def end_at_exit(server: ServerProcess) -> None:
    """Have ``server.cleanup()`` called at interpreter exit unless it was called before."""
    _LIVE.add(server)


PORTS = range(10_000, 20_000)
"""Where :func:`free_port` picks: below the kernel's ephemeral ports (32768-60999 by default,
the source ports of outgoing connections) and below the Slurm rendezvous ports that radT derives
from a job id (20000-39999), so that nothing else is handed the port before its server binds."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, for a server a test starts.

    Not one the kernel picks (``bind(0)`` gives an ephemeral port, which the kernel may hand
    to another process's outgoing connection, another pytest-xdist worker's included, before
    the server binds it: a torchrun rendezvous port is bound seconds after it is chosen). Each
    pytest-xdist worker picks among its own share of :data:`PORTS` (``gw1`` the ports ≡ 1 mod
    the worker count), so two workers never pick the same port."""
    import random

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    share = [port for port in PORTS if port % workers == int(worker or 0) % workers]
    for port in random.sample(share, 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port among 200 tried in {PORTS.start}-{PORTS.stop - 1}")


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
        return True


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``GET url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status == 200
    except (OSError, urllib.error.URLError):
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command name: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


class ServerProcess:
    """A server command run in a process group of its own, serving ``127.0.0.1:port``.

    Subclasses give :meth:`argv` and :meth:`ready`, and may change :meth:`env`,
    :meth:`popen_options` (e.g. the account to run as) and :attr:`name`.
    """

    name = "server"

    def __init__(self, folder: Path, log_path: Path, port: int | None = None) -> None:
        self.folder = Path(folder)
        self.log_path = Path(log_path)
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self.starts = 0

    # ------------------------------------------------------------------ what to run

    def argv(self) -> list[str]:
        """The command line of the server."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """The server's environment (default: ours)."""
        return dict(os.environ)

    def popen_options(self) -> dict:
        """Further ``subprocess.Popen`` arguments (default: none)."""
        return {}

    def ready(self) -> bool:
        """Whether the server serves now."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        """Whether the server's leading process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self, timeout_s: float = 120.0):
        """Start the server and wait until :meth:`ready`; raise with its log's tail otherwise."""
        if self.running:
            raise RuntimeError(f"the {self.name} on port {self.port} is already running")
        if port_open(self.port):
            raise RuntimeError(f"port {self.port} is taken by another process")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- start {self.starts} ---\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv(),
                cwd=self.folder,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self.popen_options(),
            )
        end_at_exit(self)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self.kill()
                raise RuntimeError(f"the {self.name} exited at start ({code}):\n{self.log_tail()}")
            if self.ready():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(
            f"the {self.name} was not ready within {timeout_s:g} s:\n{self.log_tail()}"
        )

    def stop(self, grace_s: float = 10.0, timeout_s: float = 30.0) -> None:
        """TERM the whole group, KILL what is left after ``grace_s``; return once the port
        is free again (a no-op when not running)."""
        self.end(signal.SIGTERM, grace_s, timeout_s=timeout_s)

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the whole process group (a crash); return once the port is free again."""
        self.end(signal.SIGKILL, 0.0, timeout_s=timeout_s)

    def end(
        self, sig: int, grace_s: float, whole_group: bool = True, timeout_s: float = 30.0
    ) -> None:
        """Send ``sig`` to the group (or the leader alone), wait up to ``grace_s`` for the
        group to end, then KILL what is left; return once the port is free again."""
        process = self.process
        if process is None:
            return
        pgid = process.pid  # start_new_session: the leader's pid is the group id
        with contextlib.suppress(ProcessLookupError):
            if whole_group:
                os.killpg(pgid, sig)
            else:
                process.send_signal(sig)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(max(grace_s, 0.0))
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is None or group_members(pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                process.wait()
            elif not port_open(self.port):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the {self.name}'s group {pgid} still alive or port {self.port} still open"
                )
            time.sleep(0.05)
        self.process = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the whole group (SIGSTOP) for the block, then continue it: a server that
        takes connections (the kernel's backlog) and answers none, as a hung one does."""
        assert self.process is not None, f"the {self.name} is not running"
        os.killpg(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)

    def cleanup(self) -> None:
        """Kill the server if it still runs; what a subclass made goes too."""
        try:
            self.kill()
        finally:
            _LIVE.discard(self)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no {self.name} log)"

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()


class HttpServer(ServerProcess):
    """A command serving HTTP on ``127.0.0.1:port``, ready when ``ready_path`` answers 200."""

    name = "HTTP server"
    ready_path = "/"

    def __init__(
        self,
        command: list[str] | None = None,
        *,
        folder: Path,
        log_path: Path,
        port: int | None = None,
        env: dict[str, str] | None = None,
        ready_path: str | None = None,
    ) -> None:
        super().__init__(folder, log_path, port)
        self._command = command
        self._env = env
        if ready_path is not None:
            self.ready_path = ready_path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        if self._command is None:
            raise NotImplementedError
        return list(self._command)

    def env(self) -> dict[str, str]:
        return dict(os.environ) if self._env is None else dict(self._env)

    def ready(self) -> bool:
        return answers(self.url + self.ready_path)
