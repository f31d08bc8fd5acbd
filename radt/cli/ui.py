"""``radt ui [--port 8050]``: the web UI over a tracking store (:mod:`radt.frontend`)."""

from __future__ import annotations


def run_ui(argv: list[str]) -> int:
    """``radt ui``: serve the web UI until Ctrl-C; the only way in to :mod:`radt.frontend`."""
    from radt.frontend.serve import run_ui as serve

    return serve(argv)
