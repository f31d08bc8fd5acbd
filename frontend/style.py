"""Colours, the empty-figure note, the one-of-a-few choice and the page's CSS, shared by the
charts and pages."""

from __future__ import annotations

import re

import plotly.graph_objects as go
from dash import dcc

from radt.tags import Mode

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)
"""Run colours (plotly's D3 palette), in the order the runs are listed."""

MODE_COLOURS = {"none": "#7f7f7f", "naive": "#ff7f0e", "mps": "#2ca02c", "mig": "#1f77b4"}
"""The colour of each collocation mode, in every Compare chart and its legend."""


def choice(id_: str, options: dict[str, str], value: str) -> dcc.RadioItems:
    """Inline radio buttons with id ``id_``: ``options`` maps each value to its label."""
    return dcc.RadioItems(
        id=id_,
        options=[{"label": label, "value": key} for key, label in options.items()],
        value=value,
        inline=True,
        inputStyle={"marginRight": "4px", "marginLeft": "10px"},
    )


def mode_colour(mode: str | None) -> str:
    """The colour of a collocation mode (grey for an unknown one)."""
    return MODE_COLOURS.get(str(mode or Mode.NONE), "#444444")


WRAP_CHARS = 56
"""The longest line of an empty figure's note, in characters: it fits a half-width card at
1100 px, the narrowest window with two cards to a row (plotly does not wrap text)."""
_TAG = re.compile(r"<[^>]+>")


def wrap(message: str, width: int = WRAP_CHARS) -> str:
    """``message`` as it is where each of its ``<br>`` lines has at most ``width`` visible
    characters (tags such as ``<i>`` not counted), else broken again at spaces into such
    lines (its own breaks, set for a wide chart, taken as spaces)."""
    if all(len(_TAG.sub("", line)) <= width for line in message.split("<br>")):
        return message
    lines: list[str] = []
    current = ""
    for word in message.replace("<br>", " ").split(" "):
        longer = f"{current} {word}" if current else word
        if current and len(_TAG.sub("", longer)) > width:
            lines.append(current)
            current = word
        else:
            current = longer
    lines.append(current)
    return "<br>".join(lines)


def empty_figure(message: str, title: str | None = None) -> go.Figure:
    """A figure without data that says why, in its middle (never an empty plot), its note
    :func:`wrap`-ped to fit a half-width card."""
    fig = go.Figure()
    fig.add_annotation(
        text=wrap(message),
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        showarrow=False,
        font={"size": 14, "color": "#555"},
        align="center",
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(
        height=320,
        template="plotly_white",
        margin={"l": 20, "r": 20, "t": 50 if title else 20, "b": 20},
        title=title,
    )
    return fig


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #222; background: #f6f7f9; }
.radt-header { display: flex; align-items: center; gap: 24px; padding: 10px 20px;
               background: #1d2b3a; color: #fff; }
.radt-header h1 { font-size: 20px; margin: 0; font-weight: 600; }
.radt-nav a { color: #cfd8e3; text-decoration: none; margin-right: 16px; font-size: 15px; }
.radt-nav a.active { color: #fff; border-bottom: 2px solid #4da3ff; padding-bottom: 2px; }
.radt-store { margin-left: auto; font-size: 12px; color: #9fb0c3; }
.radt-bar { display: flex; align-items: center; gap: 12px; flex-wrap: wrap; padding: 8px 20px;
            background: #fff; border-bottom: 1px solid #dde2e8; font-size: 14px; }
.radt-bar button, .radt-page button { padding: 4px 10px; border: 1px solid #b8c2cc;
            background: #fff; border-radius: 4px; cursor: pointer; font-size: 13px; }
.radt-bar button:hover, .radt-page button:hover { background: #eef3f8; }
.radt-banner { padding: 8px 20px; background: #fdecea; color: #8a1c12;
               border-bottom: 1px solid #f5c2bd; font-size: 14px; }
.radt-page { padding: 12px 20px; }
.radt-note { color: #555; font-size: 14px; margin: 6px 0; }
.radt-empty { padding: 24px; background: #fff; border: 1px dashed #b8c2cc; border-radius: 6px;
              color: #444; font-size: 15px; }
.radt-empty code, .radt-note code { background: #eef1f4; padding: 1px 4px; border-radius: 3px; }
.radt-controls { display: flex; gap: 16px; align-items: center; flex-wrap: wrap;
                 margin-bottom: 8px; }
.radt-card { background: #fff; border: 1px solid #dde2e8; border-radius: 6px; padding: 6px;
             margin-bottom: 12px; }
.radt-grid-2 { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
@media (max-width: 1100px) { .radt-grid-2 { grid-template-columns: 1fr; } }
.radt-row-provider { font-weight: 600; }
.radt-scroll { display: inline-flex; align-items: center; gap: 4px; margin-left: auto; }
.radt-scroll-label { color: #555; font-size: 13px; margin-right: 2px; }
"""
