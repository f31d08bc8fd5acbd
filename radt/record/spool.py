"""The local spool: every sample, appended to Arrow IPC chunk files on disk.

The spool is the full-rate truth of a run (DESIGN.md). Each append writes one
record batch and flushes it, so a crash loses at most the batch in flight; a
chunk cut short by a crash is read up to its last whole batch. A write that
fails part-way (a full disk) is cut back to the chunk's last whole batch, and
the next append starts a fresh chunk, so no chunk holds a torn message.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from radt.listener import Sample
from radt.words import count

SCHEMA = pa.schema(
    [
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.string()),
        ("value", pa.float64()),
    ]
)
CHUNK_GLOB = "chunk-*.arrows"


def samples_to_batch(samples: Sequence[Sample]) -> pa.RecordBatch:
    """Turn samples into one record batch of the spool schema."""
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

    def append(self, samples: Sequence[Sample]) -> None:
        """Write ``samples`` as one batch and flush it to the OS. Raises OSError."""
        if not samples:
            return
        if self._writer is None or time.monotonic() - self._opened >= self.chunk_s:
            self._rotate()
        assert self._writer is not None and self._sink is not None
        try:
            self._writer.write_batch(samples_to_batch(samples))
            self._sink.flush()
        except OSError:
            self._abandon()
            raise
        self._good_bytes = self._sink.tell()
        self.rows += len(samples)

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


def read_spool(folder: Path) -> tuple[pa.Table, list[str]]:
    """Read every chunk under ``folder`` in order.

    Returns the samples and a list of problems: a chunk that is damaged is read
    up to its last whole batch, and the rest of it is reported and skipped.
    """
    batches: list[pa.RecordBatch] = []
    problems: list[str] = []
    for path in sorted(folder.glob(CHUNK_GLOB)):
        read = 0
        try:
            with pa.OSFile(str(path), "rb") as source:
                reader = ipc.open_stream(source)
                if reader.schema != SCHEMA:
                    raise ValueError(f"unexpected columns {reader.schema.names}")
                for batch in reader:
                    batch.validate(full=True)
                    batches.append(batch)
                    read += batch.num_rows
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            reason = " ".join(str(exc).split())[:200]
            kept = count(read, "sample")
            problems.append(f"{path.name}: kept {kept}, skipped the rest ({reason})")
    return pa.Table.from_batches(batches, schema=SCHEMA), problems


def tidy(table: pa.Table) -> pa.Table:
    """Sort by time and add the ``listener`` and ``entity`` columns parsed from the key."""
    table = table.sort_by([("timestamp", "ascending"), ("key", "ascending")])
    keys = table.column("key").to_pylist()
    unique = {key: _split_key(key) for key in set(keys)}
    listener = pa.array([unique[k][0] for k in keys], pa.string()).dictionary_encode()
    entity = pa.array([unique[k][1] for k in keys], pa.string()).dictionary_encode()
    return pa.table(
        {
            "timestamp": table.column("timestamp"),
            "key": table.column("key").dictionary_encode(),
            "value": table.column("value"),
            "listener": listener,
            "entity": entity,
        }
    )


def _split_key(key: str) -> tuple[str, str]:
    parts = key.split("/")
    if len(parts) < 3:
        return parts[0], ""
    return parts[0], "/".join(parts[1:-1])


def compact(folder: Path, target: Path) -> tuple[int, list[str]]:
    """Write the spool under ``folder`` as one tidy Parquet file; return rows and problems."""
    table, problems = read_spool(folder)
    pq.write_table(tidy(table), target, compression="zstd")
    return table.num_rows, problems
