"""Callbacks that report a framework's training to radT: :mod:`radt.integrations.transformers`
(the Hugging Face ``Trainer``) and :mod:`radt.integrations.lightning` (Lightning's ``Trainer``).

Each module imports its framework; import the one you use (``radt --autolog`` adds it to every
``Trainer`` made without an edit to the script).
"""

from __future__ import annotations

from radt import run_api


class PhaseSteps:
    """One open :func:`radt.phase` at a time, as a framework's hooks mark the steps' parts:
    ``_enter(name)`` ends the open one and opens ``name``; ``_leave()`` ends the open one."""

    _phase: run_api.phase | None = None

    def _enter(self, name: str) -> None:
        self._leave()
        self._phase = run_api.phase(name).__enter__()

    def _leave(self) -> None:
        if self._phase is not None:
            self._phase.__exit__(None, None, None)
            self._phase = None
