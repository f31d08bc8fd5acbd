"""What NVIDIA's tools print where they have no value, read as no value.

nvidia-smi prints the reason in brackets (``[N/A]``, ``[Not Supported]``,
``[Unknown Error]``, ``[GPU is lost]``, ``[Insufficient Permissions]``, …) and,
in ``-q``, bare words (``N/A``; ``CUDA Version : Not Found`` on a vGPU host);
dcgmi prints ``N/A``. Wherever radT turns a tool's text into a value (the
``smi`` and ``dcgm`` listeners, environment capture, the collocation backends'
nvidia-smi parsing) it asks :func:`is_placeholder` first, so such a word is
recorded as missing, never as a value and never as zero.
"""

from __future__ import annotations

import math
import re

_BRACKETED = re.compile(r"^\[[^\[\]]*\]$")
BARE_WORDS = frozenset(
    {
        "n/a",
        "not found",
        "not supported",
        "not available",
        "unknown error",
        "gpu is lost",
        "insufficient permissions",
    }
)
"""Placeholders printed without brackets, lower case."""


def is_placeholder(text: str) -> bool:
    """Whether ``text`` is a tool's word for "no value" (``[N/A]``, ``N/A``, ``Not Found`` …)."""
    value = text.strip()
    return bool(_BRACKETED.match(value)) or value.lower() in BARE_WORDS


def number(text: str) -> float | None:
    """A tool's value as a float (``6.75``, ``13,485``: thousands separators dropped); None for
    a placeholder (missing, never zero); ValueError for anything else that is not a finite
    number, so that a garbled value is skipped and counted instead of being recorded wrong."""
    value = text.strip()
    if is_placeholder(value):
        return None
    result = float(value.replace(",", ""))
    if not math.isfinite(result):
        raise ValueError(f"not a finite number: {value!r}")
    return result


def value_or_none(text: str) -> str | None:
    """``text`` stripped, or None when it is empty or a placeholder."""
    value = text.strip()
    return None if not value or is_placeholder(value) else value
