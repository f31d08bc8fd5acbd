"""The figures of each level of the run tree over its window: a client's (or lone run's), a shared
loader's, a workload's (provider) over its clients' overlap; CPU and per-example figures."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from radt.analysis.figures import (
    DEVICE_FIGURES,
    FIGURES,
    NAN,
    energy_method,
    finite_sum,
    per_example,
)
from radt.analysis.runtree import Record, _has_device
from radt.tags import RADT_LETTER

if TYPE_CHECKING:
    from radt.analysis.windows import Window


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


def _figures_over(record: Record, series: Mapping, start: float, end: float, whole: bool):
    """Figures of ``series`` over a window (or all samples); energy source; a note."""
    from radt.analysis.windows import window_figures

    if not whole and not (math.isfinite(start) and math.isfinite(end) and end > start):
        return {name: NAN for name in FIGURES}, "none", None
    figures, used, note = window_figures(series) if whole else window_figures(series, start, end)
    return figures, energy_method(used, record.tags), note


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
                name = run.tags.get(RADT_LETTER) or run.run_id
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
            k.tags.get(RADT_LETTER) or k.run_id for k in kids if not math.isfinite(k.examples_total)
        ]
        if silent and basis == "examples_lifetime":
            record.notes.append(no_examples_note(silent))
            examples = NAN
        record.window = Window(record.start_s, record.end_s, examples, basis, "lifetime")
        record.examples_total = examples
        figures, used, _ = window_figures(record.series)
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
    clients = [(k.tags.get(RADT_LETTER) or k.run_id, k.window, k.timeline) for k in kids]
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
