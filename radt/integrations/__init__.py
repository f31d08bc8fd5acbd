"""radT's framework callbacks by their public names: ``radt.integrations.transformers`` and
``radt.integrations.lightning`` (each ``RadtCallback``), defined in :mod:`radt.autologging`.

The package's old shared names (``BatchSizes``, ``PhaseSteps``, ``batch_size``, now in
:mod:`radt.autologging.callbacks`) still import, for one release, with a
:class:`DeprecationWarning`; this package imports nothing until one of them is asked for.
"""

from __future__ import annotations

import warnings

MOVED = "radt.autologging"
"""Where radT's framework callbacks are now."""
_OLD_NAMES = ("BatchSizes", "PhaseSteps", "batch_size")


def deprecated(old: str, new: str) -> None:
    """Warn that ``old`` is now ``new``: a DeprecationWarning at the line that imported the old
    path (Python skips the frames of the import machinery)."""
    warnings.warn(
        f"{old} is deprecated and goes away in the next release: import from {new} instead",
        DeprecationWarning,
        stacklevel=3,
    )


def __getattr__(name: str):
    if name not in _OLD_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from radt.autologging import callbacks

    deprecated(f"{__name__}.{name}", f"{callbacks.__name__}.{name}")
    return getattr(callbacks, name)
