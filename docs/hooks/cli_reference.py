"""MkDocs hook: the command-line reference, rendered from radT's own argparse parsers.

docs/reference/cli.md holds the marker ``<!-- cli-reference -->``; this hook replaces it with
each command's ``--help`` as radT prints it, so the page cannot drift from the parsers. Every
subcommand is reached through radT's entry point, imported in one place (``ENTRY_POINT``
below): point it elsewhere if the entry point moves.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os

ENTRY_POINT = "radt.cli:main"
"""The ``radt`` console script's function (pyproject.toml ``[project.scripts]``)."""

MARKER = "<!-- cli-reference -->"
COMMANDS = (
    ("radt", [], "Run a command, a plan (CSV) or a study (YAML) under radT."),
    ("radt listeners", ["listeners"], "Which listeners can run here, and a listener's options."),
    ("radt doctor", ["doctor"], "What this machine can measure and control."),
    ("radt sync", ["sync"], "Upload what an outage or a crash left behind."),
    ("radt runs", ["runs"], "An experiment's workloads and runs with their figures."),
    ("radt export", ["export"], "Samples, summaries, repeats, frontier or phases as a file."),
    ("radt report", ["report"], "A study's findings as one HTML or Markdown page."),
    ("radt ui", ["ui"], "radT's web pages: runs, time series, compare, report."),
)


def entry_point():
    """The function ``radt`` runs (``ENTRY_POINT``)."""
    module, name = ENTRY_POINT.split(":")
    return getattr(importlib.import_module(module), name)


def command_help(args: list[str]) -> str:
    """What ``radt ARGS --help`` prints, at a width of 100 columns."""
    main = entry_point()
    out = io.StringIO()
    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = main([*args, "--help"])
            except SystemExit as exc:  # argparse's --help exits 0
                code = exc.code
    finally:
        if width is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = width
    if code not in (0, None) or not out.getvalue().strip():
        raise RuntimeError(f"radt {' '.join(args)} --help exited {code} printing nothing")
    return out.getvalue().rstrip()


def render() -> str:
    """Every command's section: a heading, what it does, its help in a text block."""
    parts = []
    for title, args, what in COMMANDS:
        parts.append(f"## `{title}`\n\n{what}\n\n```text\n{command_help(args)}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs event: fill the marker of the command-line page."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
