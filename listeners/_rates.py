"""Per-second rates from two readings of cumulative counters, shared by polled listeners."""

from __future__ import annotations

from collections.abc import Mapping

MIB = 1024 * 1024
"""Bytes in a mebibyte."""

MIN_WINDOW_S = 0.05
"""Shortest time between two readings worth turning into a rate; shorter is noise."""


def rate(before: float, after: float, seconds: float) -> float | None:
    """Return the per-second rate of a counter, or None after a wrap or reset, or no time."""
    if seconds <= 0 or after < before:
        return None
    return (after - before) / seconds


def rates(
    before: Mapping[str, float], after: Mapping[str, float], seconds: float
) -> dict[str, float]:
    """Return the rate of each counter read both times, leaving out wrapped or reset ones."""
    found: dict[str, float] = {}
    for key, value in after.items():
        if key in before and (per_s := rate(before[key], value, seconds)) is not None:
            found[key] = per_s
    return found
