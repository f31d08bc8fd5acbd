"""Runs page: an experiment's workloads and runs in a grid; tick runs to compare them."""

from __future__ import annotations

import math
from collections.abc import Mapping

import dash_ag_grid as dag
import pandas as pd
from dash import Dash, Input, Output, Patch, State, dcc, html, no_update
from radt.frontend.data import DataError, Store

from radt.analysis.attribution import CROSSCHECK_LIMIT_PCT
from radt.analysis.baselines import BASELINE_SPREAD_LIMIT_PCT
from radt.analysis.catalog import CATALOG, Figure
from radt.words import count

HIDDEN = {"height": "0px", "display": "none"}
SCROLL_LEFT = "scroll the columns left (the run column stays)"
SCROLL_RIGHT = "scroll the columns right: more columns (the run column stays)"
SCROLL_JS = """
function(_left, _right) {
    const ctx = window.dash_clientside.callback_context;
    const which = ctx.triggered.length ? ctx.triggered[0].prop_id.split(".")[0] : null;
    const bar = document.querySelector("#runs-grid .ag-body-horizontal-scroll-viewport");
    if (bar && (which === "runs-left" || which === "runs-right")) {
        const step = Math.max(200, bar.clientWidth * 0.8);
        bar.scrollBy({left: which === "runs-right" ? step : -step});
    }
    return window.dash_clientside.no_update;
}
"""
"""Scrolls the grid sideways by most of its width: the buttons work where scrollbars do not
show (overlay scrollbars appear only while one scrolls, on macOS and in headless Chromium)."""
LEVELS = {
    "provider": "workload",
    "client": "client",
    "loader": "loader",
    "run": "run",
    "job": "job",
    "node": "node",
}
BENEATH = ("client", "loader", "node")
"""The levels shown beneath their parent's row (``↳``): a workload's runs, a job's nodes."""
_BLANK = "params.value == null ? '' : "
_WHY = (
    "(params.value == null && params.data.window_note ? "
    "'missing: ' + params.data.window_note : null)"
)
MISSING_TIP = {"function": _WHY}
"""A blank figure's tooltip: why it is missing (the row's ``window_note``)."""
_NUMBER = {"function": _BLANK + "d3.format(',.1f')(params.value)"}
_INTEGER = {"function": _BLANK + "d3.format(',.0f')(params.value)"}
_RATIO = {"function": _BLANK + "d3.format('.2f')(params.value)"}


def _si(scale: float, unit: str) -> dict:
    """A formatter of SI values: ns stored, ``25.8ms`` shown."""
    return {"function": _BLANK + f"d3.format('.3s')(params.value * {scale}) + '{unit}'"}


_CHECK = "params.data.energy_crosscheck_pct"
_FLAGGED = f"{_CHECK} != null && Math.abs({_CHECK}) > {CROSSCHECK_LIMIT_PCT:g}"


def _orange_when(condition: str) -> dict:
    """A cell style: orange where the JavaScript ``condition`` holds (a flagged figure)."""
    return {
        "styleConditions": [
            {"condition": condition, "style": {"backgroundColor": "#fde2c8", "color": "#8a3b00"}}
        ]
    }


CROSSCHECK_STYLE = _orange_when(_FLAGGED)
"""Orange where the energy counter and the integral of power differ by more than the limit."""
CROSSCHECK_TIP = {
    "function": f"{_FLAGGED} ? 'energy cross-check: the integral of power is ' + "
    f"d3.format('+.1f')({_CHECK}) + ' % off the energy counter (over "
    f"{CROSSCHECK_LIMIT_PCT:g} %)' : {_WHY}"
}
_SPREAD = "params.data.baseline_cv_pct"
_SPREAD_OUT = f"{_SPREAD} != null && {_SPREAD} > {BASELINE_SPREAD_LIMIT_PCT:g}"
SPREAD_STYLE = _orange_when(_SPREAD_OUT)
"""Orange where the baseline's repeats spread more than the limit (coefficient of variation)."""
SPREAD_TIP = {
    "function": f"{_SPREAD_OUT} ? 'against a baseline whose repeats spread ' + "
    f"d3.format('.1f')({_SPREAD}) + ' % (over {BASELINE_SPREAD_LIMIT_PCT:g} %): the slowdown "
    f"is uncertain; run the baseline again' : {_WHY}"
}
_ESTIMATE = {"fontStyle": "italic", "color": "#555"}
"""Estimates look apart from measurements."""


def _col(field: str, header: str, fmt: dict | None = None, **extra) -> dict:
    column = {"field": field, "headerName": header, **extra}
    if fmt is not None:
        column.update(valueFormatter=fmt, filter="agNumberColumnFilter", type="rightAligned")
        column.setdefault("tooltipValueGetter", MISSING_TIP)
    return column


_FORMATS = {
    "number": _NUMBER,
    "integer": _INTEGER,
    "ratio": _RATIO,
    "signed": {"function": _BLANK + "d3.format('+.1f')(params.value)"},
    "percent": {"function": _BLANK + "d3.format('.1f')(params.value)"},
}
GRID_EXTRAS = {
    "energy_per_example_nj": {"cellStyle": CROSSCHECK_STYLE, "tooltipValueGetter": CROSSCHECK_TIP},
    "energy_crosscheck_pct": {
        "cellStyle": CROSSCHECK_STYLE,
        "tooltipValueGetter": CROSSCHECK_TIP,
        "headerTooltip": "integral of power vs the energy counter over the window",
    },
    "slowdown": {"cellStyle": SPREAD_STYLE, "tooltipValueGetter": SPREAD_TIP},
    "baseline_cv_pct": {
        "cellStyle": SPREAD_STYLE,
        "headerTooltip": "coefficient of variation of the baseline's repeats (flagged over "
        f"{BASELINE_SPREAD_LIMIT_PCT:g} %)",
    },
}
"""The figure columns' flags: the energy cross-check and the baseline's spread in orange."""


def _format(show: str | None) -> dict | None:
    """The grid's formatter for a figure's ``show`` (:class:`radt.analysis.catalog.Figure`)."""
    if show is None:
        return None
    if show.startswith("si:"):
        _, scale, unit = show.split(":")
        return _si(float(scale), unit)
    return _FORMATS[show]


def figure_column(figure: Figure) -> dict:
    """The grid column of one figure: its label, format, width and flags."""
    extra = dict(GRID_EXTRAS.get(figure.name, {}))
    if figure.estimate:
        extra.setdefault("cellStyle", _ESTIMATE)
    return _col(figure.name, figure.label, _format(figure.show), width=figure.width, **extra)


FIGURE_COLUMNS = [figure_column(figure) for figure in CATALOG if figure.width]
"""The figures in the grid: those of :data:`radt.analysis.catalog.CATALOG` with a width."""
SCALING_TIP = {
    "function": "params.value != null && params.data.scaling_baseline ? "
    "'examples/s per GPU over that of ' + params.data.scaling_baseline : " + _WHY
}
JOB_FIELD_COLUMNS = [
    _col("nodes", "nodes", _INTEGER, width=90),
    _col("gpus", "GPUs", _INTEGER, width=85),
    _col("examples_per_s_per_gpu", "examples/s per GPU", _NUMBER, width=165),
    _col(
        "scaling_efficiency",
        "scaling efficiency",
        _RATIO,
        width=155,
        tooltipValueGetter=SCALING_TIP,
        headerTooltip="examples/s per GPU over that of the same job on fewer nodes",
    ),
]
"""A distributed job's own figures (docs/analysis.md, "Distributed jobs"), after examples/s;
blank on every other row."""
FRONT = ("examples_per_s", "time_per_example_ns", "energy_per_example_nj", "slowdown")
"""The figures users come for, right after the run: before its configuration, in view at
1280 px."""
_BY_FIELD = {c["field"]: c for c in FIGURE_COLUMNS}
_REST = [c for c in FIGURE_COLUMNS if c["field"] not in FRONT]
_AFTER = next(i for i, c in enumerate(_REST) if c["field"] == "examples") + 1

COLUMNS = [
    _col("name", "run", pinned="left", minWidth=170),
    *(_BY_FIELD[field] for field in FRONT),
    _col("kind", "kind", width=105),
    _col("workload", "workload", width=120),
    _col(
        "status",
        "status",
        width=115,
        cellStyle={
            "styleConditions": [
                {"condition": "params.value == 'FAILED'", "style": {"color": "#b00020"}},
                {"condition": "params.value == 'KILLED'", "style": {"color": "#b00020"}},
                {"condition": "params.value == 'RUNNING'", "style": {"color": "#0b61c4"}},
            ]
        },
    ),
    _col("collocation", "collocation", width=120),
    _col("mig_profile", "MIG profile", width=120),
    _col("mps_thread_pct", "MPS %", _INTEGER, width=95),
    _col("power_limit_w", "power limit (W)", width=130),
    _col("configuration", "configuration", width=140),
    _col("job", "job", minWidth=320, maxWidth=640, tooltipField="job"),
    _col("params", "params", minWidth=160, maxWidth=640, tooltipField="params"),
    *_REST[:_AFTER],
    *JOB_FIELD_COLUMNS,
    *_REST[_AFTER:],
    _col("window_note", "why a figure is missing", minWidth=260),
    _col("start", "start (UTC)", width=170),
    _col("slurm_job_id", "Slurm job", width=120, hide=True),
    _col("slurm_node", "node", width=130, hide=True),
    _col("run_id", "run id", width=290),
]
"""The grid's columns: ``radt.summary`` columns, numbers formatted, each filterable and sortable;
the run, then :data:`FRONT`, then what the run was (configuration, job, params), then the other
figures."""
SLURM_FIELDS = ("slurm_job_id", "slurm_node")
"""Columns shown only when a run of the experiment ran in a Slurm job."""
JOB_FIELDS = tuple(column["field"] for column in JOB_FIELD_COLUMNS)
"""Columns shown only when a distributed job of the experiment has them."""
ALWAYS_SHOWN = ("name", *FRONT, "kind", "status", "run_id")
"""Columns shown even when every row is blank in them (a blank figure's tooltip says why)."""
OPTIONAL_FIELDS = tuple(c["field"] for c in COLUMNS if c["field"] not in ALWAYS_SHOWN)
"""Columns shown only when a row has them (a CPU-only study: no MIG profile, MPS %, power
limit; the Slurm job and node; a distributed job's figures)."""


def _blank(value) -> bool:
    return value is None or value == ""


def grid_columns(rows: list[dict]) -> list[dict]:
    """The grid's columns for ``rows`` (:func:`grid_rows`): each of :data:`OPTIONAL_FIELDS`
    shown when any row has it, hidden when it is blank in every row."""
    shown = {name for name in OPTIONAL_FIELDS if any(not _blank(row.get(name)) for row in rows)}
    return [
        {**column, "hide": column["field"] not in shown}
        if column["field"] in OPTIONAL_FIELDS
        else column
        for column in COLUMNS
    ]


FULL_TEXT = ("job", "params")
"""Columns as wide as their longest text (up to their maxWidth; the tooltip has the rest)."""


def _cell(value):
    """A JSON-safe cell: NaN and NaT become None, timestamps ISO text."""
    if value is None or value is pd.NaT:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if hasattr(value, "item"):
        return _cell(value.item())
    return value


def grid_rows(frame: pd.DataFrame, baselines: Mapping[str, str] | None = None) -> list[dict]:
    """Rows of the runs grid from a ``radt.summary`` frame (each workload before its clients,
    each distributed job before its nodes, whose runs are named by their node);
    ``baselines``: the scaling baseline of each job run (:meth:`Store.scaling_baselines`)."""
    from radt.analysis.distributed import one_line_per_job

    # a job's configuration as `radt runs` words it (the column may hold no text yet)
    lines = one_line_per_job(frame.astype({"configuration": object}))
    jobs = lines.loc[lines["level"] == "job"] if "level" in lines else lines.iloc[:0]
    configurations = dict(zip(jobs["run_id"], jobs["configuration"], strict=True))
    rows = []
    for record in frame.to_dict("records"):
        row = {key: _cell(value) for key, value in record.items()}
        level = row.get("level") or "run"
        name = row.get("run_name") or str(row["run_id"])[:8]
        row["name"] = f"↳ {name}" if level in BENEATH else name
        row["kind"] = LEVELS.get(level, level)
        if level == "job":
            row["configuration"] = _cell(configurations.get(row["run_id"]))
            if baselines and row["run_id"] in baselines:
                row["scaling_baseline"] = baselines[row["run_id"]]
        rows.append(row)
    return rows


def runs_note(name: str, kinds: list[str]) -> str:
    """The line above the grid: ``name: 1 workload, 2 runs in them, 1 single run. Tick …``."""
    counts = ", ".join(
        count(kinds.count(kind), noun, many)
        for kind, noun, many in (
            ("workload", "workload", None),
            ("client", "run in them", "runs in them"),
            ("loader", "shared loader", None),
            ("job", "distributed job", None),
            ("node", "node run in them", "node runs in them"),
            ("run", "single run", None),
        )
        if kinds.count(kind)
    )
    return (
        f"{name}: {counts}. Tick runs to overlay their series and compare them; "
        "click a header to sort."
    )


def layout() -> html.Div:
    """The page: experiment picker, quick filter, the grid."""
    return html.Div(
        className="radt-page",
        children=[
            html.Div(
                className="radt-controls",
                children=[
                    html.Label("Experiment", htmlFor="exp-picker"),
                    dcc.Dropdown(id="exp-picker", clearable=False, style={"width": "320px"}),
                    html.Button("Refresh", id="runs-refresh", n_clicks=0),
                    dcc.Input(
                        id="runs-filter",
                        type="search",
                        placeholder="filter rows…",
                        debounce=False,
                        style={"width": "200px"},
                    ),
                    html.Span(
                        className="radt-scroll",
                        children=[
                            html.Span("columns", className="radt-scroll-label"),
                            html.Button("◀", id="runs-left", n_clicks=0, title=SCROLL_LEFT),
                            html.Button("▶", id="runs-right", n_clicks=0, title=SCROLL_RIGHT),
                        ],
                    ),
                    dcc.Store(id="runs-scrolled"),
                ],
            ),
            html.Div(id="runs-note", className="radt-note"),
            dag.AgGrid(
                id="runs-grid",
                columnDefs=COLUMNS,
                rowData=[],
                defaultColDef={
                    "sortable": True,
                    "filter": True,
                    "floatingFilter": True,
                    "resizable": True,
                },
                getRowId="params.data.run_id",
                dashGridOptions={
                    "rowSelection": {"mode": "multiRow", "enableClickSelection": False},
                    "selectionColumnDef": {"pinned": "left", "width": 48, "maxWidth": 48},
                    "animateRows": False,
                    "tooltipShowDelay": 300,
                    "alwaysShowHorizontalScroll": True,
                    "autoSizeStrategy": {"type": "fitCellContents", "colIds": list(FULL_TEXT)},
                },
                getRowStyle={
                    "styleConditions": [
                        {
                            "condition": "['provider', 'job'].includes(params.data.level)",
                            "style": {"fontWeight": 600, "backgroundColor": "#f3f6fa"},
                        }
                    ]
                },
                style={"height": "320px"},
            ),
        ],
    )


def _empty_note(store: Store, what: str) -> html.Div:
    return html.Div(
        className="radt-empty",
        children=[
            html.Div(what),
            html.Div(
                [
                    "Record runs with ",
                    html.Code("radt train.py"),
                    " or a copy of an example plan (",
                    html.Code("cp examples/collocation.csv my-study.csv; radt my-study.csv"),
                    ")",
                    f" (tracking store {store.label}), then press Refresh.",
                ]
            ),
        ],
    )


def register(app: Dash, store: Store) -> None:
    """The page's callbacks."""

    @app.callback(
        Output("exp-picker", "options"),
        Output("exp-picker", "value"),
        Output("runs-note", "children", allow_duplicate=True),
        Input("runs-refresh", "n_clicks"),
        State("experiment", "data"),
        prevent_initial_call="initial_duplicate",
    )
    def experiments(_clicks, current):
        try:
            found = store.experiments()
        except DataError:
            note = "No experiments to show: the tracking store did not answer (see above)."
            return [], None, html.Div(note, className="radt-empty")
        if not found:
            return [], None, _empty_note(store, "No experiments yet.")
        options = [{"label": e.name, "value": e.id} for e in found]
        ids = [e.id for e in found]
        chosen = (current or {}).get("id")
        if chosen not in ids:
            try:
                chosen = store.default_experiment(found)
            except DataError:
                chosen = ids[0]
        return options, chosen, no_update

    @app.callback(
        Output("runs-grid", "rowData"),
        Output("runs-grid", "columnDefs"),
        Output("runs-grid", "selectedRows"),
        Output("runs-grid", "style"),
        Output("runs-note", "children"),
        Output("experiment", "data"),
        Input("exp-picker", "value"),
        Input("runs-refresh", "n_clicks"),
        State("exp-picker", "options"),
        State("selection", "data"),
        State("runs-grid", "columnDefs"),
        prevent_initial_call=True,
    )
    def rows(experiment, _clicks, options, selection, columns):
        if not experiment:
            return [], no_update, {"ids": []}, HIDDEN, no_update, no_update
        name = next((o["label"] for o in options or [] if o["value"] == experiment), experiment)
        chosen = {"id": experiment, "name": name}
        try:
            frame = store.summary(experiment)
        except DataError as exc:
            return (
                [],
                no_update,
                {"ids": []},
                HIDDEN,
                html.Div(str(exc), className="radt-empty"),
                chosen,
            )
        if frame.empty:
            note = _empty_note(store, f"Experiment {name!r} has no runs yet.")
            return [], no_update, {"ids": []}, HIDDEN, note, chosen
        baselines = {}
        if (frame["level"] == "job").any():
            try:
                baselines = store.scaling_baselines(experiment)
            except DataError:
                baselines = {}  # the efficiency shows; only its tooltip lacks the baseline
        data = grid_rows(frame, baselines)
        kept = []
        if (selection or {}).get("experiment") == experiment:
            have = {row["run_id"] for row in data}
            kept = [r["run_id"] for r in selection.get("runs", []) if r["run_id"] in have]
        note = runs_note(name, [row["kind"] for row in data])
        # room for every row (up to 12) and a horizontal scrollbar under them
        height = {"height": f"{min(656, 116 + 42 * len(data))}px"}
        wanted = grid_columns(data)
        same = [c.get("hide") for c in wanted] == [c.get("hide") for c in columns or []]
        # columns set again only when some show or hide: a user's widths stay
        return data, no_update if same else wanted, {"ids": kept}, height, note, chosen

    @app.callback(
        Output("selection", "data"),
        Input("runs-grid", "selectedRows"),
        State("exp-picker", "value"),
        State("selection", "data"),
        prevent_initial_call=True,
    )
    def remember(selected, experiment, previous):
        if isinstance(selected, dict) or selected is None:
            return no_update  # the ids the grid was given; it reports the rows next
        runs = [{"run_id": r["run_id"], "run_name": r.get("run_name")} for r in selected]
        current = {"experiment": experiment, "runs": runs}
        return no_update if current == previous else current

    app.clientside_callback(
        SCROLL_JS,
        Output("runs-scrolled", "data"),
        Input("runs-left", "n_clicks"),
        Input("runs-right", "n_clicks"),
        prevent_initial_call=True,
    )

    @app.callback(
        Output("runs-grid", "dashGridOptions"),
        Input("runs-filter", "value"),
        prevent_initial_call=True,
    )
    def quick_filter(text):
        patch = Patch()
        patch["quickFilterText"] = text or ""
        return patch
