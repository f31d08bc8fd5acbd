"""What the wrapping listeners (``nsys``, ``ncu``) share: a report tool's time limit, its CSV.

A report tool is run by :func:`radt.tools.run` (which never raises: the result
says why it failed) within the ``timeout_s`` listener option. Its CSV is read leniently: the
lines a tool prints before the table are passed over, and a line of the table
that cannot be read (truncated, garbage) is skipped and counted, never fatal.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_TIMEOUT_S = 900.0

# Time units as the tools spell them: nsys ``--timeunit`` column suffixes and
# ncu's metric units (short forms in recent versions, long ones in older).
_NS_PER_UNIT = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "sec": 1e9,
    "second": 1e9,
}


def timeout_option(options: dict[str, str], warn: Callable[[str], None], name: str) -> float:
    """The ``timeout_s`` listener option, or the default when absent or not a positive number."""
    raw = options.get("timeout_s")
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
        if value > 0:
            return value
    except ValueError:
        pass
    warn(f"listener {name}: ignoring timeout_s={raw!r} (not a positive number)")
    return DEFAULT_TIMEOUT_S


def ns_per(unit: str) -> float:
    """Nanoseconds in one ``unit`` (``ns``, ``usecond``, ``ms``...); ValueError if none."""
    try:
        return _NS_PER_UNIT[unit.strip().lower()]
    except KeyError:
        raise ValueError(f"not a time unit: {unit!r}") from None


_UNIT_IN_NAME = re.compile(r"\((\w+)\)\s*$")


def unit_of_column(column: str) -> str | None:
    """The unit in a column name: ``Total Time (ns)`` → ``ns``; None without one."""
    found = _UNIT_IN_NAME.search(column)
    return found.group(1) if found else None


@dataclass
class Table:
    """A CSV table found in a tool's output."""

    header: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    skipped: int = 0
    """Lines after the header that could not be read as a row of this table."""
    before: list[str] = field(default_factory=list)
    """Non-blank lines the tool printed before the header."""


def _fields(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


def read_table(
    text: str | Iterable[str],
    is_header: Callable[[list[str]], bool],
    required: Sequence[str] = (),
) -> Table | None:
    """Find the CSV table whose header ``is_header`` accepts; None when there is none.

    A row needs a value for every ``required`` column (it may stop short of
    the header's later, optional columns, as ncu's rows without a rule do); a
    row longer than the header, one that stops before a required column, or a
    line that is not CSV at all is skipped and counted. Blank lines are passed
    over silently.
    """
    lines = text.splitlines() if isinstance(text, str) else [line.rstrip("\n") for line in text]
    table: Table | None = None
    before: list[str] = []
    needed = 0
    for line in lines:
        if not line.strip():
            continue
        fields = _fields(line)
        if table is None:
            if fields is not None and is_header(fields):
                table = Table(header=fields, before=before)
                needed = max((fields.index(c) + 1 for c in required if c in fields), default=0)
            else:
                before.append(line.strip())
            continue
        if fields is None or len(fields) > len(table.header) or len(fields) < needed:
            table.skipped += 1
            continue
        table.rows.append(dict(zip(table.header, fields, strict=False)))
    return table


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """Write a small CSV table (the per-kernel artifacts) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path
