"""Report page: the findings of the experiments chosen (``radt report``), with the page to
download as HTML (one file, opens offline) or Markdown (a zip: the page and its charts)."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

import dash
import flask
from dash import Dash, Input, Output, State, dcc, html, no_update
from dash.exceptions import PreventUpdate
from radt.frontend.data import DataError, Store

from radt.analysis.findings import Objective

OBJECTIVES = {
    "throughput": "throughput",
    "energy": "energy",
    "slowdown:1.2": "slowdown ≤ 1.2×",
    "slowdown:1.5": "slowdown ≤ 1.5×",
}


def layout() -> html.Div:
    """The page: the experiments and the objective, the downloads, the findings."""
    return html.Div(
        className="radt-page",
        children=[
            html.Div(
                className="radt-controls",
                children=[
                    html.Span("Experiments:", className="radt-note"),
                    dcc.Dropdown(id="rep-experiments", multi=True, style={"minWidth": "320px"}),
                    html.Span("Objective:", className="radt-note"),
                    dcc.Dropdown(
                        id="rep-objective",
                        options=[{"label": v, "value": k} for k, v in OBJECTIVES.items()],
                        value="throughput",
                        clearable=False,
                        style={"minWidth": "180px"},
                    ),
                    html.Button("Download HTML", id="rep-html", n_clicks=0),
                    html.Button("Download Markdown", id="rep-md", n_clicks=0),
                    dcc.Download(id="rep-download"),
                ],
            ),
            html.Div(id="rep-note", className="radt-note"),
            html.H2("Findings"),
            html.Ol(id="rep-findings"),
            html.H2("What to run"),
            html.Ul(id="rep-plan"),
        ],
    )


def markdown_zip(made) -> bytes:
    """The Markdown page and its charts (or the HTML page it links to) as one zip."""
    with tempfile.TemporaryDirectory(prefix="radt-report-") as folder:
        written = made.write(Path(folder) / "report.md", "md")
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in written:
                archive.write(path, path.relative_to(folder).as_posix())
        return buffer.getvalue()


def register(app: Dash, store: Store) -> None:
    """The page's callbacks: experiments to choose, the findings, the downloads."""

    @app.callback(
        Output("rep-experiments", "options"),
        Output("rep-experiments", "value"),
        Input("url", "pathname"),
        State("experiment", "data"),
    )
    def experiments(_path, experiment):
        try:
            found = store.experiments()
            chosen = (experiment or {}).get("id") or store.default_experiment(found)
        except DataError:
            return [], []
        options = [{"label": e.name, "value": e.id} for e in found]
        return options, [chosen] if chosen else []

    @app.callback(
        Output("rep-note", "children"),
        Output("rep-findings", "children"),
        Output("rep-plan", "children"),
        Input("rep-experiments", "value"),
        Input("rep-objective", "value"),
    )
    def findings(chosen, objective):
        if not chosen:
            return "Choose the study's experiments.", [], []
        try:
            made = store.report(chosen, Objective.parse(objective))
        except DataError as exc:
            return str(exc), [], []
        items = [
            html.Li(row["sentence"], className="rep-finding") for _, row in made.findings.iterrows()
        ]
        plan = [html.Li(row["sentence"]) for _, row in made.what_to_run.iterrows()]
        note = (
            f"{len(made.summary)} summary rows; objective {made.objective}. A difference inside "
            "the repeats' spread is said to be within noise; the downloads hold the tables "
            "and charts."
        )
        return note, items or [html.Li("No finding: nothing to compare yet.")], plan

    @app.callback(
        Output("rep-download", "data"),
        Input("rep-html", "n_clicks"),
        Input("rep-md", "n_clicks"),
        State("rep-experiments", "value"),
        State("rep-objective", "value"),
        prevent_initial_call=True,
    )
    def download(_html, _md, chosen, objective):
        if not chosen:
            raise PreventUpdate
        try:  # the downloaded page's run ids link back to this UI
            made = store.report(chosen, Objective.parse(objective), ui=flask.request.host_url)
        except DataError:
            return no_update
        if dash.ctx.triggered_id == "rep-md":
            return dcc.send_bytes(markdown_zip(made), "radt-report.zip")
        return dcc.send_string(made.html, "radt-report.html")
