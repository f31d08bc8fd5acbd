"""The compare charts of the MIG energy study, from a ``radt.summary`` frame (pure functions).

Rows of the frame (``level``): a **provider** is a workload (its parent run), a
**client** one training process of it, a **run** a lone command (both at once).
Configurations are told apart by collocation mode (colour) and power limit
(symbol, or the outer group of a bar chart). A provider's figures are over its
window (the overlap of its runs' steady states); each point says its window
and ``basis`` on hover, and points on different bases are separate traces with
the basis in their name. Every builder returns a figure that says in words why
it is empty rather than an empty plot.

The frontier chart is in :mod:`radt.frontend.frontier`, the placement of the points' labels
in :mod:`radt.frontend.labels`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from fractions import Fraction

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from radt.frontend.labels import label_positions
from radt.frontend.style import empty_figure, mode_colour

from radt.analysis.attribution import crosscheck_flagged
from radt.analysis.baselines import BASELINE_SPREAD_LIMIT_PCT, baseline_spread_flagged
from radt.analysis.levels import NO_GPU_NOTE
from radt.analysis.runtree import SHARED_LOADER
from radt.tags import MODES, Mode
from radt.words import count

PROVIDERS = ("provider", "run")
CLIENTS = ("client", "run")
MIG_SLICES = 7
"""Compute slices of a whole A100/H100 in MIG: ``3g`` is 3/7 of the GPU."""
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "hexagon")
NO_EXAMPLES = (
    "No run reports examples: call radt.log_examples(n) in the training script<br>"
    "(or log a metric named <i>examples</i>) for per-example figures."
)
BASIS_WORDS = {
    "examples": "steady state (a workload: while all its runs were in theirs)",
    "duration": "the command's duration (no examples reported)",
    "examples_lifetime": "the whole run, start-up included (no counter samples)",
    "duration_lifetime": "the whole run's duration (no counter samples)",
}
"""What each ``basis`` of radt.summary means, in a few words."""
NO_ENERGY = (
    "No GPU energy in these workloads (a CPU-only machine, or no nvml, dcgm or smi listener):<br>"
    "energy per example needs a GPU listener."
)


def normalise(frame: pd.DataFrame) -> pd.DataFrame:
    """A summary frame with the collocation of untagged runs as ``none``, ready for the charts."""
    return frame.assign(
        collocation=frame["collocation"].astype(object).fillna(Mode.NONE.value).astype(str)
    )


def focus(frame: pd.DataFrame, selected: Iterable[str]) -> pd.DataFrame:
    """The rows of the workloads that ``selected`` runs belong to (all rows if none is selected)."""
    chosen = {str(r) for r in selected}
    if not chosen:
        return frame
    parents = set(frame.loc[frame["run_id"].isin(chosen), "parent_run_id"].dropna().astype(str))
    workloads = chosen | parents
    keep = frame["run_id"].isin(workloads) | frame["parent_run_id"].isin(workloads)
    return frame[keep]


def _finite(values) -> pd.Series:
    return pd.to_numeric(pd.Series(values), errors="coerce").replace([np.inf, -np.inf], np.nan)


def power_label(value) -> str:
    """``"250"`` → ``250 W``; no cap recorded → ``default cap``."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    return f"{text} W" if text else "default cap"


def setting_label(power, clock=None) -> str:
    """The power limit and the locked SM clock in words: ``250 W · 1410 MHz``, ``default cap``
    (the clock left out at the driver's default)."""
    text = power_label(power)
    return f"{text} · {clock} MHz" if _present(clock) and str(clock) != "default" else text


def _settings(rows: pd.DataFrame) -> pd.Series:
    """Each row's :func:`setting_label` (a frame without a clock column: default clocks)."""
    clocks = rows["gpu_clock_mhz"] if "gpu_clock_mhz" in rows else [None] * len(rows)
    labels = [setting_label(p, c) for p, c in zip(rows["power_limit_w"], clocks, strict=True)]
    return pd.Series(labels, index=rows.index, dtype=object)


def config_label(row: pd.Series) -> str:
    """A configuration in words: ``mig 3g.40gb · 250 W``, ``mps 50% · default cap``, ``naive``."""
    mode = str(row.get("collocation") or Mode.NONE)
    detail = ""
    if mode == Mode.MIG and _present(row.get("mig_profile")):
        detail = f" {row['mig_profile']}"
    elif mode == Mode.MPS and _present(row.get("mps_thread_pct")):
        detail = f" {float(row['mps_thread_pct']):g}%"
    return f"{mode}{detail} · {setting_label(row.get('power_limit_w'), row.get('gpu_clock_mhz'))}"


def _present(value) -> bool:
    return (
        value is not None
        and not (isinstance(value, float) and math.isnan(value))
        and str(value) not in ("", "-", "nan", "None")
    )


def partition_share(row: pd.Series, clients: int = 1) -> Fraction | None:
    """The share of the GPU a client had: MIG slices of 7, its MPS share, 1/n when naive.

    ``clients`` is the number of runs in its workload. None when unknown (a MIG
    profile that does not start with ``<n>g``).
    """
    mode = str(row.get("collocation") or Mode.NONE)
    if mode == Mode.MIG:
        found = re.match(r"^(\d+)g", str(row.get("mig_profile") or ""))
        return Fraction(min(int(found.group(1)), MIG_SLICES), MIG_SLICES) if found else None
    if mode == Mode.MPS and _present(row.get("mps_thread_pct")):
        return Fraction(round(float(row["mps_thread_pct"])), 100)
    if mode in (Mode.NAIVE, Mode.MPS):
        return Fraction(1, max(int(clients), 1))
    return Fraction(1)


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in study order: by mode (none, naive, mps, mig), power limit, then start."""
    rank = frame["collocation"].map(lambda m: MODES.index(m) if m in MODES else len(MODES))
    cap = pd.to_numeric(frame["power_limit_w"], errors="coerce")
    return frame.assign(_rank=rank, _cap=cap).sort_values(
        ["_cap", "_rank", "start"], na_position="first"
    )


def _basis(frame: pd.DataFrame) -> pd.Series:
    """The rows' basis (``-`` where a frame has none)."""
    if "basis" not in frame:
        return pd.Series("-", index=frame.index)
    return frame["basis"].astype(object).fillna("-").astype(str)


def basis_note(frame: pd.DataFrame) -> str:
    """What the providers' figures of a summary frame are over, in one sentence.

    Says which bases occur (docs/analysis.md) and warns when they are mixed:
    figures on different bases do not compare.
    """
    rows = frame[frame["level"].isin(PROVIDERS)]
    counts = _basis(rows).value_counts()
    counts = counts[counts.index != "-"]
    if counts.empty:
        return ""
    parts = [
        f"{count(n, 'workload')} on basis {b}, {BASIS_WORDS.get(b, b)}" for b, n in counts.items()
    ]
    if len(parts) == 1:
        return f"Workload figures are over their window: {parts[0]}."
    return (
        "Mixed bases, not comparable with each other (separate legend entries): "
        + "; ".join(parts)
        + "."
    )


def _window_text(rows: pd.DataFrame) -> np.ndarray:
    """Per row: ``12.3 s window, examples basis`` for hover labels."""
    seconds = _finite(rows["window_s"]) if "window_s" in rows else pd.Series(np.nan, rows.index)
    texts = []
    for value, basis in zip(seconds.to_numpy(), _basis(rows), strict=True):
        window = f"{value:.3g} s window" if np.isfinite(value) else "no window"
        texts.append(f"{window}, {basis} basis")
    return np.asarray(texts, dtype=object)


def _symbols(frame: pd.DataFrame) -> dict[str, str]:
    caps = sorted(set(_settings(frame)))
    return {cap: SYMBOLS[i % len(SYMBOLS)] for i, cap in enumerate(caps)}


def efficiency_figure(frame: pd.DataFrame) -> go.Figure:
    """Provider time per example (x) against energy per example (y); down-left is better."""
    title = "Workloads: time vs energy per example"
    rows = frame[frame["level"].isin(PROVIDERS)]
    seconds = _finite(rows["time_per_example_ns"]).to_numpy() * 1e-9
    joules = _finite(rows["energy_per_example_nj"]).to_numpy() * 1e-9
    if not np.isfinite(seconds).any():
        return empty_figure(NO_EXAMPLES, title)
    if not (np.isfinite(seconds) & np.isfinite(joules)).any():
        return empty_figure(NO_ENERGY, title)
    rows = rows.assign(
        _s=seconds,
        _j=joules,
        _basis=_basis(rows),
        _window=_window_text(rows),
        _check=host_text(rows) + crosscheck_text(rows),
    )
    rows = rows[np.isfinite(rows["_s"]) & np.isfinite(rows["_j"])]
    symbols = _symbols(rows)
    mixed = rows["_basis"].nunique() > 1
    fig = go.Figure()
    for (mode, cap, basis), part in _ordered(rows).groupby(
        ["collocation", _settings(rows), "_basis"],
        sort=False,
        dropna=False,
    ):
        symbol = symbols[cap] + ("-open" if mixed and basis != "examples" else "")
        fig.add_trace(
            go.Scatter(
                x=part["_s"],
                y=part["_j"],
                mode="markers+text",
                text=part["workload"].fillna(part["run_name"]),
                textposition="top center",
                cliponaxis=False,
                name=f"{mode} · {cap}" + (f" · {basis}" if mixed else ""),
                marker={"size": 12, "color": mode_colour(mode), "symbol": symbol},
                customdata=part[["run_name", "examples", "_window", "_check"]].to_numpy(),
                hovertemplate="%{customdata[0]}<br>%{x:.3s}s per example<br>"
                "%{y:.3s}J per example<br>%{customdata[1]:,.0f} examples in a "
                "%{customdata[2]}%{customdata[3]}<extra></extra>",
            )
        )
    fig.add_annotation(
        text="better: less time and energy per example",
        xref="paper",
        yref="paper",
        x=0.02,
        y=0.04,
        ax=70,
        ay=-50,
        showarrow=True,
        arrowhead=3,
        xanchor="left",
        font={"color": "#2a7a2a"},
        arrowcolor="#2a7a2a",
    )
    _per_example_axes(fig, rows, "provider time per example", "provider energy per example")
    return _finish(fig, title)


PAD = 0.15
"""The room beside the outermost points, as a share of the points' span: a label centred on
a point at the edge stays inside the plot."""
LABEL_ROOM = 0.3
"""The room above the highest point, as a share of the span: its label (``top center``)."""


def _per_example_axes(fig: go.Figure, rows: pd.DataFrame, time_title: str, energy_title: str):
    """Time per example (``rows["_s"]``) across, energy per example (``rows["_j"]``) up, in SI
    units, each padded so that a point's label stays inside the plot."""
    fig.update_xaxes(
        title_text=time_title,
        ticksuffix="s",
        exponentformat="SI",
        range=padded_range(rows["_s"]),
    )
    fig.update_yaxes(
        title_text=energy_title,
        ticksuffix="J",
        exponentformat="SI",
        range=padded_range(rows["_j"], above=LABEL_ROOM),
    )


def padded_range(values, below: float = PAD, above: float = PAD) -> list[float]:
    """An axis range over the finite ``values`` with ``below``/``above`` of their span beside
    them (a single value: of itself), so that the points' labels are not cut at the plot's
    edge; it starts at 0 where padding would take positive values below 0."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    lo, hi = float(finite.min()), float(finite.max())
    span = hi - lo or abs(hi) or 1.0
    start = lo - below * span
    return [0.0 if lo >= 0 > start else start, hi + above * span]


def crosscheck_text(rows: pd.DataFrame) -> np.ndarray:
    """Per row, a hover line when its energy cross-check is over the limit, else ``""``."""
    if "energy_crosscheck_pct" not in rows:
        return np.full(len(rows), "", dtype=object)
    texts = [
        f"<br>⚠ energy cross-check: the integral of power is {pct:+.1f} % off the counter"
        if crosscheck_flagged(pct)
        else ""
        for pct in _finite(rows["energy_crosscheck_pct"]).to_numpy()
    ]
    return np.asarray(texts, dtype=object)


def host_text(rows: pd.DataFrame) -> np.ndarray:
    """Per row, a hover line with host (CPU + DRAM) and GPU + host energy per example, else ``""``.

    The host figure is the whole machine's (RAPL has no per-process or per-GPU
    split), which the line says.
    """
    if "host_energy_per_example_nj" not in rows:
        return np.full(len(rows), "", dtype=object)
    host = _finite(rows["host_energy_per_example_nj"]).to_numpy() * 1e-9
    total = (
        _finite(rows["total_energy_per_example_nj"]).to_numpy() * 1e-9
        if "total_energy_per_example_nj" in rows
        else np.full(len(rows), np.nan)
    )
    texts = []
    for h, t in zip(host, total, strict=True):
        if not np.isfinite(h):
            texts.append("")
            continue
        line = f"<br>host (CPU+DRAM, whole machine): {_si(h)}J per example"
        texts.append(line + (f", GPU+host {_si(t)}J" if np.isfinite(t) else ""))
    return np.asarray(texts, dtype=object)


def _si(value: float) -> str:
    """``0.0123`` → ``12.3m`` (three significant digits and an SI prefix, as d3's ``.3s``)."""
    if value == 0:
        return "0"
    prefixes = {-4: "p", -3: "n", -2: "µ", -1: "m", 0: "", 1: "k", 2: "M", 3: "G"}
    power = max(-4, min(3, math.floor(math.log10(abs(value)) / 3)))
    return f"{value / 1000.0**power:.3g}{prefixes[power]}"


def client_energy_figure(frame: pd.DataFrame) -> go.Figure:
    """Runs' time (x) against GPU energy (y) per example: measured solid, estimated hollow.

    A lone run or a workload's only run has measured energy
    (``energy_per_example_nj``); a collocated client has an estimate
    (``energy_per_example_nj_est``, docs/analysis.md), drawn as a hollow marker
    in its own legend entry ending ``est.``, its method in the hover. The two are
    never one trace.
    """
    title = "Runs: time vs GPU energy per example (hollow: estimated share of a shared GPU)"
    rows = frame[frame["level"].isin(CLIENTS)]
    seconds = _finite(rows["time_per_example_ns"]).to_numpy() * 1e-9
    if not np.isfinite(seconds).any():
        return empty_figure(NO_EXAMPLES, title)
    measured = _finite(rows["energy_per_example_nj"]).to_numpy() * 1e-9
    estimated = (
        _finite(rows["energy_per_example_nj_est"]).to_numpy() * 1e-9
        if "energy_per_example_nj_est" in rows
        else np.full(len(rows), np.nan)
    )
    methods = (
        rows["energy_est_method"].astype(object).fillna("").astype(str).to_numpy()
        if "energy_est_method" in rows
        else np.full(len(rows), "", dtype=object)
    )
    kind = np.where(np.isfinite(measured), "measured", np.where(np.isfinite(estimated), "est", ""))
    joules = np.where(kind == "measured", measured, estimated)
    rows = rows.assign(
        _s=seconds,
        _j=joules,
        _kind=kind,
        _how=np.where(kind == "est", "estimated by " + methods.astype(object), "measured"),
        _window=_window_text(rows),
    )
    rows = rows[np.isfinite(rows["_s"]) & np.isfinite(rows["_j"])]
    if rows.empty:
        return empty_figure(NO_ENERGY, title)
    symbols = _symbols(rows)
    fig = go.Figure()
    for (mode, cap, what), part in _ordered(rows).groupby(
        ["collocation", _settings(rows), "_kind"], sort=False
    ):
        estimate = what == "est"
        fig.add_trace(
            go.Scatter(
                x=part["_s"],
                y=part["_j"],
                mode="markers+text",
                text=part["run_name"],
                textposition="top center",
                cliponaxis=False,
                name=f"{mode} · {cap}" + (" · est." if estimate else ""),
                marker={
                    "size": 12,
                    "color": mode_colour(mode),
                    "symbol": symbols[cap] + ("-open" if estimate else ""),
                    "line": {"width": 2} if estimate else {},
                },
                customdata=part[["workload", "_how", "_window"]].to_numpy(),
                hovertemplate="%{text} (%{customdata[0]})<br>%{x:.3s}s per example<br>"
                "%{y:.3s}J per example" + (" (est.)" if estimate else "") + ", %{customdata[1]}"
                "<br>%{customdata[2]}<extra></extra>",
            )
        )
    _per_example_axes(fig, rows, "time per example", "GPU energy per example")
    return _finish(fig, title)


def throughput_energy_figure(frame: pd.DataFrame) -> go.Figure:
    """Bars per workload, grouped by power limit and coloured by mode: examples/s and J/example."""
    title = "Throughput and energy per example, per configuration"
    rows = _ordered(frame[frame["level"].isin(PROVIDERS)])
    rate = _finite(rows["examples_per_s"]).to_numpy()
    if not np.isfinite(rate).any():
        return empty_figure(NO_EXAMPLES, title)
    joules = _finite(rows["energy_per_example_nj"]).to_numpy() * 1e-9
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("throughput (examples/s)", "energy per example (J)"),
        horizontal_spacing=0.12,
    )
    outer = _settings(rows).to_numpy(dtype=object)
    inner = rows["workload"].fillna(rows["run_name"]).astype(str).to_numpy(dtype=object)
    windows = _window_text(rows)
    for col, values in ((1, rate), (2, joules)):
        for mode in dict.fromkeys(rows["collocation"]):
            mask = (rows["collocation"] == mode).to_numpy()
            fig.add_trace(
                go.Bar(
                    x=[outer[mask].tolist(), inner[mask].tolist()],
                    y=values[mask],
                    name=str(mode),
                    legendgroup=str(mode),
                    showlegend=col == 1,
                    marker_color=mode_colour(mode),
                    customdata=windows[mask],
                    hovertemplate="%{x}<br>%{y:.4s} over a %{customdata}<extra>"
                    + str(mode)
                    + "</extra>",
                ),
                row=1,
                col=col,
            )
    if not np.isfinite(joules).any():
        fig.add_annotation(
            text="no GPU energy recorded",
            xref="x2 domain",
            yref="y2 domain",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 13, "color": "#555"},
        )
        fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_yaxes(exponentformat="SI", ticksuffix="J", row=1, col=2)
    fig.update_layout(barmode="relative")
    fig = _finish(fig, title)
    # two rows of x labels (power limit, workload): a legend under them would cover them
    fig.update_layout(
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"},
        margin={"r": 110},
    )
    return fig


def slowdown_figure(frame: pd.DataFrame) -> go.Figure:
    """Client slowdown against its partition of the GPU, with the 1:1 line.

    x is the slowdown the partition alone implies, 1/share (a 3g MIG slice of
    7: 7/3; MPS at 50 %: 2; naive sharing among n runs: n); y the measured
    slowdown against the same job alone. On the 1:1 line a client ran exactly
    as fast as its share; below it, faster.
    """
    title = "Client slowdown against partition size"
    clients = frame[frame["level"].isin(CLIENTS)]
    sizes = frame["parent_run_id"].value_counts()
    shares = [
        partition_share(row, int(sizes.get(row["parent_run_id"], 1)))
        for _, row in clients.iterrows()
    ]
    slow = _finite(clients["slowdown"]).to_numpy()
    expected = np.array([float(1 / s) if s else np.nan for s in shares])
    ok = np.isfinite(slow) & np.isfinite(expected)
    if not ok.any():
        return empty_figure(
            "No slowdown yet: it needs a baseline, a FINISHED run of the same job alone<br>"
            "(collocation none) on the same basis (both with examples, or both without).",
            title,
        )
    fig = go.Figure()
    top = float(max(np.nanmax(slow[ok]), np.nanmax(expected[ok]), 1.0)) * 1.1
    fig.add_trace(
        go.Scatter(
            x=[0, top],
            y=[0, top],
            mode="lines",
            name="1:1 (as fast as its share)",
            line={"color": "#999", "dash": "dash"},
            hoverinfo="skip",
        )
    )
    labels = [f"{s.numerator}/{s.denominator}" if s else "?" for s in shares]
    spread = (
        _finite(clients["baseline_cv_pct"]).to_numpy()
        if "baseline_cv_pct" in clients
        else np.full(len(clients), np.nan)
    )
    flagged = np.array([baseline_spread_flagged(v) for v in spread], dtype=bool)
    part = clients.assign(
        _x=expected,
        _y=slow,
        _share=labels,
        _window=_window_text(clients),
        _flagged=flagged,
        _cv=spread,
        _spread=[
            f"<br>⚠ baseline repeats spread {v:.1f} % (over {BASELINE_SPREAD_LIMIT_PCT:g} %)"
            if f
            else ""
            for v, f in zip(spread, flagged, strict=True)
        ],
    )[ok]
    part = part.assign(
        _position=label_positions(part["_x"], part["_y"], part["run_name"], (top, top))
    )
    for (mode, spread_out), group in part.groupby(["collocation", "_flagged"], sort=False):
        fig.add_trace(
            go.Scatter(
                x=group["_x"],
                y=group["_y"],
                mode="markers+text",
                text=group["run_name"],
                textposition=group["_position"].tolist(),
                cliponaxis=False,
                name=f"{mode} (baseline spread > {BASELINE_SPREAD_LIMIT_PCT:g} %)"
                if spread_out
                else str(mode),
                legendgroup=str(mode),
                marker={
                    "size": 11,
                    "color": mode_colour(mode),
                    "symbol": "circle-open" if spread_out else "circle",
                    "line": {"width": 2} if spread_out else {},
                },
                customdata=group[["_share", "workload", "_window", "_spread"]].to_numpy(),
                hovertemplate="%{text} (%{customdata[1]})<br>share %{customdata[0]} of the GPU"
                "<br>slowdown %{y:.2f}× (share implies %{x:.2f}×)<br>%{customdata[2]}"
                "%{customdata[3]}<extra></extra>",
            )
        )
    spread_out = part[part["_flagged"]]
    if len(spread_out):
        spreads = ", ".join(f"{v:.0f}" for v in sorted({round(v) for v in spread_out["_cv"]}))
        _corner_note(
            fig,
            f"hollow: the baseline's repeats spread {spreads} % (over "
            f"{BASELINE_SPREAD_LIMIT_PCT:g} %): slowdown uncertain",
            "left",
            "#8a3b00",
        )
    fig.update_xaxes(title_text="partition size as slowdown: 1 / share of the GPU", range=[0, top])
    fig.update_yaxes(title_text="measured slowdown vs alone", range=[0, top])
    return _finish(fig, title)


def utilisation_figure(frame: pd.DataFrame) -> go.Figure:
    """Mean GPU utilisation and SM activity per run, in percent."""
    title = "GPU utilisation and SM activity per run"
    util = _finite(frame["util_mean_pct"]).to_numpy()
    smact = _finite(frame["smact_mean_ratio"]).to_numpy() * 100
    ok = np.isfinite(util) | np.isfinite(smact)
    if not ok.any():
        return empty_figure(
            "No GPU utilisation in these runs (a CPU-only machine?): the nvml and smi listeners<br>"
            "record utilisation, dcgm SM activity. CPU series are on the time-series page.",
            title,
        )
    rows = frame[ok]
    names = [
        f"{n} (workload)" if lvl == "provider" else str(n)
        for n, lvl in zip(rows["run_name"], rows["level"], strict=True)
    ]
    fig = go.Figure()
    for values, label, colour in (
        (util[ok], "utilisation", "#1f77b4"),
        (smact[ok], "SM activity", "#ff7f0e"),
    ):
        if np.isfinite(values).any():
            fig.add_trace(go.Bar(x=names, y=values, name=f"{label} (%)", marker_color=colour))
    fig.update_yaxes(title_text="%", range=[0, 100])
    fig.update_layout(barmode="group")
    return _finish(fig, title)


def _finish(fig: go.Figure, title: str) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        height=420,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        legend={"orientation": "h", "y": -0.18},
    )
    return fig


def _corner_note(fig: go.Figure, text: str, side: str, colour: str) -> None:
    """A small note in the top ``side`` ("left": just above the plot, "right": inside it)."""
    fig.add_annotation(
        text=text,
        xref="paper",
        yref="paper",
        x=0.0 if side == "left" else 1.0,
        y=1.0,
        xanchor=side,
        yanchor="bottom" if side == "left" else "top",
        align=side,
        showarrow=False,
        font={"size": 11, "color": colour},
    )


NO_CPU = (
    "No CPU per example in these workloads: it needs the <i>top</i> listener and<br>"
    "radt.log_examples(n) in the script (CPU core-seconds over the window / examples)."
)
LOADER_TITLES = {
    ("own",): " (each training its own data loader)",
    ("shared",): " (one shared data loader per workload)",
    ("own", "shared"): ": own loaders vs one shared loader",
}
"""The end of :func:`cpu_figure`'s title: what the loaders shown are."""
LOADER_PATTERNS = {"own": "", "shared": "/"}
"""Own loaders' bars plain, one shared loader's hatched, in :func:`cpu_figure` (the colour is
the collocation mode's, as in the page's other charts)."""


def _cpu_note(note) -> str:
    """A row's ``window_note`` less what is about the GPU alone (no reason for missing CPU)."""
    parts = [p for p in str(note).split("; ") if p != NO_GPU_NOTE] if _present(note) else []
    return "; ".join(parts) or "no CPU per example"


def cpu_figure(frame: pd.DataFrame) -> go.Figure:
    """Provider CPU per example (ms) by configuration for each Job, own vs shared loader.

    One bar per Job × configuration (``+ shared loader`` taken off) × power limit ×
    ``loader``, side by side, coloured by collocation mode (:func:`mode_colour`, as the
    page's other charts) and hatched for ``shared`` (``own``: each training loads its own
    data; ``shared``: one shared loader fed them, its CPU counted in). A bar is
    the mean of its workloads' ``cpu_per_example_ns`` (repeats; the hover says how
    many). Workloads whose CPU per example is missing are named under the chart with
    their ``window_note``.
    """
    title = "CPU per example by configuration"
    rows = frame[frame["level"].isin(PROVIDERS)]
    if rows.empty:
        return empty_figure(NO_CPU, title)
    rows = _ordered(rows)
    cpu_ms = _finite(rows["cpu_per_example_ns"]).to_numpy() * 1e-6
    configuration = rows["configuration"].astype(object).fillna(rows["collocation"]).astype(str)
    cap = rows["power_limit_w"].map(lambda v: "" if not _present(v) else f" · {power_label(v)}")
    rows = rows.assign(
        _ms=cpu_ms,
        _job=rows["job"].astype(object).fillna("-").astype(str).to_numpy(),
        _config=(configuration.str.removesuffix(SHARED_LOADER) + cap).to_numpy(),
        _loader=rows["loader"].astype(object).fillna("own").astype(str).to_numpy(),
        _name=rows["workload"].fillna(rows["run_name"]).astype(str).to_numpy(),
        _mode=rows["collocation"].astype(object).fillna(Mode.NONE).astype(str).to_numpy(),
    )
    known = rows[np.isfinite(rows["_ms"])]
    if known.empty:
        return empty_figure(NO_CPU, title)
    fig = go.Figure()
    keys = ["_job", "_config"]
    slots = list(dict.fromkeys(zip(known["_job"], known["_config"], strict=True)))
    loaders = [m for m in ("own", "shared") if (known["_loader"] == m).any()]
    title += LOADER_TITLES[tuple(loaders)]
    modes = list(dict.fromkeys(known["_mode"]))
    for loader, mode in ((lo, m) for lo in loaders for m in modes):
        mine = known[(known["_loader"] == loader) & (known["_mode"] == mode)]
        if mine.empty:
            continue
        means = mine.groupby(keys, sort=False)["_ms"].agg(["mean", "count"])
        names = mine.groupby(keys, sort=False)["_name"].agg(", ".join)
        present = [s for s in slots if s in means.index]
        fig.add_trace(
            go.Bar(
                x=[[s[0] for s in present], [s[1] for s in present]],
                y=[float(means.loc[s, "mean"]) for s in present],
                name=f"{mode} · {loader} loader" + ("s" if loader == "own" else ""),
                legendgroup=mode,
                offsetgroup=loader,  # side by side by loader; a slot has one mode
                marker={
                    "color": mode_colour(mode),
                    "pattern": {"shape": LOADER_PATTERNS.get(loader, "")},
                },
                customdata=[[int(means.loc[s, "count"]), names.loc[s]] for s in present],
                hovertemplate="%{x}<br>%{y:.4g} ms CPU per example (mean of %{customdata[0]}: "
                "%{customdata[1]})<extra>" + loader + "</extra>",
            )
        )
    missing = rows[~np.isfinite(rows["_ms"])]
    if len(missing):
        notes = rows["window_note"] if "window_note" in rows else pd.Series(None, rows.index)
        lines = [
            f"{name}: {_cpu_note(note)}"
            for name, note in zip(missing["_name"], notes[missing.index], strict=True)
        ]
        _corner_note(fig, "missing: " + "<br>".join(lines), "right", "#555")
    fig.update_yaxes(title_text="CPU per example (ms, core-time)", rangemode="tozero")
    fig.update_layout(barmode="group")
    return _finish(fig, title)
