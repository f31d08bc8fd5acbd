"""The time–energy frontier: per Job, which configurations × power limits × GPU clocks are
worth running.

Each **point** is one Job × configuration × power limit × locked GPU clock (× basis) of the
provider view of :func:`radt.analysis.summary.repeats`: the mean over its FINISHED repeats of
the provider time per example (ns) and energy per example (nJ). A point is **on the frontier**
(Pareto-optimal) when no other point of the same Job is at least as fast and at least as cheap
and better in one of the two. Its **energy bloat** is how much more energy per example it uses
than the cheapest frontier point that is at least as fast: ``100 × (e / min{e_f : f on the
frontier, t_f ≤ t} − 1)`` percent, 0 on the frontier. The **energy-optimal** point is the
frontier point with the least energy (the faster one on a tie), the **time-optimal** point the
fastest (the cheaper one on a tie). A point without both figures (no examples, no energy) is
listed with ``on_frontier`` missing and the reason in ``frontier_note``; figures on different
bases are never compared.

The energy is the GPU's (``energy_source = "gpu"``). A Job none of whose points has GPU
energy (a study on a machine without a GPU) takes the host's instead, the CPU packages and
DRAM from ``rapl`` (``host_energy_per_example_nj``, ``energy_source = "host"``); the two
are never mixed within a Job, and a host frontier has no normalised energy.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from radt.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd

TIME, ENERGY = "time_per_example_ns", "energy_per_example_nj"
TIME_NORM, ENERGY_NORM = "time_per_example_norm", "energy_per_example_norm"
HOST_ENERGY = "host_energy_per_example_nj"
FIGURES = (TIME, ENERGY, TIME_NORM, ENERGY_NORM, "examples_per_s", HOST_ENERGY)
KEYS = ("job", "configuration", "power_limit_w", "gpu_clock_mhz", "basis")
COLUMNS = (
    *KEYS,
    "count",
    TIME,
    ENERGY,
    f"{TIME}_std",
    f"{ENERGY}_std",
    "energy_source",
    TIME_NORM,
    ENERGY_NORM,
    "examples_per_s",
    "on_frontier",
    "energy_bloat_pct",
    "energy_optimal",
    "time_optimal",
    "frontier_note",
    "run_ids",
)


def frontier(
    experiment: str | None = None,
    runs=None,
    *,
    by: str | None = "job",
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """Per Job, every configuration × power limit × GPU clock with its frontier figures (see
    the module).

    Args:
        experiment: experiment name or id (all its runs unless ``runs`` narrows them).
        runs: run ids (their workloads are taken whole).
        by: ``"job"`` (a frontier per Job, the default) or None (one frontier over all points,
            for a study whose Jobs are meant to be compared with each other).
        tracking_uri, cache_dir: as for :func:`radt.summary`.

    Returns:
        One row per point, columns :data:`COLUMNS`: the group, ``count`` (repeats), the mean
        provider ``time_per_example_ns`` and ``energy_per_example_nj`` with their ``_std``,
        ``energy_source`` (``gpu``, or ``host`` for a Job without GPU energy), the mean
        normalised figures (over the Job's ``none`` baseline at the default power
        limit and clock: the whole GPU at full power), ``on_frontier``, ``energy_bloat_pct``,
        ``energy_optimal``, ``time_optimal``, ``frontier_note`` and ``run_ids``; sorted by Job,
        then time per example.
    """
    from radt.analysis.summary import summary

    return frontier_table(
        summary(experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir), by=by
    )


def frontier_table(frame: pd.DataFrame, by: str | None = "job") -> pd.DataFrame:
    """The frontier of a :func:`radt.summary` frame (pure: no MLflow)."""
    import pandas as pd

    from radt.analysis.summary import repeats

    if by not in ("job", None):
        raise AnalysisError(f"by= takes 'job' or None, not {by!r}")
    if frame.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    finished = frame[frame["level"].isin(("provider", "run")) & (frame["status"] == "FINISHED")]
    if finished.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    finished = finished.reindex(columns=list(dict.fromkeys([*finished.columns, *FIGURES])))
    table = repeats(finished, figures=FIGURES)
    table = table[table["view"] == "provider"].copy()
    points = pd.DataFrame(
        {
            **{key: table[key] for key in KEYS},
            "count": table["count"],
            **{name: table[f"{name}_mean"] for name in FIGURES},
            f"{TIME}_std": table[f"{TIME}_std"],
            f"{ENERGY}_std": table[f"{ENERGY}_std"],
            f"{HOST_ENERGY}_std": table[f"{HOST_ENERGY}_std"],
            "run_ids": table["run_ids"],
        }
    )
    points = pd.concat(
        [_energy_source(part.copy()) for _, part in points.groupby("job", sort=False)],
        ignore_index=True,
    )
    group = ["job", "basis"] if by == "job" else ["basis", "energy_source"]
    parts = [_mark(part.copy()) for _, part in points.groupby(group, sort=False, dropna=False)]
    out = pd.concat(parts, ignore_index=True) if parts else points
    out = out.sort_values(["job", TIME], na_position="last", kind="stable")
    return out.reindex(columns=list(COLUMNS)).reset_index(drop=True)


def _energy_source(points: pd.DataFrame) -> pd.DataFrame:
    """One Job's points on GPU energy, else (no point has any) on the host's (rapl)."""
    if (
        points[ENERGY].astype(float).gt(0).any()
        or not points[HOST_ENERGY].astype(float).gt(0).any()
    ):
        points["energy_source"] = "gpu"
        return points
    points[ENERGY] = points[HOST_ENERGY]
    points[f"{ENERGY}_std"] = points[f"{HOST_ENERGY}_std"]
    points[ENERGY_NORM] = math.nan
    points["energy_source"] = "host"
    return points


def _known(value) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def _mark(points: pd.DataFrame) -> pd.DataFrame:
    """Frontier, bloat and the two optima of one group of points."""
    times = points[TIME].astype(float).tolist()
    energies = points[ENERGY].astype(float).tolist()
    known = [
        _known(t) and _known(e) and t > 0 and e > 0 for t, e in zip(times, energies, strict=True)
    ]
    on: list[bool | None] = []
    notes: list[str | None] = []
    for i, (t, e) in enumerate(zip(times, energies, strict=True)):
        if not known[i]:
            on.append(None)
            notes.append(_why(points.iloc[i]))
            continue
        dominated = any(
            known[j] and tj <= t and ej <= e and (tj < t or ej < e)
            for j, (tj, ej) in enumerate(zip(times, energies, strict=True))
        )
        on.append(not dominated)
        notes.append(None)
    bloat = []
    for i, (t, e) in enumerate(zip(times, energies, strict=True)):
        cheapest = min(
            (energies[j] for j in range(len(times)) if on[j] and times[j] <= t),
            default=math.nan,
        )
        bloat.append(100.0 * (e / cheapest - 1.0) if known[i] and cheapest > 0 else math.nan)
    front = [i for i, flag in enumerate(on) if flag]
    best_energy = min(front, key=lambda i: (energies[i], times[i]), default=None)
    best_time = min(front, key=lambda i: (times[i], energies[i]), default=None)
    points["on_frontier"] = on
    points["energy_bloat_pct"] = bloat
    points["energy_optimal"] = [i == best_energy for i in range(len(times))]
    points["time_optimal"] = [i == best_time for i in range(len(times))]
    points["frontier_note"] = notes
    return points


def _why(point) -> str:
    if not _known(point[TIME]):
        return "no time per example (no examples in the provider window)"
    return (
        "no energy per example (neither GPU nor host energy recorded: a GPU listener, or rapl "
        "where the CPU's energy counters can be read, is needed)"
    )
