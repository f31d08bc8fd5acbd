"""Time-series page: metric keys of the selected runs (and their workloads) overlaid.

The server downsamples every trace to ~2,000 points (MinMaxLTTB) and, when the
user zooms, draws the visible window again from the full-rate samples: from
memory, or, for a selection too long to keep (a day-long run), by reading that
window alone (:meth:`radt.frontend.data.Store.samples`). While any shown run is
RUNNING the chart refreshes every few seconds.
"""

from __future__ import annotations

import hashlib
import json

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate
from radt.frontend.data import DataError, RunInfo, Store
from radt.frontend.downsample import DEFAULT_BUDGET
from radt.frontend.series import (
    RunLabel,
    RunWindow,
    default_keys,
    relayout_window,
    timeseries_figure,
)
from radt.frontend.style import choice, empty_figure

from radt.quantities import GPU_MEMORY, GPU_POWER, GPU_UTILISATION, listener_prefixes
from radt.words import count

LIVE_MS = 3_000
KEYS_LIST_PX = 560
"""The open key list's height: about 16 keys at a time (Dash's default, 200 px, showed 3)."""


def layout() -> html.Div:
    """The page: key picker, time axis choice, the chart."""
    return html.Div(
        className="radt-page",
        children=[
            html.Div(id="ts-message"),
            html.Div(
                className="radt-controls",
                children=[
                    dcc.Dropdown(
                        id="ts-keys",
                        multi=True,
                        placeholder="metric keys…",
                        maxHeight=KEYS_LIST_PX,
                        style={"minWidth": "480px", "flex": "1"},
                    ),
                    choice(
                        "ts-time",
                        {"relative": "time since each run started", "wall": "wall time (UTC)"},
                        "relative",
                    ),
                ],
            ),
            html.Div(id="ts-info", className="radt-note"),
            html.Div(
                className="radt-card",
                children=dcc.Graph(
                    id="ts-graph",
                    figure=empty_figure("Loading…"),
                    config={"displaylogo": False, "scrollZoom": False},
                ),
            ),
            dcc.Interval(id="ts-live", interval=LIVE_MS, disabled=True),
            dcc.Store(id="ts-range"),
            dcc.Store(id="ts-rev"),
            dcc.Store(id="ts-xevent"),
        ],
    )


# The time axis as the chart holds it after any relayout event, with the revision of
# the figure it belongs to, sent on only when it changed. Reading the chart, not the
# event: events that come together (a zoom, then the autosize of a window resize)
# reach Dash as the last one alone. An autorange counts only as the undoing of a zoom.
TIME_AXIS_NOW = """
function (event, last) {
    const none = window.dash_clientside.no_update;
    const gd = document.querySelector('#ts-graph .js-plotly-plot');
    const ax = gd && gd.layout && gd.layout.xaxis;
    if (!event || !ax) {
        return none;
    }
    const rev = gd.layout.uirevision === undefined ? null : gd.layout.uirevision;
    if (ax.autorange === true || !Array.isArray(ax.range)) {
        const zoomed = last && last.rev === rev && last['xaxis.range'];
        return zoomed ? {'rev': rev, 'xaxis.autorange': true} : none;
    }
    const now = {'rev': rev, 'xaxis.range': ax.range.slice(0, 2)};
    return JSON.stringify(now) === JSON.stringify(last) ? none : now;
}
"""


def _labels(runs: dict[str, RunInfo]) -> dict[str, RunLabel]:
    """The runs as the figure names them; a node run on its job's time axis (when the job is
    known), so that one node lagging another shows."""
    labels = {}
    for r in runs.values():
        job = runs.get(r.parent_id or "") if r.level == "node" else None
        labels[r.run_id] = RunLabel(
            r.run_id,
            r.name,
            job.start_us if job is not None else r.start_us,
            workload=r.level == "provider",
            node=r.node if r.level == "node" else None,
            job=r.level == "job",
        )
    return labels


def _revision(run_ids: list[str], keys: list[str], mode: str) -> str:
    text = json.dumps([sorted(run_ids), list(keys), mode])
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _message(children) -> html.Div:
    return html.Div(children, className="radt-empty")


def _keys_note(keys: list[str]) -> html.Div | None:
    """What the key list says about the runs: nothing recorded yet, or no GPU listener."""
    if not keys:
        return html.Div("These runs hold no metrics yet.", className="radt-note")
    gpu_listeners = listener_prefixes([GPU_POWER, GPU_UTILISATION, GPU_MEMORY])
    if not any(k.startswith(gpu_listeners) for k in keys):
        names = ", ".join(p.rstrip("/") for p in gpu_listeners)
        return html.Div(
            f"No GPU metrics in these runs (no GPU listener ran: {names}; or no GPU): "
            "CPU, memory and I/O series only.",
            className="radt-note",
        )
    return None


def _info(stats, window, frame, runs: dict[str, RunInfo]) -> str:
    info = f"{count(stats.traces, 'trace')}, {count(stats.shown, 'point')} drawn"
    if stats.downsampled:
        info += f" of {count(stats.samples, 'sample')} (MinMaxLTTB, ≤{DEFAULT_BUDGET:,} per trace)"
    info += "; zoomed in: full resolution within the budget" if window else ""
    if frame.attrs.get("radt.window"):
        info += " (only the visible window was read)"
    sources = frame.attrs.get("radt.source", {})
    # a job run holds only its figures, never samples: no artifact is missing there
    decimated = [
        runs[r].name
        for r, s in sources.items()
        if s == "metrics" and r in runs and runs[r].level != "job"
    ]
    if decimated:
        info += ". From MLflow's decimated stream (no samples artifact): " + ", ".join(decimated)
    live = [r.name for r in runs.values() if r.running]
    if live:
        info += f". Live: {', '.join(live)} still running, refreshing every {LIVE_MS // 1000} s"
    return info


def _phases_note(stats, relative: bool) -> str:
    """What the phase panel shows: intervals in view, bands drawn, what merged or was left out."""
    if not stats.phase_intervals:
        return ""
    note = (
        f". Phases: {count(stats.phase_intervals, 'interval')} in view as "
        f"{count(stats.phase_bands, 'band')}"
    )
    if stats.phase_bands < stats.phase_intervals:
        gap = stats.phase_merge_s if relative else stats.phase_merge_s / 1e6
        note += f" (those closer than {gap * 1e3:.3g} ms merged"
        if stats.phase_left_out:
            note += f"; {count(stats.phase_left_out, 'short band')} not drawn"
        note += "; zoom in for single intervals)"
    return note


def register(app: Dash, store: Store) -> None:
    """The page's callbacks: one draws (keys, figure, live refresh), one follows zooms."""

    @app.callback(
        Output("ts-keys", "options"),
        Output("ts-keys", "value"),
        Output("ts-message", "children"),
        Output("ts-graph", "figure"),
        Output("ts-info", "children"),
        Output("ts-rev", "data"),
        Output("ts-live", "disabled"),
        Input("selection", "data"),
        Input("ts-keys", "value"),
        Input("ts-time", "value"),
        Input("ts-range", "data"),
        Input("ts-live", "n_intervals"),
        State("keys", "data"),
    )
    def draw(selection, keys, mode, view, _tick, saved):
        chosen = [r["run_id"] for r in (selection or {}).get("runs", [])]
        if not chosen:
            note = _message(
                [
                    "No runs selected. Tick runs on the ",
                    dcc.Link("Runs page", href="/"),
                    " to overlay their series here.",
                ]
            )
            empty = empty_figure("Select runs on the Runs page.")
            return [], [], note, empty, None, None, True
        try:
            runs = store.runs(chosen)
        except DataError as exc:
            return [], [], _message(str(exc)), empty_figure(str(exc)), None, None, True
        available = sorted({k for r in runs.values() for k in r.keys})
        picked = no_update
        if ctx.triggered_id in (None, "selection") or keys is None:
            keys = [k for k in saved or [] if k in available] or default_keys(available)
            picked = keys
        revision = _revision(list(runs), keys, mode)
        window = None
        if view and view.get("rev") == revision and view.get("range"):
            window = tuple(view["range"])
        try:
            frame = store.samples(list(runs.values()), keys, window, relative=mode != "wall")
        except DataError as exc:
            return available, picked, _message(str(exc)), empty_figure(str(exc)), None, None, True
        try:
            bands = {k: RunWindow(*v) for k, v in store.windows(list(runs.values())).items()}
            missing = None
        except DataError as exc:
            bands, missing = {}, str(exc)
        try:
            phases, no_phases = store.phase_intervals(list(runs.values())), None
        except DataError as exc:
            phases, no_phases = None, str(exc)
        fig, stats = timeseries_figure(
            frame,
            _labels(runs),
            keys,
            relative=mode != "wall",
            window=window,
            budget=DEFAULT_BUDGET,
            revision=revision,
            windows=bands,
            phases=phases,
        )
        live = any(r.running for r in runs.values())
        info = _info(stats, window, frame, runs)
        if stats.bands:
            info += (
                ". Shaded: each run's window, the span its figures are over "
                "(a workload's: while all its runs were in theirs)"
            )
        if missing:
            info += f". No window bands: {missing}"
        info += _phases_note(stats, mode != "wall")
        if no_phases:
            info += f". No phases: {no_phases}"
        return available, picked, _keys_note(available), fig, info, revision, not live

    @app.callback(
        Output("keys", "data"),
        Input("ts-keys", "value"),
        prevent_initial_call=True,
    )
    def save_keys(keys):
        return keys or []

    app.clientside_callback(
        TIME_AXIS_NOW,
        Output("ts-xevent", "data"),
        Input("ts-graph", "relayoutData"),
        State("ts-xevent", "data"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("ts-range", "data"),
        Input("ts-xevent", "data"),
        State("ts-rev", "data"),
        prevent_initial_call=True,
    )
    def zoom(event, revision):
        change = relayout_window(event)
        if change is None:
            raise PreventUpdate
        revision = (event or {}).get("rev") or revision  # the figure that was zoomed
        return {"rev": revision, "range": None if change[1] is None else list(change[1])}
