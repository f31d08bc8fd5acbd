"""Steady-state windows and the arithmetic across them (pure functions on arrays and frames).

Definitions (docs/analysis.md has them with a worked example):

- **Client window** of one run: from the end of its warm-up to its last
  example. The end of the warm-up is, first that applies: the latest
  ``radt.start_window()`` mark; ``--warmup-s S`` (command start + S);
  ``--warmup-epochs N`` (the N-th epoch mark; N = 0: the command start); the
  first epoch mark when the run reported at least two epochs; the first
  counter sample (the first ``radt.log_examples`` call). The window ends at the
  last example: where the counter first reaches its final value
  (:func:`last_example_s`), never at a later epoch mark, validation or tail
  that only repeats the count. Its examples are counter(end) − counter(start): a bound
  on a sample uses that sample, a bound between two samples interpolates them
  linearly; a bound at or before the command start counts from 0 (nothing was
  counted before the command started). ``basis = "examples"``.
  Without examples the window is the command's own duration (its start moved
  by a warm-up mark or override when there is one) and ``basis = "duration"``.
- **Provider window** of a workload: the intersection of its clients'
  windows. Its examples are the sum of each client's counter increase inside
  it. An empty overlap, or one shorter than :func:`min_overlap_s`, gives no
  provider figures, with the reason.
- **Energy across a window**: per GPU, the energy counter interpolated at the
  bounds (after undoing resets), else the trapezoid integral of power over the
  window (labelled ``integrated_power``). A bound at most one sampling interval
  outside the samples is extrapolated from the nearest interval (the device
  listener starts a moment after the command); farther out the energy is
  missing with the reason.
- **CPU across a window**: core-seconds of a run's process tree, from ``top``'s
  ``top/proc/cpu_pct`` (each sample the tree's CPU over the time since the one
  before; the first over the time since the listener's first sample) summed
  into a CPU-time counter, which is interpolated at the bounds like an energy
  counter.

Times are float epoch seconds. Units: ns = 1e9 × s, nJ = 1e9 × J.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from radt.analysis.figures import (
    FIGURES,
    GAP_FACTOR,
    NAN,
    SOURCES,
    all_samples_energy,
    device_series,
    energy_per_gpu,
    epoch_seconds,
    per_example,
    sample_figures,
)
from radt.quantities import sources
from radt.tags import RADT_COMMAND_END_S, RADT_COMMAND_START_S, RADT_WARMUP_EPOCHS, RADT_WARMUP_S

if TYPE_CHECKING:
    import pandas as pd

COUNTER_KEY = "script/run/examples"
EPOCH_KEY = "script/run/epoch"
WINDOW_MARK_KEY = "script/run/window_start"
SCRIPT_KEYS = (COUNTER_KEY, EPOCH_KEY, WINDOW_MARK_KEY)
MIN_OVERLAP_INTERVALS = 3
"""A provider window shorter than this many device sampling intervals is too short…"""
MIN_OVERLAP_FLOOR_S = 1.0
"""…and never shorter than this."""

BASES = ("examples", "duration", "examples_lifetime", "duration_lifetime")
"""What a row's figures are over: a steady-state window with examples; the command's duration
without examples; and for runs without counter samples (recorded before the run-API channel, or a
script that logs the metric ``examples`` itself) the whole run, with or without examples."""
LIFETIME_BASES = BASES[2:]


# --------------------------------------------------------------------------- what a run reported


@dataclass(frozen=True)
class Timeline:
    """What one run reported about its progress, and when (epoch seconds)."""

    counter_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    """Times of the counter samples (``script/run/examples``), ascending."""
    counter: np.ndarray = field(default_factory=lambda: np.empty(0))
    """The run's cumulative examples at those times."""
    epoch_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    """Times of the epoch marks (``radt.log_epoch``), ascending."""
    mark_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    """Times of ``radt.start_window()`` calls, ascending."""
    command_start_s: float = NAN
    command_end_s: float = NAN
    warmup_epochs: int | None = None
    warmup_s: float | None = None

    @property
    def has_examples(self) -> bool:
        """Whether the run counted any example."""
        return bool(len(self.counter)) and float(np.nanmax(self.counter)) > 0

    def counter_points(self) -> tuple[np.ndarray, np.ndarray]:
        """The counter samples, led by ``(command start, 0)`` when the command's start is known.

        Nothing was counted before the command started.
        """
        start = self.command_start_s
        if not len(self.counter_s) or not math.isfinite(start) or start >= self.counter_s[0]:
            return self.counter_s, self.counter
        return np.concatenate([[start], self.counter_s]), np.concatenate([[0.0], self.counter])


@dataclass(frozen=True)
class Window:
    """A window and what it holds: its bounds, examples, basis, and why anything is missing."""

    start_s: float = NAN
    end_s: float = NAN
    examples: float = NAN
    basis: str = "duration"
    warmup: str = "none"
    """What set the start: ``start_window``, ``warmup_s``, ``warmup_epochs``, ``first_epoch``,
    ``first_example``, ``none`` (the command's start), ``overlap`` (a provider), ``lifetime``."""
    note: str | None = None
    """Why a figure is missing (None when nothing is)."""

    @property
    def seconds(self) -> float:
        """The window's length (NaN when it has none)."""
        length = self.end_s - self.start_s
        return length if math.isfinite(length) and length > 0 else NAN

    @property
    def valid(self) -> bool:
        """Whether the window has a positive length."""
        return math.isfinite(self.seconds)


def _number(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return NAN
    return value if math.isfinite(value) else NAN


def _times(frame: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray]:
    rows = frame[frame["key"] == key]
    if not len(rows):
        return np.empty(0), np.empty(0)
    seconds = epoch_seconds(rows["timestamp"])
    values = rows["value"].to_numpy(np.float64)
    keep = np.isfinite(seconds) & np.isfinite(values)
    seconds, values = seconds[keep], values[keep]
    order = np.lexsort((values, seconds))
    return seconds[order], values[order]


def timeline(frame: pd.DataFrame | None, tags: Mapping[str, str]) -> Timeline:
    """A run's :class:`Timeline` from its tidy samples and its tags.

    Reads the samples ``script/run/examples``, ``script/run/epoch`` and
    ``script/run/window_start`` and the tags ``radt.command_start_s``,
    ``radt.command_end_s``, ``radt.warmup_epochs`` and ``radt.warmup_s``.
    """
    empty = np.empty(0)
    if frame is not None and len(frame):
        frame = frame[frame["key"].isin(SCRIPT_KEYS)]
    if frame is None or not len(frame):
        counter_s = counter = epoch_s = mark_s = empty
    else:
        counter_s, counter = _times(frame, COUNTER_KEY)
        counter_s, counter = _dedupe(counter_s, counter)
        epoch_s = _times(frame, EPOCH_KEY)[0]
        mark_s = _times(frame, WINDOW_MARK_KEY)[0]
    epochs = _number(tags.get(RADT_WARMUP_EPOCHS))
    seconds = _number(tags.get(RADT_WARMUP_S))
    return Timeline(
        counter_s=counter_s,
        counter=counter,
        epoch_s=epoch_s,
        mark_s=mark_s,
        command_start_s=_number(tags.get(RADT_COMMAND_START_S)),
        command_end_s=_number(tags.get(RADT_COMMAND_END_S)),
        warmup_epochs=int(epochs) if math.isfinite(epochs) and epochs >= 0 else None,
        warmup_s=seconds if math.isfinite(seconds) and seconds >= 0 else None,
    )


def _dedupe(seconds: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One counter value per time: the highest (the counter only grows)."""
    if len(seconds) < 2:
        return seconds, values
    last = np.append(seconds[1:] != seconds[:-1], True)
    return seconds[last], values[last]


# --------------------------------------------------------------------------- interpolation


def value_at(seconds: np.ndarray, values: np.ndarray, at: float, reach_s: float = 0.0) -> float:
    """A sampled quantity at time ``at``: the sample there, else linear between its neighbours.

    Outside the samples, up to ``reach_s`` beyond the first or last one, the
    nearest interval's line is extended; farther out the value is NaN.
    """
    if not len(seconds) or not math.isfinite(at):
        return NAN
    first, last = seconds[0], seconds[-1]
    if first <= at <= last:
        return float(np.interp(at, seconds, values))
    if at < first and first - at <= reach_s:
        return _extend(seconds[:2], values[:2], at)
    if at > last and at - last <= reach_s:
        return _extend(seconds[-2:], values[-2:], at)
    return NAN


def _extend(seconds: np.ndarray, values: np.ndarray, at: float) -> float:
    if len(seconds) < 2 or seconds[1] <= seconds[0]:
        return float(values[0] if at < seconds[0] else values[-1])
    slope = (values[1] - values[0]) / (seconds[1] - seconds[0])
    anchor = 0 if at < seconds[0] else 1
    return float(values[anchor] + slope * (at - seconds[anchor]))


def sampling_interval(seconds: np.ndarray) -> float:
    """The median interval between samples (NaN with fewer than two distinct times)."""
    seconds = np.asarray(seconds, np.float64)
    steps = np.diff(seconds[np.isfinite(seconds)])
    steps = steps[steps > 0]
    return float(np.median(steps)) if len(steps) else NAN


def counter_increase(seconds: np.ndarray, values: np.ndarray, start: float, end: float) -> float:
    """How much the examples counter grew from ``start`` to ``end`` (NaN outside its samples)."""
    return value_at(seconds, values, end) - value_at(seconds, values, start)


# --------------------------------------------------------------------------- client window


def last_example_s(t: Timeline) -> float:
    """When the run counted its last example: the first counter sample at the counter's final
    value (the time of its last increase); NaN without counter samples.

    This is where every steady-state window ends (a client's, and through them a workload's
    overlap and a distributed job's). The run API stamps a count with the time of the last
    ``radt.log_examples`` call it includes and repeats it at an epoch mark with the mark's time
    (runs recorded before it did so sent only the latter), so a sample after the last increase
    only says that nothing more was counted, and the window ends before it. The first sample
    that reaches the final value, not the last change: in a run of several processes a count
    stamped with an earlier call's time can reach radT after another process's later one, and
    the sum then dips between them.
    """
    if not len(t.counter_s):
        return NAN
    reached = np.flatnonzero(t.counter >= t.counter[-1])
    return float(t.counter_s[reached[0]])


def client_window(t: Timeline) -> Window:
    """The client window of one run (see the module docstring)."""
    if t.has_examples:
        return _examples_window(t)
    start, rule, note = _warmup_end(t, examples=False)
    end = t.command_end_s
    why = ["no examples reported (radt.log_examples): per-example figures missing"]
    if note:
        why.insert(0, note)
    if not math.isfinite(start) or not math.isfinite(end):
        why.insert(0, "the command's start or end was not recorded")
        return Window(basis="duration", warmup=rule, note="; ".join(why))
    if end <= start:
        why.insert(0, f"the warm-up ({rule}) outlasts the command")
        return Window(start, end, basis="duration", warmup=rule, note="; ".join(why))
    return Window(start, end, basis="duration", warmup=rule, note="; ".join(why))


def _warmup_end(t: Timeline, examples: bool) -> tuple[float, str, str | None]:
    """When the warm-up ends, the rule that said so, and a note when it is not reached."""
    if len(t.mark_s):
        return float(t.mark_s[-1]), "start_window", None
    if t.warmup_s is not None:
        if not math.isfinite(t.command_start_s):
            return NAN, "warmup_s", "the command's start was not recorded (needed by --warmup-s)"
        return t.command_start_s + t.warmup_s, "warmup_s", None
    if t.warmup_epochs is not None:
        n = t.warmup_epochs
        if n == 0:
            return t.command_start_s, "warmup_epochs", None
        if len(t.epoch_s) < n:
            return (
                NAN,
                "warmup_epochs",
                (f"the warm-up of {n} epochs was not reached ({len(t.epoch_s)} reported)"),
            )
        return float(t.epoch_s[n - 1]), "warmup_epochs", None
    if examples and len(t.epoch_s) >= 2:
        return float(t.epoch_s[0]), "first_epoch", None
    if examples:
        return float(t.counter_s[0]), "first_example", None
    return t.command_start_s, "none", None


def _examples_window(t: Timeline) -> Window:
    start, rule, note = _warmup_end(t, examples=True)
    end = last_example_s(t)
    if note or not math.isfinite(start):
        note = note or "the command's start was not recorded"
        return Window(end_s=end, basis="examples", warmup=rule, note=note)
    seconds, counter = t.counter_points()
    if math.isfinite(t.command_start_s) and start <= t.command_start_s:
        start = t.command_start_s  # nothing was counted before: the counter is 0 there
    elif start < t.counter_s[0]:
        note = (
            f"the warm-up ({rule}) ended before the first example was reported: "
            "the window starts at the first example"
        )
        start, rule = float(t.counter_s[0]), "first_example"
    if not start < end:
        why = f"no steady state: the warm-up ({rule}) lasts until the last example"
        return Window(start, end, basis="examples", warmup=rule, note=why)
    examples = counter_increase(seconds, counter, start, end)
    return Window(start, end, examples, basis="examples", warmup=rule, note=note)


# --------------------------------------------------------------------------- provider window


def runs_named(names: Sequence[str]) -> str:
    """``run A`` or ``runs A, B``: the runs a note is about."""
    return ("run " if len(names) == 1 else "runs ") + ", ".join(names)


def no_examples_note(names: Sequence[str]) -> str:
    """``run B reports no examples: …`` (``runs B, C report …``)."""
    verb = "reports" if len(names) == 1 else "report"
    return f"{runs_named(names)} {verb} no examples: per-example figures missing"


def min_overlap_s(device_interval_s: float = NAN) -> float:
    """The shortest provider window: 3 device sampling intervals, at least 1 s."""
    if not math.isfinite(device_interval_s):
        return MIN_OVERLAP_FLOOR_S
    return max(MIN_OVERLAP_FLOOR_S, MIN_OVERLAP_INTERVALS * device_interval_s)


def provider_window(
    clients: Sequence[tuple[str, Window, Timeline]], device_interval_s: float = NAN
) -> Window:
    """The provider window of a workload from its clients' ``(letter, window, timeline)``.

    The intersection of the client windows; its examples are the sum of each
    client's counter increase inside it. Every client must have a window; with
    clients on the duration basis the window is the intersection of their
    command windows and has no examples.
    """
    if not clients:
        return Window(basis="duration", warmup="overlap", note="the workload has no runs")
    missing = [letter for letter, w, _ in clients if not w.valid]
    counted = [w.basis == "examples" for _, w, _ in clients]
    basis = "examples" if all(counted) else "duration"
    if missing:
        return Window(
            basis=basis,
            warmup="overlap",
            note=f"no window for {runs_named(missing)}: no provider window",
        )
    start = max(w.start_s for _, w, _ in clients)
    end = min(w.end_s for _, w, _ in clients)
    shortest = min_overlap_s(device_interval_s)
    if not end > start:
        return Window(
            basis=basis, warmup="overlap", note="the runs' windows do not overlap in time"
        )
    if end - start < shortest:
        return Window(
            basis=basis,
            warmup="overlap",
            note=f"the runs overlap for {end - start:.3g} s only, less than {shortest:.3g} s "
            f"({MIN_OVERLAP_INTERVALS} device sampling intervals, at least "
            f"{MIN_OVERLAP_FLOOR_S:g} s)",
        )
    if basis != "examples":
        silent = [letter for (letter, _, _), c in zip(clients, counted, strict=True) if not c]
        note = no_examples_note(silent)
        return Window(start, end, basis="duration", warmup="overlap", note=note)
    examples = 0.0
    for _, _, t in clients:
        examples += counter_increase(*t.counter_points(), start, end)
    return Window(start, end, examples, basis="examples", warmup="overlap")


# --------------------------------------------------------------------------- energy across a window


def unwrap_counter(values: np.ndarray) -> np.ndarray:
    """An energy counter with its resets undone: the running sum of its increases."""
    values = np.asarray(values, np.float64)
    if len(values) < 2:
        return values
    steps = np.diff(values)
    if (steps >= 0).all():
        return values
    return np.concatenate([[values[0]], values[0] + np.cumsum(np.maximum(steps, 0.0))])


def counter_energy_between(
    seconds: np.ndarray, joules: np.ndarray, start: float, end: float
) -> float:
    """Joules an energy counter counted from ``start`` to ``end``; NaN if it does not cover them.

    The counter is interpolated at the bounds; one sampling interval of reach
    beyond its first and last samples.
    """
    seconds, joules = np.asarray(seconds, np.float64), unwrap_counter(joules)
    if len(seconds) < 2:
        return NAN
    reach = sampling_interval(seconds)
    return value_at(seconds, joules, end, reach) - value_at(seconds, joules, start, reach)


def power_energy_between(
    seconds: np.ndarray,
    watts: np.ndarray,
    start: float,
    end: float,
    gap_factor: float = GAP_FACTOR,
) -> float:
    """The trapezoid integral of power from ``start`` to ``end`` (J); NaN if not covered.

    Power is interpolated at the bounds (one sampling interval of reach beyond
    the samples, holding the nearest value); an interval longer than
    ``gap_factor`` × the median sampling interval is a gap and is not integrated.
    """
    seconds, watts = np.asarray(seconds, np.float64), np.asarray(watts, np.float64)
    if len(seconds) < 2 or not end > start:
        return NAN
    interval = sampling_interval(seconds)
    if not math.isfinite(interval):
        return NAN
    if start < seconds[0] - interval or end > seconds[-1] + interval:
        return NAN
    inside = (seconds > start) & (seconds < end)
    times = np.concatenate([[start], seconds[inside], [end]])
    values = np.concatenate(
        [[_held(seconds, watts, start)], watts[inside], [_held(seconds, watts, end)]]
    )
    steps = np.diff(times)
    limit = gap_factor * interval
    # a gap is judged by the sampling interval it lies in, not by the cut piece of it
    spans = np.diff(
        np.concatenate([[_before(seconds, start)], seconds[inside], [_after(seconds, end)]])
    )
    keep = spans <= limit
    return float(np.sum(((values[1:] + values[:-1]) / 2.0 * steps)[keep]))


def _held(seconds: np.ndarray, watts: np.ndarray, at: float) -> float:
    if at <= seconds[0]:
        return float(watts[0])
    if at >= seconds[-1]:
        return float(watts[-1])
    return float(np.interp(at, seconds, watts))


def _before(seconds: np.ndarray, at: float) -> float:
    """The last sample time at or before ``at`` (``at`` itself before the first sample)."""
    index = np.searchsorted(seconds, at, side="right") - 1
    return float(seconds[index]) if index >= 0 else at


def _after(seconds: np.ndarray, at: float) -> float:
    """The first sample time at or after ``at`` (``at`` itself after the last sample)."""
    index = np.searchsorted(seconds, at, side="left")
    return float(seconds[index]) if index < len(seconds) else at


Series = Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]
"""``(listener, entity, quantity) → (seconds, values)``, as
:func:`radt.analysis.figures.device_series` returns them."""


def energy_between(series: Series, start: float, end: float) -> tuple[float, dict, str | None]:
    """GPU energy (J) from ``start`` to ``end`` summed over the GPUs, each GPU's source, a note.

    Per GPU the energy counter (``nvml``, else ``dcgm``) if it covers the
    window, else the integral of power (``nvml``, ``dcgm``, ``smi``). A GPU with
    series that cover neither way makes the energy missing (NaN) with the note.
    Returns ``(joules, {gpu: (listener, "counter" | "integrated_power")}, note)``.
    """
    total, used, uncovered = energy_per_gpu(
        series,
        lambda seconds, joules: counter_energy_between(seconds, joules, start, end),
        lambda seconds, watts: power_energy_between(seconds, watts, start, end),
    )
    if uncovered:
        note = f"the samples of {', '.join(uncovered)} do not cover the window: energy missing"
        return NAN, used, note
    return total, used, None


def _inside(series: Series, quantity: str, start, end) -> dict:
    """Per GPU, the ``(seconds, values)`` of the per-GPU ``quantity`` (:mod:`radt.quantities`)
    from the first listener that has them, in the window."""
    chosen: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for listener, series_name in sources(quantity):
        for (source, gpu, name), (seconds, values) in series.items():
            wanted = source == listener and name == series_name and gpu.startswith("gpu")
            if wanted and gpu not in chosen:
                inside = (seconds >= start) & (seconds <= end)
                chosen[gpu] = (seconds[inside], values[inside])
    return {gpu: pair for gpu, pair in chosen.items() if len(pair[0])}


def window_figures(
    series: Series, start: float = -math.inf, end: float = math.inf
) -> tuple[dict[str, float], dict, str | None]:
    """The figures of :data:`radt.analysis.figures.FIGURES` over ``[start, end]`` (by
    default all the samples: the whole run).

    ``energy_j`` as :func:`energy_between` (over all samples:
    :func:`radt.analysis.figures.all_samples_energy`); the others from the samples inside
    the window, the GPUs taken together, as :data:`radt.analysis.catalog.CATALOG` says
    (:func:`sample_figures`). Returns the figures, the energy
    source per GPU and a note when the energy is missing.
    """
    if not end > start:
        return {name: NAN for name in FIGURES}, {}, None
    if math.isinf(start) and math.isinf(end):
        (joules, used), note = all_samples_energy(series), None
    else:
        joules, used, note = energy_between(series, start, end)
    chosen = {name: _inside(series, quantity, start, end) for name, quantity in SOURCES.items()}
    tree = {}
    for (source, entity, quantity), (seconds, values) in series.items():
        if source == "top" and entity == "proc":
            tree[quantity] = values[(seconds >= start) & (seconds <= end)]
    figures = {"energy_j": joules, **sample_figures(chosen, tree)}
    return figures, used, note


def run_figures(
    frame: pd.DataFrame | None, series: Mapping | None = None
) -> tuple[dict[str, float], dict[str, tuple[str, str]]]:
    """:func:`window_figures` over all of one run's samples, and the energy source per GPU.

    ``series`` (as :func:`device_series` returns them) replaces ``frame`` when given.
    """
    series = device_series(frame) if series is None else series
    figures, used, _ = window_figures(series)
    return figures, used


def summarize_samples(
    frame: pd.DataFrame,
    examples: float | None = None,
    duration_s: float | None = None,
) -> dict[str, float]:
    """The energy, power, utilisation and memory figures of ONE run's samples.

    ``frame`` has the tidy columns ``timestamp``, ``key`` and ``value`` (as
    :func:`radt.load` returns them, or as ``radt/samples.parquet`` holds them;
    timestamps tz-aware, naive UTC, or numeric epoch seconds). Returns floats,
    NaN where the samples do not tell:

    - ``energy_j``: see :mod:`radt.analysis.figures` (counter, else integrated power);
    - the GPU figures of the GPUs taken together, per instant (:func:`sample_figures`):
      ``power_mean_w`` and ``power_max_w``, the mean and peak of the summed draw
      (``nvml``, else ``dcgm``, else ``smi``); ``util_mean_pct``, the mean utilisation
      (``nvml``, else ``smi``); ``smact_mean_ratio``, the mean SM activity (``dcgm``);
      ``gpu_mem_peak_mib``, the peak of the memory used on all of them (``nvml``, else ``smi``);
    - ``host_mem_peak_mib``: peak RSS of the run's process tree (``top/proc/rss_mib``);
    - with ``examples`` and ``duration_s`` also ``examples_per_s``,
      ``time_per_example_ns`` and ``energy_per_example_nj``.
    """
    figures, _ = run_figures(frame)
    if examples is not None or duration_s is not None:
        figures.update(per_example(examples, duration_s, figures["energy_j"]))
    return figures


# --------------------------------------------------------------------------- CPU time

CPU_KEY = ("top", "proc", "cpu_pct")
"""The process tree's CPU (``top/proc/cpu_pct``) in split series."""
CPU_REACH_INTERVALS = 2.0
"""How far beyond its samples the CPU counter reaches, in sampling intervals."""


def cpu_counter(
    seconds: np.ndarray, cpu_pct: np.ndarray, first_s: float = NAN
) -> tuple[np.ndarray, np.ndarray]:
    """Core-seconds a process tree used, cumulative, from its ``cpu_pct`` samples.

    Sample *i* is the tree's CPU (100 = one core) over the time since sample
    *i − 1*; the first one's over the time since ``first_s`` (when the listener
    took its first reading; without it, the first sample only starts the count).
    Returns ``(times, core_s)`` with ``core_s = 0`` at the first time.
    """
    seconds = np.asarray(seconds, np.float64)
    cpu_pct = np.asarray(cpu_pct, np.float64)
    if not len(seconds):
        return seconds, cpu_pct
    if math.isfinite(first_s) and first_s < seconds[0]:
        times = np.concatenate([[first_s], seconds])
        used = np.diff(times) * cpu_pct / 100.0
    else:
        times = seconds
        used = np.diff(times) * cpu_pct[1:] / 100.0
    return times, np.concatenate([[0.0], np.cumsum(used)])


def cpu_between(series: Series, start: float, end: float) -> tuple[float, str | None]:
    """Core-seconds of the run's process tree from ``start`` to ``end``, or NaN and why.

    The CPU-time counter of :func:`cpu_counter` (started at the first ``top``
    sample of the tree) interpolated at the bounds, with two sampling intervals of
    reach beyond its samples: one interval, and as much again for the interval's own
    jitter (a poll that comes late or skips a tick under load).
    """
    if CPU_KEY not in series:
        return NAN, "no CPU samples (the top listener did not record this run)"
    seconds, pct = series[CPU_KEY]
    rss = series.get(("top", "proc", "rss_mib"))
    first = float(rss[0][0]) if rss is not None and len(rss[0]) else NAN
    times, core_s = cpu_counter(seconds, pct, first)
    if len(times) < 2 or not end > start:
        return NAN, "too few CPU samples (top) for the window"
    reach = CPU_REACH_INTERVALS * sampling_interval(times)
    used = value_at(times, core_s, end, reach) - value_at(times, core_s, start, reach)
    if not math.isfinite(used):
        return NAN, "the CPU samples (top) do not cover the window"
    return used, None


def device_interval_s(series: Series) -> float:
    """The device listener's sampling interval: the finest median interval of GPU energy/power."""
    found = [
        sampling_interval(seconds)
        for (_, gpu, quantity), (seconds, _) in series.items()
        if gpu.startswith("gpu") and quantity in ("energy_j", "power_w")
    ]
    found = [f for f in found if math.isfinite(f)]
    return min(found) if found else NAN
