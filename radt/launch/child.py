"""The training process: started in a session of its own, output teed, always reaped."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import psutil

from radt.launch.tree import ProcessTree, describe

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _libc_prctl()


def _die_with_radt(radt_pid: int, tree: ProcessTree | None = None) -> None:
    # Runs in the child between fork and exec.
    if tree is not None:
        tree.before_exec()
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != radt_pid:  # radT died before the death signal was armed
            os.kill(os.getpid(), signal.SIGTERM)


class Child:
    """One command, its own process group, its output copied to the terminal and a log.

    The output is always drained, whatever happens to the log (a full disk) or the
    terminal (gone): a command must never block on a pipe nobody reads.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        prefix: str = "",
        cwd: Path | None = None,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        """The folder the command runs in (None: radT's own)."""
        self.log_path = log_path
        self.prefix = prefix.encode()
        self.warn = warn
        self.process: subprocess.Popen[bytes] | None = None
        self.started_s: float | None = None
        """When the command was started (epoch seconds, once it runs)."""
        self.ended_s: float | None = None
        """When the command was first seen to have exited (epoch seconds)."""
        self._log: BinaryIO | None = None
        self._log_lock = threading.Lock()
        self._log_failed = False
        self._pumps: list[threading.Thread] = []
        self.before_reap: Callable[[], None] | None = None
        """Called once when the command is first seen to have exited, before it is reaped
        (its CPU time can still be read then)."""
        self._mid_line: object | None = None
        """The terminal stream whose last output from the command did not end a line."""
        self.tree: ProcessTree | None = None
        """Every process the command starts (created when it starts)."""

    @property
    def pid(self) -> int:
        """The process id, which is also its process-group id."""
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        """Start the command. Raises OSError when it cannot be executed."""
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            # Unbuffered: each chunk is written at once, and what fits a full disk is kept.
            self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - join_output
        except OSError as exc:
            self._log_lost(exc)
        self.tree = ProcessTree(self.env.get("RADT_RUN_ID"))
        starting_s = time.time()  # before fork: nothing the command does comes earlier
        try:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=functools.partial(_die_with_radt, os.getpid(), self.tree),
            )
        except BaseException:
            self.tree.close([])
            raise
        self.tree.started(self.process.pid)
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
        if self.before_reap is not None and self.process.returncode is None and self.has_exited():
            self.ended_s = time.time()
            hook, self.before_reap = self.before_reap, None
            hook()
        code = self.process.poll()
        if code is not None and self.ended_s is None:
            self.ended_s = time.time()
        if code is None and self.tree is not None:
            self.tree.watch()
        return code

    def has_exited(self) -> bool:
        """Whether the command has exited, looked at without reaping it."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the command's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def reap_group(self, grace_s: float = 2.0) -> None:
        """End whatever the command left running: its process group, and every process it
        started elsewhere (a daemon in a session of its own); say in one line what."""
        leftovers = self.tree.leftovers() if self.tree is not None else []
        said = describe(leftovers)  # names, while they still have them
        self.signal_group(signal.SIGTERM)
        for process in leftovers:
            with contextlib.suppress(psutil.Error):
                process.terminate()

        def running() -> bool:
            return _group_alive(self.pid) or any(_alive(process) for process in leftovers)

        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and running():
            time.sleep(0.05)
        self.signal_group(signal.SIGKILL)
        if self.tree is not None:
            self.tree.kill_all()
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and any(_alive(p) for p in leftovers):
                time.sleep(0.02)
            self.tree.close(leftovers)
        if leftovers:
            count = len(leftovers)
            self.warn(
                f"ended {count} process{'es' if count > 1 else ''} the command left running: {said}"
            )

    def join_output(self, timeout_s: float = 5.0) -> None:
        """Wait until the output is copied, then close the log."""
        for pump in self._pumps:
            pump.join(timeout_s)
        if self._log is not None:
            with self._log_lock:
                self._log.close()

    def end_line(self) -> None:
        """End the command's last output line on the terminal if it had no newline, so
        that radT's next line on stderr starts a line of its own."""
        terminal, self._mid_line = self._mid_line, None
        if terminal is None:
            return
        if terminal is not sys.stderr and not _same_file(terminal, sys.stderr):
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _pump(self, source: BinaryIO, terminal) -> None:
        out = getattr(terminal, "buffer", None)
        fd = source.fileno()
        partial = b""
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            self._keep(data)
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
                    self._mid_line = None if shown.endswith(b"\n") else terminal
                except (OSError, ValueError):
                    out = None
            if not data:
                break
        source.close()

    def _keep(self, data: bytes) -> None:
        """Append ``data`` to the log; after a failed write the log stops (said once)."""
        failure = None
        with self._log_lock:
            stream = self._log
            if stream is None or stream.closed or self._log_failed:  # closed: join_output gave up
                return
            view = memoryview(data)
            try:
                while view:
                    written = stream.write(view)
                    if not written:
                        raise OSError(errno.ENOSPC, "nothing written")
                    view = view[written:]
            except OSError as exc:
                failure = exc
        if failure is not None:
            self._log_lost(failure)

    def _log_lost(self, exc: OSError) -> None:
        with self._log_lock:
            if self._log_failed:
                return
            self._log_failed = True
        self.warn(
            f"cannot write the output log {self.log_path} ({exc.strerror or exc}); "
            "the command goes on and its output still reaches the terminal, but the log "
            "keeps only what was written so far: free some disk space"
        )


def _same_file(one, other) -> bool:
    """Whether two streams write to one file (a terminal, or a pipe both were given)."""
    try:
        a, b = os.fstat(one.fileno()), os.fstat(other.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
