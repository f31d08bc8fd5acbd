"""Deprecated: radT 0.3 moved this module to :mod:`radt.autologging.transformers`; this path still
imports, with a :class:`DeprecationWarning`, for one release."""

from __future__ import annotations

from radt.autologging.transformers import RadtCallback
from radt.integrations import deprecated

deprecated("radt.integrations.transformers", "radt.autologging.transformers")

__all__ = ["RadtCallback"]
