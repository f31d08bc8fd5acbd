"""radT's on/off environment variables (``RADT_WARM``, ``RADT_LIGHT``), read by one rule: on
unless set to ``0``, ``off``, ``false`` or ``no`` (any case, spaces around ignored)."""

from __future__ import annotations

import os
from collections.abc import Mapping

OFF = ("0", "off", "false", "no")


def turned_off(variable: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``variable`` turns its feature off in ``environ`` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return environ.get(variable, "").strip().lower() in OFF
