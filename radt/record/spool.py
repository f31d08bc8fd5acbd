"""The local spool: every sample, appended to Arrow IPC chunk files on disk.

The spool is the full-rate truth of a run (DESIGN.md). Each append writes one
record batch and flushes it, so a crash loses at most the batch in flight; a
chunk cut short by a crash is read up to its last whole batch. A write that
fails part-way (a full disk) is cut back to the chunk's last whole batch, and
the next append starts a fresh chunk, so no chunk holds a torn message.

Samples arrive as :class:`Sample` tuples or as a :class:`SampleBatch` (columns);
either way one append is one Arrow batch. The end of a run compacts the spool
into the samples artifact (:mod:`radt.record.compact`), reading it back one
batch at a time (:func:`iter_spool`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from radt.listener import Sample, SampleBatch, sample_schema
from radt.words import count

SCHEMA = sample_schema()
CHUNK_GLOB = "chunk-*.arrows"


def samples_to_batch(samples: Sequence[Sample]) -> pa.RecordBatch:
    """Turn samples into one record batch of the spool schema."""
    if not isinstance(samples, Sequence):
        samples = list(samples)
    return pa.record_batch(
        [
            pa.array([round(s.timestamp * 1e6) for s in samples], pa.int64()).cast(
                SCHEMA.field("timestamp").type
            ),
            pa.array([s.key for s in samples], pa.string()),
            pa.array([s.value for s in samples], pa.float64()),
        ],
        schema=SCHEMA,
    )


SpoolInput = Sequence[Sample] | SampleBatch | pa.Table | pa.RecordBatch
"""What the spool and the decimator take: samples, a batch of them, or a table of SCHEMA."""


def as_table(samples: SpoolInput) -> pa.Table:
    """Any :data:`SpoolInput` as a table of :data:`SCHEMA` (no copy where it already is one)."""
    if isinstance(samples, SampleBatch):
        return samples.table
    if isinstance(samples, pa.Table):
        return samples
    if isinstance(samples, pa.RecordBatch):
        return pa.Table.from_batches([samples])
    return pa.Table.from_batches([samples_to_batch(samples)])


class SpoolWriter:
    """Appends batches of samples to rotating chunk files under ``folder``."""

    def __init__(self, folder: Path, chunk_s: float = 30.0) -> None:
        self.folder = folder
        self.chunk_s = chunk_s
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index = max((_chunk_number(p) for p in self.folder.glob(CHUNK_GLOB)), default=0)
        self._sink = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self._opened = 0.0
        self._path: Path | None = None
        self._good_bytes = 0
        self.rows = 0

    def append(self, samples: SpoolInput) -> None:
        """Write ``samples`` as one batch and flush it to the OS. Raises OSError."""
        table = as_table(samples)
        if table.num_rows == 0:
            return
        batch = table.combine_chunks().to_batches()[0] if table.num_columns else None
        if self._writer is None or time.monotonic() - self._opened >= self.chunk_s:
            self._rotate()
        assert self._writer is not None and self._sink is not None
        try:
            self._writer.write_batch(batch)
            self._sink.flush()
        except OSError:
            self._abandon()
            raise
        self._good_bytes = self._sink.tell()
        self.rows += table.num_rows

    def close(self) -> None:
        """Finish the current chunk."""
        if self._writer is not None:
            try:
                self._writer.close()
            finally:
                self._sink.close()
                self._writer = self._sink = None

    def _rotate(self) -> None:
        self.close()
        self._index += 1
        self._path = self.folder / f"chunk-{self._index:06d}.arrows"
        self._good_bytes = 0
        try:
            self._sink = pa.OSFile(str(self._path), "wb")
            self._writer = ipc.new_stream(self._sink, SCHEMA)
            self._sink.flush()
        except OSError:
            self._abandon()
            raise
        self._good_bytes = self._sink.tell()
        self._opened = time.monotonic()

    def _abandon(self) -> None:
        """Drop the current chunk after a failed write, keeping its whole batches only."""
        sink, self._writer, self._sink = self._sink, None, None
        if sink is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                sink.close()
        if self._path is None:
            return
        try:
            if self._good_bytes:
                os.truncate(self._path, self._good_bytes)
            else:
                self._path.unlink(missing_ok=True)
        except OSError:
            # read_spool validates every batch and stops at a torn one.
            pass


def _chunk_number(path: Path) -> int:
    digits = path.name.removeprefix("chunk-").removesuffix(".arrows")
    return int(digits) if digits.isdigit() else 0


def iter_spool(folder: Path, problems: list[str]) -> Iterator[pa.RecordBatch]:
    """Every batch of every chunk under ``folder``, in order, one at a time.

    A chunk that is damaged is read up to its last whole batch; the rest of it
    is skipped and reported by a line appended to ``problems``.
    """
    for path in sorted(folder.glob(CHUNK_GLOB)):
        read = 0
        try:
            with pa.memory_map(str(path), "r") as source:
                reader = ipc.open_stream(source)
                if reader.schema != SCHEMA:
                    raise ValueError(f"unexpected columns {reader.schema.names}")
                while True:
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        break
                    batch.validate(full=True)
                    read += batch.num_rows
                    yield batch
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            reason = " ".join(str(exc).split())[:200]
            kept = count(read, "sample")
            problems.append(f"{path.name}: kept {kept}, skipped the rest ({reason})")


def read_spool(folder: Path) -> tuple[pa.Table, list[str]]:
    """Read every chunk under ``folder`` in order, all at once (small spools, tests).

    Returns the samples and a list of problems, as :func:`iter_spool` reports them.
    """
    problems: list[str] = []
    batches = list(iter_spool(folder, problems))
    return pa.Table.from_batches(batches, schema=SCHEMA), problems


def _split_key(key: str) -> tuple[str, str]:
    parts = key.split("/")
    if len(parts) < 3:
        return parts[0], ""
    return parts[0], "/".join(parts[1:-1])
