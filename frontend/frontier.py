"""The Compare page's frontier chart: each Job's time-energy frontier from a
:func:`radt.frontier` table, and its empty state, which names what the workloads lack (pure
functions).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from radt.frontend.charts import PROVIDERS, SYMBOLS, _finish, _finite, setting_label
from radt.frontend.style import PALETTE, empty_figure, mode_colour

from radt.tags import Mode

NO_FRONTIER = (
    "No finished workload has both time and energy per example:<br>"
    "the frontier needs radt.log_examples(n) in the script and a GPU listener (nvml, dcgm, smi)."
)
FRONTIER_NEEDS = {
    "examples": "no run counted examples: call radt.log_examples(n) in the script "
    "(or log a metric named <i>examples</i>)",
    "energy": "no energy: no GPU listener (nvml, dcgm, smi) recorded power in these "
    "workloads, nor rapl the host's",
}
"""What the frontier lacks, each need in words, for its empty state (:func:`frontier_missing`)."""


def frontier_missing(summary: pd.DataFrame) -> list[str]:
    """The needs of :data:`FRONTIER_NEEDS` that no finished workload of a :func:`radt.summary`
    frame meets: ``examples`` (none counted any) and ``energy`` (none has GPU or host energy)."""
    rows = summary[summary["level"].isin(PROVIDERS)] if "level" in summary else summary
    if "status" in rows:
        rows = rows[rows["status"] == "FINISHED"]
    missing = []
    counted = [_finite(rows[c]) for c in ("examples", "examples_total") if c in rows]
    if not any((values > 0).any() for values in counted):
        missing.append("examples")
    energy = [_finite(rows[c]) for c in ("energy_j", "host_energy_j") if c in rows]
    if not any((values > 0).any() for values in energy):
        missing.append("energy")
    return missing


def no_frontier_note(summary: pd.DataFrame | None) -> str:
    """The frontier's empty state: each need the workloads miss by name, or (both met, or no
    summary to tell) :data:`NO_FRONTIER`."""
    missing = frontier_missing(summary) if summary is not None else []
    if not missing:
        return NO_FRONTIER
    lines = [FRONTIER_NEEDS[need] for need in missing]
    return "No frontier: it needs examples and energy per finished workload.<br>" + "<br>".join(
        line[0].upper() + line[1:] + "." for line in lines
    )


NO_NORMALISED = (
    "No normalised figures: they divide by the Job's <i>none</i> run on the whole GPU at the<br>"
    "default power limit and clock; run the job alone at full power (collocation none, no "
    "power_limit, no gpu_clock)."
)


def configuration_mode(configuration) -> str:
    """The collocation mode of a configuration label: ``4g.40gb+3g.40gb`` → ``mig``
    (``mps+naive`` for a workload that mixed modes)."""
    text = str(configuration or Mode.NONE)
    if text.startswith((Mode.NAIVE, Mode.MPS)):
        return text.split(":")[0].split()[0]
    return Mode.MIG if text[:1].isdigit() else Mode.NONE


def frontier_figure(
    table: pd.DataFrame, normalised: bool = False, summary: pd.DataFrame | None = None
) -> go.Figure:
    """Each Job's time–energy frontier from a :func:`radt.frontier` table.

    Every point is a configuration × power limit (mean of its repeats), coloured by
    collocation mode, its symbol the power limit; a line per Job runs through its Pareto
    points, dominated points are faded, and the energy-optimal and time-optimal points are
    labelled. ``normalised``: both axes divided by the Job's ``none`` run on the whole GPU at
    the default power limit (the dotted lines at 1). ``summary`` (the :func:`radt.summary`
    rows the table was made of) lets an empty frontier say which of its needs is missing.
    """
    title = "Frontier: what is worth running" + (" (normalised)" if normalised else "")
    x_name = "time_per_example_norm" if normalised else "time_per_example_ns"
    y_name = "energy_per_example_norm" if normalised else "energy_per_example_nj"
    scale = 1.0 if normalised else 1e-9
    points = table.assign(
        _x=_finite(table[x_name]).to_numpy() * scale if len(table) else [],
        _y=_finite(table[y_name]).to_numpy() * scale if len(table) else [],
    )
    points = points[np.isfinite(points["_x"]) & np.isfinite(points["_y"])]
    bases = [b for b in ("examples", "examples_lifetime") if (points["basis"] == b).any()]
    if bases:  # figures on different bases are never drawn together
        points = points[points["basis"] == bases[0]]
    if points.empty:
        empty = table[table["on_frontier"].notna()] if len(table) else table
        if normalised and len(empty):
            return empty_figure(NO_NORMALISED, title)
        return empty_figure(no_frontier_note(summary), title)
    points = points.assign(
        _mode=points["configuration"].map(configuration_mode),
        _cap=[
            setting_label(None if power == "default" else power, clock)
            for power, clock in zip(points["power_limit_w"], points["gpu_clock_mhz"], strict=True)
        ],
    )
    symbols = {cap: SYMBOLS[i % len(SYMBOLS)] for i, cap in enumerate(sorted(set(points["_cap"])))}
    jobs = list(dict.fromkeys(points["job"]))
    fig = go.Figure()
    optima: list[dict] = []
    for k, job in enumerate(jobs):
        mine = points[points["job"] == job]
        front = mine[mine["on_frontier"] == True].sort_values("_x")  # noqa: E712 - object column
        fig.add_trace(
            go.Scatter(
                x=front["_x"],
                y=front["_y"],
                mode="lines",
                line={"color": PALETTE[k % len(PALETTE)], "width": 2},
                name=f"frontier: {job}" if len(jobs) > 1 else "frontier",
                hoverinfo="skip",
            )
        )
        for on in (True, False):
            part = mine[(mine["on_frontier"] == True) == on]  # noqa: E712
            for (mode, cap), group in part.groupby(["_mode", "_cap"], sort=False):
                fig.add_trace(
                    go.Scatter(
                        x=group["_x"],
                        y=group["_y"],
                        mode="markers",
                        name=f"{mode} · {cap}" + ("" if on else " (dominated)"),
                        legendgroup=f"{mode} · {cap}",
                        opacity=1.0 if on else 0.3,
                        marker={"size": 12, "color": mode_colour(mode), "symbol": symbols[cap]},
                        customdata=group[
                            ["job", "configuration", "_cap", "count", "energy_bloat_pct"]
                        ].to_numpy(),
                        hovertemplate="%{customdata[0]}<br>%{customdata[1]} · %{customdata[2]}"
                        "<br>x %{x:.3s}, y %{y:.3s} (mean of %{customdata[3]})"
                        "<br>energy bloat %{customdata[4]:.1f}%<extra></extra>",
                    )
                )
        for flag, text in (("energy_optimal", "energy-optimal"), ("time_optimal", "time-optimal")):
            best = mine[mine[flag] == True]  # noqa: E712
            for _, p in best.iterrows():
                optima.append(
                    {
                        "x": p["_x"],
                        "y": p["_y"],
                        "text": f"{text}: {p['configuration']} · {p['_cap']}",
                        "showarrow": True,
                        "arrowhead": 2,
                        "ax": 40 if flag == "energy_optimal" else -40,
                        "ay": 30 if flag == "energy_optimal" else -30,
                        "font": {"color": PALETTE[k % len(PALETTE)]},
                    }
                )
    # set at once: plotly's add_annotation validates every annotation already there (50 Jobs'
    # optima took seconds)
    fig.layout.annotations = (*fig.layout.annotations, *optima)
    if normalised:
        fig.add_hline(y=1, line={"dash": "dot", "color": "#999"})
        fig.add_vline(x=1, line={"dash": "dot", "color": "#999"})
        fig.update_xaxes(title_text="time per example / whole GPU at full power")
        fig.update_yaxes(title_text="energy per example / whole GPU at full power")
    else:
        fig.update_xaxes(
            title_text="provider time per example", ticksuffix="s", exponentformat="SI"
        )
        host = "energy_source" in points and (points["energy_source"] == "host").all()
        fig.update_yaxes(
            title_text="provider energy per example"
            + (" (host: CPU packages + DRAM, rapl)" if host else ""),
            ticksuffix="J",
            exponentformat="SI",
        )
    return _finish(fig, title)
