"""Where the points' labels go on a scatter chart: a text position per point such that the
labels cover neither each other nor the markers and stay inside the plot (pure functions).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

LABEL_POSITIONS = (
    "top center",
    "bottom center",
    "middle right",
    "middle left",
    "top right",
    "bottom right",
    "top left",
    "bottom left",
)
"""Where a point's label may go, in the order :func:`label_positions` tries them."""
PLOT_PX = (480.0, 240.0)
"""The least plot area a chart in a half-width card gets, in pixels (width, height): 420 px less
the title's and axes' margins and a legend of up to two rows below (one row leaves 270 px in
Chromium). Less than the real area on purpose: labels apart at this size are further apart when
drawn larger, not the reverse (a legend row once put a label 2 px into another marker)."""
CHAR_PX, LINE_PX, MARKER_PX = 7.0, 14.0, 8.0
"""A label character's width, a label's height and a marker's radius with the gap plotly leaves
before its label, in pixels, each a little over what Chromium draws (5.9–6.6, 14 and 5.5 + 2.3)."""


def label_box(x_px: float, y_px: float, text: str, position: str) -> tuple[float, ...]:
    """The box ``(left, bottom, right, top)`` in pixels (y up) that plotly gives the label
    ``text`` of a marker at ``(x_px, y_px)`` at ``position`` (``top center`` …)."""
    width = CHAR_PX * len(text)
    vertical, horizontal = position.split()
    left = {
        "center": x_px - width / 2,
        "right": x_px + MARKER_PX,
        "left": x_px - MARKER_PX - width,
    }[horizontal]
    bottom = {
        "top": y_px + MARKER_PX,
        "middle": y_px - LINE_PX / 2,
        "bottom": y_px - MARKER_PX - LINE_PX,
    }[vertical]
    return (left, bottom, left + width, bottom + LINE_PX)


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """The area two boxes ``(left, bottom, right, top)`` share."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return max(width, 0.0) * max(height, 0.0)


def label_positions(
    x: Iterable[float],
    y: Iterable[float],
    texts: Iterable[str],
    span: tuple[float, float],
    plot_px: tuple[float, float] = PLOT_PX,
) -> list[str]:
    """A text position per point such that labels cover neither each other nor the markers.

    ``span``: the x and y ranges of the axes (both from 0), which with ``plot_px`` place the
    points in pixels. From the highest point down, each label takes the first place of
    :data:`LABEL_POSITIONS` where it overlaps no label placed before and no marker and stays
    inside the plot; where every place overlaps, the one that overlaps least (the area outside
    the plot counted as overlap).
    """
    points = [
        (px / (span[0] or 1.0) * plot_px[0], py / (span[1] or 1.0) * plot_px[1])
        for px, py in zip(x, y, strict=True)
    ]
    words = [str(t) for t in texts]
    markers = np.array(
        [(px - MARKER_PX, py - MARKER_PX, px + MARKER_PX, py + MARKER_PX) for px, py in points],
        dtype=float,
    ).reshape(-1, 4)
    placed = np.empty((len(points), 4))
    chosen: dict[int, str] = {}
    order = sorted(range(len(points)), key=lambda k: (-points[k][1], points[k][0]))
    for n, i in enumerate(order):
        others = np.delete(markers, i, axis=0)
        best = None
        for position in LABEL_POSITIONS:
            box = label_box(*points[i], words[i], position)
            clash = _overlaps(box, placed[:n]) + _overlaps(box, others)
            clash += _overlap(box, box) - _overlap(box, (0.0, 0.0, *plot_px))  # cut at the edge
            if best is None or clash < best[0]:
                best = (clash, position, box)
            if clash == 0:
                break
        chosen[i], placed[n] = best[1], best[2]
    return [chosen[i] for i in range(len(points))]


def _overlaps(box: tuple[float, ...], boxes: np.ndarray) -> float:
    """The area ``box`` shares with each of ``boxes`` (rows ``left, bottom, right, top``), summed:
    :func:`_overlap` over many boxes at once (a chart of 1,000 points has 1,000 to look at for
    each of its labels' places)."""
    if not len(boxes):
        return 0.0
    width = np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0])
    height = np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1])
    return float((np.clip(width, 0.0, None) * np.clip(height, 0.0, None)).sum())
