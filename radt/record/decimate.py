"""The decimated stream for MLflow: one mean point per key per window, computed on arrays."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from radt.record.events import EPOCH_KEY, EXAMPLES_KEY, WINDOW_KEY
from radt.restclient import import_mlflow

if TYPE_CHECKING:
    from mlflow.entities import Metric

MLFLOW_PREFIX = "system/"
MAX_KEY = 250
_KEY_CHARS = re.compile(r"^[\w\-. /:]+$")
RUN_API_METRICS: dict[str, str | None] = {
    EXAMPLES_KEY: "examples",
    EPOCH_KEY: "epoch",
    WINDOW_KEY: None,
}
"""Run-API keys: each sample is a point of a plain MLflow metric (None: samples only)."""
_NO_KEY = -1
"""Code of a key left out of the stream (MLflow would refuse it)."""
_RUN_API = -2
"""Code of a run-API key (:data:`RUN_API_METRICS`)."""


def mlflow_key_problem(key: str) -> str | None:
    """Why MLflow would refuse ``system/<key>`` as a metric name, or None."""
    if len(MLFLOW_PREFIX + key) > MAX_KEY:
        return f"longer than {MAX_KEY} characters with the {MLFLOW_PREFIX} prefix"
    if not _KEY_CHARS.match(key) or "//" in key or key.startswith("/"):
        return "has characters MLflow does not allow in metric names"
    return None


class Decimator:
    """Averages each key over fixed windows of ``window_s`` seconds.

    A window is a run of one key's samples, in arrival order, that fall into
    the same ``window_s`` bucket; its point is their mean, carries the
    timestamp of its latest sample, and has the bucket's index since
    ``origin_s`` as its step. The same samples in the same order always give the
    same points, however they are cut into calls (an open window keeps its
    samples, not a running total, so each mean is computed once over all of
    them): a resend from the spool after a failure is idempotent in MLflow. A
    window closes when the key's next window begins, or on :meth:`flush`.
    Keys MLflow would refuse are left out of the stream (they stay in the
    samples artifact) and listed in :attr:`rejected`.

    The run API's samples (:data:`RUN_API_METRICS`) are not averaged: every
    one is a point of the plain metric ``examples`` (step: its window index)
    or ``epoch`` (step: the epoch), as a script's own ``mlflow.log_metric``
    would make them.

    Samples are taken as anything the spool takes (:data:`radt.record.spool.SpoolInput`)
    and handled as arrays: no Python object per sample.
    """

    def __init__(self, window_s: float, origin_s: float) -> None:
        self.rejected: dict[str, str] = {}
        """Keys left out of the stream (MLflow would refuse them), with the reason."""
        self.window_us = max(1, round(window_s * 1e6))
        self.origin_bucket = round(origin_s * 1e6) // self.window_us
        self._codes: dict[str, int] = {}
        self._names: list[str] = []
        self._last: tuple[pa.Array, np.ndarray] | None = None
        # The samples of the open windows, in arrival order: key code, microseconds, value.
        self._open = (np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.float64))

    def add(self, samples) -> list[Metric]:
        """Take samples in arrival order; return the points of windows they closed."""
        from radt.record.spool import as_table

        table = as_table(samples)
        if table.num_rows == 0:
            return []
        codes = self._encode(table.column("key"))
        micros = pc.cast(table.column("timestamp"), pa.int64()).to_numpy()
        values = table.column("value").to_numpy()
        points = []
        keep = codes >= 0
        if not keep.all():
            run_api = np.flatnonzero(codes == _RUN_API)
            if len(run_api):
                names = table.column("key").take(pa.array(run_api)).to_pylist()
                for key, micro, value in zip(
                    names, micros[run_api].tolist(), values[run_api].tolist(), strict=True
                ):
                    point = self._run_api_point(micro, key, value)
                    if point is not None:
                        points.append(point)
            codes, micros, values = codes[keep], micros[keep], values[keep]
        open_codes, open_micros, open_values = self._open
        return points + self._windows(
            np.concatenate([open_codes, codes]),
            np.concatenate([open_micros, micros]),
            np.concatenate([open_values, values]),
            keep_last=True,
        )

    def flush(self) -> list[Metric]:
        """Close every open window and return its points."""
        return self._windows(*self._open, keep_last=False)

    def _encode(self, keys: pa.ChunkedArray) -> np.ndarray:
        """Stable codes of the keys (``_NO_KEY`` for keys MLflow refuses), one check per key."""
        if keys.num_chunks == 0:
            return np.empty(0, np.int32)
        array = keys.combine_chunks() if keys.num_chunks > 1 else keys.chunk(0)
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        dictionary = array.dictionary
        if self._last is None or not self._last[0].equals(dictionary):
            lookup = np.fromiter(
                (self._code(k) for k in dictionary.to_pylist()), np.int32, len(dictionary)
            )
            self._last = (dictionary, lookup)  # the next call most likely has the same keys
        return self._last[1][array.indices.to_numpy(zero_copy_only=False)]

    def _code(self, key: str) -> int:
        code = self._codes.get(key)
        if code is None:
            problem = mlflow_key_problem(key)
            if key in RUN_API_METRICS:
                code = _RUN_API
            elif problem:
                self.rejected[key] = problem
                code = _NO_KEY
            else:
                code = len(self._names)
                self._names.append(key)
            self._codes[key] = code
        return code

    def _run_api_point(self, micros: int, key: str, value: float) -> Metric | None:
        name = RUN_API_METRICS[key]
        if name is None:
            return None
        step = int(value) if key == EPOCH_KEY else micros // self.window_us - self.origin_bucket
        import_mlflow()  # a light run's MLflow is imported after its command starts
        from mlflow.entities import Metric

        return Metric(name, value, micros // 1000, step)

    def _windows(
        self, codes: np.ndarray, micros: np.ndarray, values: np.ndarray, keep_last: bool
    ) -> list[Metric]:
        """Points of the windows in these samples; with ``keep_last`` the last window of each
        key stays open (its samples are kept for the next call)."""
        import_mlflow()
        from mlflow.entities import Metric

        if len(codes) == 0:
            self._open = (codes, micros, values)
            return []
        small = codes.astype(np.int16) if len(self._names) < 2**15 else codes  # radix sort
        order = np.argsort(small, kind="stable")  # each key's samples, in arrival order
        codes, micros, values = codes[order], micros[order], values[order]
        buckets = micros // self.window_us
        starts = np.flatnonzero(
            np.concatenate([[True], (codes[1:] != codes[:-1]) | (buckets[1:] != buckets[:-1])])
        )
        counts = np.diff(np.append(starts, len(codes)))
        # Each window's sum and latest sample over exactly its own samples: the same
        # arithmetic on the same values whatever else came in the same call.
        sums = np.add.reduceat(values, starts)
        last_ms = np.maximum.reduceat(micros, starts) // 1000
        if keep_last:
            last = np.append(codes[starts][1:] != codes[starts][:-1], True)
            held = np.repeat(last, counts)
            self._open = (codes[held], micros[held], values[held])
            closed = np.flatnonzero(~last)
        else:
            self._open = (codes[:0], micros[:0], values[:0])
            closed = np.arange(len(starts))
        if len(closed) == 0:
            return []
        means = sums[closed] / counts[closed]
        steps = buckets[starts[closed]] - self.origin_bucket
        names = self._names
        return [
            Metric(MLFLOW_PREFIX + names[code], mean, ms, step)
            for code, mean, ms, step in zip(
                codes[starts[closed]].tolist(),
                means.tolist(),
                last_ms[closed].tolist(),
                steps.tolist(),
                strict=True,
            )
        ]
