"""The shared loader's parts that need no tensorsocket (the fast tier's test of
radt/plans/loader.py; test_shared_loader.py runs the loader itself): its ports and their
variables, the ports a real process tree listens on, how a process ended, a log's last line."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
from conftest import default_signals, kill_quietly, wait_for

from radt.plans.loader import LoaderPorts, ended_how, last_line, listening_ports

LISTENER = """\
import socket, sys, time
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
time.sleep(120)
"""


def test_four_distinct_ports_and_the_variables_each_run_gets():
    ports = LoaderPorts.pick()
    assert len(set(ports.all)) == 4 and ports.all[0] == ports.port
    assert ports.env(3) == {
        "RADT_LOADER_PORT": str(ports.port),
        "RADT_LOADER_ACK_PORT": str(ports.ack_port),
        "RADT_LOADER_HEART_PORTS": f"{ports.heart_ports[0]},{ports.heart_ports[1]}",
        "RADT_LOADER_CONSUMERS": "3",
    }


def test_the_ports_a_child_of_the_process_listens_on_are_found():
    # the listener is a grandchild: a shell runs it (and waits), as a loader command may
    shell = subprocess.Popen(
        ["/bin/sh", "-c", f'"{sys.executable}" -c "$0"; exit 0', LISTENER],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        port = int(shell.stdout.readline())
        assert len(psutil.Process(shell.pid).children()) == 1  # not the shell itself
        assert wait_for(lambda: listening_ports(shell.pid) == {port})
    finally:
        for process in psutil.Process(shell.pid).children(recursive=True):
            kill_quietly(process.pid)
        kill_quietly(shell.pid)
        shell.wait(timeout=30)
    assert listening_ports(shell.pid) == set()  # gone: nothing, not an error


def test_how_a_process_ended():
    assert ended_how(1) == "exited with code 1"
    assert ended_how(-signal.SIGKILL) == "died of SIGKILL"
    assert ended_how(-200) == "exited with code -200"


def test_the_last_line_of_a_log(tmp_path):
    log = tmp_path / "loader.log"
    log.write_text("starting\n" + "x" * 9000 + "\nready on 5555\n\n  \n")
    assert last_line(log) == "ready on 5555"
    log.write_text("y" * 400)
    assert last_line(log) == "y" * 300
    assert last_line(tmp_path / "missing.log") == ""
