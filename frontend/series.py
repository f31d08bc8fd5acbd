"""The time-series figure: metric keys of runs overlaid, one panel per quantity (pure functions).

A key is ``<listener>/<entity>/<quantity>_<unit>`` (DESIGN.md, "Metric keys"):
keys that end in the same quantity (``top/proc/cpu_pct`` and ``top/host/cpu_pct``)
share a panel, whose axis names the unit spelled in the suffix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from radt.frontend.downsample import DEFAULT_BUDGET, reduce
from radt.frontend.phases import LANE_HEIGHT, phase_bands
from radt.frontend.style import PALETTE, empty_figure

UNITS: dict[str, str] = {
    "w": "W",
    "j": "J",
    "kj": "kJ",
    "pct": "%",
    "ratio": "ratio",
    "mib": "MiB",
    "gib": "GiB",
    "kib": "KiB",
    "mhz": "MHz",
    "c": "°C",
    "s": "s",
    "ms": "ms",
    "us": "µs",
    "ns": "ns",
    "mib_s": "MiB/s",
    "gib_s": "GiB/s",
    "ops_s": "ops/s",
    "pkts_s": "packets/s",
    "bytes": "bytes",
}
"""Key suffix → unit; two-part suffixes (``_mib_s``) are tried before one-part ones."""

DASHES = ("solid", "dot", "dash", "dashdot", "longdash", "longdashdot")
PANEL_HEIGHT = 240
PHASES_TITLE = "phases (radt.phase): % of each run's phase span in view"
"""The phase panel's title, which says what a lane's share is of."""
WINDOW_LABEL_PX = 14
"""How far apart, in pixels, the window labels of successive runs sit (one line each)."""
WINDOW_LABEL_TOP_PX = 24
"""How far above the top panel the first window label sits: over the panel's title, off the
plot area and its lines."""
TOP_MARGIN_PX = 40
"""The time-series figure's top margin without window labels (room for the top panel's title)."""


def top_margin(bands: int) -> int:
    """The figure's top margin with ``bands`` window labels above the top panel."""
    if not bands:
        return TOP_MARGIN_PX
    return max(TOP_MARGIN_PX, WINDOW_LABEL_TOP_PX + WINDOW_LABEL_PX * bands + 6)


@dataclass(frozen=True)
class RunLabel:
    """What the figure needs to know about one run."""

    run_id: str
    name: str
    start_us: int
    """The run's start (MLflow start time), microseconds since the epoch: relative time's origin.
    A node run's is its job run's start, so that its nodes share one time axis."""
    workload: bool = False
    """A workload (parent) run: its series are the devices' of the whole workload."""
    node: str | None = None
    """A distributed training's node run: its node, which names its traces."""
    job: bool = False
    """A distributed training's job run (the parent of its node runs)."""

    @property
    def label(self) -> str:
        """How its traces and window are named: ``pair (workload)``, ``node a``, ``ddp (job)``,
        else the run's name."""
        if self.node is not None:
            return f"node {self.node}"
        if self.workload or self.job:
            return f"{self.name} ({'workload' if self.workload else 'job'})"
        return self.name


def quantity(key: str) -> str:
    """The last part of a key: ``top/proc/cpu_pct`` → ``cpu_pct``; ``examples`` → ``examples``."""
    return key.rsplit("/", 1)[-1]


def split_unit(name: str) -> tuple[str, str]:
    """A quantity and its unit: ``cpu_pct`` → ``("cpu", "%")``; ``read_mib_s`` → MiB/s.

    A name without a known unit suffix (``threads``) has the unit ``""``.
    """
    parts = name.split("_")
    for width in (2, 1):
        if len(parts) > width:
            suffix = "_".join(parts[-width:]).lower()
            if suffix in UNITS:
                return "_".join(parts[:-width]).replace("_", " "), UNITS[suffix]
    return name.replace("_", " "), ""


def panel_title(name: str) -> str:
    """Axis title of a quantity's panel: ``power_w`` → ``power (W)``."""
    what, unit = split_unit(name)
    return f"{what} ({unit})" if unit else what


def panels(keys: Sequence[str]) -> list[str]:
    """The quantities of ``keys`` in the order they first appear: one panel each."""
    return list(dict.fromkeys(quantity(k) for k in keys))


def micros(stamps: pd.Series) -> np.ndarray:
    """Datetimes (naive ones are UTC) as int64 microseconds since the epoch."""
    if stamps.dt.tz is None:
        stamps = stamps.dt.tz_localize("UTC")
    return np.asarray(stamps.dt.as_unit("us").array.asi8, dtype=np.int64)


def _x(stamps: pd.Series, run: RunLabel, relative: bool) -> np.ndarray:
    micros_ = micros(stamps)
    return (micros_ - run.start_us) / 1e6 if relative else micros_


def _bound(value, relative: bool):
    """A window bound from the browser: seconds (relative), or a date string (wall, UTC)."""
    if value is None:
        return None
    if relative:
        return float(value)
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return int(stamp.value // 1000)


@dataclass
class SeriesStats:
    """What the figure holds: for the status line under the chart."""

    traces: int = 0
    samples: int = 0
    shown: int = 0
    bands: int = 0
    phase_intervals: int = 0
    """radt.phase intervals in the window, drawn as ``phase_bands`` bands."""
    phase_bands: int = 0
    phase_left_out: int = 0
    phase_merge_s: float = 0.0

    @property
    def downsampled(self) -> bool:
        return self.shown < self.samples


@dataclass(frozen=True)
class RunWindow:
    """The window a run's figures are over (``radt.summary``'s ``window_start/_end``)."""

    start_us: int
    end_us: int
    basis: str


def window_bands(
    fig: go.Figure,
    windows: Mapping[str, RunWindow],
    runs: Mapping[str, RunLabel],
    colours: Mapping[str, str],
    rows: int,
    relative: bool,
) -> int:
    """Shade each run's window across all ``rows`` panels, in the run's colour; return how many.

    One shape per run, named ``pair-A: window (examples)``, drawn on the bottom panel's time
    axis, which the others match, over the whole height; its label, the same words, is an
    annotation at the window's start above the top panel (each run's a line above the one
    before, :data:`WINDOW_LABEL_PX`), off the plot so that it never covers a line. (No legend
    entries: plotly stops zooming matched axes when a shape has one, and a shape on a
    matching axis does the same.)
    """
    axis = f"x{rows}" if rows > 1 else "x"
    drawn = 0
    for run_id, span in windows.items():
        run = runs.get(run_id)
        if run is None or span.end_us <= span.start_us:
            continue
        if relative:
            x0, x1 = (span.start_us - run.start_us) / 1e6, (span.end_us - run.start_us) / 1e6
        else:
            x0 = pd.Timestamp(span.start_us, unit="us").isoformat()
            x1 = pd.Timestamp(span.end_us, unit="us").isoformat()
        label = run.label
        fig.add_shape(
            type="rect",
            xref=axis,
            yref="paper",
            x0=x0,
            x1=x1,
            y0=0,
            y1=1,
            fillcolor=colours.get(run_id, "#888888"),
            opacity=0.12,
            layer="below",
            line_width=0,
            name=f"{label}: window ({span.basis})",
        )
        fig.add_annotation(
            x=x0,
            xref=axis,
            y=1,
            yref="paper",
            xanchor="left",
            yanchor="bottom",
            # a line of its own per run: windows that start together label apart
            yshift=WINDOW_LABEL_TOP_PX + WINDOW_LABEL_PX * drawn,
            text=f"{label}: window ({span.basis})",
            name=f"{label}: window ({span.basis})",
            showarrow=False,
            font={"size": 10, "color": colours.get(run_id, "#888888")},
        )
        drawn += 1
    return drawn


def timeseries_figure(
    frame: pd.DataFrame,
    runs: Mapping[str, RunLabel],
    keys: Sequence[str],
    *,
    relative: bool = True,
    window: tuple | None = None,
    budget: int = DEFAULT_BUDGET,
    revision: str = "",
    windows: Mapping[str, RunWindow] | None = None,
    phases: pd.DataFrame | None = None,
) -> tuple[go.Figure, SeriesStats]:
    """Overlay ``keys`` of ``runs`` from a tidy ``frame`` (``radt.load``'s columns).

    One subplot per quantity sharing the time axis: seconds since each run's
    start (``relative``), else wall time in UTC. Within ``window`` (x-axis
    bounds as the browser sends them; None: everything) each trace keeps at
    most ``budget`` points, chosen by MinMaxLTTB. A run's colour is the same
    in every panel; keys within a panel differ by dash. ``windows`` (per run
    id) are shaded as bands in the run's colour (:func:`window_bands`).
    ``phases`` (``radt.phase`` intervals, :func:`radt.analysis.phases.intervals`'
    columns) are drawn as bands in lanes, in a panel of their own at the bottom
    (:func:`radt.frontend.phases.phase_bands`: merged and limited to the window).
    ``revision`` becomes ``layout.uirevision``, so zoom and hidden traces
    survive a refresh of the same view.
    """
    stats = SeriesStats()
    names = panels(keys)
    if not names:
        return empty_figure("Pick one or more metric keys above."), stats
    wanted = frame[frame["key"].isin(list(keys))] if len(frame) else frame
    if wanted.empty:
        return empty_figure("The selected runs hold no samples of these keys."), stats
    lo, hi = (None, None) if window is None else (_bound(w, relative) for w in window)
    lanes = phase_bands(phases, runs, relative=relative, lo=lo, hi=hi)
    stats.phase_intervals, stats.phase_bands = lanes.intervals, lanes.drawn
    stats.phase_left_out, stats.phase_merge_s = lanes.left_out, lanes.merge_s
    heights = [PANEL_HEIGHT] * len(names)
    titles = [panel_title(n) for n in names]
    if lanes.traces:
        heights.append(LANE_HEIGHT * len(lanes.lanes) + 30)
        titles.append(PHASES_TITLE)
    rows = len(heights)
    fig = make_subplots(
        rows=rows,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.08, 0.3 / rows),
        subplot_titles=titles,
        row_heights=heights,
    )
    colours = {run_id: PALETTE[i % len(PALETTE)] for i, run_id in enumerate(runs)}
    by_key = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    parts = {
        (str(run_id), str(key)): part
        for (run_id, key), part in wanted.groupby(["run_id", "key"], observed=True, sort=False)
    }
    for key, run_id in ((k, r) for k in by_key for r in runs):
        part = parts.get((run_id, key))
        if part is None:
            continue
        run = runs[run_id]
        x = _x(part["timestamp"], run, relative)
        y = part["value"].to_numpy(dtype=np.float64)
        order = np.argsort(x, kind="stable")
        xs, ys, n = reduce(x[order], y[order], lo, hi, budget)
        stats.traces += 1
        stats.samples += n
        stats.shown += len(xs)
        label = run.label
        fig.add_trace(
            go.Scatter(
                x=xs if relative else xs.astype("datetime64[us]"),
                y=ys,
                mode="lines",
                name=f"{label} · {key}",
                legendgroup=run_id,
                line={
                    "color": colours[run_id],
                    "width": 1.5,
                    "dash": DASHES[by_key[key] % len(DASHES)],
                },
                hovertemplate=f"{label}<br>{key}<br>%{{x}}: %{{y:.4g}}<extra></extra>",
            ),
            row=names.index(quantity(key)) + 1,
            col=1,
        )
    for trace in lanes.traces:
        fig.add_trace(trace, row=rows, col=1)
    if lanes.traces:
        fig.update_yaxes(
            tickvals=list(range(len(lanes.lanes))),
            ticktext=lanes.lanes,
            range=[-0.6, len(lanes.lanes) - 0.4],
            fixedrange=True,
            showgrid=False,
            zeroline=False,
            automargin=True,
            row=rows,
            col=1,
        )
    if windows:
        stats.bands = window_bands(fig, windows, runs, colours, rows, relative)
    for row, name in enumerate(names, start=1):
        fig.update_yaxes(title_text=split_unit(name)[1] or None, row=row, col=1)
    since = "seconds since the run started"
    if any(run.node is not None for run in runs.values()):
        since += " (a node's: its job's)"
    fig.update_xaxes(
        title_text=since if relative else "time (UTC)",
        row=rows,
        col=1,
    )
    if window is not None:
        fig.update_xaxes(range=list(window), autorange=False)
    top = top_margin(stats.bands)
    height = max(320, sum(heights) + 80 + top)
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": top, "b": 50},
        # below the time axis's title: 60 px under the plot area, in paper units
        legend={"orientation": "h", "yanchor": "top", "y": -60 / (height - 50 - top), "x": 0},
        hovermode="closest",
        uirevision=revision,
        template="plotly_white",
    )
    return fig, stats


def default_keys(available: Sequence[str]) -> list[str]:
    """Keys to show first: GPU power and utilisation, the process's CPU, else the first key."""
    preferred = ("power_w", "util_pct", "smact_ratio")
    chosen = [k for k in available if quantity(k) in preferred and k.count("/") == 2]
    chosen += [k for k in available if k == "top/proc/cpu_pct"]
    return chosen[:4] or list(available[:1])


_RANGE = re.compile(r"^xaxis\d*\.range(\[([01])\])?$")
_AUTO = re.compile(r"^xaxis\d*\.autorange$")


def relayout_window(event: Mapping | None) -> tuple[str, tuple | None] | None:
    """What a plotly relayout event did to the time axis.

    ``("zoom", (lo, hi))`` for a new x range (from any panel: the panels share
    it), ``("reset", None)`` after a double-click (autorange), None when the
    event did not touch the time axis (a y zoom, a resize, a legend click).
    """
    if not event:
        return None
    lo = hi = None
    for name, value in event.items():
        if _AUTO.match(name) and value:
            return ("reset", None)
        found = _RANGE.match(name)
        if not found:
            continue
        if found.group(2) is None and isinstance(value, (list, tuple)) and len(value) == 2:
            lo, hi = value
        elif found.group(2) == "0":
            lo = value
        elif found.group(2) == "1":
            hi = value
    if lo is None or hi is None:
        return None
    return ("zoom", (lo, hi))
