"""Running an external tool once (nvidia-smi, the MPS control, dcgmi, nsys, ncu), by one rule.

:func:`run` never raises for what the tool does: a tool that is not on PATH,
cannot start, runs past its time limit or exits non-zero gives a
:class:`ToolResult` that says so (``ok`` is False, :meth:`ToolResult.reason`
is the one-line why). The caller decides what a failure means:
:meth:`ToolResult.check` raises :class:`ToolError` unless the tool answered
with exit status 0, :meth:`ToolResult.ran` only when it gave no answer at all
(missing, cannot start, timed out), :meth:`ToolResult.value` turns a failure
into a default, as nvitop's ``nvmlQuery(default=NA)`` does. Only an
interruption (Ctrl-C, or the exception a SIGTERM handler raises) propagates.

Every call has a time limit and runs in a session of its own (a Ctrl-C on the
terminal reaches radT, not the tool; a timeout kills the helpers the tool
started too). Output goes to temporary files rather than pipes, so a daemon
that keeps its inherited output open (``nvidia-cuda-mps-control -d``) cannot
hold radT.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from radt.errors import RadtError

TIMEOUT_S = 30.0
"""How long a call may take unless the caller says otherwise."""

T = TypeVar("T")


class ToolError(RadtError):
    """A tool gave no usable answer; the message is the reason in one line."""

    def __init__(self, message: str, result: ToolResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class ToolMissing(ToolError):
    """The tool is not on PATH."""


@dataclass
class ToolResult:
    """The outcome of one call of a tool."""

    argv: list[str]
    returncode: int | None
    """None when the tool could not be started or ran out of time."""
    stdout: str = ""
    """What it printed; stderr too for a call with ``merge_stderr``."""
    stderr: str = ""
    error: str | None = None
    """Why it gave no answer ("nvidia-smi not found on PATH", "… did not finish within 30 s")."""
    missing: bool = False
    """Whether the tool is not on PATH."""
    interrupted: BaseException | None = None
    """Ctrl-C/SIGTERM that arrived while a ``critical`` call ran: it was let finish."""

    @property
    def ok(self) -> bool:
        """Whether the tool ran to its end with exit status 0."""
        return self.returncode == 0 and self.error is None

    @property
    def command(self) -> str:
        """The call as a shell would spell it."""
        return shlex.join(self.argv)

    @property
    def output(self) -> str:
        """stdout, then stderr."""
        return "\n".join(part for part in (self.stdout, self.stderr) if part)

    def first_line(self) -> str:
        """The first non-blank line of the output, stripped ("" if none)."""
        return next((ln.strip() for ln in self.output.splitlines() if ln.strip()), "")

    def last_line(self, limit: int = 200) -> str:
        """The last non-blank line of stderr, else of stdout, cut to ``limit`` characters."""
        for text in (self.stderr, self.stdout):
            for line in reversed(text.splitlines()):
                if line.strip():
                    line = line.strip()
                    return line if len(line) <= limit else line[: limit - 1] + "…"
        return ""

    def summary(self) -> str:
        """The whole output as one line (what the tool said), else the reason it failed."""
        lines = [" ".join(ln.split()) for ln in self.output.splitlines() if ln.strip()]
        text = "; ".join(lines)
        if len(text) > 300:
            text = text[:297] + "..."
        return text or self.error or f"exit status {self.returncode}"

    def reason(self) -> str:
        """Why the call failed, in one line: the error, or the exit status and the last words."""
        if self.error:
            return self.error
        said = self.last_line()
        return f"exit status {self.returncode}" + (f": {said}" if said else "")

    def ran(self) -> ToolResult:
        """This result when the tool answered (any exit status); else raise :class:`ToolError`
        (:class:`ToolMissing` when it is not on PATH) with the reason."""
        if self.error is not None:
            raise (ToolMissing if self.missing else ToolError)(self.error, self)
        return self

    def check(self) -> ToolResult:
        """This result when :attr:`ok`; else raise :class:`ToolError`: the reason it gave no
        answer, or "`command` failed: what it said"."""
        self.ran()
        if self.returncode != 0:
            raise ToolError(f"`{self.command}` failed: {self.summary()}", self)
        return self

    def value(self, read: Callable[[ToolResult], T], default: T) -> T:
        """``read(self)`` when :attr:`ok`, else ``default``."""
        return read(self) if self.ok else default

    def reraise(self) -> None:
        """Raise the interruption that this call held back, if any."""
        if self.interrupted is not None:
            raise self.interrupted


def found(name: str) -> bool:
    """Whether ``name`` is an executable on PATH."""
    return shutil.which(name) is not None


def run(
    argv: Sequence[str],
    *,
    timeout_s: float = TIMEOUT_S,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    merge_stderr: bool = False,
    critical: bool = False,
) -> ToolResult:
    """Run ``argv`` to its end (or ``timeout_s``) and return what came of it; see the module.

    ``merge_stderr`` writes stderr into stdout in the order printed (nvidia-smi
    prints its errors on stdout). ``critical`` calls change the GPU: an
    interruption while one runs does not kill the tool; the call is let finish so
    that the caller can register the undo step of what it did, then call
    :meth:`ToolResult.reraise`.
    """
    argv = [str(a) for a in argv]
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.TemporaryFile() as inp,
    ):
        if stdin is not None:
            inp.write(stdin.encode())
            inp.seek(0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=inp if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if merge_stderr else err,
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError:
            return ToolResult(argv, None, error=f"{argv[0]} not found on PATH", missing=True)
        except OSError as exc:
            return ToolResult(argv, None, error=f"cannot run {argv[0]}: {exc.strerror or exc}")
        interrupted: BaseException | None = None
        try:
            returncode = _wait(proc, timeout_s)
        except BaseException as exc:
            if not critical:
                _kill(proc)
                raise
            interrupted = exc
            returncode = _wait(proc, timeout_s)
        result = ToolResult(argv, returncode, _read(out), _read(err), interrupted=interrupted)
    if returncode is None:
        result.error = f"`{result.command}` did not finish within {timeout_s:g} s"
    return result


def _wait(proc: subprocess.Popen, timeout_s: float) -> int | None:
    """The exit status, or None after killing a tool that ran past ``timeout_s``."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return None


def _kill(proc: subprocess.Popen) -> None:
    """Kill the tool and whatever it started in its session, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def _read(file) -> str:
    file.seek(0)
    return file.read().decode("utf-8", errors="replace")
