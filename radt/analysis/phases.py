"""Time and energy per training phase (``radt.phase``): the intervals, and the per-phase table.

A run that marks phases (``with radt.phase("forward"):``) has the artifact
``radt/phases.parquet``: one row per interval (``run, process, phase, start, end``).
:func:`phase_table` turns one run's intervals and its energy samples into one row per phase
(docs/analysis.md, "Phases", has the definitions with a worked example):

- ``count``, ``time_s`` (the summed length of its intervals), ``mean_ms``;
- ``time_share``: ``time_s`` over the **phase span**, the time from each process's first
  phase start to its last phase end, summed over the processes;
- ``energy_j``: GPU energy across its intervals; ``energy_share``: that over the GPU energy
  across the phase span; ``power_mean_w``: ``energy_j`` over the time the samples cover;
- ``cpu_energy_j`` and ``cpu_energy_share``: the same from ``rapl`` (packages and DRAM) when
  it was recorded.

A row ``(unmarked)`` holds the span's time outside every phase. Nested phases each count their
whole intervals, so the shares of nested phases add up to more than the span.

**Energy across an interval.** The energy counter (``nvml``, else ``dcgm``; resets undone) is
interpolated linearly at the interval's bounds, which gives each sampling interval's energy to
the phases by the fraction of it that they cover; without a counter, each sampling interval's
trapezoid of power (``nvml``, ``dcgm``, ``smi``) is spread the same way, and an interval longer
than ``GAP_FACTOR`` median intervals is a gap that gives no energy and covers no time. The
span's and the phases' energies use the same arithmetic, so under a constant power every phase's
energy share equals its time share. Power changes within one sampling interval cannot be seen:
a phase much shorter than the sampling interval gets the interval's mean power
(``below_interval_share`` says how many of its intervals are that short). Parts of intervals
outside the samples get no energy (``energy_coverage``: the share of the phase's time inside).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from radt.analysis.figures import (
    GAP_FACTOR,
    NAN,
    device_series,
    energy_method,
)
from radt.analysis.loadruns import open_client, select_runs
from radt.analysis.loadsamples import TERMINAL, KeyFilter, cached_artifact, load_tables
from radt.quantities import GPU_ENERGY, GPU_POWER, providers_of
from radt.tags import MLFLOW_PARENT_RUN_ID, RADT_PHASE_ROWS

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PHASES_ARTIFACT = "radt/phases.parquet"
UNMARKED = "(unmarked)"
INTERVAL_COLUMNS = ("run_id", "run_name", "process", "phase", "start", "end", "duration_s")
TABLE_COLUMNS = (
    "run_id",
    "run_name",
    "phase",
    "count",
    "time_s",
    "mean_ms",
    "time_share",
    "energy_j",
    "energy_share",
    "power_mean_w",
    "cpu_energy_j",
    "cpu_energy_share",
    "energy_method",
    "energy_scope",
    "sampling_interval_s",
    "below_interval_share",
    "energy_coverage",
    "note",
)
ENERGY_KEYS = ("*/gpu*/energy_j", "*/gpu*/power_w", "rapl/*/energy_j")
"""The samples :func:`phases` reads for the energies."""
_CPU_ZONE = re.compile(r"^(package|dram)\d+$")
"""RAPL zones summed for CPU energy: packages (they include core and uncore) and DRAM."""


# --------------------------------------------------------------------------- arithmetic


class Cumulative:
    """Energy and covered time as running totals at sample times, interpolated in between."""

    def __init__(self, seconds: np.ndarray, joules: np.ndarray, covered: np.ndarray) -> None:
        self.seconds = seconds
        self.joules = joules
        self.covered = covered

    @classmethod
    def from_counter(cls, seconds: np.ndarray, values: np.ndarray) -> Cumulative | None:
        """An energy counter (J), its resets undone (the running sum of its increases)."""

        from radt.analysis.windows import unwrap_counter

        seconds, values = _finite_sorted(seconds, values)
        if len(seconds) < 2:
            return None
        joules = unwrap_counter(values)
        return cls(seconds, joules - joules[0], seconds - seconds[0])

    @classmethod
    def from_power(
        cls, seconds: np.ndarray, watts: np.ndarray, gap_factor: float = GAP_FACTOR
    ) -> Cumulative | None:
        """Power (W): trapezoids between samples; a gap adds no energy and covers no time."""
        import numpy as np

        seconds, watts = _finite_sorted(seconds, watts)
        if len(seconds) < 2:
            return None
        steps = np.diff(seconds)
        positive = steps[steps > 0]
        if not len(positive):
            return None
        inside = steps <= gap_factor * float(np.median(positive))
        energy = np.where(inside, (watts[1:] + watts[:-1]) / 2.0 * steps, 0.0)
        covered = np.where(inside, steps, 0.0)
        zero = np.zeros(1)
        return cls(
            seconds,
            np.concatenate([zero, np.cumsum(energy)]),
            np.concatenate([zero, np.cumsum(covered)]),
        )

    def between(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per interval, the energy (J) and the time the samples cover (s) within it."""
        import numpy as np

        lo = np.clip(starts, self.seconds[0], self.seconds[-1])
        hi = np.clip(ends, self.seconds[0], self.seconds[-1])
        joules = np.interp(hi, self.seconds, self.joules) - np.interp(lo, self.seconds, self.joules)
        covered = np.interp(hi, self.seconds, self.covered) - np.interp(
            lo, self.seconds, self.covered
        )
        return joules, covered

    @property
    def interval_s(self) -> float:
        """The median sampling interval."""
        from radt.analysis.windows import sampling_interval

        return sampling_interval(self.seconds)


def _finite_sorted(seconds, values) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    seconds = np.asarray(seconds, np.float64)
    values = np.asarray(values, np.float64)
    keep = np.isfinite(seconds) & np.isfinite(values)
    seconds, values = seconds[keep], values[keep]
    order = np.argsort(seconds, kind="stable")
    return seconds[order], values[order]


def gpu_energy(
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
) -> tuple[list[Cumulative], dict[str, tuple[str, str]]]:
    """Per GPU, its energy as a :class:`Cumulative`: the counter, else integrated power.

    Returns them and, per GPU, ``(listener, "counter" | "integrated_power")`` as
    :func:`radt.analysis.figures.energy_method` reads it.
    """
    gpus = sorted({gpu for (_, gpu, quantity) in series if quantity in ("energy_j", "power_w")})
    found, used = [], {}
    for gpu in gpus:
        chosen = None
        for listener in providers_of(GPU_ENERGY):
            if (listener, gpu, "energy_j") in series:
                chosen = Cumulative.from_counter(*series[listener, gpu, "energy_j"])
                if chosen is not None:
                    used[gpu] = (listener, "counter")
                    break
        if chosen is None:
            for listener in providers_of(GPU_POWER):
                if (listener, gpu, "power_w") in series:
                    chosen = Cumulative.from_power(*series[listener, gpu, "power_w"])
                    if chosen is not None:
                        used[gpu] = (listener, "integrated_power")
                        break
        if chosen is not None:
            found.append(chosen)
    return found, used


def cpu_energy(frame: pd.DataFrame | None) -> list[Cumulative]:
    """The ``rapl`` package and DRAM energy counters of a tidy frame, one per zone."""
    import numpy as np

    from radt.analysis.figures import epoch_seconds

    if frame is None or not len(frame):
        return []
    found = []
    keys = frame["key"].astype(str)
    for key in sorted(set(keys[keys.str.startswith("rapl/")])):
        parts = key.split("/")
        if len(parts) != 3 or parts[2] != "energy_j" or not _CPU_ZONE.match(parts[1]):
            continue
        rows = frame[keys == key]
        counter = Cumulative.from_counter(
            epoch_seconds(rows["timestamp"]), rows["value"].to_numpy(np.float64)
        )
        if counter is not None:
            found.append(counter)
    return found


def _energies(
    sources: list[Cumulative], starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Summed energy over ``sources`` per interval, and the time all of them cover."""
    import numpy as np

    if not sources:
        return None
    joules = np.zeros(len(starts))
    covered = np.full(len(starts), np.inf)
    for source in sources:
        j, c = source.between(starts, ends)
        joules += j
        covered = np.minimum(covered, c)
    return joules, covered


def union(process: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """The union of each process's intervals, as disjoint ``(starts, ends)`` arrays."""
    import numpy as np

    out_s, out_e = [np.empty(0)], [np.empty(0)]
    for pid in np.unique(process):
        mine = process == pid
        order = np.argsort(starts[mine], kind="stable")
        s, e = starts[mine][order], ends[mine][order]
        reach = np.maximum.accumulate(e)
        opens = np.concatenate([[True], s[1:] > reach[:-1]])
        first = np.flatnonzero(opens)
        last = np.append(first[1:], len(s)) - 1
        out_s.append(s[first])
        out_e.append(reach[last])
    return np.concatenate(out_s), np.concatenate(out_e)


def phase_table(
    intervals: pd.DataFrame,
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]] | None = None,
    cpu: list[Cumulative] | None = None,
    tags: Mapping[str, str] | None = None,
    energy_scope: str = "run",
) -> pd.DataFrame:
    """One run's per-phase table (the module docstring defines each column).

    ``intervals``: columns ``process``, ``phase``, ``start``, ``end`` (datetimes, or epoch
    seconds). ``series``: the GPU series (:func:`radt.analysis.figures.device_series` of the samples
    that hold the GPU's energy); ``cpu``: the RAPL counters (:func:`cpu_energy`); ``tags``: the
    tags of the run whose samples gave ``series`` (for ``energy_method``). Rows: the phases,
    most time first, then ``(unmarked)``; without ``series`` the energy columns are NaN and
    ``note`` says why.
    """
    import numpy as np
    import pandas as pd

    from radt.analysis.figures import epoch_seconds

    columns = [c for c in TABLE_COLUMNS if c not in ("run_id", "run_name")]
    if intervals is None or not len(intervals):
        return pd.DataFrame(columns=columns)
    starts = epoch_seconds(intervals["start"])
    ends = epoch_seconds(intervals["end"])
    process = intervals["process"].to_numpy(np.int64)
    names = intervals["phase"].astype(str).to_numpy(dtype=object)
    lengths = np.maximum(ends - starts, 0.0)
    frame = pd.DataFrame({"process": process, "start": starts, "end": ends})
    spans = frame.groupby("process").agg(start=("start", "min"), end=("end", "max"))
    span_s = float((spans["end"] - spans["start"]).sum())
    u_start, u_end = union(process, starts, ends)
    unmarked_s = max(span_s - float(np.sum(u_end - u_start)), 0.0)
    span_starts, span_ends = spans["start"].to_numpy(), spans["end"].to_numpy()

    gpus, used = gpu_energy(series or {})
    cpu = cpu or []
    gpu = _energies(gpus, starts, ends)
    cpus = _energies(cpu, starts, ends)
    interval_s = min((g.interval_s for g in gpus), default=NAN)
    notes = []
    if gpu is None:
        notes.append("no GPU energy or power samples: energy missing")

    def outside(sources: list[Cumulative]) -> tuple[float, float, float]:
        """Energy of the span, energy outside every phase, and time covered outside them."""
        if not sources:
            return NAN, NAN, NAN
        span_j, span_c = (float(np.sum(a)) for a in _energies(sources, span_starts, span_ends))
        union_j, union_c = (float(np.sum(a)) for a in _energies(sources, u_start, u_end))
        return span_j, span_j - union_j, span_c - union_c

    gpu_span_j, gpu_out_j, gpu_out_c = outside(gpus)
    cpu_span_j, cpu_out_j, _ = outside(cpu)

    per = pd.DataFrame({"phase": names, "length": lengths})
    sums = {"count": ("length", "size"), "time_s": ("length", "sum")}
    if gpu is not None:
        per["joules"], per["covered"] = gpu
        per["short"] = lengths < interval_s
        sums.update(energy_j=("joules", "sum"), covered=("covered", "sum"), below=("short", "mean"))
    if cpus is not None:
        per["cpu_joules"] = cpus[0]
        sums["cpu_energy_j"] = ("cpu_joules", "sum")
    table = per.groupby("phase", sort=False).agg(**sums).reset_index()
    table["mean_ms"] = table["time_s"] / table["count"] * 1e3
    table["time_share"] = table["time_s"] / span_s if span_s > 0 else NAN
    method = energy_method(used, tags) if gpu is not None else "none"
    if gpu is not None:
        covered = table["covered"].to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            # a phase none of whose time the samples cover has no energy (missing, not 0)
            table["energy_j"] = np.where(covered > 0, table["energy_j"], NAN)
            table["energy_share"] = table["energy_j"] / gpu_span_j if gpu_span_j > 0 else NAN
            table["power_mean_w"] = np.where(covered > 0, table["energy_j"] / covered, NAN)
            table["energy_coverage"] = np.where(
                table["time_s"] > 0, covered / table["time_s"].to_numpy(), NAN
            )
        table["below_interval_share"] = table["below"]
    else:
        for column in ("energy_j", "energy_share", "power_mean_w", "energy_coverage"):
            table[column] = NAN
        table["below_interval_share"] = NAN
    if cpus is not None:
        table["cpu_energy_share"] = table["cpu_energy_j"] / cpu_span_j if cpu_span_j > 0 else NAN
    else:
        table["cpu_energy_j"] = table["cpu_energy_share"] = NAN
    table = table.sort_values(["time_s", "phase"], ascending=[False, True], kind="stable")
    unmarked = {
        "phase": UNMARKED,
        "count": 0,
        "time_s": unmarked_s,
        "mean_ms": NAN,
        "time_share": unmarked_s / span_s if span_s > 0 else NAN,
        "energy_j": gpu_out_j,
        "energy_share": gpu_out_j / gpu_span_j if gpu_span_j > 0 else NAN,
        "power_mean_w": gpu_out_j / gpu_out_c if gpu_out_c > 0 else NAN,
        "cpu_energy_j": cpu_out_j,
        "cpu_energy_share": cpu_out_j / cpu_span_j if cpu_span_j > 0 else NAN,
        "energy_coverage": gpu_out_c / unmarked_s if unmarked_s > 0 else NAN,
    }
    table = pd.concat([table, pd.DataFrame([unmarked])], ignore_index=True)
    table["energy_method"] = method
    table["energy_scope"] = energy_scope if gpu is not None else None
    table["sampling_interval_s"] = interval_s
    coverage = table["energy_coverage"].iloc[:-1]
    if gpu is not None and (coverage < 0.99).any():
        notes.append("some intervals lie outside the energy samples (see energy_coverage)")
    table["note"] = "; ".join(notes) or None
    return table.reindex(columns=columns)


# --------------------------------------------------------------------------- loading


def _cached_phases(client, run, cache_dir: Path) -> Path | None:
    """The run's phases artifact, downloaded once; None when the run has none.

    A run tagged ``radt.phase_rows`` = 0 has none (the store is not asked); an ended run
    without the tag whose ``radt`` artifacts list no phases is remembered as having none.
    """
    if run.data.tags.get(RADT_PHASE_ROWS) == "0":
        return None
    absent = cache_dir / run.info.run_id / "phases.absent"
    if absent.exists():
        return None
    path = cached_artifact(client, run, cache_dir, PHASES_ARTIFACT)
    if path is None and run.info.status in TERMINAL:
        try:
            listed = {a.path for a in client.list_artifacts(run.info.run_id, "radt")}
        except Exception:
            return None  # the store did not answer: ask again next time
        if PHASES_ARTIFACT not in listed:
            absent.parent.mkdir(parents=True, exist_ok=True)
            absent.touch()
    return path


def _selected(experiment, runs, tracking_uri, cache_dir):
    from radt.record.runfolder import radt_home

    client = open_client(tracking_uri)
    selected = select_runs(client, experiment, runs, include_workload=True)
    cache = Path(cache_dir) if cache_dir is not None else radt_home() / "cache"
    return client, selected, cache


def _read_intervals(client, selected: list, cache: Path) -> dict[str, pd.DataFrame]:
    """``{run_id: intervals}`` of the selected runs that have the artifact."""
    from concurrent.futures import ThreadPoolExecutor

    import pandas as pd

    with ThreadPoolExecutor(max(1, min(8, len(selected)))) as pool:
        paths = list(pool.map(lambda r: _cached_phases(client, r, cache), selected))
    found = {}
    for run, path in zip(selected, paths, strict=True):
        if path is not None:
            frame = pd.read_parquet(path, columns=["process", "phase", "start", "end"])
            found[run.info.run_id] = frame
    return found


def intervals(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """Every phase interval of the selected runs (``radt/phases.parquet``), one row each.

    Columns ``run_id, run_name, process, phase, start, end`` (UTC) and ``duration_s``; rows by
    run (oldest first), then process, then start. Runs without phases add no rows. Arguments
    as :func:`radt.load`.
    """
    import pandas as pd

    client, selected, cache = _selected(experiment, runs, tracking_uri, cache_dir)
    found = _read_intervals(client, selected, cache)
    pieces = []
    for run in selected:
        frame = found.get(run.info.run_id)
        if frame is None:
            continue
        frame = frame.sort_values(["process", "start"], kind="stable")
        frame.insert(0, "run_name", run.info.run_name)
        frame.insert(0, "run_id", run.info.run_id)
        pieces.append(frame)
    if not pieces:
        return pd.DataFrame(
            {
                "run_id": pd.Series(dtype=object),
                "run_name": pd.Series(dtype=object),
                "process": pd.Series(dtype="int64"),
                "phase": pd.Series(dtype=object),
                "start": pd.Series(dtype="datetime64[us, UTC]"),
                "end": pd.Series(dtype="datetime64[us, UTC]"),
                "duration_s": pd.Series(dtype="float64"),
            }
        )
    frame = pd.concat(pieces, ignore_index=True)
    frame["phase"] = frame["phase"].astype(str)
    frame["duration_s"] = (frame["end"] - frame["start"]).dt.total_seconds()
    return frame.reindex(columns=list(INTERVAL_COLUMNS))


def _has_gpu(table) -> bool:
    keys = table.column("key").cast("string").unique().to_pylist() if table.num_rows else []
    return any(k.endswith(("/energy_j", "/power_w")) and "/gpu" in k for k in keys)


def phases(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """Time and energy per phase of each selected run that marked phases (``radt.phase``).

    One row per run and phase, and a row ``(unmarked)`` per run; the columns are those of
    :func:`phase_table` (docs/analysis.md, "Phases") led by ``run_id`` and ``run_name``. A run
    in a workload whose GPU series were recorded in the workload's run uses those:
    ``energy_scope`` is then ``workload`` (the whole GPU, shared with the workload's other
    runs), else ``run``. Arguments as :func:`radt.load`; runs without phases add no rows.
    """
    import pandas as pd

    client, selected, cache = _selected(experiment, runs, tracking_uri, cache_dir)
    found = _read_intervals(client, selected, cache)
    by_id = {r.info.run_id: r for r in selected}
    wanted = [r for r in selected if r.info.run_id in found]
    parents = {
        r.data.tags.get(MLFLOW_PARENT_RUN_ID)
        for r in wanted
        if r.data.tags.get(MLFLOW_PARENT_RUN_ID) in by_id
    }
    readers = [r for r in selected if r.info.run_id in found or r.info.run_id in parents]
    tables, _ = load_tables(client, readers, KeyFilter(ENERGY_KEYS), cache_dir=cache)
    pieces = []
    for run in wanted:
        own = tables[run.info.run_id]
        source, scope = run, "run"
        parent = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
        if not _has_gpu(own) and parent in tables and _has_gpu(tables[parent]):
            source, scope = by_id[parent], "workload"
        samples = tables[source.info.run_id].to_pandas()
        table = phase_table(
            found[run.info.run_id],
            device_series(samples),
            cpu_energy(own.to_pandas()) or cpu_energy(samples),
            source.data.tags,
            scope,
        )
        table.insert(0, "run_name", run.info.run_name)
        table.insert(0, "run_id", run.info.run_id)
        pieces.append(table)
    if not pieces:
        return pd.DataFrame(columns=list(TABLE_COLUMNS))
    return pd.concat(pieces, ignore_index=True)
