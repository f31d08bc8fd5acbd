"""The original radT's script API on radT's run API: ``with radt.run.RADTBenchmark() as run:``,
``run.log_metric``, ``radt.log_metric`` and ``radt.log_metrics``.

Its scripts run unchanged. Under radT, metrics land in radT's run (``epoch`` is MLflow's step);
without radT every call does nothing, as in the original. With ``radt --manual`` the run's
steady-state window starts when the script opens ``RADTBenchmark()`` (the original started
tracking there).
"""

from __future__ import annotations

import os
from typing import Any

from radt.run_api import Run, start_window

MANUAL_VARIABLE = "RADT_MANUAL"
"""Set to ``1`` for the command by ``radt --manual``."""


def _under_radt() -> bool:
    return bool(os.environ.get("RADT_RUN_ID"))


class RADTBenchmark(Run):
    """``with radt.run.RADTBenchmark() as run:`` — :class:`radt.Run` with the original's
    ``log_metric(name, value, epoch)``."""

    def __enter__(self) -> RADTBenchmark:
        super().__enter__()
        if _under_radt() and os.environ.get(MANUAL_VARIABLE) == "1":
            start_window()
        return self

    def log_metric(self, key: str, value: float, epoch: int | None = 0) -> None:
        """Log ``value`` as ``key`` at step ``epoch`` in radT's run; nothing without radT."""
        if _under_radt():
            super().log_metric(key, value, step=epoch)

    def log_metrics(self, metrics: dict[str, float], epoch: int | None = 0) -> None:
        """Log every ``{key: value}`` at step ``epoch`` in radT's run; nothing without radT."""
        if _under_radt():
            super().log_metrics(metrics, step=epoch)

    def log_param(self, key: str, value: Any) -> None:
        """Log a param in radT's run; nothing without radT."""
        if _under_radt():
            super().log_param(key, value)


def log_metric(name: str, value: float, epoch: int = 0) -> None:
    """``radt.log_metric`` of the original radT: one metric at step ``epoch`` in radT's run."""
    RADTBenchmark().log_metric(name, value, epoch)


def log_metrics(metrics: dict[str, float], epoch: int = 0) -> None:
    """``radt.log_metrics`` of the original radT: several metrics at step ``epoch``."""
    RADTBenchmark().log_metrics(metrics, epoch)
