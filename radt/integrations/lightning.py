"""The public name of radT's lightning callback: ``radt.integrations.lightning.RadtCallback``
is :class:`radt.autologging.lightning.RadtCallback`, defined with the rest of autologging."""

from __future__ import annotations

from radt.autologging.lightning import RadtCallback

__all__ = ["RadtCallback"]
