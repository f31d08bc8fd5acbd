"""The run API for training scripts: examples and epochs, cheap, and harmless without radT.

Under radT (``RADT_RUN_ID`` set by the launcher) the counts land in the run
as the MLflow metrics ``examples`` (cumulative) and ``epoch``; without radT
every call is a no-op after a one-time notice, so one script works both ways.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Any

FLUSH_EVERY_S = 1.0


class _Counter:
    """Buffers example counts; sends the running total at most once per second."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.calls = 0
        self.sent_total = 0
        self.last_flush = 0.0
        self.noticed = False
        self.registered = False

    @property
    def run_id(self) -> str | None:
        return os.environ.get("RADT_RUN_ID")

    def active(self) -> bool:
        if self.run_id:
            if not self.registered:
                self.registered = True
                atexit.register(self.flush)
            return True
        if not self.noticed:
            self.noticed = True
            print(
                "radt: not running under radT; radt.log_examples/log_epoch do nothing "
                "(run the script as `radt script.py` to record them)",
                file=sys.stderr,
            )
        return False

    def add(self, n: int) -> None:
        with self.lock:
            self.total += n
            self.calls += 1
            due = time.monotonic() - self.last_flush >= FLUSH_EVERY_S
        if due:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if self.total == self.sent_total or not self.run_id:
                return
            total, step = self.total, self.calls
            self.sent_total = total
            self.last_flush = time.monotonic()
        _log("examples", float(total), step, self.run_id)


_counter = _Counter()


def _log(key: str, value: float, step: int, run_id: str) -> None:
    import mlflow

    # Asynchronous: the training thread only queues the point; MLflow's own
    # logging thread sends it and flushes the queue when the process exits.
    mlflow.log_metric(key, value, step=step, run_id=run_id, synchronous=False)


def log_examples(n: int) -> None:
    """Count ``n`` more examples processed (call after each batch; buffered, cheap)."""
    if _counter.active():
        _counter.add(int(n))


def log_epoch(epoch: int) -> None:
    """Mark the end of epoch ``epoch`` (0-based, the one just finished).

    Under a plan or ``radt --max-epochs N``, the script exits cleanly (status
    0) once N epochs are done, as the original radT does.
    """
    if not _counter.active():
        return
    _counter.flush()
    _log("epoch", float(epoch), int(epoch), _counter.run_id or "")
    limit = os.environ.get("RADT_MAX_EPOCHS")
    if limit and int(epoch) + 1 >= int(limit):
        print(f"radt: --max-epochs {limit} reached; ending the run", file=sys.stderr, flush=True)
        sys.exit(0)


class Run:
    """``with radt.Run() as run:`` — the run API plus MLflow's logging calls on radT's run.

    Without radT, ``log_examples``/``log_epoch`` do nothing and MLflow's calls
    behave as plain MLflow (they log to MLflow's own active run).
    """

    def __enter__(self) -> Run:
        _counter.active()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _counter.flush()

    @property
    def run_id(self) -> str | None:
        """radT's run id, or None without radT."""
        return _counter.run_id

    log_examples = staticmethod(log_examples)
    log_epoch = staticmethod(log_epoch)

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        """``mlflow.log_metric`` into this run."""
        import mlflow

        mlflow.log_metric(key, value, step=step, run_id=self.run_id)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """``mlflow.log_metrics`` into this run."""
        import mlflow

        mlflow.log_metrics(metrics, step=step, run_id=self.run_id)

    def log_param(self, key: str, value: Any) -> None:
        """``mlflow.log_param`` into this run."""
        import mlflow

        if self.run_id:
            mlflow.MlflowClient().log_param(self.run_id, key, value)
        else:
            mlflow.log_param(key, value)
