"""Compare page: the MIG energy study's charts for the selected runs' workloads (or all of them),
and CPU per example with own loaders against one shared loader."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dash import Dash, Input, Output, dcc, html
from radt.frontend.charts import (
    PROVIDERS,
    basis_note,
    client_energy_figure,
    cpu_figure,
    efficiency_figure,
    focus,
    normalise,
    slowdown_figure,
    throughput_energy_figure,
    utilisation_figure,
)
from radt.frontend.data import DataError, Store
from radt.frontend.frontier import frontier_figure
from radt.frontend.style import choice, empty_figure

from radt.analysis.frontier import frontier_table
from radt.words import count

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


@dataclass(frozen=True)
class Chart:
    """One chart of the page: its graph's id, how it is drawn, and whether it shares a row."""

    graph_id: str
    draw: Callable[[pd.DataFrame, str], go.Figure]
    """The chart of the shown summary rows, for the frontier's view (``absolute`` or
    ``normalised``)."""
    paired: bool = False
    """Side by side with the next paired chart (a row of two)."""


CHART_LIST = (
    Chart(
        "cmp-frontier",
        lambda shown, view: frontier_figure(
            frontier_table(shown), normalised=view == "normalised", summary=shown
        ),
    ),
    Chart("cmp-efficiency", lambda shown, _view: efficiency_figure(shown), paired=True),
    Chart("cmp-slowdown", lambda shown, _view: slowdown_figure(shown), paired=True),
    Chart("cmp-bars", lambda shown, _view: throughput_energy_figure(shown)),
    Chart("cmp-util", lambda shown, _view: utilisation_figure(shown)),
    Chart("cmp-clients", lambda shown, _view: client_energy_figure(shown)),
    Chart("cmp-cpu", lambda shown, _view: cpu_figure(shown)),
)
"""The page's charts, top to bottom: add a chart here (and its function in
:mod:`radt.frontend.figures`)."""
CHARTS = tuple(chart.graph_id for chart in CHART_LIST)
"""Their graphs' ids, in the same order."""
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
            *_rows(),
        ],
    )


def _rows() -> list[html.Div]:
    """The charts' cards in :data:`CHARTS` order, paired charts two to a row."""
    rows: list[html.Div] = []
    pair: list[html.Div] = []
    for chart in CHART_LIST:
        if chart.paired:
            pair.append(_graph(chart.graph_id))
            if len(pair) == 2:
                rows.append(html.Div(className="radt-grid-2", children=pair))
                pair = []
        else:
            rows.append(_graph(chart.graph_id))
    if pair:
        rows.append(html.Div(className="radt-grid-2", children=pair))
    return rows


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
        *(Output(graph_id, "figure") for graph_id in CHARTS),
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
        return [note.strip(), *(chart.draw(shown, view) for chart in CHART_LIST)]
