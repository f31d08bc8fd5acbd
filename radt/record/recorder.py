"""The recorder: takes samples from every listener, spools them, streams them.

Every sample is appended to the local spool first (the full-rate truth); a
decimated stream goes to MLflow through the one batched writer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from radt.listener import Sample
from radt.record.decimate import Decimator
from radt.record.spool import SpoolWriter
from radt.record.writer import BatchWriter
from radt.words import count

MAX_UNSPOOLED = 2_000_000


class Recorder:
    """Collects samples from any thread and moves them on every ``flush_s``."""

    def __init__(
        self,
        spool: SpoolWriter,
        writer: BatchWriter,
        decimator: Decimator,
        warn: Callable[[str], None],
        flush_s: float = 1.0,
    ) -> None:
        self.spool = spool
        self.writer = writer
        self.decimator = decimator
        self.warn = warn
        self.flush_s = flush_s
        self.received = 0
        self.unspooled: list[Sample] = []
        self._buffer: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._spool_failed = False
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="radt-recorder", daemon=True)

    def emit(self, samples: Iterable[Sample]) -> None:
        """Hand samples to the recorder; thread-safe and quick."""
        with self._lock:
            self._buffer.extend(samples)

    def start(self) -> None:
        """Start the writer and the flushing thread."""
        self.writer.start()
        self._thread.start()

    def close(self, send_timeout_s: float) -> int:
        """Flush everything; return how many decimated points MLflow did not take."""
        self._stop.set()
        self._thread.join()
        self._flush()
        self.writer.put(self.decimator.flush())
        try:
            self.spool.close()
        except OSError as exc:
            self.warn(f"could not close the spool cleanly: {exc}")
        if self.unspooled:
            self.warn(f"{count(len(self.unspooled), 'sample')} could not be written to the spool")
        return self.writer.close(send_timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            batch, self._buffer = self._buffer, []
        if not batch:
            return
        self.received += len(batch)
        self._spool(batch)
        self.writer.put(self.decimator.add(batch))
        for key in self.decimator.rejected.keys() - self._reported:
            self._reported.add(key)
            self.warn(
                f"metric {key!r} {self.decimator.rejected[key]}: it stays in "
                "radt/samples.parquet but is not sent to MLflow's metrics"
            )

    def _spool(self, batch: list[Sample]) -> None:
        pending = self.unspooled + batch
        try:
            self.spool.append(pending)
        except OSError as exc:
            if not self._spool_failed:
                self._spool_failed = True
                self.warn(
                    f"cannot write the spool in {self.spool.folder} ({exc.strerror or exc}); "
                    "training goes on, samples are held in memory and still sent to MLflow — "
                    "free some disk space"
                )
            self.unspooled = pending[-MAX_UNSPOOLED:]
            return
        if self._spool_failed:
            self.warn(f"spool writable again; {len(self.unspooled)} held samples written")
            self._spool_failed = False
        self.unspooled = []
