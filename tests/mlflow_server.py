"""A real ``mlflow server`` for tests: start it, crash it (SIGKILL), restart it on the same port.

The server keeps its stores across restarts (an SQLite backend and an artifact
folder under one temporary folder), so a restart is what an operator's restart
would be: same URI, same runs. It runs in a session of its own, and every stop
kills its whole process group, so no uvicorn worker outlives a test.

Usage::

    with MlflowServer(tmp_path / "server") as server:
        ...  # server.uri is http://127.0.0.1:PORT
        server.kill()      # a crash
        server.start()     # back, same port, same stores

or a pytest fixture made by :func:`server_fixture` (``mlflow_server = server_fixture()``
in a test module).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 120.0  # `mlflow server` needs 10-25 s on a small machine, more under load
SERVER_ENV = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


# Process groups of servers started and not yet killed: a last resort at interpreter
# exit for a run that never reached the fixture's teardown.
_LIVE_GROUPS: set[int] = set()


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_LIVE_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
        return True


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


class MlflowServer:
    """One ``mlflow server`` process group with stores under ``folder``."""

    def __init__(self, folder: Path, port: int | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.db = self.folder / "mlflow.db"
        self.artifacts = self.folder / "artifacts"
        self.artifacts.mkdir(exist_ok=True)
        self.log_path = self.folder / "server.log"
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.db}",
            "--artifacts-destination",
            str(self.artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_"))}
        env.update(SERVER_ENV)
        return env

    def healthy(self) -> bool:
        """Whether ``/health`` answers OK now."""
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> MlflowServer:
        """Start the server and wait until ``/health`` answers; raise with its log otherwise."""
        if self.running:
            raise RuntimeError(f"the mlflow server on port {self.port} is already running")
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
            )
        _LIVE_GROUPS.add(self.process.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.kill()
                raise RuntimeError(f"mlflow server exited at start:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"mlflow server not healthy within {timeout_s:g} s:\n{self.log_tail()}")

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the whole process group (a crash); return once the port is free again."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the leader's pid is the group id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        self.process.wait()
        self.process = None
        deadline = time.monotonic() + timeout_s
        while group_members(pgid) or port_open(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server group {pgid} still alive or port {self.port} still open"
                )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            time.sleep(0.05)
        _LIVE_GROUPS.discard(pgid)

    def restart(self, timeout_s: float = STARTUP_TIMEOUT_S) -> MlflowServer:
        """Kill if running, then start again on the same port with the same stores."""
        self.kill()
        return self.start(timeout_s)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no server log)"

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri)

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()


def server_fixture(scope: str = "module", name: str = "mlflow_server"):
    """A pytest fixture of a started :class:`MlflowServer`, always killed in teardown.

    A test may kill and restart it; the fixture hands it on running to the
    next test of its scope (restarting it when a test left it down).
    """

    @pytest.fixture(scope=scope, name=name)
    def _shared(tmp_path_factory) -> Iterator[MlflowServer]:
        server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
        try:
            server.start()
            yield server
        finally:
            server.kill()

    return _shared


def ensure_running(server: MlflowServer) -> MlflowServer:
    """Start ``server`` again when an earlier test left it down."""
    if not (server.running and server.healthy()):
        server.restart()
    return server
