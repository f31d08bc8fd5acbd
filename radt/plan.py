"""Experiment plans: the CSV of workloads that ``radt plan.csv`` runs.

A plan has the original radT's columns (``Experiment, Workload, Status, Run,
Devices, Collocation, File, Listeners, Params``, plus its optional ``Name``)
and two new ones, ``PowerLimit`` (watts) and ``Env`` (``KEY=VALUE ...``).
Column names are matched case-insensitively, ignoring spaces, ``_`` and ``-``;
only ``Experiment``, ``Workload`` and ``File`` are required. Cells are
whitespace-tolerant (``1, 1, , , 0, mps`` is fine), ``-`` means empty, blank
lines and lines starting with ``#`` are skipped (their line numbers still
count). Rows with the same Experiment and Workload run together as one
workload, even when they are not adjacent.

A ``File`` that is a ``.py`` script (or ``python [opts] script.py``) must exist;
relative paths are resolved from the current folder, as the original radT does.
``File`` and ``Params`` are split with :func:`shlex.split` and never pass
through a shell: ``; rm -rf ~`` is four arguments.

:func:`read_plan` reports every problem, each with its line number, before
anything starts. :meth:`Plan.record` writes Status and Run back atomically
(temp file, fsync, rename) under an exclusive lock on ``<plan>.lock``, and
rewrites only those two cells: every other byte of the file is kept.

The CSV is read by a small scanner here rather than :mod:`csv`: ``csv.reader``
either rejects a space after a closing quote (``strict``) or silently accepts an
unterminated quote (not strict), and it cannot tell where a cell was in the
text, which the layout-preserving write-back needs. On well-formed input both
read the same values (see the tests).
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import io
import math
import os
import re
import shlex
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from radt.errors import UsageError

COLUMNS = (
    "Experiment",
    "Workload",
    "Name",
    "Status",
    "Run",
    "Devices",
    "Collocation",
    "Listeners",
    "File",
    "Params",
    "PowerLimit",
    "Env",
)
REQUIRED = ("Experiment", "Workload", "File")
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"
MODES = ("none", "naive", "mps", "mig")
MAX_COMPUTE_SLICES = 7

_EMPTY = ("", "-")
_COLLOCATION_HELP = "use -, none, naive, mps, mps:PCT or a MIG profile like 3g.40gb"
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb((?:[+-][a-z]+(?:\.[a-z]+)?)*)$")
_CI_PROFILE = re.compile(r"^\d+c\.(\d+g\.\d+gb.*)$")
_DEVICE = re.compile(r"^(\d+|(?:GPU|MIG)-[0-9A-Za-z/_-]+)$")
_LISTENERS = re.compile(r"^[\w.-]+(\+[\w.-]+)*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_BOM = "\ufeff"


# --------------------------------------------------------------------- model


@dataclass(frozen=True)
class Collocation:
    """How a run shares its GPU: alone, naively, under MPS, or on a MIG slice."""

    mode: str  # "none" | "naive" | "mps" | "mig"
    mps_thread_pct: int | None = None  # 1..100 for "mps:PCT"
    mig_profile: str | None = None  # GPU-instance profile, e.g. "3g.40gb"

    @property
    def label(self) -> str:
        """The cell spelling: ``none``, ``naive``, ``mps``, ``mps:50``, ``3g.40gb``."""
        if self.mode == "mig":
            return str(self.mig_profile)
        if self.mode == "mps" and self.mps_thread_pct is not None:
            return f"mps:{self.mps_thread_pct}"
        return self.mode

    @property
    def compute_slices(self) -> int:
        """Compute slices a MIG profile takes (``3g.40gb`` → 3); 0 otherwise."""
        if self.mig_profile is None:
            return 0
        return int(self.mig_profile.split("g.", 1)[0])


@dataclass
class Row:
    """One training run of a plan: one data line of the CSV."""

    line: int  # 1-based line of the row's first physical line (header is usually 1)
    experiment: str
    workload: str
    status: str  # "", "FINISHED", "FAILED", "KILLED", ...
    run: str  # MLflow run id, or ""
    devices: list[str]  # "0", "GPU-…", "MIG-…"; [] = the default devices
    collocation: Collocation
    file: str  # the script (.py) or a command
    listeners: str | None  # "top+nvml"; None = radT's default
    params: list[str]
    power_limit_w: float | None
    env: dict[str, str]
    letter: str = ""  # "A", "B", … in row order within the workload
    name: str = ""  # the optional Name column (a run name), "" when absent

    @property
    def command(self) -> list[str]:
        """argv of the run: ``shlex.split(File) + Params`` (never a shell)."""
        return shlex.split(self.file) + list(self.params)


@dataclass
class Workload:
    """The rows of one (Experiment, Workload) pair: runs that execute together."""

    experiment: str
    name: str
    rows: list[Row]

    @property
    def label(self) -> str:
        """``experiment/workload``, for messages."""
        return f"{self.experiment}/{self.name}"

    @property
    def status(self) -> str:
        """FINISHED if all rows finished; FAILED if all ended and one failed;
        "" if none ran; else the first other status (KILLED, RUNNING, …).

        A workload whose rows are part FAILED and part never run (or KILLED)
        is not FAILED: like the original radT, it runs again.
        """
        statuses = [row.status for row in self.rows]
        if all(s == FINISHED for s in statuses):
            return FINISHED
        if all(s in (FINISHED, FAILED) for s in statuses):
            return FAILED
        others = [s for s in statuses if s not in (FINISHED, FAILED, "")]
        return others[0] if others else ""

    @property
    def power_limits_w(self) -> dict[str, float]:
        """Power cap per device of the workload (``""``: rows without Devices)."""
        limits: dict[str, float] = {}
        for row in self.rows:
            if row.power_limit_w is not None:
                for device in row.devices or [""]:
                    limits[device] = row.power_limit_w
        return limits

    @property
    def power_limit_w(self) -> float | None:
        """The workload's power cap when all rows that set one agree, else None.

        Rows on different devices may set different caps; then this is None
        and each row's ``power_limit_w`` (or :attr:`power_limits_w`) applies.
        """
        values = {row.power_limit_w for row in self.rows if row.power_limit_w is not None}
        return values.pop() if len(values) == 1 else None


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a plan; ``line`` is None for the file as a whole."""

    line: int | None
    message: str


def format_problems(path: Path | str, problems: list[Problem]) -> str:
    """The error text: a count line, then one ``<path> line N: …`` per problem."""
    count = len(problems)
    noun = "problem" if count == 1 else "problems"
    lines = [f"{path} has {count} {noun}; nothing was started:"]
    for problem in sorted(problems, key=lambda p: p.line or 0):
        where = f"{path} line {problem.line}" if problem.line else str(path)
        lines.append(f"{where}: {problem.message}")
    return "\n".join(lines)


class PlanError(UsageError):
    """A plan with problems; ``problems`` lists them all.

    ``partial`` holds the rows that did parse, so that checks of their
    commands, listeners and devices can be reported together with these.
    """

    def __init__(
        self, path: Path | str, problems: list[Problem], partial: Plan | None = None
    ) -> None:
        self.problems = sorted(problems, key=lambda p: p.line or 0)
        self.partial = partial
        super().__init__(format_problems(path, self.problems))


@dataclass
class Plan:
    """A validated plan: its workloads in order of first appearance."""

    path: Path
    workloads: list[Workload]

    @property
    def rows(self) -> list[Row]:
        """All rows, workload by workload."""
        return [row for workload in self.workloads for row in workload.rows]

    def pending(self, rerun: bool = False) -> list[Workload]:
        """Workloads still to run: not FINISHED, and not FAILED unless ``rerun``.

        Anything else (never run, KILLED, RUNNING left by a crash) runs again.
        """
        return [w for w in self.workloads if w.status != FINISHED and (rerun or w.status != FAILED)]

    def record(self, workload: Workload, results: dict[int, tuple[str, str]]) -> None:
        """Write ``results`` (row line → (status, run id)) back to the CSV.

        Only the Status and Run cells of those rows change; the file is
        re-read under an exclusive lock on ``<plan>.lock`` and replaced
        atomically, so radT processes recording other workloads of the same
        plan never lose each other's updates. Missing Status/Run columns are
        appended to the header.
        """
        rows = {row.line: row for row in workload.rows}
        if not results:
            return
        stray = sorted(set(results) - set(rows))
        if stray:
            raise ValueError(f"lines {stray} are not rows of workload {workload.label}")
        updates = {
            line: (_clean(status).upper(), _clean(run)) for line, (status, run) in results.items()
        }
        target = Path(os.path.realpath(self.path))
        with _locked(self.path.with_name(self.path.name + ".lock")):
            bom, text = _read_text(target)
            text = _rewrite(text, workload, updates, self.path)
            _atomic_write(target, (bom + text).encode("utf-8"))
        for line, (status, run) in updates.items():
            rows[line].status, rows[line].run = status, run


# --------------------------------------------------------------- cell parsers


def parse_collocation(text: str) -> Collocation:
    """Parse a Collocation cell; raises ValueError with a message for the user."""
    value = text.strip().lower()
    if value in (*_EMPTY, "none"):
        return Collocation("none")
    if value == "naive":
        return Collocation("naive")
    if value == "mps":
        return Collocation("mps")
    if value.startswith("mps:"):
        return Collocation("mps", mps_thread_pct=_parse_pct(value[4:]))
    profile = value.removeprefix("mig").strip() if value.startswith("mig ") else value
    if _MIG_PROFILE.match(profile):
        return Collocation("mig", mig_profile=profile)
    if ci := _CI_PROFILE.match(profile):
        raise ValueError(
            f"{text.strip()!r} is a compute-instance profile; give the GPU-instance "
            f"profile instead, e.g. {ci.group(1)}"
        )
    if re.match(r"^\d+g\.", profile):
        raise ValueError(
            f"MIG profile {text.strip()!r} is not valid: write <slices>g.<memory>gb, "
            "e.g. 1g.10gb, 3g.40gb or 1g.10gb+me"
        )
    raise ValueError(f"unknown collocation mode {text.strip()!r} ({_COLLOCATION_HELP})")


def _parse_pct(text: str) -> int:
    digits = text.strip().removesuffix("%").strip()
    if not digits.isdigit() or not 1 <= int(digits) <= 100:
        raise ValueError(
            f"MPS active thread percentage {text.strip()!r} must be a whole number "
            "from 1 to 100 (e.g. mps:50)"
        )
    return int(digits)


def _clean(text: str) -> str:
    text = text.strip()
    return "" if text in _EMPTY else text


def _parse_devices(text: str) -> list[str]:
    devices: list[str] = []
    for token in re.split(r"[,+\s]+", _clean(text)):
        if not token:
            continue
        if not _DEVICE.match(token):
            raise ValueError(
                f"unknown device {token!r} in Devices (use GPU indices like 0 or 0+1, "
                "or GPU-…/MIG-… UUIDs)"
            )
        if token not in devices:
            devices.append(token)
    return devices


def _parse_listeners(text: str) -> str | None:
    value = _clean(text)
    if not value:
        return None
    if not _LISTENERS.match(value):
        raise ValueError(f"Listeners {value!r} is not a list of names like top+nvml")
    return value


def _split(column: str, text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise ValueError(f"{column} {text!r} cannot be split into arguments: {err}") from None


def _parse_params(text: str) -> list[str]:
    value = _clean(text)
    return _split("Params", value) if value else []


def _parse_power(text: str) -> float | None:
    value = _clean(text)
    if not value:
        return None
    number = re.sub(r"\s*[wW]$", "", value)
    try:
        watts = float(number)
    except ValueError:
        watts = math.nan
    if not math.isfinite(watts) or watts <= 0:
        raise ValueError(f"PowerLimit {value!r} is not a positive number of watts (e.g. 250)")
    return watts


def _parse_env(text: str) -> dict[str, str]:
    value = _clean(text)
    env: dict[str, str] = {}
    for token in _split("Env", value) if value else []:
        key, sep, val = token.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise ValueError(f"Env {token!r} is not KEY=VALUE (e.g. OMP_NUM_THREADS=4 SEED=1)")
        env[key] = val
    return env


def _parse_status(text: str) -> str:
    # the original radT writes "FINISHED <name> (<letter>)": keep the first word
    value = _clean(text)
    return value.split()[0].upper() if value else ""


def _script_of(argv: list[str]) -> str | None:
    """The .py script a File command runs, if it names one."""
    if not argv:
        return None
    if argv[0].endswith(".py"):
        return argv[0]
    if not _PYTHON.match(Path(argv[0]).name):
        return None
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-m", "-c"):
            return None
        if arg in ("-X", "-W"):
            next(args, None)
        elif not arg.startswith("-"):
            return arg if arg.endswith(".py") else None
    return None


def _parse_file(text: str, cwd: Path) -> str:
    value = _clean(text)
    if not value:
        raise ValueError("missing File (the script or command to run)")
    script = _script_of(_split("File", value))
    if script and not (cwd / Path(script).expanduser()).is_file():
        raise ValueError(
            f"File {script!r} not found (relative paths are resolved from the current "
            f"folder, {cwd})"
        )
    return value


# ------------------------------------------------------------------- scanner


@dataclass
class _Record:
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


def _physical_lines(text: str) -> list[str]:
    return io.StringIO(text, newline="").readlines()


def _skipped(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _ending(line: str) -> tuple[str, str]:
    body = line.rstrip("\r\n")
    return body, line[len(body) :]


class _ScanError(Exception):
    def __init__(self, line: int, message: str, unterminated: bool = False):
        super().__init__(message)
        self.line = line
        self.unterminated = unterminated


def _scan_record(lines: list[str], start: int) -> tuple[_Record, int]:
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
                raise _ScanError(
                    i + 1,
                    f"text after a closing quote in cell {len(raw) + 1} "
                    '(write "" for a quote inside a quoted cell)',
                )
            cell.append(ch)
        if state != "quoted":
            raw.append("".join(cell))
            return _Record(start + 1, i + 1, raw, ending), i + 1
        cell.append(ending)
        i += 1
        if i == len(lines):
            raise _ScanError(
                quote_line,
                f"unterminated quote in cell {len(raw) + 1}: it is never closed",
                unterminated=True,
            )


def _scan(lines: list[str]) -> tuple[list[_Record], list[Problem]]:
    """All records of the file; blank and ``#`` lines between records are skipped."""
    records: list[_Record] = []
    problems: list[Problem] = []
    i = 0
    while i < len(lines):
        if _skipped(lines[i]):
            i += 1
            continue
        try:
            record, i = _scan_record(lines, i)
        except _ScanError as err:
            problems.append(Problem(err.line, f"malformed CSV: {err}"))
            if err.unterminated:
                break  # the open quote swallowed the rest of the file
            i = err.line  # go on after the line with the error
            continue
        if any(record.cells):
            records.append(record)
    return records, problems


# -------------------------------------------------------------------- reader


def _column_key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).lower()


_CANONICAL = {_column_key(name): name for name in COLUMNS}


def _read_header(record: _Record) -> tuple[list[str | None], list[Problem]]:
    """Canonical column names and header problems.

    A blank header cell gives "", an unknown or duplicate one None (already
    reported: the cells under it are ignored).
    """
    columns: list[str | None] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for position, name in enumerate(record.cells, start=1):
        canonical = _CANONICAL.get(_column_key(name)) if name else ""
        if canonical is None:
            problems.append(Problem(record.first, _unknown_column(name)))
        elif canonical in seen:
            problems.append(
                Problem(
                    record.first,
                    f"duplicate column {name!r} (columns {seen[canonical]} and {position})",
                )
            )
            canonical = None
        elif canonical:
            seen[canonical] = position
        columns.append(canonical)
    if problems and not seen:
        message = "the first row is not a header; it must name the columns: " + ", ".join(COLUMNS)
        return columns, [Problem(record.first, message)]
    missing = [name for name in REQUIRED if name not in seen]
    if missing:
        noun = "column" if len(missing) == 1 else "columns"
        problems.append(
            Problem(
                record.first,
                f"missing {noun} {', '.join(missing)} (required: {', '.join(REQUIRED)})",
            )
        )
    return columns, problems


def _unknown_column(name: str) -> str:
    close = difflib.get_close_matches(_column_key(name), list(_CANONICAL), n=1, cutoff=0.7)
    hint = f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""
    return f"unknown column {name!r} (allowed: {', '.join(COLUMNS)}){hint}"


def _shape_problems(record: _Record, columns: list[str | None]) -> list[str]:
    cells = record.cells
    filled = [i for i, value in enumerate(cells) if value]
    messages = []
    if filled and filled[-1] >= len(columns):
        messages.append(_too_many_cells(len(cells), len(columns)))
    for i in filled:
        if i < len(columns) and columns[i] == "":
            messages.append(f"cell {i + 1} ({cells[i]!r}) is under a column without a name")
    return messages


def _too_many_cells(cells: int, columns: int) -> str:
    return (
        f"{cells} cells, but the header names {columns} columns "
        '(quote a cell that contains commas, e.g. "0,1")'
    )


def _build_row(
    record: _Record, columns: list[str | None], cwd: Path
) -> tuple[Row | None, list[str]]:
    """The row of a data record, or None and the messages of what is wrong."""
    errors = _shape_problems(record, columns)
    if errors:  # cells out of place: checking them would only repeat the same mistake
        return None, errors
    values = {name: value for name, value in zip(columns, record.cells, strict=False) if name}

    def parsed(parser: Callable[[str], object], column: str) -> object:
        try:
            return parser(values.get(column, ""))
        except ValueError as err:
            errors.append(str(err))
            return None

    experiment, workload = _clean(values["Experiment"]), _clean(values["Workload"])
    for column, value in (("Experiment", experiment), ("Workload", workload)):
        if not value:
            errors.append(f"missing {column}")
    fields = dict(
        devices=parsed(_parse_devices, "Devices"),
        collocation=parsed(parse_collocation, "Collocation"),
        file=parsed(lambda text: _parse_file(text, cwd), "File"),
        listeners=parsed(_parse_listeners, "Listeners"),
        params=parsed(_parse_params, "Params"),
        power_limit_w=parsed(_parse_power, "PowerLimit"),
        env=parsed(_parse_env, "Env"),
    )
    if fields["devices"] is not None and fields["collocation"] is not None:
        errors.extend(_mig_device_problems(fields["collocation"], fields["devices"]))
    if errors and len(record.raw) > len(columns):
        # extra (empty) cells are tolerated, but here they likely shifted the row
        return None, [_too_many_cells(len(record.raw), len(columns))]
    if errors:
        return None, errors
    row = Row(
        line=record.first,
        experiment=experiment,
        workload=workload,
        status=_parse_status(values.get("Status", "")),
        run=_clean(values.get("Run", "")),
        name=_clean(values.get("Name", "")),
        **fields,  # type: ignore[arg-type]
    )
    return row, []


def _mig_device_problems(collocation: Collocation, devices: list[str]) -> list[str]:
    if collocation.mode != "mig":
        return []
    if len(devices) != 1:
        return [
            f"MIG profile {collocation.label} needs exactly one GPU in Devices "
            f"(the GPU to partition, e.g. 0), not {len(devices)}"
        ]
    if devices[0].startswith("MIG-"):
        return [
            f"MIG profile {collocation.label} needs a whole GPU in Devices, "
            f"not the MIG device {devices[0]}"
        ]
    return []


# ---------------------------------------------------------- workload checks


def _shared(a: Row, b: Row) -> str | None:
    """The device two rows share, in words; None if they share none."""
    if not a.devices or not b.devices:
        return "the default GPU"
    common = [d for d in a.devices if d in b.devices]
    return f"GPU {common[0]}" if common else None


def _pair_problem(a: Row, b: Row) -> str | None:
    device = _shared(a, b)
    if device is None:
        return None
    if b.collocation.mode == "none":
        return (
            f"collocation none means the run has its GPU to itself (a baseline), but line "
            f"{a.line} of the same workload also uses {device}; give the baseline a "
            "workload of its own, or share with naive, mps or a MIG profile"
        )
    if a.collocation.mode == "none":
        return (
            f"this row uses {device}, which line {a.line} has to itself (collocation none: "
            "a baseline); give the baseline a workload of its own, or share with naive, "
            "mps or a MIG profile"
        )
    if a.collocation.mode != b.collocation.mode:
        return (
            f"collocation {b.collocation.label} cannot share {device} with "
            f"{a.collocation.label} on line {a.line} (rows of a workload that share a "
            "GPU must use the same mode)"
        )
    if None not in (a.power_limit_w, b.power_limit_w) and a.power_limit_w != b.power_limit_w:
        return (
            f"PowerLimit {b.power_limit_w:g} W differs from {a.power_limit_w:g} W on line "
            f"{a.line} for {device} (a power cap applies to the whole GPU)"
        )
    return None


def _mig_capacity_problems(workload: Workload) -> list[Problem]:
    problems = []
    used: dict[str, int] = {}
    for row in workload.rows:
        if row.collocation.mode != "mig":
            continue
        device = row.devices[0]
        used[device] = used.get(device, 0) + row.collocation.compute_slices
        if used[device] > MAX_COMPUTE_SLICES:
            problems.append(
                Problem(
                    row.line,
                    f"the MIG profiles of workload {workload.label} on GPU {device} need "
                    f"{used[device]} compute slices; a GPU has at most {MAX_COMPUTE_SLICES}",
                )
            )
            used[device] = -(10**6)  # report each GPU once
    return problems


def _workload_problems(workload: Workload) -> list[Problem]:
    """Rows of one workload that cannot run together."""
    problems = []
    for i, row in enumerate(workload.rows):
        for earlier in workload.rows[:i]:
            message = _pair_problem(earlier, row)
            if message:
                problems.append(Problem(row.line, message))
                break
    return problems + _mig_capacity_problems(workload)


def _letter(index: int) -> str:
    """A, B, …, Z, AA, AB, … (spreadsheet style)."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def _group(rows: list[Row]) -> list[Workload]:
    workloads: dict[tuple[str, str], Workload] = {}
    for row in rows:
        key = (row.experiment, row.workload)
        if key not in workloads:
            workloads[key] = Workload(row.experiment, row.workload, [])
        workloads[key].rows.append(row)
    for workload in workloads.values():
        for index, row in enumerate(workload.rows):
            row.letter = _letter(index)
    return list(workloads.values())


def _read_text(path: Path) -> tuple[str, str]:
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


def read_plan(path: Path, *, cwd: Path | None = None) -> Plan:
    """Read and validate a plan; raises PlanError (a UsageError) listing every problem.

    ``cwd`` is the folder relative File paths are resolved from (default: the
    current folder, as in the original radT).
    """
    path = Path(path)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    _, text = _read_text(path)
    records, problems = _scan(_physical_lines(text))
    if not records:
        if not problems:
            problems.append(Problem(None, "the plan is empty: it needs a header row and rows"))
        raise PlanError(path, problems)
    columns, header_problems = _read_header(records[0])
    problems += header_problems
    if len(records) == 1 and not problems:
        problems.append(Problem(records[0].first, "the plan has a header but no rows"))
    rows: list[Row] = []
    if all(name in columns for name in REQUIRED):
        for record in records[1:]:
            row, messages = _build_row(record, columns, cwd)
            problems += [Problem(record.first, message) for message in messages]
            if row:
                rows.append(row)
    workloads = _group(rows)
    for workload in workloads:
        problems += _workload_problems(workload)
    if problems:
        raise PlanError(path, problems, Plan(path, workloads))
    return Plan(path, workloads)


# ------------------------------------------------------------------- writer


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


def _set_cells(record: _Record, updates: dict[int, str]) -> str:
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
    data: list[_Record], index: dict[str, int], workload: Workload, row: Row, path: Path
) -> _Record:
    """The record of ``row`` in a freshly read file (by line, else by position)."""

    def belongs(record: _Record) -> bool:
        cells = record.cells
        values = [
            _clean(cells[index[c]]) if index[c] < len(cells) else ""
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


def _columns_for_record(header: _Record, path: Path) -> tuple[dict[str, int], str | None]:
    """Column positions, adding Status and Run when missing (then: the new header)."""
    index = {name: i for i, name in enumerate(_read_header(header)[0]) if name}
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
    lines = _physical_lines(text)
    records, _ = _scan(lines)
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
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on ``lock_path`` (created if needed)."""
    with open(lock_path, "a") as lock:
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
