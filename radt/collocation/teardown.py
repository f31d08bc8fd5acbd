"""Undo steps that always run, in reverse order, each one whatever the others did."""

from __future__ import annotations

import contextlib
from collections.abc import Callable


def one_line(exc: BaseException) -> str:
    """An exception as one line for the user."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


class Teardown:
    """What setup changed, as undo steps.

    ``add`` registers a step right after the change it undoes succeeded;
    ``run`` runs the steps last-in first-out. A step that raises (an
    exception, or Ctrl-C while it runs) is reported through ``warn`` and the
    remaining steps still run. Each step is taken off the list before it
    runs, so a step runs at most once: a second ``run`` (or one entered from a
    signal handler while the first is busy) only runs what is left.
    """

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], None]]] = []

    def add(self, what: str, undo: Callable[[], None]) -> None:
        """Register ``undo``; ``what`` names it in failure messages ("restore …")."""
        self._steps.append((what, undo))

    def pending(self) -> list[str]:
        """The steps not run yet, in the order they would run."""
        return [what for what, _undo in reversed(self._steps)]

    def __len__(self) -> int:
        return len(self._steps)

    def run(self, warn: Callable[[str], None]) -> list[str]:
        """Run every step left; return the failures as one-line messages."""
        failures: list[str] = []
        while True:
            try:
                what, undo = self._steps.pop()
            except IndexError:
                return failures
            try:
                undo()
            except (Exception, KeyboardInterrupt) as exc:
                message = f"teardown: {what} failed: {one_line(exc)}"
                failures.append(message)
                with contextlib.suppress(Exception):  # a broken reporter must not stop the rest
                    warn(message)
