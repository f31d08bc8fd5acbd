"""Reading and validating a plan: every problem, each with its line, before anything starts.

Column names are matched case-insensitively, ignoring spaces, ``_`` and ``-``;
only ``Experiment``, ``Workload`` and ``File`` are required. Cells are
whitespace-tolerant (``1, 1, , , 0, mps`` is fine), ``-`` means empty. A
``File`` that is a ``.py`` script (or ``python [opts] script.py``) must exist;
relative paths are resolved from the current folder, as the original radT does
(the row then runs in its script's folder: see :mod:`radt.plans.workdir`).
``File`` and ``Params`` are split with :func:`shlex.split` and never pass
through a shell: ``; rm -rf ~`` is four arguments.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Callable
from functools import partial
from pathlib import Path

from radt.plans import columns as table
from radt.plans.model import (
    CONSUMER,
    EMPTY,
    LOADER,
    LOADER_LETTER,
    MAX_COMPUTE_SLICES,
    REQUIRED,
    Collocation,
    Plan,
    PlanError,
    Problem,
    Row,
    Workload,
    clean,
)
from radt.plans.scanner import CsvRecord, physical_lines, read_text, scan
from radt.tags import Mode
from radt.words import count

_COLLOCATION_HELP = "use -, none, naive, mps, mps:PCT or a MIG profile like 3g.40gb"
_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb((?:[+-][a-z]+(?:\.[a-z]+)?)*)$")
_CI_PROFILE = re.compile(r"^\d+c\.(\d+g\.\d+gb.*)$")
_DEVICE = re.compile(r"^(\d+|(?:GPU|MIG)-[0-9A-Za-z/_-]+)$")
_LISTENERS = re.compile(r"^[\w.-]+(\+[\w.-]+)*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def parse_collocation(text: str) -> Collocation:
    """Parse a Collocation cell; raises ValueError with a message for the user."""
    value = text.strip().lower()
    if value in EMPTY:
        return Collocation(Mode.NONE, blank=True)
    if value in (Mode.NONE, Mode.NAIVE, Mode.MPS):
        return Collocation(Mode(value))
    if value.startswith("mps:"):
        return Collocation(Mode.MPS, mps_thread_pct=_parse_pct(value[4:]))
    profile = value.removeprefix("mig").strip() if value.startswith("mig ") else value
    if _MIG_PROFILE.match(profile):
        return Collocation(Mode.MIG, mig_profile=profile)
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


def _parse_devices(text: str) -> list[str]:
    devices: list[str] = []
    for token in re.split(r"[,+\s]+", clean(text)):
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
    value = clean(text)
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
    value = clean(text)
    return _split("Params", value) if value else []


def _parse_power(text: str) -> float | None:
    value = clean(text)
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


def parse_gpu_clock(value: str) -> int:
    """A GpuClock cell: a positive whole number of MHz (``1410``, ``1410 MHz``)."""
    number = re.sub(r"\s*[mM][hH][zZ]$", "", value)
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"{value!r} is not a positive whole number of MHz (e.g. 1410)")
    return int(number)


def _parse_env(text: str) -> dict[str, str]:
    value = clean(text)
    env: dict[str, str] = {}
    for token in _split("Env", value) if value else []:
        key, sep, val = token.partition("=")
        if not sep or not _ENV_KEY.match(key):
            raise ValueError(f"Env {token!r} is not KEY=VALUE (e.g. OMP_NUM_THREADS=4 SEED=1)")
        env[key] = val
    return env


def _optional(column: str, parse: Callable[[str], object]) -> Callable[[str], object]:
    """A parser of an optional column: empty is None, a bad value names the column."""

    def parsed(text: str) -> object:
        value = clean(text)
        if not value:
            return None
        try:
            return parse(value)
        except ValueError as err:
            raise ValueError(f"{column} {err}") from None

    return parsed


def _parse_role(text: str) -> str:
    value = clean(text).lower()
    if value not in ("", LOADER, CONSUMER):
        raise ValueError(
            f"unknown Role {clean(text)!r} (use loader for the workload's shared data loader, "
            "or leave it empty)"
        )
    return value


def _parse_status(text: str) -> str:
    # the original radT writes "FINISHED <name> (<letter>)": keep the first word
    value = clean(text)
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
    value = clean(text)
    if not value:
        raise ValueError("missing File (the script or command to run)")
    script = _script_of(_split("File", value))
    if script and not (cwd / Path(script).expanduser()).is_file():
        raise ValueError(
            f"File {script!r} not found (relative paths are resolved from the current "
            f"folder, {cwd})"
        )
    return value


def _column_key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).lower()


def _canonical() -> dict[str, str]:
    """Column key → the column's name, for every column of the table."""
    return {_column_key(name): name for name in table.names()}


def _parse_cell(column: table.PlanColumn, text: str) -> object:
    """A table-drawn column's cell: empty is the column's default, a bad value names it."""
    value = clean(text)
    if not value or column.parse is None:
        return column.default
    try:
        return column.parse(value)
    except ValueError as err:
        raise ValueError(f"{column.name} {err}") from None


def read_header(record: CsvRecord) -> tuple[list[str | None], list[Problem]]:
    """Canonical column names and header problems.

    A blank header cell gives "", an unknown or duplicate one None (already
    reported: the cells under it are ignored).
    """
    columns: list[str | None] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    canonical_names = _canonical()
    for position, name in enumerate(record.cells, start=1):
        canonical = canonical_names.get(_column_key(name)) if name else ""
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
        message = "the first row is not a header; it must name the columns: " + ", ".join(
            table.names()
        )
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
    canonical = _canonical()
    close = difflib.get_close_matches(_column_key(name), list(canonical), n=1, cutoff=0.7)
    hint = f"; did you mean {canonical[close[0]]!r}?" if close else ""
    return f"unknown column {name!r} (allowed: {', '.join(table.names())}){hint}"


def _shape_problems(record: CsvRecord, columns: list[str | None]) -> list[str]:
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
        f"{count(cells, 'cell')}, but the header names {count(columns, 'column')} "
        '(quote a cell that contains commas, e.g. "0,1")'
    )


def _build_row(
    record: CsvRecord, columns: list[str | None], cwd: Path
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

    experiment, workload = clean(values["Experiment"]), clean(values["Workload"])
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
        gpu_clock_mhz=parsed(_optional("GpuClock", parse_gpu_clock), "GpuClock"),
        env=parsed(_parse_env, "Env"),
    )
    drawn: dict[str, object] = {}
    for spec in table.TABLE:  # in the table's order, so that a row's problems are too
        if spec.parse is not None:
            drawn[spec.field] = parsed(partial(_parse_cell, spec), spec.name)
        elif spec.name == "Role":
            fields["role"] = parsed(_parse_role, "Role")
    errors.extend(table.both_given(drawn))
    if fields["devices"] is not None and fields["collocation"] is not None:
        errors.extend(_mig_device_problems(fields["collocation"], fields["devices"]))
    if fields["role"] == LOADER:
        errors.extend(_loader_row_problems(fields["collocation"], fields["power_limit_w"]))
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
        run=clean(values.get("Run", "")),
        name=clean(values.get("Name", "")),
        values=drawn,
        **fields,  # type: ignore[arg-type]
    )
    return row, []


def _mig_device_problems(collocation: Collocation, devices: list[str]) -> list[str]:
    if collocation.mode != Mode.MIG:
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


def _loader_row_problems(collocation: Collocation | None, power_limit_w: float | None) -> list[str]:
    """A loader takes no share of the GPU: no MPS share, no MIG slice, no power cap."""
    problems = []
    if collocation is not None and collocation.mode in (Mode.MPS, Mode.MIG):
        problems.append(
            f"a loader row takes no share of the GPU, so it cannot have Collocation "
            f"{collocation.label}; leave it empty (-)"
        )
    if power_limit_w is not None:
        problems.append(
            "a loader row cannot set a PowerLimit (the trainings' rows set the GPU's cap); "
            "leave it empty"
        )
    return problems


def _loader_problems(workload: Workload) -> list[Problem]:
    """At most one loader per workload, and a loader needs trainings to feed."""
    loaders = [row for row in workload.rows if row.role == LOADER]
    problems = [
        Problem(
            row.line,
            f"workload {workload.label} has a second loader row (line {loaders[0].line} is "
            "its loader); a workload has at most one shared loader",
        )
        for row in loaders[1:]
    ]
    if loaders and not workload.trainings:
        problems.append(
            Problem(
                loaders[0].line,
                f"the loader of workload {workload.label} has no trainings to feed: add the "
                "training rows to the same workload (same Experiment and Workload)",
            )
        )
    if not loaders:
        problems += [
            Problem(
                row.line,
                f"Role consumer needs a loader row (Role loader) in workload {workload.label}",
            )
            for row in workload.rows
            if row.role == CONSUMER
        ]
    return problems


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
    if b.collocation.mode == Mode.NONE:
        return (
            f"collocation none means the run has its GPU to itself (a baseline), but line "
            f"{a.line} of the same workload also uses {device}; give the baseline a "
            "workload of its own, or share with naive, mps or a MIG profile"
        )
    if a.collocation.mode == Mode.NONE:
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
    if None not in (a.gpu_clock_mhz, b.gpu_clock_mhz) and a.gpu_clock_mhz != b.gpu_clock_mhz:
        return (
            f"GpuClock {b.gpu_clock_mhz} MHz differs from {a.gpu_clock_mhz} MHz on line "
            f"{a.line} for {device} (a locked clock applies to the whole GPU); give each "
            "clock a workload of its own"
        )
    return None


def _mig_capacity_problems(workload: Workload) -> list[Problem]:
    problems = []
    used: dict[str, int] = {}
    for row in workload.rows:
        if row.collocation.mode != Mode.MIG:
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
    trainings = workload.trainings
    for i, row in enumerate(trainings):
        for earlier in trainings[:i]:
            message = _pair_problem(earlier, row)
            if message:
                problems.append(Problem(row.line, message))
                break
    return problems + _mig_capacity_problems(workload) + _loader_problems(workload)


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
        # With a loader (letter L), the trainings' letters skip L.
        letters = (
            _letter(index)
            for index in range(len(workload.rows) + 1)
            if not (workload.loader and _letter(index) == LOADER_LETTER)
        )
        for row in workload.rows:
            row.letter = LOADER_LETTER if row.role == LOADER else next(letters)
            if workload.loader and row.role != LOADER:
                row.role = CONSUMER
    return list(workloads.values())


def _blank_rows_shared(workloads: list[Workload]) -> str | None:
    """Read ``-`` as naive sharing in workloads of several trainings, as the original radT ran
    them; return the note that says so (None when no workload has such rows)."""
    changed = []
    for workload in workloads:
        trainings = workload.trainings
        if len(trainings) < 2 or not any(row.collocation.blank for row in trainings):
            continue
        for row in trainings:
            if row.collocation.blank:
                row.collocation = Collocation(Mode.NAIVE, blank=True)
        changed.append(workload.label)
    if not changed:
        return None
    return (
        f"collocation - in {count(len(changed), 'workload')} of several runs "
        f"({', '.join(changed)}) means naive sharing, as in the original radT; "
        "write none for a baseline"
    )


def read_plan(path: Path, *, cwd: Path | None = None) -> Plan:
    """Read and validate a plan; raises PlanError (a UsageError) listing every problem.

    ``cwd`` is the folder relative File paths are resolved from (default: the
    current folder, as in the original radT).
    """
    path = Path(path)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    _, text = read_text(path)
    records, problems = scan(physical_lines(text))
    if not records:
        if not problems:
            problems.append(Problem(None, "the plan is empty: it needs a header row and rows"))
        raise PlanError(path, problems)
    columns, header_problems = read_header(records[0])
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
    note = _blank_rows_shared(workloads)
    notes = [note] if note else []
    for workload in workloads:
        problems += _workload_problems(workload)
    if problems:
        raise PlanError(path, problems, Plan(path, workloads, notes))
    return Plan(path, workloads, notes)
