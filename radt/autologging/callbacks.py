"""What radT's framework callbacks share: :mod:`radt.autologging.transformers` (the Hugging
Face ``Trainer``) and :mod:`radt.autologging.lightning` (Lightning's ``Trainer``).

Each module imports its framework; import the one you use (``radt --autolog`` adds it to every
``Trainer`` made without an edit to the script).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from radt import run_api
from radt.console import install_lines

logger = logging.getLogger(__name__)


def _say(message: str) -> None:
    """One line from radT in the training process (``radt: …`` on stderr, as the run API's):
    the callbacks' and ``radt --autolog``'s (:mod:`radt.autologging`)."""
    install_lines()
    logger.warning(message)


def batch_size(batch: Any) -> int | None:
    """The first dimension of the first tensor in ``batch`` (through tuples, lists and
    mappings), or None when there is none."""
    torch = sys.modules["torch"]
    stack = [batch]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.dim() >= 1:
                return int(item.shape[0])
            continue
        if isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
    return None


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


class BatchSizes:
    """The number of examples in a framework's batch, said once when a batch has none to read."""

    _unreadable_said = False

    def _size_of(self, batch: Any, what: str) -> int | None:
        """The examples in ``batch`` (``what`` names it in the one-time message), else None."""
        try:
            size = batch_size(batch)
        except Exception:  # an odd batch type: skipped like any unreadable one
            size = None
        if size is None and not self._unreadable_said:
            self._unreadable_said = True
            _say(
                f"cannot read a batch size from {what} (no tensor in it); "
                "such batches are not counted"
            )
        return size
