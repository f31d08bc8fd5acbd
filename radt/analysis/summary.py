"""The figures of a study: time and energy per example for providers (workloads) and clients (runs).

Vocabulary (DESIGN.md, "Analysis vocabulary"; docs/analysis.md defines every column):

- a **provider** row is a workload: its parent run, which records the
  device-wide series (power, energy, utilisation) of the GPUs the workload used;
- a **client** row is one training process of a workload (a child run);
- a **loader** row is a workload's shared data loader (a ``Role=loader`` plan
  row, tag ``radt.role=loader``): not a client, but its CPU is the workload's;
- a **run** row is a lone command (``radt train.py``): no parent, no children;
  it is its own provider and client, so both kinds of figures are its own.

Every figure is over a **window** (:mod:`radt.analysis.windows`): a client's
steady state (end of warm-up to last example), a provider's overlap of its
clients' windows. ``basis`` says what a row's figures are over:
``examples`` (a window with examples), ``duration`` (no examples: the command's
own duration), and for runs without counter samples (recorded before the
run-API channel, or a script that logs the metric ``examples`` itself)
``examples_lifetime`` / ``duration_lifetime``: the whole run, as radT 0.3.0.dev
reported it. Figures on different bases are never compared with each other.

Attribution: a provider's energy is that of its parent run's series. A client
with device series of its own (a lone run, or a listener that records per run)
has its own energy; a client that is the only run of its workload gets the
workload's energy and device figures over its own window (the GPU was its
alone); a collocated client's share of the GPU is not measured (NVML has no
power per MIG slice or per MPS client), so its energy is NaN and
``energy_method`` is ``none``; :mod:`radt.analysis.attribution` adds its
labelled estimate (``energy_j_est``), the energy cross-check and host energy.
CPU is per process tree (``top``): a client's own, a provider's the sum of its
clients' and its shared loader's, each across the window.
Units: ns = 1e9 × s, nJ = 1e9 × J.
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radt.analysis.attribution import (
    ATTRIBUTION_COLUMNS,
    ATTRIBUTION_KEYS,
    attribute,
    repeat_methods,
)
from radt.analysis.attribution import REPEAT_FIGURES as ATTRIBUTION_REPEATS
from radt.analysis.distributed import JOB_COLUMNS, job_rows
from radt.analysis.figures import (
    DEVICE_FIGURES,
    FIGURES,
    NAN,
    device_series,
    energy_method,
    finite_sum,
    per_example,
    run_figures,
)
from radt.analysis.load import (
    KeyFilter,
    grouping,
    open_client,
    prepare,
    probe,
    read_plans,
    run_columns,
    run_pieces,
    search_all,
    select_runs,
)
from radt.analysis.stored import restore
from radt.errors import UsageError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from radt.analysis.windows import Timeline, Window

EXAMPLES_METRIC = "examples"
SLURM_COLUMNS = ("slurm_job_id", "slurm_node")
"""The Slurm job a run ran in and its node (tags ``radt.slurm.job_id``, ``radt.slurm.node``)."""
SEED_FLAGS = ("seed",)
"""Flags that never make two runs different jobs (with ``radt.job_ignore``'s)."""
SUMMARY_KEYS = (
    "*/gpu*/energy_j",
    "*/gpu*/power_w",
    "*/gpu*/util_pct",
    "*/gpu*/smact_ratio",
    "*/gpu*/mem_used_mib",
    "top/proc/rss_mib",
    "top/proc/cpu_pct",
    "script/run/*",
    *ATTRIBUTION_KEYS,
)
"""The keys :func:`summary` loads: all that the figures and the windows read."""
COLUMNS = (
    "level",
    "run_id",
    "run_name",
    "workload",
    "letter",
    "parent_run_id",
    "status",
    "collocation",
    "mig_profile",
    "mps_thread_pct",
    "power_limit_w",
    "job",
    "configuration",
    "loader",
    "command",
    "params",
    "start",
    "end",
    "duration_s",
    "basis",
    "warmup",
    "window_start",
    "window_end",
    "window_s",
    "examples_total",
    "examples",
    "examples_per_s",
    "time_per_example_ns",
    "energy_j",
    "energy_method",
    "energy_per_example_nj",
    "cpu_s",
    "cpu_per_example_ns",
    "power_mean_w",
    "power_max_w",
    "util_mean_pct",
    "smact_mean_ratio",
    "gpu_mem_peak_mib",
    "host_mem_peak_mib",
    "slowdown",
    "baseline_run_id",
    "baseline_cv_pct",
    "examples_per_s_norm",
    "time_per_example_norm",
    "energy_per_example_norm",
    *ATTRIBUTION_COLUMNS,
    "window_note",
    "experiment_id",
    *SLURM_COLUMNS,
    *JOB_COLUMNS,
)
REPEAT_FIGURES = (
    "window_s",
    "examples",
    "examples_per_s",
    "time_per_example_ns",
    "energy_j",
    "energy_per_example_nj",
    "cpu_per_example_ns",
    "power_mean_w",
    "util_mean_pct",
    "slowdown",
    "examples_per_s_norm",
    "time_per_example_norm",
    "energy_per_example_norm",
    *ATTRIBUTION_REPEATS,
)
"""The figures :func:`repeats` aggregates."""
REPEAT_KEYS = ("view", "job", "configuration", "power_limit_w", "basis")
"""What makes runs repeats of each other (with the view: providers or clients)."""
STATISTICS = ("mean", "std", "min", "max")
LOADER_ROLE = "loader"
SHARED_LOADER = " + shared loader"
"""How a configuration label says that its trainings shared one data loader."""
COMPARISON_FIGURES = (
    "cpu_per_example_ns",
    "examples_per_s",
    "time_per_example_ns",
    "energy_per_example_nj",
    "host_energy_per_example_nj",
)
"""The provider figures :func:`loader_comparison` sets side by side."""


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
    job = (tags.get("radt.job") or "").strip()
    if job:
        return job
    ignored = [*SEED_FLAGS, *(tags.get("radt.job_ignore") or "").split()]
    params = params or {}
    command = tags.get("radt.command") or params.get("radt.command")
    if command:
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
        return shlex.join(strip_flags(argv, ignored))
    names = {name.lstrip("-") for name in ignored}
    pairs = [
        f"{k}={v}" for k, v in sorted(params.items()) if k != "radt.command" and k not in names
    ]
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
    modes = sorted({(t.get("radt.collocation") or "none") for t in runs_tags} or {"none"})
    if modes == ["none"]:
        return "none" if n <= 1 else f"none x{n}"
    if modes == ["mig"]:
        profiles: list[str] = []
        for tags in runs_tags:
            profile = tags.get("radt.mig_profile")
            if _present(profile):
                profiles.append(str(profile))
        if len(profiles) == n:
            if n and all(p == profiles[0] for p in profiles) and "+" in profiles[0]:
                profiles = profiles[0].split("+")  # every run carries the workload's list
            return "+".join(sorted(profiles, key=_profile_size, reverse=True))
        return f"mig x{n}"
    if modes == ["mps"]:
        shares = [t.get("radt.mps_thread_pct") for t in runs_tags]
        known = [f"{float(s):g}" for s in shares if _present(s)]
        if not known:
            return f"mps x{n}"
        if len(known) == n and len(set(known)) == 1:
            return f"mps:{known[0]} x{n}"
        ordered = sorted(known, key=float, reverse=True) + ["?"] * (n - len(known))
        return "mps:" + "+".join(ordered)
    if modes == ["naive"]:
        return f"naive x{n}"
    return "+".join(modes) + f" x{n}"


def workload_configuration(clients_tags: Sequence[Mapping[str, str]], shared: bool) -> str:
    """:func:`configuration_label` of a workload's clients, ``+ shared loader`` when they
    shared one (the loader is not one of the runs that share the GPU)."""
    return configuration_label(clients_tags) + (SHARED_LOADER if shared else "")


def loader_mode(tags: Mapping[str, str]) -> str:
    """``shared`` for the runs of a workload with a shared loader, else ``own``."""
    return "shared" if tags.get("radt.loader") == "shared" else "own"


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
        value = self.tags.get("radt.power_limit_w")
        return str(value) if _present(value) else None

    @property
    def basis(self) -> str:
        """What the figures are over (one of :data:`radt.analysis.windows.BASES`)."""
        if self.basis_ is not None:
            return self.basis_
        return self.window.basis if self.window is not None else "duration_lifetime"

    @property
    def alone(self) -> bool:
        """Whether the run had the GPU to itself (collocation ``none``)."""
        mode = self.tags.get("radt.collocation")
        return self.level != "provider" and (
            mode == "none" or (mode is None and self.level == "run")
        )

    @property
    def baseline_candidate(self) -> bool:
        """A FINISHED client or lone run alone on its GPU with a figure on its basis, that
        loaded its own data (a shared loader's trainings are not the Job's baseline)."""
        return (
            self.alone
            and self.level in ("client", "run")
            and self.tags.get("radt.role") != "consumer"
            and self.status == "FINISHED"
            and self.job is not None
            and math.isfinite(self.work)
        )


def _seconds(millis: int | None) -> float:
    return millis / 1000.0 if millis else NAN


def _client_window(record: Record) -> Window:
    """A client's window on the best basis it supports."""
    from radt.analysis.windows import Window, client_window

    t = record.timeline
    if t.has_examples:
        return client_window(t)
    examples = record.mlflow_examples
    tagged = math.isfinite(t.command_start_s) and math.isfinite(t.command_end_s)
    if math.isfinite(examples):
        start, end = (
            (t.command_start_s, t.command_end_s) if tagged else (record.start_s, record.end_s)
        )
        note = None if math.isfinite(end) else "the run has not ended"
        return Window(start, end, examples, "examples_lifetime", "lifetime", note)
    if tagged:
        return client_window(t)
    note = "no examples reported (radt.log_examples): per-example figures missing"
    if not math.isfinite(record.end_s):
        note = "the run has not ended; " + note
    return Window(record.start_s, record.end_s, NAN, "duration_lifetime", "lifetime", note)


def _whole_run(record: Record) -> bool:
    """Figures over all samples, as before windows: runs without counter or command times."""
    t = record.timeline
    return record.basis in ("examples_lifetime", "duration_lifetime") and not (
        math.isfinite(t.command_start_s) and math.isfinite(t.command_end_s)
    )


NO_GPU_NOTE = "no GPU listener (nvml, dcgm, smi) recorded: no GPU energy, power or utilisation"
"""The note of a row whose GPU figures are missing because no GPU was recorded at all."""


def _has_device(series: Mapping) -> bool:
    return any(q in ("energy_j", "power_w") for (_, gpu, q) in series if gpu.startswith("gpu"))


def _figures_over(record: Record, series: Mapping, start: float, end: float, whole: bool):
    """Figures of ``series`` over a window (or all samples); energy source; a note."""
    from radt.analysis.windows import window_figures

    if whole:
        figures, used = run_figures_from(series)
        return figures, energy_method(used, record.tags), None
    if not (math.isfinite(start) and math.isfinite(end) and end > start):
        return {name: NAN for name in FIGURES}, "none", None
    figures, used, note = window_figures(series, start, end)
    return figures, energy_method(used, record.tags), note


def run_figures_from(series: Mapping) -> tuple[dict[str, float], dict]:
    """:func:`radt.analysis.figures.run_figures` of already split series."""
    return run_figures(None, series=series)


def _client(record: Record, parent: Record | None, siblings: int) -> None:
    """A client's (or lone run's) window and figures over it."""
    window = record.window = _client_window(record)
    if window.note:
        record.notes.append(window.note)
    t = record.timeline
    record.examples_total = float(t.counter.max()) if t.has_examples else record.mlflow_examples
    whole = _whole_run(record)
    own, method, note = _figures_over(record, record.series, window.start_s, window.end_s, whole)
    if not _has_device(record.series) and parent is not None and siblings == 1:
        device, method, note = _figures_over(
            record, parent.series, window.start_s, window.end_s, whole
        )
        own = {**own, **{name: device[name] for name in DEVICE_FIGURES}}
    elif not _has_device(record.series) and parent is not None and _has_device(parent.series):
        note = "collocated: a run's share of the GPU's energy is not measured"
    if note:
        record.notes.append(note)
    record.figures, record.method = own, method
    _cpu_figures(record, [record], whole)
    _per_example(record)


def _loader(record: Record) -> None:
    """A shared loader's window (its command's duration) and figures over it."""
    from radt.analysis.windows import client_window

    window = record.window = client_window(record.timeline)
    if window.basis != "duration" or not window.valid:
        record.notes.append(window.note or "the loader's window is missing")
    own, record.method, note = _figures_over(
        record, record.series, window.start_s, window.end_s, False
    )
    if note:
        record.notes.append(note)
    record.figures = own
    _cpu_figures(record, [record], True)  # all its samples: its command, start to end
    _per_example(record)


def _cpu_figures(record: Record, runs: Sequence[Record], whole: bool) -> None:
    """``cpu_s``: core-seconds of ``runs``' process trees across the record's window
    (across all their samples when ``whole``); NaN with a note when one has no cover."""
    from radt.analysis.windows import CPU_KEY, cpu_between, cpu_counter

    window = record.window
    cpu = NAN
    if whole:
        totals = [
            float(cpu_counter(*run.series[CPU_KEY])[1][-1]) for run in runs if CPU_KEY in run.series
        ]
        cpu = sum(totals) if runs and len(totals) == len(runs) else NAN
    elif window.valid:
        cpu = 0.0
        for run in runs:
            used, why = cpu_between(run.series, window.start_s, window.end_s)
            if not math.isfinite(used):
                name = run.tags.get("radt.letter") or run.run_id
                who = f"run {name}: " if run is not record else ""
                record.notes.append(f"{who}{why}: CPU missing")
                cpu = NAN
                break
            cpu += used
    record.figures["cpu_s"] = cpu


def _per_example(record: Record) -> None:
    window = record.window
    seconds = window.seconds
    if record.basis in ("duration", "duration_lifetime"):
        figures = per_example(NAN, seconds, NAN)
        record.work = seconds
    else:
        figures = per_example(window.examples, seconds, record.figures.get("energy_j", NAN))
        record.work = figures["time_per_example_ns"]
    examples = window.examples if record.basis.startswith("examples") else NAN
    cpu_s = record.figures.get("cpu_s", NAN)
    figures["cpu_per_example_ns"] = 1e9 * cpu_s / examples if examples > 0 else NAN
    record.figures.update(figures)


def _provider(record: Record, kids: Sequence[Record], loaders: Sequence[Record] = ()) -> None:
    """A workload's provider window over its clients and its figures over it.

    ``loaders``: its shared loader, whose CPU counts in the workload's.
    """
    from radt.analysis.windows import (
        Window,
        device_interval_s,
        no_examples_note,
        provider_window,
        window_figures,
    )

    legacy = [k for k in kids if k.basis in ("examples_lifetime", "duration_lifetime")]
    if legacy or not kids:
        # Clients without counter samples: the workload's whole run, as before windows.
        examples = finite_sum(k.examples_total for k in kids)
        basis = "examples_lifetime" if math.isfinite(examples) else "duration_lifetime"
        silent = [
            k.tags.get("radt.letter") or k.run_id
            for k in kids
            if not math.isfinite(k.examples_total)
        ]
        if silent and basis == "examples_lifetime":
            record.notes.append(no_examples_note(silent))
            examples = NAN
        record.window = Window(record.start_s, record.end_s, examples, basis, "lifetime")
        record.examples_total = examples
        figures, used = run_figures_from(record.series)
        record.figures, record.method = figures, energy_method(used, record.tags)
        if not math.isfinite(figures["host_mem_peak_mib"]):
            record.figures["host_mem_peak_mib"] = finite_sum(
                k.figures.get("host_mem_peak_mib", NAN) for k in kids
            )
        if not math.isfinite(record.end_s):
            record.notes.append("the workload has not ended")
        _cpu_figures(record, [*kids, *loaders], True)
        _per_example(record)
        return
    clients = [(k.tags.get("radt.letter") or k.run_id, k.window, k.timeline) for k in kids]
    window = record.window = provider_window(clients, device_interval_s(record.series))
    record.examples_total = finite_sum(k.examples_total for k in kids)
    if window.note:
        record.notes.append(window.note)
    if window.valid:
        figures, used, note = window_figures(record.series, window.start_s, window.end_s)
        record.method = energy_method(used, record.tags)
        if note:
            record.notes.append(note)
    else:
        figures = {name: NAN for name in FIGURES}
    if not math.isfinite(figures["host_mem_peak_mib"]) and window.valid:
        peaks = []
        for kid in kids:
            rss = kid.series.get(("top", "proc", "rss_mib"))
            if rss is not None:
                inside = rss[1][(rss[0] >= window.start_s) & (rss[0] <= window.end_s)]
                peaks.append(float(inside.max()) if len(inside) else NAN)
        figures["host_mem_peak_mib"] = finite_sum(peaks)
    record.figures = figures
    _cpu_figures(record, [*kids, *loaders], False)
    _per_example(record)


# --------------------------------------------------------------------------- baselines


def baselines_by_job(candidates: Iterable[Record]) -> dict[tuple, list[Record]]:
    """Candidates by experiment, Job and basis (in their order), for :func:`choose_baseline`:
    one look-up per row instead of a pass over all candidates."""
    found: dict[tuple, list[Record]] = {}
    for c in candidates:
        found.setdefault((c.experiment_id, c.job, c.basis), []).append(c)
    return found


def choose_baseline(
    candidates: Iterable[Record] | Mapping[tuple, list[Record]],
    experiment_id: str,
    job: str | None,
    basis: str,
    power,
) -> tuple[list[Record], str | None]:
    """The Job's ``none`` runs on the same basis: at the same power limit, else at the default.

    ``candidates``: records, or records by :func:`baselines_by_job`. Returns the chosen
    runs (repeats; empty when none) and, when empty, why.
    """
    if job is None:
        return [], "no baseline: the run's job is unknown (no radt.command or radt.job)"
    if isinstance(candidates, Mapping):
        same = candidates.get((experiment_id, job, basis), [])
    else:
        same = [
            c
            for c in candidates
            if c.experiment_id == experiment_id and c.job == job and c.basis == basis
        ]
    for wanted in dict.fromkeys([power, None]):
        chosen = [c for c in same if c.power == wanted]
        if chosen:
            return chosen, None
    where = f"at {power} W or the default power limit" if power else "at the default power limit"
    return [], f"no baseline: no FINISHED none run of this job on basis {basis} {where}"


def _mean(values: Iterable[float]) -> float:
    values = [v for v in values if math.isfinite(v)]
    return float(sum(values) / len(values)) if values else NAN


BASELINE_SPREAD_LIMIT_PCT = 10.0
"""A baseline whose repeats' coefficient of variation is over this is flagged (docs/analysis.md)."""


def baseline_spread_pct(works: Iterable[float]) -> float:
    """The coefficient of variation of a baseline's repeats, in %: 100 × sample std / mean.

    ``works`` are the repeats' times per unit of work (ns per example, or window
    seconds on the duration bases); NaN with fewer than two finite ones.
    """
    values = [v for v in works if math.isfinite(v)]
    if len(values) < 2:
        return NAN
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values, mean) / mean if mean else NAN


def baseline_spread_flagged(pct: Any) -> bool:
    """Whether a baseline's spread (%) is over :data:`BASELINE_SPREAD_LIMIT_PCT`."""
    try:
        value = float(pct)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > BASELINE_SPREAD_LIMIT_PCT


def _slowdown(record: Record, candidates: Sequence[Record] | Mapping) -> dict[str, Any]:
    found, why = choose_baseline(
        candidates, record.experiment_id, record.job, record.basis, record.power
    )
    if not found:
        record.notes.append(why)
        return {"slowdown": NAN, "baseline_run_id": None, "baseline_cv_pct": NAN}
    base = _mean(c.work for c in found)
    return {
        "slowdown": record.work / base,
        "baseline_run_id": " ".join(c.run_id for c in found),
        "baseline_cv_pct": baseline_spread_pct(c.work for c in found),
    }


def _norm_client(record: Record, candidates: Sequence[Record] | Mapping) -> dict[str, float]:
    """A client's figures over its Job's baseline at the default power limit."""
    found, why = choose_baseline(candidates, record.experiment_id, record.job, record.basis, None)
    if not found:
        if record.power is not None:
            record.notes.append(why.replace("no baseline", "no normalised figures"))
        return {}
    time_norm = record.work / _mean(c.work for c in found)
    energy = "energy_per_example_nj" if record.basis.startswith("examples") else "energy_j"
    return {
        "time_per_example_norm": time_norm,
        "examples_per_s_norm": 1.0 / time_norm if time_norm else NAN,
        "energy_per_example_norm": record.figures.get(energy, NAN)
        / _mean(c.figures.get(energy, NAN) for c in found),
    }


def _norm_provider(
    record: Record, kids: Sequence[Record], candidates: Sequence[Record] | Mapping
) -> dict[str, float]:
    """A workload's figures over what its clients' baselines would need for the same examples.

    time_per_example_norm = window / Σ nᵢ·tᵢ and energy_per_example_norm =
    energy / Σ nᵢ·eᵢ, where nᵢ are client i's examples in the provider window
    and tᵢ, eᵢ the time and energy per example of its Job's baseline at the
    default power limit: for one Job, the provider's time (energy) per
    example over the baseline's.
    """
    from radt.analysis.windows import counter_increase

    window = record.window
    if record.basis not in ("examples", "examples_lifetime") or not math.isfinite(window.examples):
        return {}
    time_base = energy_base = 0.0
    for kid in kids:
        found, why = choose_baseline(candidates, kid.experiment_id, kid.job, kid.basis, None)
        if not found:
            record.notes.append(why.replace("no baseline", "no normalised figures"))
            return {}
        if record.basis == "examples" and kid.run_id in record.kid_examples:
            n = record.kid_examples[kid.run_id]
        elif record.basis == "examples":
            n = counter_increase(*kid.timeline.counter_points(), window.start_s, window.end_s)
        else:
            n = kid.examples_total
        time_base += n * _mean(c.work for c in found)
        energy_base += n * _mean(c.figures.get("energy_per_example_nj", NAN) for c in found)
    time_norm = 1e9 * window.seconds / time_base if time_base else NAN
    return {
        "time_per_example_norm": time_norm,
        "examples_per_s_norm": 1.0 / time_norm if time_norm else NAN,
        "energy_per_example_norm": 1e9 * record.figures.get("energy_j", NAN) / energy_base
        if energy_base
        else NAN,
    }


# --------------------------------------------------------------------------- rows


def _params(run) -> str | None:
    params = {k: v for k, v in run.data.params.items() if k != "radt.command"}
    return " ".join(f"{k}={v}" for k, v in sorted(params.items())) or None


def _stamp_s(seconds: float):
    import pandas as pd

    return pd.Timestamp(seconds, unit="s", tz="UTC") if math.isfinite(seconds) else pd.NaT


def _mps(value: str | None) -> float:
    try:
        return float(value) if value is not None else NAN
    except ValueError:
        return NAN


def _row(record: Record, configuration: str) -> dict:
    run = record.run
    tags = run_columns(run)
    info = run.info
    window = record.window
    duration = (
        (info.end_time - info.start_time) / 1000.0
        if info.end_time is not None and info.start_time
        else NAN
    )
    row = {
        "level": record.level,
        "run_id": info.run_id,
        "run_name": tags["run_name"],
        "workload": tags["workload"],
        "letter": tags["letter"],
        "parent_run_id": tags["parent_run_id"],
        "status": tags["status"],
        "collocation": tags["collocation"],
        "mig_profile": tags["mig_profile"],
        "mps_thread_pct": _mps(tags["mps_thread_pct"]),
        "power_limit_w": tags["power_limit_w"],
        "job": record.job,
        "configuration": configuration,
        "loader": loader_mode(run.data.tags),
        "command": run.data.tags.get("radt.command"),
        "params": _params(run),
        "start": _stamp_s(_seconds(info.start_time)),
        "end": _stamp_s(_seconds(info.end_time)),
        "duration_s": duration,
        "basis": record.basis,
        "warmup": window.warmup,
        "window_start": _stamp_s(window.start_s),
        "window_end": _stamp_s(window.end_s),
        "window_s": window.seconds,
        "examples_total": record.examples_total,
        "examples": window.examples,
        "energy_method": record.method,
        "slowdown": NAN,
        "baseline_run_id": None,
        "baseline_cv_pct": NAN,
        "experiment_id": info.experiment_id,
        "slurm_job_id": run.data.tags.get("radt.slurm.job_id"),
        "slurm_node": run.data.tags.get("radt.slurm.node"),
    }
    row.update(record.figures)
    return row


def summary(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
    by: str | None = None,
) -> pd.DataFrame:
    """One row per workload (``provider``), per run of one (``client``), per lone run (``run``).

    Args:
        experiment: experiment name or id; all its runs unless ``runs`` narrows them.
        runs: run ids; the workload of each is added (its provider row).
        tracking_uri: else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.
        cache_dir: where samples artifacts are cached (default ``$RADT_HOME/cache``).
        by: ``"repeats"``: the table of :func:`repeats` instead (one row per
            Job × configuration × power limit × basis, for providers and clients);
            ``"phases"``: the table of :func:`radt.analysis.phases.phases` (one row
            per run and ``radt.phase`` phase: time share, count, energy share);
            ``"loader"``: the table of :func:`loader_comparison` (own loaders against
            one shared loader, per Job and configuration).

    Returns:
        The columns of :data:`COLUMNS`, a workload's provider row first and its
        clients after it (by letter), in order of start. docs/analysis.md
        defines each; in short:

        - ``job``, ``configuration``: what was trained and how the GPU was shared
          (``+ shared loader`` when the trainings shared one data loader);
          ``loader``: ``shared`` or ``own``;
        - ``basis``, ``warmup``, ``window_start``, ``window_end``, ``window_s``:
          the window every figure of the row is over and what set its start;
        - ``examples``: the examples in the window; ``examples_total``: the
          run's (a provider's: its clients') whole count;
        - ``examples_per_s``, ``time_per_example_ns`` (1e9 × window_s /
          examples), ``energy_j`` (GPU energy across the window),
          ``energy_method``, ``energy_per_example_nj`` (1e9 × energy_j /
          examples), and power, utilisation, SM activity and memory from the
          samples inside the window;
        - ``cpu_s``: CPU core-seconds of the process tree across the window (a
          workload: of all its runs, its shared loader included);
          ``cpu_per_example_ns`` (1e9 × cpu_s / examples);
        - ``duration_s``: the run's MLflow wall time (end − start), as before;
        - ``slowdown``: the client's time per example (on the duration basis:
          its window) over the mean of its baseline's repeats
          (``baseline_run_id``, space-separated): the FINISHED ``none`` runs of
          its Job on the same basis at the same power limit, else at the default;
          ``baseline_cv_pct``: how far those repeats spread (coefficient of
          variation, %; flagged over :data:`BASELINE_SPREAD_LIMIT_PCT`);
        - ``*_norm``: figures over the Job's ``none`` baseline at the default
          power limit (a provider: over what the baselines would need for the
          same examples);
        - ``energy_counter_j``, ``energy_power_integral_j``,
          ``energy_crosscheck_pct``: the counter against integrated power;
          ``host_energy_j`` (CPU + DRAM, rapl) and per example,
          ``total_energy_per_example_nj``; a collocated client's estimate
          ``energy_j_est`` by ``energy_est_method``; the idle floor
          (:mod:`radt.analysis.attribution`);
        - ``window_note``: why a figure is missing, ``; ``-separated.
    """
    import pandas as pd

    if by not in (None, "repeats", "phases", "loader"):
        raise UsageError(f"by= takes 'repeats', 'phases', 'loader' or nothing, not {by!r}")
    if by == "phases":
        from radt.analysis.phases import phases

        return phases(experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir)
    client = open_client(tracking_uri)
    chosen = select_runs(client, experiment, runs, include_workload=True)
    if runs is None:
        context = chosen
    else:
        context = search_all(client, sorted({r.info.experiment_id for r in chosen}))
    # a study's run and its batch-size probes are no measurements of their own
    chosen = [r for r in chosen if not (grouping(r) or probe(r))]
    context = [r for r in context if not (grouping(r) or probe(r))]
    by_id = {r.info.run_id: r for r in [*context, *chosen]}
    children: dict[str, list] = {}
    for run in by_id.values():
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent:
            children.setdefault(parent, []).append(run)
    for kids in children.values():
        kids.sort(key=_child_order)
    parents = set(children) | {
        r.info.run_id
        for r in by_id.values()
        if "radt.workload_runs" in r.data.tags and "radt.letter" not in r.data.tags
    }

    def level(run) -> str:
        if run.info.run_id in parents:
            return "provider"
        if not run.data.tags.get("mlflow.parentRunId"):
            return "run"
        return "loader" if run.data.tags.get("radt.role") == LOADER_ROLE else "client"

    records = {run.info.run_id: Record.of(run, level(run)) for run in by_id.values()}
    chosen_ids = {r.info.run_id for r in chosen}
    wanted = set(chosen_ids)
    for pid in chosen_ids & parents:
        wanted |= {k.info.run_id for k in children.get(pid, [])}
    jobs = {(records[i].experiment_id, records[i].job) for i in wanted if records[i].job}
    for record in records.values():  # baselines of the chosen runs' jobs, with their workloads
        same_job = (record.experiment_id, record.job) in jobs
        alone = record.tags.get("radt.collocation") in ("none", None)
        if record.level != "provider" and same_job and alone:
            wanted.add(record.run_id)
            parent = record.tags.get("mlflow.parentRunId")
            if parent in records:
                wanted.add(parent)
    needed = [by_id[i] for i in sorted(wanted, key=lambda i: _order(by_id[i]))]
    stored = restore(records, [run.info.run_id for run in needed], children)
    needed = [run for run in needed if run.info.run_id not in stored]
    plans = prepare(client, needed, cache_dir=cache_dir)
    extra = _compute(client, records, plans, children)
    attribute(records, needed, extra, children)

    baselines = baselines_by_job(
        sorted(
            (r for r in (records[i] for i in wanted) if r.baseline_candidate),
            key=lambda r: (r.start_s, r.run_id),
        )
    )
    rows: dict[str, dict] = {}
    for run in chosen:
        record = records[run.info.run_id]
        kids = [records[k.info.run_id] for k in children.get(record.run_id, [])]
        if record.level == "provider":
            clients = [k for k in kids if k.level == "client"]
            shared = loader_mode(record.tags) == "shared"
            row = _row(record, workload_configuration([k.tags for k in clients], shared))
            row["job"] = " + ".join(dict.fromkeys(k.job for k in clients if k.job)) or None
            row["command"] = " | ".join(k.tags.get("radt.command", "?") for k in clients) or None
            row["params"] = None
            row.update(_norm_provider(record, clients, baselines))
            parent = None
        else:
            parent = records.get(record.tags.get("mlflow.parentRunId") or "")
            kin = (
                [records[s.info.run_id] for s in children.get(parent.run_id, [])] if parent else []
            )
            siblings = [k for k in kin if k.level == "client"] if parent else [record]
            shared = loader_mode(record.tags) == "shared"
            row = _row(record, workload_configuration([s.tags for s in siblings], shared))
            if record.level != "loader":
                row.update(_slowdown(record, baselines))
                row.update(_norm_client(record, baselines))
        gpu = record.has_device or (
            record.level == "client" and parent is not None and parent.has_device
        )
        if not gpu and record.level != "loader":
            record.notes.append(NO_GPU_NOTE)
        row["window_note"] = "; ".join(dict.fromkeys(record.notes)) or None
        rows[record.run_id] = row

    ordered: list[dict] = []
    for run in chosen:  # oldest first; a workload's clients follow its provider row
        run_id = run.info.run_id
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent in rows:
            continue
        ordered.append(rows[run_id])
        ordered.extend(
            rows[k.info.run_id] for k in children.get(run_id, []) if k.info.run_id in rows
        )
    frame = pd.DataFrame(ordered, columns=list(COLUMNS))
    for column in ("start", "end", "window_start", "window_end"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    frame = job_rows(frame, by_id)
    if by == "loader":
        return loader_comparison(frame)
    return repeats(frame) if by == "repeats" else frame


def _order(run) -> tuple:
    return (run.info.start_time or 0, run.info.run_id)


def _child_order(run) -> tuple:
    """A workload's runs by letter, its shared loader last."""
    tags = run.data.tags
    return (
        tags.get("radt.role") == LOADER_ROLE,
        tags.get("radt.letter") or "",
        run.info.start_time or 0,
    )


def run_series(
    pieces: Iterable[pa.Table | pd.DataFrame], tags: Mapping[str, str]
) -> tuple[dict, Timeline]:
    """A run's device series (:func:`device_series`) and :class:`Timeline` from its samples
    handed over a piece at a time (tables, or tidy frames): only one piece is a frame at once.

    The same as both computed from all the pieces as one frame: each key's pieces are
    joined in the order read and sorted by time, stably.
    """
    import numpy as np
    import pandas as pd

    from radt.analysis.windows import SCRIPT_KEYS, timeline

    parts: dict[tuple[str, str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    script = []
    for piece in pieces:
        frame = piece if isinstance(piece, pd.DataFrame) else piece.to_pandas()
        del piece
        for name, pair in device_series(frame).items():
            parts.setdefault(name, []).append(pair)
        rows = frame[frame["key"].isin(SCRIPT_KEYS)]
        if len(rows):
            script.append(rows.astype({"key": str}))
        del frame, rows
    series = {}
    while parts:
        name, pairs = parts.popitem()
        seconds = np.concatenate([p[0] for p in pairs])
        values = np.concatenate([p[1] for p in pairs])
        if len(pairs) > 1:
            order = np.argsort(seconds, kind="stable")
            seconds, values = seconds[order], values[order]
        series[name] = (seconds, values)
    return series, timeline(pd.concat(script) if script else None, tags)


def _compute(client, records: dict[str, Record], plans: Sequence, children) -> dict:
    """Windows and figures of every needed run: clients first, then their workloads; returns
    each run's samples of the attribution's keys (:data:`ATTRIBUTION_KEYS`), as tables.

    A run with a samples artifact is read a piece at a time (:func:`run_series`): memory
    holds the series the figures use, never the run's samples as a table. Runs read
    from MLflow's decimated metrics are small and read together, in parallel.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted, extra_keys = KeyFilter(SUMMARY_KEYS), KeyFilter(ATTRIBUTION_KEYS)
    decimated = read_plans(client, [p for p in plans if p.artifact is None], wanted)
    extra: dict[str, pa.Table] = {}

    def tap(pieces, kept: list) -> Iterable[pa.Table]:
        for piece in pieces:  # the attribution's own keys are kept aside as rows
            names = [k for k in pc.unique(piece["key"]).to_pylist() if k and extra_keys(k)]
            if names:
                kept.append(piece.filter(pc.is_in(piece["key"], value_set=pa.array(names))))
            yield piece

    for plan in plans:
        record = records[plan.run.info.run_id]
        if plan.artifact is None:
            pieces = [decimated.pop(record.run_id)]
        else:
            pieces = run_pieces(client, plan, wanted)
        kept: list[pa.Table] = []
        record.series, record.timeline = run_series(tap(pieces, kept), record.tags)
        if kept:
            extra[record.run_id] = pa.concat_tables(kept)
    needed = [plan.run for plan in plans]
    ids = {run.info.run_id for run in needed}
    for run in needed:
        record = records[run.info.run_id]
        if record.level == "provider":
            continue
        if record.level == "loader":
            _loader(record)
            continue
        parent = records.get(record.tags.get("mlflow.parentRunId") or "")
        parent = parent if parent is not None and parent.run_id in ids else None
        kids = children.get(parent.run_id, []) if parent else []
        siblings = sum(records[k.info.run_id].level == "client" for k in kids) if parent else 1
        _client(record, parent, siblings)
    for run in needed:
        record = records[run.info.run_id]
        if record.level != "provider":
            continue
        kids = [records[k.info.run_id] for k in children.get(record.run_id, [])]
        if all(k.window is not None for k in kids):  # else only loaded for a baseline's energy
            clients = [k for k in kids if k.level == "client"]
            _provider(record, clients, [k for k in kids if k.level == "loader"])
    return extra


# --------------------------------------------------------------------------- repeats


def repeats(frame: pd.DataFrame, figures: Sequence[str] = REPEAT_FIGURES) -> pd.DataFrame:
    """Repeats of a :func:`summary` frame: per Job × configuration × power limit × basis.

    Two views: ``view = "provider"`` groups the workloads and lone runs,
    ``view = "client"`` the clients and lone runs (a lone run is both).
    Columns: the group (``view, job, configuration, power_limit_w, basis``),
    ``count`` (rows in the group), ``run_ids`` (space-separated) and, for every
    figure of ``figures``, ``<figure>_mean``, ``_std`` (sample standard
    deviation, NaN for one repeat), ``_min`` and ``_max`` over the rows where
    the figure is known. A missing power limit (the default) reads ``default``.
    """
    import pandas as pd

    parts = []
    for view, levels in (("provider", ("provider", "run")), ("client", ("client", "run"))):
        rows = frame[frame["level"].isin(levels)].copy()
        if rows.empty:
            continue
        rows["view"] = view
        parts.append(rows)
    columns = [
        *REPEAT_KEYS,
        "count",
        "run_ids",
        *(f"{name}_{stat}" for name in figures for stat in STATISTICS),
        "energy_est_method",
    ]
    if not parts:
        return pd.DataFrame(columns=columns)
    rows = pd.concat(parts, ignore_index=True)
    rows["job"] = rows["job"].fillna("-")
    rows["configuration"] = rows["configuration"].fillna("-")
    rows["power_limit_w"] = rows["power_limit_w"].astype(object).fillna("default")
    rows["basis"] = rows["basis"].fillna("-")
    out = []
    for key, group in rows.groupby(list(REPEAT_KEYS), sort=False, dropna=False):
        entry = dict(zip(REPEAT_KEYS, key, strict=True))
        entry["count"] = len(group)
        entry["run_ids"] = " ".join(group["run_id"].astype(str))
        for name in figures:
            values = pd.to_numeric(group[name], errors="coerce")
            entry[f"{name}_mean"] = values.mean()
            entry[f"{name}_std"] = values.std(ddof=1)
            entry[f"{name}_min"] = values.min()
            entry[f"{name}_max"] = values.max()
        entry.update(repeat_methods(group))
        out.append(entry)
    return pd.DataFrame(out, columns=columns)


# --------------------------------------------------------------------------- shared loading


def loader_comparison(
    frame: pd.DataFrame, figures: Sequence[str] = COMPARISON_FIGURES
) -> pd.DataFrame:
    """Workloads with their own loaders against the same with one shared loader.

    One row per Job × configuration (without ``+ shared loader``) × power limit ×
    basis that has workloads of both kinds: ``own_count``/``shared_count`` (the
    workloads), ``own_run_ids``/``shared_run_ids`` and, for every figure of
    ``figures``, ``own_<figure>`` and ``shared_<figure>`` (means over the
    workloads where it is known) and ``<figure>_ratio`` (shared / own: below 1,
    the shared loader needs less CPU, time or energy per example; above 1 for
    ``examples_per_s``, it is faster). Groups with only one kind are left out.
    """
    import pandas as pd

    keys = ["job", "configuration", "power_limit_w", "basis"]
    columns = [
        *keys,
        "own_count",
        "shared_count",
        "own_run_ids",
        "shared_run_ids",
        *(f"{side}_{name}" for name in figures for side in ("own", "shared")),
        *(f"{name}_ratio" for name in figures),
    ]
    rows = frame[frame["level"] == "provider"].copy()
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows["configuration"] = rows["configuration"].astype(str).str.removesuffix(SHARED_LOADER)
    rows["job"] = rows["job"].fillna("-")
    rows["power_limit_w"] = rows["power_limit_w"].astype(object).fillna("default")
    rows["basis"] = rows["basis"].fillna("-")
    out = []
    for key, group in rows.groupby(keys, sort=False, dropna=False):
        sides = {side: group[group["loader"] == side] for side in ("own", "shared")}
        if sides["own"].empty or sides["shared"].empty:
            continue
        entry = dict(zip(keys, key, strict=True))
        for side, part in sides.items():
            entry[f"{side}_count"] = len(part)
            entry[f"{side}_run_ids"] = " ".join(part["run_id"].astype(str))
        for name in figures:
            own = pd.to_numeric(sides["own"][name], errors="coerce").mean()
            shared = pd.to_numeric(sides["shared"][name], errors="coerce").mean()
            entry[f"own_{name}"], entry[f"shared_{name}"] = own, shared
            entry[f"{name}_ratio"] = shared / own if own and math.isfinite(own) else NAN
        out.append(entry)
    return pd.DataFrame(out, columns=columns)
