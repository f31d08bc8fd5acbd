"""The end of a run: the spool compacted into the samples artifact, in bounded memory.

The artifact ``radt/samples.parquet`` (layout :data:`LAYOUT`):

- columns ``timestamp`` (timestamp[us, UTC]), ``key``, ``value`` (float64),
  ``listener``, ``entity``; the three text columns are strings, dictionary-encoded
  in the file (read them back as Arrow dictionaries with ``read_dictionary``);
- rows sorted by key, then timestamp; samples of one key at the same instant
  stay in the order they were spooled;
- row groups of :data:`ROW_GROUP_ROWS` rows (the last one shorter), with
  statistics: a reader that filters on key or time (``pyarrow.dataset``
  filters, or radT's own reader) skips the row groups that cannot match;
- the key index in the file's metadata (:data:`INDEX_KEY`): for each key its
  first row, row count, first and last timestamp, and the timestamp of its
  first row in each further row group it reaches, so a reader finds the rows of
  a key (or of keys matching a pattern) within a time window, to the row group,
  without reading any data.

Compaction is an external merge sort: the spool is read one batch at a time,
cut into runs of at most ``memory_rows`` samples that are sorted in memory and
spilled to a scratch folder beside the target, and the runs are merged block by
block into row groups. Memory stays flat however long the run was; a spool that
fits in one run is sorted in memory and written directly, with the same bytes
as the merge would give.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from radt.record.spool import _split_key, iter_spool

LAYOUT = "key-time/1"
"""Value of the metadata entry :data:`LAYOUT_KEY` in artifacts of this layout."""
LAYOUT_KEY = "radt.samples.layout"
INDEX_KEY = "radt.samples.keys"
"""Metadata entry: JSON list of ``[key, first_row, rows, first_us, last_us, [us, …]]``
sorted by key; the list holds the timestamp of the key's first row in each row group
after the one where it starts."""
ROW_GROUP_ROWS = 128 * 1024
MEMORY_ROWS = 2_000_000
"""Samples held in memory at once while compacting (about 100 bytes each at the peak)."""
MIN_BLOCK_ROWS = 1024
TEXT = pa.dictionary(pa.int32(), pa.string())
STAMP = pa.timestamp("us", tz="UTC")
ARTIFACT_SCHEMA = pa.schema(
    [
        ("timestamp", STAMP),
        ("key", TEXT),
        ("value", pa.float64()),
        ("listener", TEXT),
        ("entity", TEXT),
    ]
)
TEXT_COLUMNS = ("key", "listener", "entity")
_RUN_SCHEMA = pa.schema([("code", pa.int32()), ("micros", pa.int64()), ("value", pa.float64())])


class _Keys:
    """Codes of keys in the order they were first seen, and their order as strings."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def encode(self, keys: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """The codes of ``keys`` (strings), one dictionary lookup per distinct key."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
        if not pa.types.is_dictionary(keys.type):
            keys = keys.dictionary_encode()
        lookup = np.fromiter(
            (self._code(k) for k in keys.dictionary.to_pylist()), np.int32, len(keys.dictionary)
        )
        return lookup[keys.indices.to_numpy(zero_copy_only=False)]

    def _code(self, key: str) -> int:
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = len(self.names)
            self.names.append(key)
        return code

    def ranks(self) -> np.ndarray:
        """code → position of the key among all keys seen so far, sorted as strings."""
        order = sorted(range(len(self.names)), key=self.names.__getitem__)
        ranks = np.empty(len(order), np.int32)
        ranks[order] = np.arange(len(order), dtype=np.int32)
        return ranks


def _sort_order(ranks: np.ndarray, micros: np.ndarray) -> np.ndarray:
    """The stable order by (rank, micros): ties keep their order."""
    by_time = np.argsort(micros, kind="stable")
    small = ranks.astype(np.int16) if len(ranks) and ranks.max() < 2**15 else ranks
    return by_time[np.argsort(small[by_time], kind="stable")]


def _columns(batches: Sequence[pa.RecordBatch], keys: _Keys):
    """Codes, microseconds and values of spool batches."""
    table = pa.Table.from_batches(batches)
    codes = keys.encode(table.column("key"))
    micros = pc.cast(table.column("timestamp"), pa.int64()).to_numpy()
    values = table.column("value").to_numpy()
    return codes, micros, values


def _sorted_run(batches: Sequence[pa.RecordBatch], keys: _Keys):
    """One run: the samples of ``batches`` sorted by key (as strings), then time."""
    codes, micros, values = _columns(batches, keys)
    order = _sort_order(keys.ranks()[codes], micros)
    return codes[order], micros[order], values[order]


def _blocks_of(arrays, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    for first in range(0, len(arrays[0]), rows):
        yield tuple(column[first : first + rows] for column in arrays)


def _block_rows(memory_rows: int) -> int:
    """Rows of one block of a run in the merge: a run buffers one block at a time."""
    return max(MIN_BLOCK_ROWS, memory_rows // 64)


def _spill(arrays, path: Path, rows: int) -> None:
    with ipc.new_file(str(path), _RUN_SCHEMA) as writer:
        for codes, micros, values in _blocks_of(arrays, rows):
            writer.write_batch(
                pa.record_batch([pa.array(codes), pa.array(micros), pa.array(values)], _RUN_SCHEMA)
            )


def _read_spilled(path: Path) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    # Plain reads, not a memory map: the pages of a map stay counted in the process.
    with pa.OSFile(str(path), "rb") as source:
        reader = ipc.open_file(source)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            yield tuple(column.to_numpy() for column in batch.columns)


class _Source:
    """A sorted run read block by block, its codes turned into final ranks."""

    def __init__(self, blocks: Iterator, ranks: np.ndarray) -> None:
        self._blocks = blocks
        self._ranks = ranks
        self.more = True
        self.rank = self.micros = self.values = np.empty(0)
        self.load()

    def load(self) -> None:
        """Replace the (used up) buffer with the next non-empty block, if any."""
        while self.more and len(self.rank) == 0:
            try:
                codes, self.micros, self.values = next(self._blocks)
            except StopIteration:
                self.more = False
                self.rank = self.micros = self.values = np.empty(0, np.int32)
                return
            self.rank = self._ranks[codes]

    def take(self, count: int):
        """The first ``count`` buffered rows, removed from the buffer."""
        taken = self.rank[:count], self.micros[:count], self.values[:count]
        self.rank, self.micros, self.values = (
            self.rank[count:],
            self.micros[count:],
            self.values[count:],
        )
        return taken


def _rows_up_to(rank: np.ndarray, micros: np.ndarray, bound: tuple[int, int], inclusive: bool):
    """How many leading rows of a (rank, micros)-sorted block are at most ``bound``."""
    lo = int(np.searchsorted(rank, bound[0], "left"))
    hi = int(np.searchsorted(rank, bound[0], "right"))
    side = "right" if inclusive else "left"
    return lo + int(np.searchsorted(micros[lo:hi], bound[1], side))


def _merge(sources: list[_Source]) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The rows of all sources in (rank, micros, source, position) order, block by block.

    Each step takes from every source the rows that sort before the last buffered
    row of the source that would run out first: no row still on disk can come
    before them. That source's block is then used up and its next one loaded.
    """
    while True:
        live = [(i, s) for i, s in enumerate(sources) if len(s.rank)]
        if not live:
            return
        pending = [(int(s.rank[-1]), int(s.micros[-1]), i) for i, s in live if s.more]
        bound = min(pending) if pending else None
        pieces = []
        for i, source in live:
            if bound is None:
                count = len(source.rank)
            else:
                count = _rows_up_to(source.rank, source.micros, bound[:2], i <= bound[2])
            if count:
                pieces.append(source.take(count))
            if not len(source.rank):
                source.load()
        if not pieces:
            continue
        rank, micros, values = (np.concatenate(parts) for parts in zip(*pieces, strict=True))
        order = _sort_order(rank, micros)
        yield rank[order], micros[order], values[order]


class ArtifactWriter:
    """Writes rows that arrive sorted by key rank, then time, as the samples artifact."""

    def __init__(
        self, target: Path, keys: Sequence[str], row_group_rows: int = ROW_GROUP_ROWS
    ) -> None:
        self.target = target
        self.row_group_rows = row_group_rows
        self.keys = pa.array(keys, pa.string())
        parts = [_split_key(k) for k in keys]
        self.listeners, listener_codes = _dictionary([p[0] for p in parts])
        self.entities, entity_codes = _dictionary([p[1] for p in parts])
        self._listener_of = listener_codes
        self._entity_of = entity_codes
        n = len(keys)
        self.first_row = np.full(n, -1, np.int64)
        self.rows = np.zeros(n, np.int64)
        self.first_us = np.zeros(n, np.int64)
        self.last_us = np.zeros(n, np.int64)
        self.crossings: dict[int, list[int]] = {}
        self.written = 0
        self._buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._buffered = 0
        self._partial = target.with_name(target.name + ".partial")
        self._writer = pq.ParquetWriter(
            str(self._partial),
            ARTIFACT_SCHEMA,
            compression="zstd",
            # Dictionary pages for the text columns only: on values with many distinct
            # numbers Parquet builds a dictionary and then drops it, at 5x the cost.
            use_dictionary=list(TEXT_COLUMNS),
            column_encoding={"timestamp": "DELTA_BINARY_PACKED"},
            # An Arrow schema in the file would declare the text columns dictionaries,
            # and pyarrow.dataset would then not prune row groups on their statistics.
            store_schema=False,
            write_statistics=True,
        )

    def write(self, rank: np.ndarray, micros: np.ndarray, values: np.ndarray) -> None:
        """Add rows (sorted, and after every row written before)."""
        if not len(rank):
            return
        self._buffer.append((rank, micros, values))
        self._buffered += len(rank)
        while self._buffered >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def close(self) -> int:
        """Write the last row group and the key index; return the row count."""
        if self._buffered:
            self._flush(self._buffered)
        index = [
            [key, int(first), int(rows), int(first_us), int(last_us), self.crossings.get(rank, [])]
            for rank, (key, first, rows, first_us, last_us) in enumerate(
                zip(
                    self.keys.to_pylist(),
                    self.first_row,
                    self.rows,
                    self.first_us,
                    self.last_us,
                    strict=True,
                )
            )
            if rows
        ]
        self._writer.add_key_value_metadata(
            {LAYOUT_KEY: LAYOUT, INDEX_KEY: json.dumps(index, separators=(",", ":"))}
        )
        self._writer.close()
        os.replace(self._partial, self.target)
        return self.written

    def abandon(self) -> None:
        """Drop the partial file after a failure."""
        with contextlib.suppress(Exception):  # the first error is the one to report
            self._writer.close()
        self._partial.unlink(missing_ok=True)

    def _flush(self, count: int) -> None:
        if len(self._buffer) == 1:
            rank, micros, values = self._buffer[0]
        else:
            rank, micros, values = (np.concatenate(p) for p in zip(*self._buffer, strict=True))
        rest = rank[count:], micros[count:], values[count:]
        rank, micros, values = rank[:count], micros[:count], values[:count]
        self._buffer = [rest] if len(rest[0]) else []
        self._buffered = len(rest[0])
        low, high = int(rank[0]), int(rank[-1])
        starts = np.flatnonzero(np.concatenate([[True], rank[1:] != rank[:-1]]))
        ends = np.append(starts[1:], count)
        seen = rank[starts]
        if self.first_row[low] >= 0:  # the first key goes on from the row group before
            self.crossings.setdefault(low, []).append(int(micros[0]))
        fresh = self.first_row[seen] < 0
        self.first_row[seen[fresh]] = self.written + starts[fresh]
        self.first_us[seen[fresh]] = micros[starts[fresh]]
        self.last_us[seen] = micros[ends - 1]
        self.rows[seen] += ends - starts
        span = slice(low, high + 1)
        columns = [
            pa.array(micros, pa.int64()).cast(STAMP),
            pa.DictionaryArray.from_arrays(pa.array(rank - low, pa.int32()), self.keys[span]),
            pa.array(values, pa.float64()),
            _narrow(self._listener_of[span], rank - low, self.listeners),
            _narrow(self._entity_of[span], rank - low, self.entities),
        ]
        self._writer.write_table(
            pa.table(columns, schema=ARTIFACT_SCHEMA), row_group_size=self.row_group_rows
        )
        self.written += count


def _dictionary(values: Sequence[str]) -> tuple[pa.Array, np.ndarray]:
    """Distinct ``values`` sorted, and the code of each value."""
    names = sorted(set(values))
    position = {name: i for i, name in enumerate(names)}
    return pa.array(names, pa.string()), np.array([position[v] for v in values], np.int32)


def _narrow(of_key: np.ndarray, keys: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    """The values of ``dictionary`` that ``of_key[keys]`` names, as a dictionary array whose
    dictionary holds only the values used (``of_key``: the value's code for each key)."""
    used, inverse = np.unique(of_key, return_inverse=True)
    return pa.DictionaryArray.from_arrays(
        pa.array(inverse.astype(np.int32)[keys]), dictionary.take(pa.array(used))
    )


def compact(
    folder: Path,
    target: Path,
    *,
    memory_rows: int = MEMORY_ROWS,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> tuple[int, list[str]]:
    """Write the spool under ``folder`` as the samples artifact ``target``.

    Returns the row count and the problems of damaged chunks (each read up to
    its last whole batch, see :func:`radt.record.spool.iter_spool`). At most
    about ``memory_rows`` samples are held in memory; longer spools are sorted
    in runs spilled beside ``target`` and merged. ``row_group_rows`` sets the
    row groups' size (tests use small ones).
    """
    problems: list[str] = []
    keys = _Keys()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".compact-", dir=target.parent) as scratch:
        spilled: list[Path] = []
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in iter_spool(folder, problems):
            pending.append(batch)
            held += batch.num_rows
            if held >= memory_rows:
                path = Path(scratch) / f"run-{len(spilled):06d}.arrow"
                _spill(_sorted_run(pending, keys), path, _block_rows(memory_rows))
                spilled.append(path)
                pending, held = [], 0
        last = _sorted_run(pending, keys) if pending else None
        ranks = keys.ranks()
        sources = [_Source(_read_spilled(path), ranks) for path in spilled]
        if last is not None:
            sources.append(_Source(_blocks_of(last, _block_rows(memory_rows)), ranks))
        rows = _write(target, keys, ranks, _merge(sources), row_group_rows)
    return rows, problems


def _write(
    target: Path, keys: _Keys, ranks: np.ndarray, rows: Iterable, row_group_rows: int
) -> int:
    order = np.argsort(ranks)  # rank → code
    writer = ArtifactWriter(target, [keys.names[code] for code in order], row_group_rows)
    try:
        for rank, micros, values in rows:
            writer.write(rank, micros, values)
        return writer.close()
    except BaseException:
        writer.abandon()
        raise


def write_samples(table: pa.Table, target: Path, row_group_rows: int = ROW_GROUP_ROWS) -> int:
    """Write samples (a table with ``timestamp``, ``key``, ``value``, in any order) as the
    samples artifact ``target``, in memory; return the row count."""
    from radt.record.spool import SCHEMA

    table = table.select(SCHEMA.names).cast(SCHEMA)
    keys = _Keys()
    batches = table.to_batches()
    arrays = _sorted_run(batches, keys) if table.num_rows else None
    ranks = keys.ranks()
    source = [] if arrays is None else [(ranks[arrays[0]], arrays[1], arrays[2])]
    return _write(target, keys, ranks, source, row_group_rows)
