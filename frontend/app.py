"""The Dash app: a header with the pages, the selection bar with exports, and the routing.

State shared by the pages lives in session stores at app level, so it survives
page changes (and a reload of the tab): ``experiment`` (the one shown on the
Runs page), ``selection`` (the ticked runs) and ``keys`` (the metric keys last
overlaid).

A link may choose the runs: ``/timeseries?runs=ID,ID`` opens with those runs selected (the
links of ``radt report --ui``), on any page.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

import dash
from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate
from radt.frontend.data import DataError, Store
from radt.frontend.pages import compare, report, runs, timeseries
from radt.frontend.style import CSS, choice

PAGES = {
    "/": ("Runs", runs.layout),
    "/timeseries": ("Time series", timeseries.layout),
    "/compare": ("Compare", compare.layout),
    "/report": ("Report", report.layout),
}

INDEX = (
    """<!DOCTYPE html>
<html>
<head>
{%metas%}
<title>{%title%}</title>
{%favicon%}
{%css%}
<style>"""
    + CSS
    + """</style>
</head>
<body>
{%app_entry%}
<footer>{%config%}{%scripts%}{%renderer%}</footer>
</body>
</html>"""
)


def _shell(store: Store) -> html.Div:
    return html.Div(
        [
            dcc.Location(id="url"),
            dcc.Store(id="experiment", storage_type="session"),
            dcc.Store(id="selection", storage_type="session"),
            dcc.Store(id="keys", storage_type="session"),
            dcc.Download(id="download"),
            html.Header(
                className="radt-header",
                children=[
                    html.H1("radT"),
                    html.Nav(
                        className="radt-nav",
                        children=[
                            dcc.Link(label, href=path, id=f"nav-{label.split()[0].lower()}")
                            for path, (label, _) in PAGES.items()
                        ],
                    ),
                    html.Span(f"tracking store: {store.label}", className="radt-store"),
                ],
            ),
            html.Div(id="banner"),
            html.Div(id="link-banner"),
            html.Div(
                className="radt-bar",
                children=[
                    html.Span(id="selection-text"),
                    html.Span("Export", style={"marginLeft": "auto", "color": "#555"}),
                    choice("export-format", {"csv": "CSV", "parquet": "Parquet"}, "csv"),
                    html.Button("samples", id="export-samples", n_clicks=0),
                    html.Button("summary", id="export-summary", n_clicks=0),
                ],
            ),
            html.Div(id="export-note", className="radt-note", style={"padding": "0 20px"}),
            html.Main(id="page"),
        ]
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "runs"


def linked_runs(search: str | None) -> list[str]:
    """The run ids a link names in its query (``?runs=ID,ID``, or ``runs`` given several
    times), in order, each once."""
    values = parse_qs((search or "").lstrip("?")).get("runs", [])
    ids = [part.strip() for value in values for part in value.split(",")]
    return list(dict.fromkeys(i for i in ids if i))


def create_app(tracking_uri: str | None = None, *, store: Store | None = None) -> Dash:
    """The radT UI for ``tracking_uri`` (None: ``MLFLOW_TRACKING_URI``, else ./mlflow.db)."""
    store = store or Store(tracking_uri)
    app = Dash(
        __name__,
        title="radT",
        update_title=None,
        suppress_callback_exceptions=True,
        serve_locally=True,
    )
    app.index_string = INDEX
    app.layout = _shell(store)
    for page in (runs, timeseries, compare, report):
        page.register(app, store)

    @app.callback(
        Output("page", "children"),
        *(Output(f"nav-{label.split()[0].lower()}", "className") for label, _ in PAGES.values()),
        Input("url", "pathname"),
    )
    def route(path):
        path = path if path in PAGES else ("/" if path in (None, "", "/runs") else path)
        classes = ["active" if p == path else "" for p in PAGES]
        if path not in PAGES:
            return html.Div(
                className="radt-page",
                children=html.Div(
                    ["No page here. ", dcc.Link("Back to the runs", href="/")],
                    className="radt-empty",
                ),
            ), *classes
        return PAGES[path][1](), *classes

    @app.callback(Output("banner", "children"), Input("url", "pathname"))
    def banner(_path):
        problem = store.check()
        return html.Div(problem, className="radt-banner", id="banner-text") if problem else None

    @app.callback(
        Output("selection", "data", allow_duplicate=True),
        Output("experiment", "data", allow_duplicate=True),
        Output("link-banner", "children"),
        Input("url", "search"),
        prevent_initial_call="initial_duplicate",
    )
    def linked(search):
        ids = linked_runs(search)
        if not ids:
            return no_update, no_update, None
        try:
            found = store.runs(ids)
            names = {e.id: e.name for e in store.experiments()}
        except DataError as exc:  # e.g. a run this store does not have
            return no_update, no_update, html.Div(str(exc), className="radt-banner")
        runs = [found[run_id] for run_id in ids]
        experiment = runs[0].experiment_id
        selection = {
            "experiment": experiment,
            "runs": [{"run_id": r.run_id, "run_name": r.name} for r in runs],
        }
        return selection, {"id": experiment, "name": names.get(experiment, experiment)}, None

    @app.callback(Output("selection-text", "children"), Input("selection", "data"))
    def selection_text(selection):
        chosen = (selection or {}).get("runs", [])
        if not chosen:
            return "No runs selected: exports hold the whole experiment."
        names = ", ".join(str(r.get("run_name") or r["run_id"][:8]) for r in chosen[:6])
        more = f" and {len(chosen) - 6} more" if len(chosen) > 6 else ""
        return [
            html.B(f"{len(chosen)} selected: "),
            names + more,
            " · ",
            dcc.Link("overlay series", href="/timeseries"),
            " · ",
            dcc.Link("compare", href="/compare"),
        ]

    @app.callback(
        Output("download", "data"),
        Output("export-note", "children"),
        Input("export-samples", "n_clicks"),
        Input("export-summary", "n_clicks"),
        State("export-format", "value"),
        State("selection", "data"),
        State("experiment", "data"),
        prevent_initial_call=True,
    )
    def export(_samples, _summary, fmt, selection, experiment):
        what = "summary" if dash.ctx.triggered_id == "export-summary" else "samples"
        chosen = [r["run_id"] for r in (selection or {}).get("runs", [])]
        exp = (experiment or {}) if not chosen else {"id": selection.get("experiment")}
        if not chosen and not exp.get("id"):
            raise PreventUpdate
        try:
            body = store.export(what, fmt, exp.get("id"), chosen)
        except DataError as exc:
            return no_update, str(exc)
        base = f"{len(chosen)}-runs" if chosen else _slug(exp.get("name") or exp["id"])
        return dcc.send_bytes(body, f"radt-{what}-{base}.{fmt}"), None

    return app
