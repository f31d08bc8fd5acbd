"""A workload's shared data loader: its ports, its readiness, its watch and its end.

A workload with a ``Role=loader`` row (a TensorSocket producer, for instance)
runs that row first, as a child run of the workload (``radt.role=loader``,
letter ``L``). Every run of the workload, the loader's included, gets:

- ``RADT_LOADER_PORT``: the data port (the producer's ``port``);
- ``RADT_LOADER_ACK_PORT``: the acknowledgement port (``ack_port``);
- ``RADT_LOADER_HEART_PORTS``: the heartbeat ports ``PUB,SUB`` (``heart_ports``);
- ``RADT_LOADER_CONSUMERS``: how many trainings the loader feeds.

The ports are free TCP ports radT picks on this host. The loader is **ready**
when its process tree listens on all four of them; only then do the trainings
(``radt.role=consumer``) start. A loader that ends before it is ready, or is not
ready within the loader timeout, fails the workload and no training starts. A
loader that ends with a non-zero status (or by a signal) while trainings still
run fails the workload, with its reason, and the trainings are stopped (SIGTERM,
then SIGKILL after the grace period). When every training has ended, radT ends
the loader: SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from radt.errors import RadtError
from radt.launch.child import Child
from radt.launch.supervise import Outcome, Supervisor
from radt.tags import RADT_EXIT_CODE, RADT_STOP_REASON

CONSUMERS_VARIABLE = "RADT_LOADER_CONSUMERS"
POLL_S = 0.1


class LoaderFailed(RadtError):
    """The shared loader could not be started or did not become ready."""


@dataclass(frozen=True)
class LoaderPorts:
    """The four TCP ports of a shared loader."""

    port: int
    ack_port: int
    heart_ports: tuple[int, int]

    @classmethod
    def pick(cls) -> LoaderPorts:
        """Four distinct ports that are free on every interface right now."""
        with contextlib.ExitStack() as stack:
            ports = []
            for _ in range(4):
                sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind(("", 0))
                ports.append(sock.getsockname()[1])
        return cls(ports[0], ports[1], (ports[2], ports[3]))

    @property
    def all(self) -> tuple[int, ...]:
        """Every port, data port first."""
        return (self.port, self.ack_port, *self.heart_ports)

    def env(self, consumers: int) -> dict[str, str]:
        """The variables every run of the workload gets."""
        return {
            "RADT_LOADER_PORT": str(self.port),
            "RADT_LOADER_ACK_PORT": str(self.ack_port),
            "RADT_LOADER_HEART_PORTS": f"{self.heart_ports[0]},{self.heart_ports[1]}",
            CONSUMERS_VARIABLE: str(consumers),
        }


def listening_ports(pid: int) -> set[int]:
    """TCP ports on which the process ``pid`` or one of its descendants listens."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    ports: set[int] = set()
    for proc in tree:
        try:
            connections = proc.net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN)
    return ports


def last_line(path: Path) -> str:
    """The last non-blank line of a log (at most 300 characters), or ""."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - 8192))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    text = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return text[:300]


def ended_how(code: int) -> str:
    """``exited with code 1`` / ``died of SIGKILL``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"died of {signal.Signals(-code).name}"
    return f"exited with code {code}"


class SharedLoader:
    """The loader row of one workload while it runs; the runner calls it in this order:

    :meth:`start` (before the trainings start), :meth:`watch` (while they run),
    :meth:`stop` (once they have all ended), :meth:`outcome` (for its run).
    """

    def __init__(
        self,
        ports: LoaderPorts,
        child: Child,
        output_log: Path,
        start_listeners: Callable[[int], None],
        say: Callable[[str], None],
        grace_s: float,
        ready_timeout_s: float,
    ) -> None:
        self.ports = ports
        self.child = child
        self.output_log = output_log
        self.start_listeners = start_listeners
        self.say = say
        self.grace_s = grace_s
        self.ready_timeout_s = ready_timeout_s
        self.failure: str | None = None
        """Why the loader failed the workload, once it has."""
        self.stopped = False
        """radT asked it to stop because every training had ended."""
        self.killed = False
        """It needed SIGKILL after that."""

    def start(self, supervisor: Supervisor) -> bool:
        """Start the loader and wait until it is ready; False if a signal interrupted the wait.

        Raises LoaderFailed when it cannot start, ends, or is not ready in time.
        """
        try:
            self.child.start()
        except OSError as exc:
            raise self._fail(f"cannot start {self.child.argv[0]}: {exc.strerror or exc}") from exc
        self.start_listeners(self.child.pid)
        self.say(f"shared loader [L] started; waiting until it listens on {self._ports()}")
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if supervisor.reason is not None:
                return False
            code = self.child.poll()
            if code is not None:
                raise self._fail(self._ended(code, "before it was ready"))
            missing = set(self.ports.all) - listening_ports(self.child.pid)
            if not missing:
                self.say("shared loader [L] is ready; starting the trainings")
                return True
            if time.monotonic() > deadline:
                raise self._fail(
                    f"the shared loader [L] was not ready within {self.ready_timeout_s:g} s: "
                    f"nothing listens on port {', '.join(map(str, sorted(missing)))} "
                    "(give it the ports of RADT_LOADER_PORT, RADT_LOADER_ACK_PORT and "
                    "RADT_LOADER_HEART_PORTS, or a longer --loader-timeout)"
                )
            time.sleep(POLL_S)

    def watch(self, supervisor: Supervisor) -> None:
        """While the trainings run: a loader that failed stops them and fails the workload."""
        if self.failure is not None or self.stopped or supervisor.reason is not None:
            return  # already stopping (radT was interrupted, --max-time): not the loader's doing
        code = self.child.poll()
        if code is None or code == 0:
            return  # a loader that served everything may end before its trainings
        self.failure = self._ended(code, "while the trainings ran")
        self.say(f"error: {self.failure}")
        supervisor.stop_all(f"stopped because {self.failure}")

    def stop(self, supervisor: Supervisor) -> None:
        """Every training has ended: SIGTERM the loader, SIGKILL it after the grace period."""
        if self.child.process is None or self.child.poll() is not None:
            return
        self.stopped = True
        self.child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while self.child.poll() is None:
            if time.monotonic() >= deadline or supervisor.signum is not None:
                self.say("the shared loader [L] did not end after SIGTERM; sending SIGKILL")
                self.killed = True
                self.child.signal_group(signal.SIGKILL)
                self.child.process.wait()
                self.child.poll()
                return
            time.sleep(POLL_S / 2)

    def outcome(
        self, supervisor: Supervisor | None, failure: BaseException | None
    ) -> Outcome | None:
        """The loader run's status; None where the runner's general rules apply.

        ``failure`` is what stopped the workload, if anything did.
        """
        if self.child.process is None or (failure is not None and self.failure is None):
            return None
        code = self.child.poll()
        tags = {} if code is None else {RADT_EXIT_CODE: str(code)}
        exit_code = 1 if code is None else (128 - code if code < 0 else code)
        if self.failure is not None:
            return Outcome("FAILED", exit_code or 1, {**tags, RADT_STOP_REASON: self.failure})
        if self.killed:
            reason = f"did not end within the grace period ({self.grace_s:g} s) after SIGTERM"
            return Outcome("KILLED", exit_code, {**tags, RADT_STOP_REASON: reason})
        if self.stopped:
            return Outcome("FINISHED", 0, {**tags, RADT_STOP_REASON: "its trainings ended"})
        if code is None or supervisor is None:
            return None
        if supervisor.reason is not None or code == 0:
            return supervisor.judge(code)
        # It failed on its own after the last look, once every training had ended.
        reason = self._ended(code, "")
        return Outcome("FAILED", exit_code, {**tags, RADT_STOP_REASON: reason})

    def _fail(self, reason: str) -> LoaderFailed:
        self.failure = reason
        return LoaderFailed(reason)

    def _ended(self, code: int, when: str) -> str:
        text = f"the shared loader [L] {ended_how(code)}"
        text = f"{text} {when}" if when else text
        line = last_line(self.output_log)
        return f"{text}: {line}" if line else text

    def _ports(self) -> str:
        return ", ".join(str(port) for port in self.ports.all)
