"""The public name of radT's transformers callback: ``radt.integrations.transformers.RadtCallback``
is :class:`radt.autologging.transformers.RadtCallback`, defined with the rest of autologging."""

from __future__ import annotations

from radt.autologging.transformers import RadtCallback

__all__ = ["RadtCallback"]
