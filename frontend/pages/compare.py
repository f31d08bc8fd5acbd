"""Compare page: the MIG energy study's charts for the selected runs' workloads (or all of them),
and CPU per example with own loaders against one shared loader."""

from __future__ import annotations

from dash import Dash, Input, Output, dcc, html
from radt.frontend.charts import (
    PROVIDERS,
    basis_note,
    client_energy_figure,
    cpu_figure,
    efficiency_figure,
    focus,
    frontier_figure,
    normalise,
    slowdown_figure,
    throughput_energy_figure,
    utilisation_figure,
)
from radt.frontend.data import DataError, Store
from radt.frontend.style import choice, empty_figure

from radt.analysis.frontier import frontier_table
from radt.words import count

CHARTS = (
    "cmp-efficiency",
    "cmp-bars",
    "cmp-slowdown",
    "cmp-util",
    "cmp-frontier",
    "cmp-clients",
    "cmp-cpu",
)
VIEWS = {
    "absolute": "time and energy per example",
    "normalised": "over the whole GPU at full power",
}


def _graph(graph_id: str) -> html.Div:
    return html.Div(
        className="radt-card",
        children=dcc.Graph(
            id=graph_id, figure=empty_figure("Loading…"), config={"displaylogo": False}
        ),
    )


def layout() -> html.Div:
    """The page: a note on what is compared, the frontier (with its view), the other charts."""
    return html.Div(
        className="radt-page",
        children=[
            html.Div(id="cmp-note", className="radt-note"),
            html.Div(
                className="radt-controls",
                children=[
                    html.Span("Frontier:", className="radt-note"),
                    choice("cmp-frontier-view", VIEWS, "absolute"),
                ],
            ),
            _graph(CHARTS[4]),
            html.Div(className="radt-grid-2", children=[_graph(CHARTS[0]), _graph(CHARTS[2])]),
            _graph(CHARTS[1]),
            _graph(CHARTS[3]),
            _graph(CHARTS[5]),
            _graph(CHARTS[6]),
        ],
    )


def compare_note(workloads: int, chosen: int) -> str:
    """What the charts compare: the selected runs' workloads, or every workload."""
    if chosen:
        return (
            f"The {count(workloads, 'workload')} of the {count(chosen, 'selected run')}. "
            "Colour: collocation mode; grouped by power limit and GPU clock."
        )
    return (
        f"Every workload of the experiment ({workloads}); tick runs on the Runs page "
        "to narrow the comparison. Colour: collocation mode; grouped by power limit and GPU clock."
    )


def register(app: Dash, store: Store) -> None:
    """The page's callback: one summary, the frontier and the other charts."""

    @app.callback(
        Output("cmp-note", "children"),
        *(Output(chart, "figure") for chart in CHARTS),
        Input("selection", "data"),
        Input("experiment", "data"),
        Input("cmp-frontier-view", "value"),
    )
    def charts(selection, experiment, view):
        selection = selection or {}
        chosen = [r["run_id"] for r in selection.get("runs", [])]
        exp = selection.get("experiment") if chosen else (experiment or {}).get("id")
        try:
            exp = exp or store.default_experiment()  # a fresh tab: what the Runs page shows
            if not exp:
                message = "No experiments yet: record runs, then pick one on the Runs page."
                return [message, *(empty_figure(message) for _ in CHARTS)]
            frame = store.summary(exp)
        except DataError as exc:
            return [str(exc), *(empty_figure(str(exc)) for _ in CHARTS)]
        if frame.empty:
            message = "This experiment has no runs yet."
            return [message, *(empty_figure(message) for _ in CHARTS)]
        shown = normalise(focus(frame, chosen))
        note = compare_note(int(shown["level"].isin(PROVIDERS).sum()), len(chosen))
        note += " " + (basis_note(shown) or "")
        return [
            note.strip(),
            efficiency_figure(shown),
            throughput_energy_figure(shown),
            slowdown_figure(shown),
            utilisation_figure(shown),
            frontier_figure(frontier_table(shown), normalised=view == "normalised"),
            client_energy_figure(shown),
            cpu_figure(shown),
        ]
