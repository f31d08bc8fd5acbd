"""The training process: started in a session of its own, output teed, always reaped."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

_PR_SET_PDEATHSIG = 1


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _libc_prctl()


def _die_with_radt(radt_pid: int) -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != radt_pid:  # radT died before the death signal was armed
            os.kill(os.getpid(), signal.SIGTERM)


class Child:
    """One command, its own process group, its output copied to the terminal and a log."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        prefix: str = "",
        cwd: Path | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        """The folder the command runs in (None: radT's own)."""
        self.log_path = log_path
        self.prefix = prefix.encode()
        self.process: subprocess.Popen[bytes] | None = None
        self.started_s: float | None = None
        """When the command was started (epoch seconds, once it runs)."""
        self.ended_s: float | None = None
        """When the command was first seen to have exited (epoch seconds)."""
        self._log: BinaryIO | None = None
        self._log_lock = threading.Lock()
        self._pumps: list[threading.Thread] = []

    @property
    def pid(self) -> int:
        """The process id, which is also its process-group id."""
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Start the command. Raises OSError when it cannot be executed."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in join_output
        starting_s = time.time()  # before fork: nothing the command does comes earlier
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=functools.partial(_die_with_radt, os.getpid()),
        )
        self.started_s = starting_s
        for source, terminal in (
            (self.process.stdout, sys.stdout),
            (self.process.stderr, sys.stderr),
        ):
            pump = threading.Thread(
                target=self._pump, args=(source, terminal), name="radt-output", daemon=True
            )
            pump.start()
            self._pumps.append(pump)

    def poll(self) -> int | None:
        """The exit status, or None while it runs."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None and self.ended_s is None:
            self.ended_s = time.time()
        return code

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the command's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def reap_group(self, grace_s: float = 2.0) -> None:
        """End whatever the command left behind in its process group."""
        self.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(self.pid):
            time.sleep(0.05)
        self.signal_group(signal.SIGKILL)

    def join_output(self, timeout_s: float = 5.0) -> None:
        """Wait until the output is copied, then close the log."""
        for pump in self._pumps:
            pump.join(timeout_s)
        if self._log is not None:
            with self._log_lock:
                self._log.close()

    def _pump(self, source: BinaryIO, terminal) -> None:
        out = getattr(terminal, "buffer", None)
        fd = source.fileno()
        partial = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            with self._log_lock:
                assert self._log is not None
                if not self._log.closed:  # join_output gave up waiting for this pump
                    self._log.write(data)
                    self._log.flush()
            if self.prefix:
                # Whole lines only, so that commands running together interleave by line.
                lines = (partial + data).split(b"\n")
                partial = lines.pop() if data else b""
                shown = b"".join(self.prefix + line + b"\n" for line in lines if line or data)
            else:
                shown = data
            if out is not None and shown:
                try:
                    out.write(shown)
                    out.flush()
                except (OSError, ValueError):
                    out = None
            if not data:
                break
        source.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
