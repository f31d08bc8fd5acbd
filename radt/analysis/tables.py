"""Tables drawn from a summary frame: repeats (mean, spread per Job × configuration × power
limit × basis) and own loaders against one shared loader."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from radt.analysis.attribution import repeat_methods
from radt.analysis.catalog import REPEATED
from radt.analysis.figures import NAN
from radt.analysis.runtree import SHARED_LOADER

if TYPE_CHECKING:
    import pandas as pd

REPEAT_FIGURES = REPEATED
"""The figures :func:`repeats` aggregates."""
REPEAT_KEYS = ("view", "job", "configuration", "power_limit_w", "gpu_clock_mhz", "basis")
"""What makes runs repeats of each other (with the view: providers or clients)."""
STATISTICS = ("mean", "std", "min", "max")
COMPARISON_FIGURES = (
    "cpu_per_example_ns",
    "examples_per_s",
    "time_per_example_ns",
    "energy_per_example_nj",
    "host_energy_per_example_nj",
)
"""The provider figures :func:`loader_comparison` sets side by side."""


# --------------------------------------------------------------------------- repeats


def repeats(frame: pd.DataFrame, figures: Sequence[str] = REPEAT_FIGURES) -> pd.DataFrame:
    """Repeats of a :func:`summary` frame: per Job × configuration × power limit × GPU clock ×
    basis.

    Two views: ``view = "provider"`` groups the workloads and lone runs,
    ``view = "client"`` the clients and lone runs (a lone run is both).
    Columns: the group (``view, job, configuration, power_limit_w, gpu_clock_mhz, basis``),
    ``count`` (rows in the group), ``run_ids`` (space-separated) and, for every
    figure of ``figures``, ``<figure>_mean``, ``_std`` (sample standard
    deviation, NaN for one repeat), ``_min`` and ``_max`` over the rows where
    the figure is known. A missing power limit or clock (the default) reads ``default``.
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
    # a frame written before the clock dial has no clock column: every run at the default
    rows["gpu_clock_mhz"] = rows.reindex(columns=["gpu_clock_mhz"])["gpu_clock_mhz"]
    rows["gpu_clock_mhz"] = rows["gpu_clock_mhz"].astype(object).fillna("default")
    rows["basis"] = rows["basis"].fillna("-")
    # each group numbered in order of first appearance, every figure made numeric once and
    # reduced per group in one pass; only narrow frames are split per group (a loop over the
    # whole rows' groups took seconds for a few hundred rows)
    import numpy as np

    codes = rows.groupby(list(REPEAT_KEYS), sort=False, dropna=False).ngroup().to_numpy()
    _, first = np.unique(codes, return_index=True)
    keys = rows[list(REPEAT_KEYS)].iloc[first].to_numpy()
    counts = np.bincount(codes)
    run_ids = rows["run_id"].astype(str).groupby(codes, sort=True).agg(" ".join).tolist()
    values = pd.DataFrame(
        {name: pd.to_numeric(rows[name], errors="coerce") for name in figures},
        index=rows.index,
        dtype=float,
    )
    stats = values.groupby(codes, sort=True).agg(list(STATISTICS)) if figures else None
    names = [f"{name}_{stat}" for name, stat in stats.columns] if figures else []
    table = stats.to_numpy() if figures else None
    methods = rows.reindex(columns=["energy_est_method"]).groupby(codes, sort=True)
    methods = [repeat_methods(part) for _, part in methods]
    out = []
    for i, key in enumerate(keys):
        entry = dict(zip(REPEAT_KEYS, key, strict=True))
        entry["count"] = int(counts[i])
        entry["run_ids"] = run_ids[i]
        if figures:
            entry.update(zip(names, table[i].tolist(), strict=True))
        entry.update(methods[i])
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
