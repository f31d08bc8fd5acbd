"""Server-side downsampling of long series: MinMaxLTTB (tsdownsample) within a visible window.

A browser draws a few thousand points per line as fast as a dozen, and a
screen has no more pixels than that across: a million-sample series is cut to
the window the user looks at, then to ``budget`` points that keep every
extreme (MinMax preselection) and the shape (LTTB). Zooming in asks the server
for the new window, at full resolution once it holds fewer samples than the budget.
"""

from __future__ import annotations

import numpy as np
from tsdownsample import MinMaxLTTBDownsampler

DEFAULT_BUDGET = 2_000
"""Points per trace: about the width of a wide chart in pixels."""

_DOWNSAMPLER = MinMaxLTTBDownsampler()


def window(x: np.ndarray, lo: float | None, hi: float | None) -> slice:
    """The slice of sorted ``x`` inside ``[lo, hi]``, plus one sample beyond each edge.

    The extra samples let a line run to the edges of the view instead of
    stopping at the first and last sample inside it. None leaves a side open.
    """
    start = 0 if lo is None else max(int(np.searchsorted(x, lo, side="left")) - 1, 0)
    stop = len(x) if hi is None else min(int(np.searchsorted(x, hi, side="right")) + 1, len(x))
    return slice(start, max(start, stop))


def minmax_lttb(x: np.ndarray, y: np.ndarray, budget: int = DEFAULT_BUDGET) -> np.ndarray:
    """Indices of at most ``budget`` points of ``(x, y)`` chosen by MinMaxLTTB, in order.

    ``x`` must be sorted ascending (numbers: seconds, or int64 nanoseconds) and
    ``y`` finite. With ``budget`` points or fewer, every index is returned.
    """
    n = len(x)
    if n != len(y):
        raise ValueError(f"x and y differ in length ({n} vs {len(y)})")
    if n <= budget:
        return np.arange(n)
    if budget < 4:
        raise ValueError(f"budget must be at least 4 points, got {budget}")
    xs = np.ascontiguousarray(x, dtype=np.int64 if x.dtype.kind in "iuM" else np.float64)
    ys = np.ascontiguousarray(y, dtype=np.float64)
    return np.asarray(_DOWNSAMPLER.downsample(xs, ys, n_out=budget), dtype=np.int64)


def reduce(
    x: np.ndarray,
    y: np.ndarray,
    lo: float | None = None,
    hi: float | None = None,
    budget: int = DEFAULT_BUDGET,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The points of ``(x, y)`` to draw for the window ``[lo, hi]``, and how many it held.

    Missing values (NaN) are dropped first; ``x`` must be sorted. Returns
    ``(x_shown, y_shown, n_in_window)``: ``n_in_window`` is the number of
    finite samples in the window before downsampling.
    """
    keep = np.isfinite(y)
    if not keep.all():
        x, y = x[keep], y[keep]
    cut = window(x, lo, hi)
    x, y = x[cut], y[cut]
    chosen = minmax_lttb(x, y, budget)
    if len(chosen) == len(x):
        return x, y, len(x)
    return x[chosen], y[chosen], len(x)
