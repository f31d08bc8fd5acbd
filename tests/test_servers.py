"""The test servers' one way to start, wait for and stop a server (tests/servers.py).

Stand-ins for the servers are small Python scripts in real process groups: a
leader that holds the port through a child (as ``mlflow server`` does through
its uvicorn worker), one that ignores SIGTERM, one that dies at start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from servers import HttpServer, ServerProcess, free_port, group_members, port_open

# argv: port, "stubborn" or "polite". A child holds the port; a stubborn group ignores TERM.
GROUP = """
import signal, socket, subprocess, sys, time
child = (
    "import signal, socket, sys, time\\n"
    "if sys.argv[2] == 'stubborn': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('listening', flush=True)\\n"
    "time.sleep(600)"
)
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", child, *sys.argv[1:]])
time.sleep(600)
"""


class StandIn(ServerProcess):
    name = "stand-in"

    def __init__(self, folder: Path, script: Path, mode: str) -> None:
        super().__init__(folder, folder / "stand-in.log")
        self.script, self.mode = script, mode

    def argv(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.port), self.mode]

    def ready(self) -> bool:
        return port_open(self.port)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "group.py"
    path.write_text(GROUP)
    return path


@pytest.mark.parametrize(
    ("mode", "end"),
    [
        ("polite", lambda server: server.stop(grace_s=30)),
        ("stubborn", lambda server: server.stop(grace_s=0.5)),  # TERM ignored: KILL
        ("stubborn", lambda server: server.kill()),  # a crash
    ],
    ids=["stop", "stop-kill", "kill"],
)
def test_the_whole_group_ends_and_the_server_restarts_on_its_port(tmp_path, script, mode, end):
    server = StandIn(tmp_path, script, mode)
    try:
        server.start(timeout_s=60)
        leader = server.process.pid
        assert len(group_members(leader)) == 2
        assert "listening" in server.log_tail()
        end(server)
        assert group_members(leader) == [] and not port_open(server.port)
        assert not server.running and server.process is None
        server.start(timeout_s=60)  # again, on the same port
        assert server.starts == 2 and port_open(server.port)
    finally:
        server.cleanup()
    assert not port_open(server.port)


@pytest.mark.slow
def test_a_server_that_dies_at_start_fails_with_its_log(tmp_path):
    code = "import sys; print('cannot bind: address in use', flush=True); sys.exit(3)"
    server = HttpServer([sys.executable, "-c", code], folder=tmp_path, log_path=tmp_path / "log")
    with pytest.raises(RuntimeError, match=r"exited at start \(3\):\n(.|\n)*cannot bind"):
        server.start(timeout_s=60)
    assert server.process is None


def test_a_server_never_ready_is_killed_with_its_log_in_the_error(tmp_path):
    code = "import time; print('still loading', flush=True); time.sleep(600)"
    server = HttpServer([sys.executable, "-c", code], folder=tmp_path, log_path=tmp_path / "log")
    with pytest.raises(RuntimeError, match=r"not ready within 2 s:\n(.|\n)*still loading"):
        server.start(timeout_s=2)
    assert server.process is None


@pytest.mark.slow
def test_an_http_server_is_ready_when_it_answers(tmp_path):
    (tmp_path / "health").write_text("ok")
    port = free_port()
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
    server = HttpServer(
        command, folder=tmp_path, log_path=tmp_path / "log", port=port, ready_path="/health"
    )
    with server:
        assert server.running and server.ready()
    assert not server.running and not port_open(server.port)
