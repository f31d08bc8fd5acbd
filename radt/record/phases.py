"""Phase intervals (``radt.phase``) on disk: buffered beside the spool, compacted into an artifact.

The run-API receiver hands each finished interval to a :class:`PhaseWriter`, which keeps them in
memory and appends them, every few seconds or every :data:`BATCH_ROWS` intervals, as one record
batch of an Arrow IPC stream in the run folder (``phases/phases.arrows``): memory stays bounded
however long the run is, and a crash of radT loses at most the last few seconds. At the end
(:func:`compact_phases`, in the run's ``artifacts`` step, so ``radt sync`` does it too) the
stream becomes the artifact ``radt/phases.parquet``: columns ``run`` (run id), ``process``
(pid), ``phase`` (name), ``start`` and ``end`` (UTC, µs), one row per interval in the order
they arrived (per process, in the order the blocks ended). Samples never carry phases.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

FOLDER = "phases"
STREAM = "phases.arrows"
ARTIFACT = "radt/phases.parquet"
BATCH_ROWS = 50_000
BATCH_S = 5.0
SPOOL_SCHEMA = pa.schema(
    [
        ("process", pa.int64()),
        ("phase", pa.string()),
        ("start_us", pa.int64()),
        ("end_us", pa.int64()),
    ]
)
_STAMP = pa.timestamp("us", tz="UTC")
_TEXT = pa.dictionary(pa.int32(), pa.string())
SCHEMA = pa.schema(
    [
        ("run", _TEXT),
        ("process", pa.int64()),
        ("phase", _TEXT),
        ("start", _STAMP),
        ("end", _STAMP),
    ]
)
"""The columns of ``radt/phases.parquet``."""


class PhaseWriter:
    """Appends phase intervals to the run folder's phase stream; thread-safe by its one caller.

    A write that fails (a full disk) cuts the stream back to its last whole batch and stops
    recording phases, with one warning; the run goes on.
    """

    def __init__(self, run_folder: Path, warn: Callable[[str], None]) -> None:
        self.path = run_folder / FOLDER / STREAM
        self.warn = warn
        self.rows = 0
        self.failed = False
        self._process: list[int] = []
        self._phase: list[str] = []
        self._start: list[int] = []
        self._end: list[int] = []
        self._batches: list[pa.RecordBatch] = []
        self._kept = 0
        self._written_s = time.monotonic()
        self._sink = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self._good_bytes = 0

    def add(self, process: int, phase: str, start_s: float, end_s: float) -> None:
        """Keep one interval (epoch seconds); written with the next batch."""
        if self.failed:
            return
        self._process.append(process)
        self._phase.append(phase)
        self._start.append(round(start_s * 1e6))
        self._end.append(round(end_s * 1e6))
        self._kept += 1
        if self._kept >= BATCH_ROWS:
            self.flush()

    def add_batch(
        self, process: pa.Array, phase: pa.Array, start_s: pa.Array, end_s: pa.Array
    ) -> None:
        """Keep many intervals at once (Arrow arrays: pids, names, epoch seconds)."""
        if self.failed:
            return
        micros = [pc.cast(pc.round(pc.multiply(t, 1e6)), pa.int64()) for t in (start_s, end_s)]
        self._batches.append(
            pa.record_batch([process.cast(pa.int64()), phase, *micros], schema=SPOOL_SCHEMA)
        )
        self._kept += len(process)
        if self._kept >= BATCH_ROWS:
            self.flush()

    def tick(self) -> None:
        """Write the kept intervals when the last batch is more than a few seconds old."""
        if self._kept and time.monotonic() - self._written_s >= BATCH_S:
            self.flush()

    def flush(self) -> None:
        """Write the kept intervals as one batch now."""
        self._written_s = time.monotonic()
        if not self._kept or self.failed:
            return
        batches = self._batches
        if self._process:
            batches.append(
                pa.record_batch(
                    [
                        pa.array(self._process, pa.int64()),
                        pa.array(self._phase, pa.string()),
                        pa.array(self._start, pa.int64()),
                        pa.array(self._end, pa.int64()),
                    ],
                    schema=SPOOL_SCHEMA,
                )
            )
        rows = self._kept
        self._process, self._phase, self._start, self._end = [], [], [], []
        self._batches, self._kept = [], 0
        try:
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._sink = pa.OSFile(str(self.path), "wb")
                self._writer = ipc.new_stream(self._sink, SPOOL_SCHEMA)
            self._writer.write_batch(
                pa.Table.from_batches(batches, SPOOL_SCHEMA).combine_chunks().to_batches()[0]
            )
            self._sink.flush()
            self._good_bytes = self._sink.tell()
        except (OSError, pa.ArrowException) as exc:
            self._fail(exc)
            return
        self.rows += rows

    def close(self) -> None:
        """Write what is kept and close the stream; safe twice."""
        self.flush()
        writer, sink, self._writer, self._sink = self._writer, self._sink, None, None
        if writer is not None:
            try:
                writer.close()
            except (OSError, pa.ArrowException) as exc:
                self._fail(exc)
            finally:
                with contextlib.suppress(OSError, pa.ArrowException):
                    sink.close()

    def _fail(self, exc: BaseException) -> None:
        self.failed = True
        sink, self._writer, self._sink = self._sink, None, None
        if sink is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                sink.close()
        with contextlib.suppress(OSError):
            if self._good_bytes:
                os.truncate(self.path, self._good_bytes)
            else:
                self.path.unlink(missing_ok=True)
        reason = getattr(exc, "strerror", None) or str(exc)
        self.warn(
            f"cannot keep phase intervals ({reason}); the ones written so far are kept, "
            "later ones are not recorded"
        )


def read_phase_stream(path: Path) -> tuple[list[pa.RecordBatch], str | None]:
    """The whole batches of a phase stream, and what was wrong with the rest (None if nothing).

    A stream cut short (radT killed while writing) is read up to its last whole batch.
    """
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = ipc.open_stream(source)
            if reader.schema != SPOOL_SCHEMA:
                raise ValueError(f"unexpected columns {reader.schema.names}")
            for batch in reader:
                batch.validate(full=True)
                batches.append(batch)
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        return batches, " ".join(str(exc).split())[:200]
    return batches, None


def compact_phases(run_folder: Path, run_id: str, target: Path) -> tuple[int, str | None]:
    """Write the run folder's phase stream as ``target`` (Parquet, :data:`SCHEMA`).

    Returns the rows written and a problem with the stream (None when it was whole); nothing
    is written when the run recorded no phase.
    """
    path = run_folder / FOLDER / STREAM
    if not path.is_file():
        return 0, None
    batches, problem = read_phase_stream(path)
    rows = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(str(target), SCHEMA, compression="zstd") as out:
        for batch in batches:
            n = batch.num_rows
            rows += n
            out.write_table(
                pa.table(
                    [
                        pa.DictionaryArray.from_arrays(
                            pa.array(np.zeros(n, np.int32)), pa.array([run_id], pa.string())
                        ),
                        batch.column("process"),
                        batch.column("phase").dictionary_encode(),
                        batch.column("start_us").cast(_STAMP),
                        batch.column("end_us").cast(_STAMP),
                    ],
                    schema=SCHEMA,
                )
            )
    return rows, problem
