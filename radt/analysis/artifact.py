"""Reading one samples artifact: the rows of chosen keys and times, and nothing else.

An artifact of the key-sorted layout (:mod:`radt.record.compact`) carries a
key index: the rows of the keys asked for are found there, the row groups
that hold them are read (those where the key's times, which the index gives
per row group, lie outside the time window are skipped), and the rows are cut
exactly, by key and by a binary search on time. The result holds exactly the
rows a full read and filter would, with the text columns as Arrow dictionaries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from radt.errors import AnalysisError
from radt.record.compact import INDEX_KEY, LAYOUT, LAYOUT_KEY, TEXT_COLUMNS

COLUMNS = ("timestamp", "key", "value", "listener", "entity")
PIECE_ROWS = 1_000_000
"""Rows per piece that :meth:`Artifact.pieces` yields (about, never cutting a row group)."""


@dataclass(frozen=True)
class KeyRows:
    """Where one key's samples are in a key-sorted artifact."""

    key: str
    first_row: int
    rows: int
    first_us: int
    last_us: int
    crossings: tuple[int, ...] = ()
    """The timestamp of the key's first row in each row group after its first."""


class Artifact:
    """One ``samples.parquet`` file, opened for reading (its footer only)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.file = pq.ParquetFile(str(path), read_dictionary=list(TEXT_COLUMNS))
        meta = self.file.metadata
        extra = meta.metadata or {}
        if extra.get(LAYOUT_KEY.encode()) != LAYOUT.encode():
            raise AnalysisError(
                f"{path} has no key index (a samples artifact of a development build of radT "
                "0.3.0, time-sorted); this radT reads only the key-sorted layout: record the "
                "run again"
            )
        self.index = [
            KeyRows(*entry[:5], tuple(entry[5])) for entry in json.loads(extra[INDEX_KEY.encode()])
        ]
        """The key index: where each key's rows are, by key."""
        sizes = np.array([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        self.group_starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.num_rows = meta.num_rows

    def keys(self) -> list[str]:
        """The keys the artifact holds, sorted."""
        return [entry.key for entry in self.index]

    def estimate_rows(
        self, wanted: Callable[[str], bool], lo_us: int | None, hi_us: int | None
    ) -> int:
        """About how many rows :meth:`read` would return (exact without a time window).

        Within a window a key's samples are taken as evenly spread over its span.
        """
        total = 0.0
        for entry in self._wanted(wanted, lo_us, hi_us):
            span = entry.last_us - entry.first_us
            start = entry.first_us if lo_us is None else max(lo_us, entry.first_us)
            end = entry.last_us if hi_us is None else min(hi_us, entry.last_us)
            share = 1.0 if span <= 0 else min(1.0, (end - start) / span + 1.0 / entry.rows)
            total += entry.rows * share
        return int(total)

    def read(
        self,
        wanted: Callable[[str], bool],
        everything: bool = False,
        lo_us: int | None = None,
        hi_us: int | None = None,
    ) -> pa.Table:
        """The rows whose key ``wanted`` accepts, with ``lo_us <= timestamp <= hi_us``.

        ``everything`` says ``wanted`` accepts every key. The rows come by key, then time.
        """
        # in pieces: the reader's buffers for decoding stay the size of one piece
        pieces = list(self.pieces(wanted, everything, lo_us, hi_us))
        pa.default_memory_pool().release_unused()
        if not pieces:
            return _empty()
        return pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]

    def pieces(
        self,
        wanted: Callable[[str], bool],
        everything: bool = False,
        lo_us: int | None = None,
        hi_us: int | None = None,
        max_rows: int | None = PIECE_ROWS,
    ) -> Iterator[pa.Table]:
        """What :meth:`read` returns, in consecutive pieces of about ``max_rows`` rows
        (None: one piece), reading only the row groups each piece needs."""
        if lo_us is None and hi_us is None:
            if everything:
                ranges = [(0, self.num_rows)] if self.num_rows else []
            else:
                ranges = [(e.first_row, e.first_row + e.rows) for e in self._wanted(wanted)]
            groups = self._ranges_by_group(_merge_adjacent(ranges))
        else:
            groups = self._keys_by_group(self._wanted(wanted, lo_us, hi_us), lo_us, hi_us)
        batch: list[tuple[int, list[tuple[int, int]]]] = []
        held = 0
        for group, parts in groups:
            batch.append((group, parts))
            held += sum(b - a for a, b in parts)
            if max_rows is not None and held >= max_rows:
                yield self._cut(batch, lo_us, hi_us)
                batch, held = [], 0
        if batch:
            piece = self._cut(batch, lo_us, hi_us)
            if piece.num_rows:
                yield piece

    def _wanted(self, wanted, lo_us=None, hi_us=None) -> Iterator[KeyRows]:
        assert self.index is not None
        for entry in self.index:
            if lo_us is not None and entry.last_us < lo_us:
                continue
            if hi_us is not None and entry.first_us > hi_us:
                continue
            if wanted(entry.key):
                yield entry

    def _ranges_by_group(self, ranges) -> list[tuple[int, list[tuple[int, int]]]]:
        """Row ranges cut at row-group bounds: ``[(group, [(first, end), …]), …]``."""
        found: dict[int, list[tuple[int, int]]] = {}
        starts = self.group_starts
        for first, end in ranges:
            group = int(np.searchsorted(starts, first, "right")) - 1
            while group < len(starts) - 1 and starts[group] < end:
                part = (max(first, int(starts[group])), min(end, int(starts[group + 1])))
                found.setdefault(group, []).append(part)
                group += 1
        return sorted(found.items())

    def _keys_by_group(self, entries, lo_us, hi_us) -> list[tuple[int, list[tuple[int, int]]]]:
        """The rows of each key cut at row-group bounds, leaving out the groups in which
        the key's times (from the index's crossings) lie outside the window."""
        found: dict[int, list[tuple[int, int]]] = {}
        starts = self.group_starts
        for entry in entries:
            end = entry.first_row + entry.rows
            group = int(np.searchsorted(starts, entry.first_row, "right")) - 1
            # the key's time span in each group it reaches: [its first, the next group's first]
            bounds = [entry.first_us, *entry.crossings, entry.last_us]
            for step in range(len(bounds) - 1):
                low, high = bounds[step], bounds[step + 1]
                outside = (lo_us is not None and high < lo_us) or (
                    hi_us is not None and low > hi_us
                )
                if not outside:
                    part = (
                        max(entry.first_row, int(starts[group])),
                        min(end, int(starts[group + 1])),
                    )
                    found.setdefault(group, []).append(part)
                group += 1
        return sorted(found.items())

    def _cut(self, batch, lo_us, hi_us) -> pa.Table:
        """Read the groups of ``batch`` and keep the rows of its parts, within the window."""
        groups = [group for group, _ in batch]
        table = self.file.read_row_groups(groups, columns=list(COLUMNS))
        offset = 0
        slices = []
        for group, parts in batch:
            start = int(self.group_starts[group])
            for first, end in parts:
                part = table.slice(offset + first - start, end - first)
                if lo_us is not None or hi_us is not None:
                    part = _within(part, lo_us, hi_us)
                if part.num_rows:
                    slices.append(part)
            offset += int(self.group_starts[group + 1]) - start
        if not slices:
            return _empty()
        return pa.concat_tables(slices) if len(slices) > 1 else slices[0]


def _within(part: pa.Table, lo_us: int | None, hi_us: int | None) -> pa.Table:
    """The rows of one key's time-sorted slice with ``lo_us <= timestamp <= hi_us``."""
    micros = pc.cast(part.column("timestamp"), pa.int64()).to_numpy()
    first = 0 if lo_us is None else int(np.searchsorted(micros, lo_us, "left"))
    end = len(micros) if hi_us is None else int(np.searchsorted(micros, hi_us, "right"))
    return part.slice(first, max(0, end - first))


def _merge_adjacent(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, end in ranges:
        if merged and merged[-1][1] == first:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((first, end))
    return merged


def _empty() -> pa.Table:
    text = pa.dictionary(pa.int32(), pa.string())
    return pa.schema(
        [
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("key", text),
            ("value", pa.float64()),
            ("listener", text),
            ("entity", text),
        ]
    ).empty_table()
