"""The table of plan columns: each column's name, Row field, parser, tag and way into the run.

:data:`TABLE` lists every column a plan may have, in the order radT names them. A column with
a ``parse`` is drawn from the table alone: :mod:`radt.plans.read` parses its cell, the Row
holds its value (``row.<field>``), :mod:`radt.plans.runner` turns it into the run's tag, the
command's environment variable or a launch option of :func:`radt.launch.launcher.child_env`,
and a study key of the same meaning becomes the column in the plan a study writes
(:mod:`radt.plans.studyplan`). Columns without a ``parse`` (Devices, Collocation, File, …) have
code of their own in those modules. docs/architecture.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from radt.launch.job import parse_job, parse_warmup_epochs, parse_warmup_s
from radt.tags import RADT_JOB, RADT_WARMUP_EPOCHS, RADT_WARMUP_S

EMPTY_CELL = "-"


@dataclass(frozen=True)
class PlanColumn:
    """One plan column: how its cell is read, held, recorded and passed to the run."""

    name: str
    """The column as spelled in a plan's header (matched ignoring case, spaces, ``_``, ``-``)."""
    field: str
    """The Row attribute that holds the cell's value."""
    parse: Callable[[str], Any] | None = None
    """A non-empty cell (``-`` and blanks are empty) → its value; a ValueError's text follows
    the column's name in the one-line problem (``WarmupEpochs 'x' is not …``). None: the column
    has code of its own in :mod:`radt.plans.read`."""
    default: Any = None
    """The value of an empty cell (and of a row whose plan lacks the column)."""
    text: Callable[[Any], str] = str
    """A value other than ``default`` as its tag's value and as a cell a study writes."""
    tag: str | None = None
    """The ``radt.*`` tag (from :mod:`radt.tags`) a run records the value in; a row's value
    replaces the command line's."""
    env: str | None = None
    """The environment variable the row's command gets the value in."""
    launch: str | None = None
    """The keyword of :func:`radt.launch.launcher.child_env` the value becomes, and the
    :class:`radt.plans.runner.PlanOptions` attribute holding the command line's value, used
    when the row's cell is empty."""
    flag: str | None = None
    """The ``radt`` option of the same meaning, for a row run as a lone radT command (a
    multi-node study's nodes, :mod:`radt.plans.multinode`): ``--flag text``, or ``--flag``
    alone for a value of ``True``."""
    instead_of: str | None = None
    """A column this one is the alternative of: a row gives at most one of the two, and a row
    that gives either replaces both of the command line's."""
    study_key: str | None = None
    """The study key (:mod:`radt.plans.study`) whose value becomes this column in every row."""
    study_parse: Callable[[Any], Any] | None = None
    """The study key's YAML value → the column's value; a ValueError's text is the problem."""


def _parse_yes_no(value: str) -> bool:
    word = value.lower()
    if word in ("no", "false"):
        return False
    if word in ("yes", "true"):
        return True
    raise ValueError(f"{value!r} is not yes or no (yes: count examples as radt --autolog does)")


def _study_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return value


TABLE: tuple[PlanColumn, ...] = (
    PlanColumn("Experiment", "experiment"),
    PlanColumn("Workload", "workload"),
    PlanColumn("Name", "name"),
    PlanColumn("Status", "status"),
    PlanColumn("Run", "run"),
    PlanColumn("Devices", "devices"),
    PlanColumn("Collocation", "collocation"),
    PlanColumn("Listeners", "listeners"),
    PlanColumn("File", "file"),
    PlanColumn("Params", "params"),
    PlanColumn("PowerLimit", "power_limit_w"),
    PlanColumn("GpuClock", "gpu_clock_mhz"),
    PlanColumn("Env", "env"),
    PlanColumn("Job", "job", parse_job, tag=RADT_JOB, flag="--job"),
    PlanColumn(
        "WarmupEpochs",
        "warmup_epochs",
        parse_warmup_epochs,
        tag=RADT_WARMUP_EPOCHS,
        flag="--warmup-epochs",
        instead_of="WarmupS",
    ),
    PlanColumn(
        "WarmupS",
        "warmup_s",
        parse_warmup_s,
        text=lambda s: f"{s:g}",
        tag=RADT_WARMUP_S,
        flag="--warmup-s",
    ),
    PlanColumn("Role", "role"),
    PlanColumn(
        "Autolog",
        "autolog",
        _parse_yes_no,
        default=False,
        text=lambda _: "yes",
        launch="autolog",
        flag="--autolog",
        study_key="autolog",
        study_parse=_study_bool,
    ),
)


JOB = next(column.name for column in TABLE if column.field == "job")
"""The Job column's header, which reports and findings name the Job by."""


def names() -> tuple[str, ...]:
    """Every column's name, in the table's order."""
    return tuple(column.name for column in TABLE)


def drawn() -> tuple[PlanColumn, ...]:
    """The columns drawn from the table alone (those with a ``parse``)."""
    return tuple(column for column in TABLE if column.parse is not None)


def by_field(field: str) -> PlanColumn | None:
    """The table-drawn column whose Row attribute is ``field``, if any."""
    return next((column for column in drawn() if column.field == field), None)


def _given(values: Mapping[str, Any]) -> list[PlanColumn]:
    return [
        column for column in drawn() if values.get(column.field, column.default) != column.default
    ]


def _alternatives(column: PlanColumn) -> list[PlanColumn]:
    return [
        other
        for other in drawn()
        if other.name == column.instead_of or other.instead_of == column.name
    ]


def run_tags(values: Mapping[str, Any], defaults: Mapping[str, str]) -> dict[str, str]:
    """The run's tags for a row's ``values`` (Row field → value): the command line's
    ``defaults`` under the row's own."""
    tags = dict(defaults)
    for column in _given(values):
        if column.tag is None:
            continue
        for other in _alternatives(column):
            if other.tag is not None:
                tags.pop(other.tag, None)
        tags[column.tag] = column.text(values[column.field])
    return tags


def run_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables a row's command gets from its columns."""
    return {
        column.env: column.text(values[column.field])
        for column in _given(values)
        if column.env is not None
    }


def launch_options(values: Mapping[str, Any], options: object) -> dict[str, Any]:
    """The keywords of ``child_env`` for a row: its value, else the command line's."""
    launch: dict[str, Any] = {}
    for column in drawn():
        if column.launch is None:
            continue
        value = values.get(column.field, column.default)
        if value == column.default:
            value = getattr(options, column.launch, column.default)
        launch[column.launch] = value
    return launch


def radt_flags(values: Mapping[str, Any]) -> list[str]:
    """The ``radt`` options that give a lone radT command a row's ``values``."""
    flags: list[str] = []
    for column in _given(values):
        if column.flag is None:
            continue
        value = values[column.field]
        flags += [column.flag] if value is True else [column.flag, column.text(value)]
    return flags


def both_given(values: Mapping[str, Any]) -> list[str]:
    """The problems of a row that gives two columns that are each other's alternative."""
    given = {column.name for column in _given(values)}
    return [
        f"give {column.name} or {column.instead_of}, not both"
        for column in drawn()
        if column.instead_of and {column.name, column.instead_of} <= given
    ]


def study_cells(values: Mapping[str, Any]) -> dict[str, str]:
    """The cells a study writes in every row for its keys that are columns (``-``: default)."""
    cells = {}
    for column in drawn():
        if column.study_key:
            value = values.get(column.field, column.default)
            cells[column.name] = EMPTY_CELL if value == column.default else column.text(value)
    return cells


def study_columns(values: Mapping[str, Any]) -> list[str]:
    """The columns a study's plan has for its keys that are columns: those it gives a value
    other than the default."""
    return [column.name for column in _given(values) if column.study_key]
