"""The decimated stream for MLflow: one mean point per key per window."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mlflow.entities import Metric

from radt.listener import Sample
from radt.record.events import EPOCH_KEY, EXAMPLES_KEY, WINDOW_KEY

MLFLOW_PREFIX = "system/"
MAX_KEY = 250
_KEY_CHARS = re.compile(r"^[\w\-. /:]+$")
RUN_API_METRICS: dict[str, str | None] = {
    EXAMPLES_KEY: "examples",
    EPOCH_KEY: "epoch",
    WINDOW_KEY: None,
}
"""Run-API keys: each sample is a point of a plain MLflow metric (None: samples only)."""


def mlflow_key_problem(key: str) -> str | None:
    """Why MLflow would refuse ``system/<key>`` as a metric name, or None."""
    if len(MLFLOW_PREFIX + key) > MAX_KEY:
        return f"longer than {MAX_KEY} characters with the {MLFLOW_PREFIX} prefix"
    if not _KEY_CHARS.match(key) or "//" in key or key.startswith("/"):
        return "has characters MLflow does not allow in metric names"
    return None


@dataclass
class _Window:
    bucket: int
    total: float = 0.0
    count: int = 0
    last_ms: int = 0


class Decimator:
    """Averages each key over fixed windows of ``window_s`` seconds.

    A point carries the timestamp of the last sample in its window and the
    window's index since ``origin_s`` as its step, so the same samples always
    give the same points: a resend after a failure is idempotent in MLflow.
    A window closes when the key's next window begins, or on :meth:`flush`.
    Keys MLflow would refuse are left out of the stream (they stay in the
    samples artifact) and listed in :attr:`rejected`.

    The run API's samples (:data:`RUN_API_METRICS`) are not averaged: every
    one is a point of the plain metric ``examples`` (step: its window index)
    or ``epoch`` (step: the epoch), as a script's own ``mlflow.log_metric``
    would make them.
    """

    def __init__(self, window_s: float, origin_s: float) -> None:
        self.rejected: dict[str, str] = {}
        """Keys left out of the stream (MLflow would refuse them), with the reason."""
        self._valid: set[str] = set()
        self.window_us = max(1, round(window_s * 1e6))
        self.origin_bucket = round(origin_s * 1e6) // self.window_us
        self._open: dict[str, _Window] = {}

    def add(self, samples: Iterable[Sample]) -> list[Metric]:
        """Take samples in arrival order; return the points of windows they closed."""
        closed: list[Metric] = []
        for timestamp, key, value in samples:
            if key in RUN_API_METRICS:
                point = self._run_api_point(timestamp, key, value)
                if point is not None:
                    closed.append(point)
                continue
            if key not in self._valid:
                problem = mlflow_key_problem(key)
                if problem:
                    self.rejected[key] = problem
                    continue
                self._valid.add(key)
            # Whole microseconds, as the spool keeps them, so a resend from the
            # spool puts every sample in the same window as the live stream did.
            micros = round(timestamp * 1e6)
            bucket = micros // self.window_us
            window = self._open.get(key)
            if window is None or window.bucket != bucket:
                if window is not None:
                    closed.append(self._point(key, window))
                window = self._open[key] = _Window(bucket)
            window.total += value
            window.count += 1
            window.last_ms = max(window.last_ms, micros // 1000)
        return closed

    def flush(self) -> list[Metric]:
        """Close every open window and return its points."""
        points = [self._point(key, window) for key, window in self._open.items()]
        self._open.clear()
        return points

    def _run_api_point(self, timestamp: float, key: str, value: float) -> Metric | None:
        name = RUN_API_METRICS[key]
        if name is None:
            return None
        micros = round(timestamp * 1e6)
        step = int(value) if key == EPOCH_KEY else micros // self.window_us - self.origin_bucket
        return Metric(name, value, micros // 1000, step)

    def _point(self, key: str, window: _Window) -> Metric:
        return Metric(
            MLFLOW_PREFIX + key,
            window.total / window.count,
            window.last_ms,
            window.bucket - self.origin_bucket,
        )
