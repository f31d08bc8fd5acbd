"""The plan CSV scanner: records with their cells as written and their places in the text.

The CSV is read by this small scanner rather than :mod:`csv`: ``csv.reader``
either rejects a space after a closing quote (``strict``) or silently accepts an
unterminated quote (not strict), and it cannot tell where a cell was in the
text, which the layout-preserving write-back needs. On well-formed input both
read the same values (see the tests). Blank lines and lines starting with
``#`` are skipped (their line numbers still count).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from radt.errors import UsageError
from radt.plans.model import PlanError, Problem

_BOM = "\ufeff"


def read_text(path: Path) -> tuple[str, str]:
    """(BOM, text) of a UTF-8 file; raises UsageError if it cannot be read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"plan not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"plan is a folder, not a CSV file: {path}") from None
    except OSError as err:
        raise UsageError(f"cannot read plan {path}: {err.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PlanError(
            path, [Problem(line, "not UTF-8 text; save the plan as UTF-8 CSV")]
        ) from None
    if text.startswith(_BOM):
        return _BOM, text[1:]
    return "", text


@dataclass
class CsvRecord:
    """One CSV record: its lines, its cells as written and their values."""

    first: int  # 1-based first physical line
    last: int  # 1-based last physical line
    raw: list[str]  # cells exactly as written (spaces, quotes)
    terminator: str  # the last line's line ending

    @property
    def cells(self) -> list[str]:
        return [_unquote(cell) for cell in self.raw]


def _unquote(raw: str) -> str:
    value = raw.strip()
    if value.startswith('"') and value.endswith('"') and len(value) >= 2:
        value = value[1:-1].replace('""', '"').strip()
    return value


def physical_lines(text: str) -> list[str]:
    return io.StringIO(text, newline="").readlines()


def _skipped(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _ending(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body) :]


class ScanError(Exception):
    def __init__(self, line: int, message: str, unterminated: bool = False):
        super().__init__(message)
        self.line = line
        self.unterminated = unterminated


def _scan_record(lines: list[str], start: int) -> tuple[CsvRecord, int]:
    """Read the record that begins at index ``start``; return it and the next index."""
    raw: list[str] = []
    cell: list[str] = []
    state, quote_line, i = "start", 0, start
    while True:
        body, ending = _ending(lines[i])
        for ch in body:
            if state == "quoted":
                state = "closed" if ch == '"' else "quoted"
            elif ch == ",":
                raw.append("".join(cell))
                cell, state = [], "start"
                continue
            elif state == "start" and ch == '"':
                state, quote_line = "quoted", i + 1
            elif state == "start" and ch not in " \t":
                state = "plain"
            elif state == "closed" and ch == '"':
                state = "quoted"
            elif state == "closed" and ch not in " \t":
                raise ScanError(
                    i + 1,
                    f"text after a closing quote in cell {len(raw) + 1} "
                    '(write "" for a quote inside a quoted cell)',
                )
            cell.append(ch)
        if state != "quoted":
            raw.append("".join(cell))
            return CsvRecord(start + 1, i + 1, raw, ending), i + 1
        cell.append(ending)
        i += 1
        if i == len(lines):
            raise ScanError(
                quote_line,
                f"unterminated quote in cell {len(raw) + 1}: it is never closed",
                unterminated=True,
            )


def scan(lines: list[str]) -> tuple[list[CsvRecord], list[Problem]]:
    """All records of the file; blank and ``#`` lines between records are skipped."""
    records: list[CsvRecord] = []
    problems: list[Problem] = []
    i = 0
    while i < len(lines):
        if _skipped(lines[i]):
            i += 1
            continue
        try:
            record, i = _scan_record(lines, i)
        except ScanError as err:
            problems.append(Problem(err.line, f"malformed CSV: {err}"))
            if err.unterminated:
                break  # the open quote swallowed the rest of the file
            i = err.line  # go on after the line with the error
            continue
        if any(record.cells):
            records.append(record)
    return records, problems
