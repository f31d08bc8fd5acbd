"""The run tree: what each run is (workload, client, loader, lone run), its Job and configuration
label, and its :class:`Record`, which the per-level figures fill."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from radt.analysis.figures import NAN
from radt.tags import (
    RADT_COLLOCATION,
    RADT_COMMAND,
    RADT_GPU_CLOCK_MHZ,
    RADT_JOB,
    RADT_JOB_IGNORE,
    RADT_LOADER,
    RADT_MANUAL,
    RADT_MIG_PROFILE,
    RADT_MPS_THREAD_PCT,
    RADT_POWER_LIMIT_W,
    RADT_ROLE,
    Mode,
)

if TYPE_CHECKING:
    from radt.analysis.windows import Timeline, Window

EXAMPLES_METRIC = "examples"
SEED_FLAGS = ("seed",)
"""Flags that never make two runs different jobs (with ``radt.job_ignore``'s)."""
SHARED_LOADER = " + shared loader"
"""How a configuration label says that its trainings shared one data loader."""


# --------------------------------------------------------------------------- jobs and labels


def _flag_name(arg: str) -> str | None:
    """``--seed=1`` → ``seed``; a value (``1``, ``-0.5``) → None."""
    if not arg.startswith("-") or arg in ("-", "--") or re.match(r"^-\.?\d", arg):
        return None
    return arg.lstrip("-").partition("=")[0]


def strip_flags(argv: Sequence[str], ignored: Iterable[str]) -> list[str]:
    """``argv`` without the flags named in ``ignored`` and their values.

    ``--seed 1``, ``--seed=1`` and ``-seed 1`` all go; a flag takes at most the
    one argument after it that is not a flag itself (as radT reads params).
    """
    names = {name.lstrip("-") for name in ignored if name.lstrip("-")}
    kept: list[str] = []
    skip_value = False
    for arg in argv:
        name = _flag_name(arg)
        if skip_value:
            skip_value = False
            if name is None:
                continue
        if name is not None and name in names:
            skip_value = "=" not in arg
            continue
        kept.append(arg)
    return kept


def job_of(tags: Mapping[str, str], params: Mapping[str, str] | None = None) -> str | None:
    """A run's Job: the ``radt.job`` tag, else its command without seed-only flags.

    Seed-only flags are ``--seed`` and those named in ``radt.job_ignore``
    (space-separated), each with its value. A run without a ``radt.command``
    tag falls back to its params (minus the same flags).
    """
    job = (tags.get(RADT_JOB) or "").strip()
    if job:
        return job
    ignored = [*SEED_FLAGS, *(tags.get(RADT_JOB_IGNORE) or "").split()]
    params = params or {}
    command = tags.get(RADT_COMMAND) or params.get(RADT_COMMAND)
    if command:
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
        return shlex.join(strip_flags(argv, ignored))
    names = {name.lstrip("-") for name in ignored}
    pairs = [f"{k}={v}" for k, v in sorted(params.items()) if k != RADT_COMMAND and k not in names]
    return " ".join(pairs) or None


def _present(value: Any) -> bool:
    return value is not None and str(value).strip() not in ("", "-", "nan", "None")


def _profile_size(profile: str) -> tuple[int, float]:
    found = re.match(r"^(\d+)g(?:\.(\d+(?:\.\d+)?)gb)?", profile)
    if not found:
        return (0, 0.0)
    return (int(found.group(1)), float(found.group(2) or 0))


def configuration_label(runs_tags: Sequence[Mapping[str, str]]) -> str:
    """How the GPU was shared, in words: ``none``, ``naive x2``, ``mps:50 x2``, ``4g.40gb+3g.40gb``.

    ``runs_tags`` are the tags of the runs that shared it (one for a lone run).
    MIG profiles are joined by ``+``, largest first; MPS shares that differ as
    ``mps:70+30``.
    """
    n = len(runs_tags)
    modes = sorted({str(t.get(RADT_COLLOCATION) or Mode.NONE) for t in runs_tags} or {Mode.NONE})
    if modes == [Mode.NONE]:
        return Mode.NONE.value if n <= 1 else f"{Mode.NONE} x{n}"
    if modes == [Mode.MIG]:
        profiles: list[str] = []
        for tags in runs_tags:
            profile = tags.get(RADT_MIG_PROFILE)
            if _present(profile):
                profiles.append(str(profile))
        if len(profiles) == n:
            if n and all(p == profiles[0] for p in profiles) and "+" in profiles[0]:
                profiles = profiles[0].split("+")  # every run carries the workload's list
            return "+".join(sorted(profiles, key=_profile_size, reverse=True))
        return f"{Mode.MIG} x{n}"
    if modes == [Mode.MPS]:
        shares = [t.get(RADT_MPS_THREAD_PCT) for t in runs_tags]
        known = [f"{float(s):g}" for s in shares if _present(s)]
        if not known:
            return f"mps x{n}"
        if len(known) == n and len(set(known)) == 1:
            return f"mps:{known[0]} x{n}"
        ordered = sorted(known, key=float, reverse=True) + ["?"] * (n - len(known))
        return "mps:" + "+".join(ordered)
    if modes == [Mode.NAIVE]:
        return f"{Mode.NAIVE} x{n}"
    return "+".join(modes) + f" x{n}"


def workload_configuration(clients_tags: Sequence[Mapping[str, str]], shared: bool) -> str:
    """:func:`configuration_label` of a workload's clients, ``+ shared loader`` when they
    shared one (the loader is not one of the runs that share the GPU)."""
    return configuration_label(clients_tags) + (SHARED_LOADER if shared else "")


def loader_mode(tags: Mapping[str, str]) -> str:
    """``shared`` for the runs of a workload with a shared loader, else ``own``."""
    return "shared" if tags.get(RADT_LOADER) == "shared" else "own"


# --------------------------------------------------------------------------- one run's record


@dataclass
class Record:
    """One run (or workload) with what the summary computes for it.

    Built from an MLflow run by :meth:`of`, or by hand where a run is still
    being completed (:mod:`radt.analysis.closing`).
    """

    run_id: str
    experiment_id: str
    status: str
    level: str
    """``provider``, ``client``, ``loader`` or ``run``."""
    tags: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)
    start_s: float = NAN
    """The MLflow run's start and end (epoch seconds; NaN while it runs)."""
    end_s: float = NAN
    mlflow_examples: float = NAN
    """The last value of the MLflow metric ``examples`` (runs without counter samples)."""
    run: Any = None
    series: dict = field(default_factory=dict)
    timeline: Timeline | None = None
    window: Window | None = None
    examples_total: float = NAN
    figures: dict[str, float] = field(default_factory=dict)
    method: str = "none"
    notes: list[str] = field(default_factory=list)
    work: float = NAN
    """Time per unit of work on this record's basis: ns per example, else window seconds."""
    basis_: str | None = None
    kid_examples: dict[str, float] = field(default_factory=dict)
    """A workload's clients' examples in its window, as stored (:mod:`radt.analysis.stored`)."""
    device_recorded: bool | None = None
    """Whether GPU power or energy was recorded, as stored; None: see :attr:`series`."""

    @property
    def has_device(self) -> bool:
        """Whether this run's samples hold GPU power or energy series."""
        if self.device_recorded is not None:
            return self.device_recorded
        return _has_device(self.series)

    @classmethod
    def of(cls, run, level: str) -> Record:
        """The record of an MLflow run."""
        info = run.info
        examples = run.data.metrics.get(EXAMPLES_METRIC)
        return cls(
            run_id=info.run_id,
            experiment_id=info.experiment_id,
            status=info.status,
            level=level,
            tags=dict(run.data.tags),
            params=dict(run.data.params),
            start_s=_seconds(info.start_time),
            end_s=_seconds(info.end_time),
            mlflow_examples=float(examples) if examples is not None else NAN,
            run=run,
        )

    @cached_property
    def job(self) -> str | None:
        """The run's Job (:func:`job_of`)."""
        return job_of(self.tags, self.params)

    @property
    def power(self) -> str | None:
        """The power limit as recorded; None at the default."""
        value = self.tags.get(RADT_POWER_LIMIT_W)
        return str(value) if _present(value) else None

    @property
    def clock(self) -> str | None:
        """The locked SM clock (MHz) as recorded; None at the driver's default."""
        value = self.tags.get(RADT_GPU_CLOCK_MHZ)
        return str(value) if _present(value) else None

    @property
    def manual(self) -> bool:
        """Whether the run's window starts by ``radt --manual``'s rule (``radt.manual``)."""
        return self.tags.get(RADT_MANUAL) == "1"

    @property
    def basis(self) -> str:
        """What the figures are over (one of :data:`radt.analysis.windows.BASES`)."""
        if self.basis_ is not None:
            return self.basis_
        return self.window.basis if self.window is not None else "duration_lifetime"

    @property
    def alone(self) -> bool:
        """Whether the run had the GPU to itself (collocation ``none``)."""
        mode = self.tags.get(RADT_COLLOCATION)
        return self.level != "provider" and (
            mode == Mode.NONE or (mode is None and self.level == "run")
        )

    @property
    def baseline_candidate(self) -> bool:
        """A FINISHED client or lone run alone on its GPU with a figure on its basis, that
        loaded its own data (a shared loader's trainings are not the Job's baseline)."""
        return (
            self.alone
            and self.level in ("client", "run")
            and self.tags.get(RADT_ROLE) != "consumer"
            and self.status == "FINISHED"
            and self.job is not None
            and math.isfinite(self.work)
        )


def _seconds(millis: int | None) -> float:
    return millis / 1000.0 if millis else NAN


def _has_device(series: Mapping) -> bool:
    return any(q in ("energy_j", "power_w") for (_, gpu, q) in series if gpu.startswith("gpu"))


def _order(run) -> tuple:
    return (run.info.start_time or 0, run.info.run_id)
