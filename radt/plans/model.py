"""The plan model: rows, workloads, collocations, problems, and the plan itself.

A plan has the original radT's columns (``Experiment, Workload, Status, Run,
Devices, Collocation, File, Listeners, Params``, plus its optional ``Name``)
and new ones: ``PowerLimit`` (watts), ``Env`` (``KEY=VALUE ...``), ``Job``
(what is trained: the baseline a run is compared with), ``WarmupEpochs`` /
``WarmupS`` (where the run's steady-state window starts), ``Role``
(``loader`` marks the workload's shared data loader) and ``Autolog`` (``yes``: the run
counts its examples as ``radt --autolog`` does); :data:`radt.plans.columns.TABLE` lists them.
Rows with the same Experiment and Workload run together as one workload.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radt.errors import UsageError
from radt.plans import columns
from radt.tags import LOADER_ROLE, Mode
from radt.words import count

COLUMNS = columns.names()
"""Every column a plan may have, in order (:data:`radt.plans.columns.TABLE`)."""
REQUIRED = ("Experiment", "Workload", "File")
FINISHED, FAILED = "FINISHED", "FAILED"
MAX_COMPUTE_SLICES = 7
LOADER, CONSUMER = LOADER_ROLE, "consumer"
"""Roles in a workload with a shared loader (``radt.role``); the loader's letter is L."""
LOADER_LETTER = "L"

EMPTY = ("", "-")
"""Cell values that mean "empty"."""


def clean(text: str) -> str:
    """A cell's value with ``-`` (and blanks) as the empty string."""
    text = text.strip()
    return "" if text in EMPTY else text


# --------------------------------------------------------------------- model


@dataclass(frozen=True)
class Collocation:
    """How a run shares its GPU: alone, naively, under MPS, or on a MIG slice."""

    mode: Mode
    mps_thread_pct: int | None = None  # 1..100 for "mps:PCT"
    mig_profile: str | None = None  # GPU-instance profile, e.g. "3g.40gb"
    blank: bool = field(default=False, compare=False)
    """The cell said ``-`` or nothing: the original radT's "no collocation method", a
    baseline alone and naive sharing among several rows of one workload."""

    @property
    def label(self) -> str:
        """The cell spelling: ``none``, ``naive``, ``mps``, ``mps:50``, ``3g.40gb``."""
        if self.mode == Mode.MIG:
            return str(self.mig_profile)
        if self.mode == Mode.MPS and self.mps_thread_pct is not None:
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
    letter: str = ""  # "A", "B", … in row order within the workload; "L" for a loader
    name: str = ""  # the optional Name column (a run name), "" when absent
    gpu_clock_mhz: int | None = None  # the GpuClock column: the SM clock to lock, MHz
    role: str = ""  # "loader", "consumer" (a training fed by the loader) or ""
    values: dict[str, Any] = field(default_factory=dict)
    """The columns drawn from :data:`radt.plans.columns.TABLE` (Row field → value), read as
    attributes (``row.<field>``); an absent one is its column's default."""

    def __getattr__(self, name: str) -> Any:
        column = columns.by_field(name) if name != "values" else None
        if column is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.values.get(name, column.default)

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
    def loader(self) -> Row | None:
        """The workload's shared loader row (``Role`` = loader), if it has one."""
        return next((row for row in self.rows if row.role == LOADER), None)

    @property
    def trainings(self) -> list[Row]:
        """The rows that are not the loader: the runs that share the GPU."""
        return [row for row in self.rows if row.role != LOADER]

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
    lines = [f"{path} has {count(len(problems), 'problem')}; nothing was started:"]
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
    notes: list[str] = field(default_factory=list)
    """What radT read differently from the cells' plain words, said once when it runs."""

    @property
    def rows(self) -> list[Row]:
        """All rows, workload by workload."""
        return [row for workload in self.workloads for row in workload.rows]

    def pending(self, rerun: bool = False) -> list[Workload]:
        """Workloads still to run: not FINISHED, and not FAILED unless ``rerun``.

        Anything else (never run, KILLED, RUNNING left by a crash) runs again.
        """
        return [w for w in self.workloads if w.status != FINISHED and (rerun or w.status != FAILED)]
