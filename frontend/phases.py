"""Phase bands for the time-series figure: each run's ``radt.phase`` intervals as bands in lanes
(pure functions).

A lane per run and phase, in a panel under the metric panels, sharing their time axis. A run
can hold millions of intervals, so what is drawn is merged and limited: within the visible
window, intervals of one lane closer than one pixel's worth of time (the window over
:data:`PIXELS`) merge into one band, and at most ``budget`` bands are drawn in all (the
longest ones of each lane; the rest are counted). Zooming in draws the window again, so the
single intervals appear once they are far enough apart. Each phase has one colour in every
run; the bands of a lane are one filled trace (rectangles separated by gaps), which plotly
draws fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from radt.frontend.style import PALETTE

PIXELS = 1500
"""About the width of the time axis in pixels: intervals closer than the window / this merge."""
DEFAULT_BANDS = 3000
LANE_HEIGHT = 22
BAND = 0.8
"""The height of a band within its lane (lanes are 1 apart)."""
PHASE_COLOURS = PALETTE[::-1]
"""Phase colours, in the order phases are first met (run colours go the other way)."""


@dataclass
class PhaseBands:
    """What :func:`phase_bands` made: traces for the phase panel and what it left out."""

    traces: list[go.Scatter] = field(default_factory=list)
    lanes: list[str] = field(default_factory=list)
    """Lane labels, bottom to top: ``run · phase 38%`` (the share of the run's phase span in
    view spent in the phase, which merged bands no longer show); lane i is centred on y = i."""
    intervals: int = 0
    """Intervals inside the window."""
    drawn: int = 0
    """Bands drawn (after merging and the limit)."""
    left_out: int = 0
    """Bands not drawn for the limit."""
    merge_s: float = 0.0
    """Intervals of one lane closer than this merged (in the axis's unit: s, or µs)."""


def merge(starts: np.ndarray, ends: np.ndarray, gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint bands covering the intervals; those at most ``gap_s`` apart join."""
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    opens = np.concatenate([[True], s[1:] > reach[:-1] + gap_s])
    first = np.flatnonzero(opens)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


def phase_bands(
    intervals: pd.DataFrame | None,
    runs: Mapping[str, object],
    *,
    relative: bool = True,
    lo: float | None = None,
    hi: float | None = None,
    budget: int = DEFAULT_BANDS,
) -> PhaseBands:
    """The phase bands of ``runs`` from ``intervals`` (``radt.phases.intervals``'s columns).

    ``runs`` maps run ids to labels with ``name``, ``start_us`` and ``workload``
    (:class:`radt.frontend.series.RunLabel`); ``relative`` puts seconds since each run's
    start on the time axis, else wall time. ``lo``/``hi`` bound the visible window (in those
    units: seconds, or µs since the epoch for wall time); None: every interval. A lane's share
    is of its run's **phase span** in view (its first phase start to its last phase end, as
    ``radt.phases``' ``time_share``), not of the view: runs of different lengths side by side
    each get their own.
    """
    out = PhaseBands()
    if intervals is None or not len(intervals):
        return out
    start_us = _micros(intervals["start"])
    end_us = _micros(intervals["end"])
    run_codes, run_names = _codes(intervals["run_id"])
    phase_codes, phase_names = _codes(intervals["phase"])
    shown = [i for i, r in enumerate(run_names) if r in runs]
    visible = np.isin(run_codes, shown)
    if relative:
        origins = np.array(
            [float(getattr(runs.get(r), "start_us", 0) or 0) for r in run_names] or [0.0]
        )
        origin = origins[run_codes]
        x0, x1 = (start_us - origin) / 1e6, (end_us - origin) / 1e6
    else:
        x0, x1 = start_us, end_us
    if lo is not None:
        visible &= x1 >= lo
    if hi is not None:
        visible &= x0 <= hi
    out.intervals = int(visible.sum())
    if not out.intervals:
        return out
    lo_seen = float(np.min(x0[visible])) if lo is None else lo
    hi_seen = float(np.max(x1[visible])) if hi is None else hi
    out.merge_s = max(hi_seen - lo_seen, 0.0) / PIXELS  # in the axis's unit (s, or µs)
    colours: dict[str, str] = {}
    lanes = []
    order = {r: i for i, r in enumerate(run_names)}
    for run_id in runs:
        if run_id not in order:
            continue
        mine = visible & (run_codes == order[run_id])
        if not mine.any():
            continue
        # the run's phase span in view: its first phase start to its last phase end
        span_lo = max(float(np.min(x0[mine])), lo_seen)
        span_hi = min(float(np.max(x1[mine])), hi_seen)
        codes = phase_codes[mine]
        first_seen = np.unique(codes, return_index=True)
        for code in first_seen[0][np.argsort(first_seen[1])]:
            phase = phase_names[code]
            colours.setdefault(phase, PHASE_COLOURS[len(colours) % len(PHASE_COLOURS)])
            here = np.flatnonzero(mine)[codes == code]
            s, e = merge(x0[here], x1[here], 0.0)  # the union: the phase's own time
            busy = float(np.sum(np.clip(np.minimum(e, span_hi) - np.maximum(s, span_lo), 0, None)))
            s, e = merge(s, e, out.merge_s)
            span = span_hi - span_lo
            lanes.append((run_id, phase, s, e, busy / span if span > 0 else 1.0))
    share = max(1, budget // max(1, len(lanes)))
    for index, (run_id, phase, s, e, busy) in enumerate(lanes):
        if len(s) > share:
            keep = np.sort(np.argsort(e - s, kind="stable")[-share:])
            out.left_out += len(s) - share
            s, e = s[keep], e[keep]
        out.drawn += len(s)
        label = runs[run_id]
        name = f"{getattr(label, 'name', run_id)} · {phase} {busy:.0%}"
        out.lanes.append(name)
        out.traces.append(_band_trace(s, e, index, name, colours[phase], relative))
    return out


def _codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes of a text column and the text of each code."""
    categorical = column.astype("category")
    names = [str(c) for c in categorical.cat.categories]
    return categorical.cat.codes.to_numpy(np.int64), names


def _micros(stamps: pd.Series) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(stamps):
        return np.round(stamps.to_numpy(np.float64) * 1e6)
    stamps = pd.to_datetime(stamps, utc=True)
    return stamps.dt.as_unit("us").array.asi8.astype(np.float64)


def _band_trace(
    starts: np.ndarray, ends: np.ndarray, lane: int, name: str, colour: str, relative: bool
) -> go.Scatter:
    """One filled trace: a rectangle per band, separated by gaps (None)."""
    n = len(starts)
    xs = np.empty(n * 6, dtype=object)
    ys = np.empty(n * 6, dtype=object)
    low, high = lane - BAND / 2, lane + BAND / 2
    corners_x = (starts, ends, ends, starts, starts)
    corners_y = (low, low, high, high, low)
    for i, (x, y) in enumerate(zip(corners_x, corners_y, strict=True)):
        xs[i::6] = x if relative else x.astype(np.int64).astype("datetime64[us]")
        ys[i::6] = y
    xs[5::6] = None
    ys[5::6] = None
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        fill="toself",
        fillcolor=colour,
        line={"width": 0, "color": colour},
        hoveron="fills",
        name=name,
        legendgroup="phases",
        showlegend=False,
        hovertemplate=f"{name}<extra></extra>",
    )
