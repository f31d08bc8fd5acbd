"""Writing Status and Run back into a plan: atomically, under a lock, every other byte kept.

The file is re-read under an exclusive lock and replaced atomically (temp
file, fsync, rename), so radT processes recording other workloads of the same
plan never lose each other's updates. The lock file lives in radT's home
(``~/.radt/locks/``, see :func:`lock_path`), not beside the plan, so running a
plan leaves nothing next to it. Missing
Status/Run columns are appended to the header.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from radt.errors import UsageError
from radt.plans.model import Plan, Row, Workload, clean
from radt.plans.read import read_header
from radt.plans.scanner import CsvRecord, physical_lines, read_text, scan
from radt.record.runfolder import radt_home

log = logging.getLogger(__name__)


def write_results(plan: Plan, workload: Workload, results: dict[int, tuple[str, str]]) -> None:
    """Write ``results`` (row line → (status, run id)) of ``workload`` back to ``plan``'s CSV."""
    rows = {row.line: row for row in workload.rows}
    if not results:
        return
    stray = sorted(set(results) - set(rows))
    if stray:
        raise ValueError(f"lines {stray} are not rows of workload {workload.label}")
    updates = {line: (clean(status).upper(), clean(run)) for line, (status, run) in results.items()}
    target = Path(os.path.realpath(plan.path))
    try:
        with _locked(lock_path(plan.path)):
            bom, text = read_text(target)
            text = _rewrite(text, workload, updates, plan.path)
            _atomic_write(target, (bom + text).encode("utf-8"))
    except OSError as exc:  # a read-only folder or file, a full disk: the runs are done
        _write_copy(plan, target, workload, updates, exc)
    for line, (status, run) in updates.items():
        rows[line].status, rows[line].run = status, run


def lock_path(plan_path: Path) -> Path:
    """The lock of a plan: ``<radT home>/locks/<name>-<hash of its real path>.lock``.

    Every radT process of this user (and of any host sharing the home folder)
    that writes the same plan file takes the same lock.
    """
    real = os.path.realpath(plan_path)
    digest = hashlib.sha256(real.encode()).hexdigest()[:16]
    return radt_home() / "locks" / f"{Path(real).name}-{digest}.lock"


_told: set[Path] = set()


def status_copy(target: Path) -> Path:
    """Where the Status and Run of a plan that cannot be updated go:
    ``$RADT_HOME/plans/<name>-<hash of its path>.csv``."""
    digest = hashlib.sha1(str(target).encode()).hexdigest()[:8]
    return radt_home() / "plans" / f"{target.stem}-{digest}{target.suffix}"


def _write_copy(
    plan: Plan,
    target: Path,
    workload: Workload,
    updates: dict[int, tuple[str, str]],
    exc: OSError,
) -> None:
    """Write the results into the plan's copy (made from the plan the first time), and
    say once per plan where they went."""
    copy = status_copy(target)
    bom, text = read_text(copy if copy.exists() else target)
    text = _rewrite(text, workload, updates, plan.path)
    copy.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(copy, (bom + text).encode("utf-8"))
    if target not in _told:
        _told.add(target)
        log.warning(
            f"cannot update {plan.path} ({exc.strerror or exc}); the runs go on and "
            f"their Status and Run are written to {copy} (run that copy next time, "
            "or copy it back)"
        )


def _quote(value: str) -> str:
    if any(ch in value for ch in ',"\r\n') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


def _replace_cell(old: str, value: str) -> str:
    """``value`` in the place of ``old``, keeping the spaces around it."""
    if not old.strip():
        return old + _quote(value)
    lead = old[: len(old) - len(old.lstrip())]
    return lead + _quote(value) + old[len(old.rstrip()) :]


def _set_cells(record: CsvRecord, updates: dict[int, str]) -> str:
    """The record's text with the cells at ``updates``' positions replaced.

    A short record is padded with empty cells, spaced like its other cells.
    """
    raw = list(record.raw)
    lead = " " if any(cell.startswith(" ") for cell in raw[1:]) else ""
    raw += [lead] * (max(updates) + 1 - len(raw))
    for position, value in updates.items():
        raw[position] = _replace_cell(raw[position], value)
    return ",".join(raw) + record.terminator


def _find_record(
    data: list[CsvRecord], index: dict[str, int], workload: Workload, row: Row, path: Path
) -> CsvRecord:
    """The record of ``row`` in a freshly read file (by line, else by position)."""

    def belongs(record: CsvRecord) -> bool:
        cells = record.cells
        values = [
            clean(cells[index[c]]) if index[c] < len(cells) else ""
            for c in ("Experiment", "Workload")
        ]
        return values == [workload.experiment, workload.name]

    for record in data:
        if record.first == row.line and belongs(record):
            return record
    mine = [record for record in data if belongs(record)]
    position = workload.rows.index(row)
    if position < len(mine):
        return mine[position]
    raise UsageError(
        f"{path} changed while radT ran: the row of line {row.line} "
        f"(workload {workload.label}) is gone; its status was not written"
    )


def _columns_for_record(header: CsvRecord, path: Path) -> tuple[dict[str, int], str | None]:
    """Column positions, adding Status and Run when missing (then: the new header)."""
    index = {name: i for i, name in enumerate(read_header(header)[0]) if name}
    if "Experiment" not in index or "Workload" not in index:
        raise UsageError(f"{path} changed while radT ran: its header lost Experiment/Workload")
    missing = [name for name in ("Status", "Run") if name not in index]
    if not missing:
        return index, None
    added = {name: len(header.raw) + n for n, name in enumerate(missing)}
    index.update(added)
    return index, _set_cells(header, {i: name for name, i in added.items()})


def _rewrite(text: str, workload: Workload, updates: dict[int, tuple[str, str]], path: Path) -> str:
    """``text`` with the Status and Run cells of ``updates``' rows set."""
    lines = physical_lines(text)
    records, _ = scan(lines)
    if not records:
        raise UsageError(f"{path} changed while radT ran: it is now empty")
    header, data = records[0], records[1:]
    index, new_header = _columns_for_record(header, path)
    replacements: dict[int, tuple[int, str]] = {}
    if new_header is not None:
        replacements[header.first] = (header.last, new_header)
    rows = {row.line: row for row in workload.rows}
    for line, (status, run) in updates.items():
        record = _find_record(data, index, workload, rows[line], path)
        cells = _set_cells(record, {index["Status"]: status, index["Run"]: run})
        replacements[record.first] = (record.last, cells)
    return "".join(_splice(lines, replacements))


def _splice(lines: list[str], replacements: dict[int, tuple[int, str]]) -> Iterator[str]:
    """The lines, with each 1-based range first..last replaced by its new text."""
    number = 1
    while number <= len(lines):
        if number in replacements:
            last, new = replacements[number]
            yield new
            number = last + 1
        else:
            yield lines[number - 1]
            number += 1


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file in the same folder, fsync, rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
