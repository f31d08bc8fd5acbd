"""One batched, retrying writer of metric points into an MLflow run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch request
# Answers that no retry can change: bad input, a deleted or finished run.
PERMANENT = {"INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST", "BAD_REQUEST", "INVALID_STATE"}


class _OutageNotice:
    """One warning per outage for every writer of this process (a plan records several
    runs at once, each with a writer, all talking to the same server)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def failed(self) -> bool:
        """Note a failed request; True for the first one of this outage."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                return True
            return False

    def answered(self) -> float | None:
        """Note an answered request; the outage's length for the first one after it."""
        with self._lock:
            since, self._since = self._since, None
        return None if since is None else time.monotonic() - since


OUTAGE = _OutageNotice()


def is_permanent(exc: BaseException) -> bool:
    """Whether MLflow refused the request for good, rather than failing to answer."""
    return getattr(exc, "error_code", None) in PERMANENT


class BatchWriter:
    """Sends points with ``MlflowClient.log_batch`` from a thread of its own.

    Points are queued by :meth:`put` and sent at most every ``period_s``, in
    requests of up to 1000. When the tracking server fails, the writer warns
    once, keeps the points and retries with backoff; when it answers again,
    it says so once. Nothing is dropped while the writer runs.
    """

    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        warn: Callable[[str], None],
        period_s: float = 1.0,
        max_backoff_s: float = 15.0,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.warn = warn
        self.period_s = period_s
        self.max_backoff_s = max_backoff_s
        self.sent = 0
        self.failures = 0
        self.refused = 0
        self._pending: list[Metric] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._deadline = float("inf")
        self._outage_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name="radt-writer", daemon=True)

    def start(self) -> None:
        """Start the sending thread."""
        self._thread.start()

    def put(self, points: Sequence[Metric]) -> None:
        """Queue points for sending; returns at once."""
        if points:
            with self._lock:
                self._pending.extend(points)

    @property
    def pending(self) -> int:
        """How many points are not yet acknowledged by the server."""
        with self._lock:
            return len(self._pending)

    def close(self, timeout_s: float, outage_timeout_s: float = 5.0) -> int:
        """Send what is queued; return how many points are unsent.

        Tries for at most ``timeout_s``, or ``outage_timeout_s`` when the
        server is already known to be down (``radt sync`` sends the rest).
        """
        self._closing = True
        if self._outage_since is not None:
            timeout_s = min(timeout_s, outage_timeout_s)
        self._deadline = time.monotonic() + timeout_s
        self._wake.set()
        self._thread.join()
        return self.pending

    def _loop(self) -> None:
        backoff = self.period_s
        while True:
            if not self._closing:
                self._wake.wait(backoff)
            with self._lock:
                batch = self._pending[:MAX_BATCH]
            if not batch:
                if self._closing:
                    return
                backoff = self.period_s
                continue
            if self._send(batch):
                with self._lock:
                    del self._pending[: len(batch)]
                backoff = self.period_s if not self._pending_more() else 0.0
            else:
                if self._closing and time.monotonic() >= self._deadline:
                    return
                backoff = min(max(backoff * 2, 1.0), self.max_backoff_s)
                if self._closing:
                    time.sleep(min(backoff, max(0.0, self._deadline - time.monotonic())))

    def _pending_more(self) -> bool:
        with self._lock:
            return bool(self._pending)

    def _send(self, batch: list[Metric]) -> bool:
        try:
            self.client.log_batch(self.run_id, metrics=batch, synchronous=True)
        except Exception as exc:
            if is_permanent(exc):
                if not self.refused:
                    self.warn(
                        f"MLflow refused metric points ({_short(exc)}); they are dropped from "
                        "the live stream and stay in radt/samples.parquet"
                    )
                self.refused += len(batch)
                return True
            self.failures += 1
            if self._outage_since is None:
                self._outage_since = time.monotonic()
                if OUTAGE.failed():
                    self.warn(
                        f"tracking server not answering ({_short(exc)}); training goes on, "
                        "samples stay in the local spool and are resent when it is back"
                    )
            return False
        self._outage_since = None
        lasted = OUTAGE.answered()
        if lasted is not None:
            self.warn(f"tracking server answers again after {lasted:.0f} s; catching up")
        self.sent += len(batch)
        return True


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) < 160 else text[:157] + "..."
