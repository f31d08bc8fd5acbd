"""A real ``mlflow server`` for tests: start it, crash it (SIGKILL), restart it on the same port.

The server keeps its stores across restarts (an SQLite backend, or a PostgreSQL
database given as ``database``, and an artifact folder under one temporary
folder), so a restart is what an operator's restart would be: same URI, same
runs. It is a :class:`servers.HttpServer`: it runs in a session of its own, and
every stop ends its whole process group, so no uvicorn worker outlives a test.

Usage::

    with MlflowServer(tmp_path / "server") as server:
        ...  # server.uri is http://127.0.0.1:PORT
        server.kill()      # a crash
        server.start()     # back, same port, same stores

    MlflowServer(folder, database=postgres)  # runs and metrics in a tests/postgres.py server

or a pytest fixture made by :func:`server_fixture` (``mlflow_server = server_fixture()``
in a test module).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from servers import HttpServer

if TYPE_CHECKING:
    from postgres import PostgresServer

STARTUP_TIMEOUT_S = 120.0  # `mlflow server` needs 10-25 s on a small machine, more under load
SERVER_ENV = {
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


class MlflowServer(HttpServer):
    """One ``mlflow server`` process group with stores under ``folder``.

    With ``database`` (a :class:`postgres.PostgresServer`) runs and metrics go to
    PostgreSQL; its password reaches the server through ``PGPASSWORD``, never its
    command line.
    """

    name = "mlflow server"
    ready_path = "/health"

    def __init__(
        self, folder: Path, port: int | None = None, database: PostgresServer | None = None
    ) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        super().__init__(folder=folder, log_path=folder / "server.log", port=port)
        self.db = self.folder / "mlflow.db"
        self.artifacts = self.folder / "artifacts"
        self.artifacts.mkdir(exist_ok=True)
        self.database = database

    @property
    def uri(self) -> str:
        return self.url

    @property
    def backend_store_uri(self) -> str:
        return self.database.uri if self.database is not None else f"sqlite:///{self.db}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            self.backend_store_uri,
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
        if self.database is not None:
            env.update(self.database.client_env())
        return env

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> MlflowServer:
        """Start the server and wait until ``/health`` answers; raise with its log otherwise."""
        return super().start(timeout_s)

    def restart(self, timeout_s: float = STARTUP_TIMEOUT_S) -> MlflowServer:
        """Kill if running, then start again on the same port with the same stores."""
        self.kill()
        return self.start(timeout_s)

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri)


def server_fixture(scope: str = "module", name: str = "mlflow_server"):
    """A pytest fixture of a started :class:`MlflowServer`, always stopped in teardown.

    A test may kill and restart it; the fixture hands it on running to the
    next test of its scope (restarting it when a test left it down).
    """

    @pytest.fixture(scope=scope, name=name)
    def _shared(tmp_path_factory) -> Iterator[MlflowServer]:
        with MlflowServer(tmp_path_factory.mktemp("mlflow-server")) as server:
            yield server

    return _shared


def ensure_running(server: MlflowServer) -> MlflowServer:
    """Start ``server`` again when an earlier test left it down."""
    if not (server.running and server.ready()):
        server.restart()
    return server
