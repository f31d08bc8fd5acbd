"""The recorder: takes samples from every listener, spools them, streams them.

Every sample is appended to the local spool first (the full-rate truth); a
decimated stream goes to MLflow through the one batched writer. What the
listeners emitted since the last flush becomes one Arrow table, in the order it
was emitted, which the spool and the decimator take as arrays.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa

from radt.listener import Sample, SampleBatch, Samples
from radt.record.decimate import Decimator
from radt.record.spool import SpoolWriter, as_table
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
        self.unspooled: pa.Table | None = None
        """Samples the spool could not take yet (a full disk), the latest ``MAX_UNSPOOLED``."""
        self._buffer: list[list[Sample] | pa.Table] = []
        # re-entrant: a signal handler may keep the received samples (keep_received) while
        # the thread it interrupted is in emit
        self._lock = threading.RLock()
        self._spooling = threading.Lock()
        """Held by the one thread that writes the spool."""
        self._stop = threading.Event()
        self._spool_failed = False
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="radt-recorder", daemon=True)

    def emit(self, samples: Samples) -> None:
        """Hand samples (an iterable of :class:`Sample`, or a :class:`SampleBatch`) to the
        recorder; thread-safe and quick."""
        if isinstance(samples, SampleBatch):
            with self._lock:
                self._buffer.append(samples.table)
            return
        with self._lock:
            if self._buffer and isinstance(self._buffer[-1], list):
                self._buffer[-1].extend(samples)
            else:
                self._buffer.append(list(samples))

    def start(self) -> None:
        """Start the writer and the flushing thread."""
        self.writer.start()
        self._thread.start()

    def stop(self) -> None:
        """Spool every sample received and close the spool; the last decimated points are
        queued for MLflow. Safe twice; :meth:`close` sends them."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._flush()
        self.writer.put(self.decimator.flush())
        try:
            self.spool.close()
        except OSError as exc:
            self.warn(f"could not close the spool cleanly: {exc}")
        if self.unspooled is not None:
            self.warn(
                f"{count(self.unspooled.num_rows, 'sample')} could not be written to the spool"
            )

    def close(self, send_timeout_s: float) -> int:
        """Flush everything (:meth:`stop`); return how many decimated points MLflow did not
        take within ``send_timeout_s``."""
        self.stop()
        return self.writer.close(send_timeout_s)

    def keep_received(self, timeout_s: float = 10.0) -> None:
        """Spool every sample received so far, sending none: for a radT about to end before
        its record is finished (``radt sync`` sends them from the spool).

        Waits for a flush in progress in another thread, ``timeout_s`` at most. Never call
        it from a thread that is flushing.
        """
        if not self._spooling.acquire(timeout=timeout_s):
            return
        try:
            self._spool_received()
        finally:
            self._spooling.release()

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            self._flush()

    def _flush(self) -> None:
        with self._spooling:
            batch = self._spool_received()
        if batch is None:
            return
        self.writer.put(self.decimator.add(batch))
        for key in self.decimator.rejected.keys() - self._reported:
            self._reported.add(key)
            self.warn(
                f"metric {key!r} {self.decimator.rejected[key]}: it stays in "
                "radt/samples.parquet but is not sent to MLflow's metrics"
            )

    def _spool_received(self) -> pa.Table | None:
        """Spool what was emitted since the last time and return it (None: nothing);
        the caller holds ``_spooling``."""
        with self._lock:
            pieces, self._buffer = self._buffer, []
        tables = [as_table(piece) for piece in pieces if len(piece)]
        if not tables:
            return None
        batch = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        self.received += batch.num_rows
        self._spool(batch)
        return batch

    def _spool(self, batch: pa.Table) -> None:
        pending = batch if self.unspooled is None else pa.concat_tables([self.unspooled, batch])
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
            held = pending.slice(max(0, pending.num_rows - MAX_UNSPOOLED))
            self.unspooled = held.combine_chunks() if held.num_rows else None
            return
        if self._spool_failed:
            written = 0 if self.unspooled is None else self.unspooled.num_rows
            self.warn(f"spool writable again; {written} held samples written")
            self._spool_failed = False
        self.unspooled = None
