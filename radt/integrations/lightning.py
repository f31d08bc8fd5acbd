"""Deprecated: radT 0.3 moved this module to :mod:`radt.autologging.lightning`; this path still
imports, with a :class:`DeprecationWarning`, for one release."""

from __future__ import annotations

from radt.autologging.lightning import RadtCallback
from radt.integrations import deprecated

deprecated("radt.integrations.lightning", "radt.autologging.lightning")

__all__ = ["RadtCallback"]
