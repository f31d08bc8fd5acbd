"""Watching running commands: stop signals, ``--max-time``, and how each one ended."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from radt.launch.child import Child
from radt.tags import RADT_EXIT_CODE, RADT_SIGNAL, RADT_STOP_REASON

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Outcome:
    """How one command ended, as an MLflow status and radT's exit code."""

    status: str
    exit_code: int
    tags: dict[str, str] = field(default_factory=dict)


def ended(
    status: str, exit_code: int, reason: str | None = None, signum: int | None = None
) -> Outcome:
    """An outcome with its tags: ``radt.exit_code`` is the status radT exits with (0–255,
    128+N for signal N), ``radt.signal`` the signal the command died of or was stopped with,
    ``radt.stop_reason`` why radT stopped it."""
    tags = {RADT_EXIT_CODE: str(exit_code)}
    if signum is not None:
        tags[RADT_SIGNAL] = signal.Signals(signum).name
    if reason:
        tags[RADT_STOP_REASON] = reason
    return Outcome(status, exit_code, tags)


class Supervisor:
    """Waits for commands that run together; use as a context manager.

    SIGINT, SIGTERM and SIGHUP to radT are forwarded to every command's
    process group; after ``grace_s`` the commands get SIGKILL, and a second
    signal kills them at once. ``max_time_min`` ends them the same way.
    A signal that was ignored when radT started stays ignored.

    With ``abandon``, a signal that comes once every command has ended stops nothing:
    the record is finished. Another signal after :meth:`record_kept` calls
    ``abandon(signum)``, which leaves the record to ``radt sync``.
    """

    def __init__(
        self,
        children: Sequence[Child],
        warn: Callable[[str], None],
        grace_s: float = 10.0,
        max_time_min: float | None = None,
        abandon: Callable[[int], None] | None = None,
    ) -> None:
        self.children = list(children)
        self.warn = warn
        self.grace_s = grace_s
        self.max_time_min = max_time_min
        self.reason: str | None = None
        self.signum: int | None = None
        """The signal radT received (its exit code is then 128 + it)."""
        self.sent: int | None = None
        """The last signal radT sent to stop the commands on its own (``--max-time``)."""
        self.late_signum: int | None = None
        """A signal radT received after every command had ended (with ``abandon``)."""
        self._abandon = abandon
        self._kept = False
        self._kill_at: float | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Supervisor:
        self._previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
        for signum, handler in self._previous.items():
            # A signal ignored when radT started (`nohup radt …`, `radt … &` in a script)
            # stays ignored, for radT as for the command, which inherits that.
            if handler is not signal.SIG_IGN:
                signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def record_kept(self) -> None:
        """Every command has ended and its outcome is kept in the run folder: from now on,
        a second signal may abandon the record (``radt sync`` finishes it)."""
        self._kept = True

    def _all_ended(self) -> bool:
        """Whether every command has exited (looked at without reaping it)."""
        for child in self.children:
            if child.process is None:
                return False
            if child.process.returncode is None and not child.has_exited():
                return False
        return True

    def _on_signal(self, signum: int, _frame) -> None:
        if self._abandon is not None and (self._kept or self._all_ended()):
            self._after_end(signum)
            return
        if self.signum is not None:
            self.warn("second interrupt: killing the command now")
            self._signal_all(signal.SIGKILL)
            return
        self.signum = signum
        self.reason = f"radT received {signal.Signals(signum).name}"
        self._kill_at = time.monotonic() + self.grace_s
        # printed after "radt: ", so radT is not named again; the stored reason names it
        self.warn(
            f"received {signal.Signals(signum).name}; stopping the command "
            "(again to kill it at once)"
        )
        self._signal_all(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    def _after_end(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._kept and (self.signum is not None or self.late_signum is not None):
            assert self._abandon is not None
            self._abandon(signum)
            return
        if self.late_signum is None and self.signum is None:
            self.late_signum = signum
        self.warn(
            f"received {name} after the command ended; finishing its record "
            "(again to leave it to `radt sync`)"
        )

    def _signal_all(self, signum: int) -> None:
        for child in self.children:
            if child.process is not None and child.poll() is None:
                child.signal_group(signum)

    def stop_all(self, reason: str) -> None:
        """Ask every command to stop (SIGTERM), with SIGKILL after the grace period."""
        if self.reason is None:
            self.reason = reason
            self._kill_at = time.monotonic() + self.grace_s
            self.warn(f"{reason}; sending SIGTERM (SIGKILL in {self.grace_s:g} s)")
            self.sent = signal.SIGTERM
            self._signal_all(signal.SIGTERM)

    def wait(
        self,
        on_exit: Callable[[int], None] | None = None,
        children: Sequence[Child] | None = None,
        watch: Callable[[], None] | None = None,
    ) -> list[int]:
        """Wait until every command (or every one of ``children``) has ended; return their
        exit statuses.

        ``on_exit(i)`` is called once for command ``i`` (of those waited for) as soon as it
        is seen to have ended. ``watch`` is called at each look while they run, e.g. to stop
        them (:meth:`stop_all`) when something they depend on has failed.
        """
        waited = self.children if children is None else list(children)
        deadline = (
            time.monotonic() + self.max_time_min * 60 if self.max_time_min is not None else None
        )
        ended: set[int] = set()
        while True:
            codes = [child.poll() for child in waited]
            if on_exit is not None:
                for index, code in enumerate(codes):
                    if code is not None and index not in ended:
                        ended.add(index)
                        on_exit(index)
            if all(code is not None for code in codes):
                return codes  # type: ignore[return-value]
            if watch is not None:
                watch()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self.stop_all(f"--max-time of {self.max_time_min:g} min reached")
            if self._kill_at is not None and now >= self._kill_at:
                self.warn("the command did not stop within the grace period; sending SIGKILL")
                self.sent = signal.SIGKILL
                self._signal_all(signal.SIGKILL)
                self._kill_at = None
            time.sleep(0.05)

    def judge(self, returncode: int) -> Outcome:
        """The status of a run whose command ended with ``returncode``."""
        if self.signum is not None:
            return ended("KILLED", 128 + self.signum, self.reason, self.signum)
        if returncode < 0:
            reason = self.reason or f"the command died of {signal.Signals(-returncode).name}"
            return ended("KILLED", 128 - returncode, reason, -returncode)
        status = "FINISHED" if returncode == 0 else "FAILED"
        return ended(status, returncode, self.reason, self.sent if self.reason else None)
