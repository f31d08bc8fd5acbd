"""The training command: how it is run and which of its flags become params; and radT's own
``KEY=VALUE`` arguments (``--tag``, ``-o LISTENER.KEY=VALUE``), read alike by the command line
and ``radt doctor``."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from radt.errors import UsageError

if TYPE_CHECKING:
    import argparse

MAX_PARAM_VALUE = 6000
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_NUMBER = re.compile(r"^-\d|^-\.\d")


def resolve_argv(command: list[str]) -> list[str]:
    """Return the argv to execute: a ``.py`` file runs with this interpreter.

    Raises UsageError for a missing script or a command not on PATH.
    """
    if not command:
        raise UsageError("no command given; try `radt examples/train.py --epochs 1`")
    program = command[0]
    if program.endswith(".py"):
        if not Path(program).is_file():
            raise UsageError(f"script not found: {program} (looked in {Path.cwd()})")
        return [sys.executable, program, *command[1:]]
    if os.sep in program:
        if not (Path(program).is_file() and os.access(program, os.X_OK)):
            raise UsageError(f"command not found or not executable: {program}")
        return list(command)
    if shutil.which(program) is None:
        raise UsageError(f"command not found: {program} (not on PATH); check the spelling")
    return list(command)


def script_args(command: list[str]) -> list[str]:
    """The arguments that belong to the training script, not to its interpreter.

    ``python -u -m pkg.train --lr 1`` → ``['--lr', '1']``; ``train.py --lr 1``
    → ``['--lr', '1']``; anything else: every argument after the program.
    """
    args = command[1:]
    if command and (command[0].endswith(".py")):
        return args
    if command and _PYTHON.match(Path(command[0]).name):
        skip = False
        for i, arg in enumerate(args):
            if skip:
                skip = False
            elif arg in ("-m", "-c"):
                return args[i + 2 :]
            elif arg in ("-X", "-W"):
                skip = True
            elif not arg.startswith("-"):
                return args[i + 1 :]
        return []
    return args


def params_from_args(args: list[str]) -> dict[str, str]:
    """Turn flags into params.

    ``--batch-size 128`` → ``batch-size=128``, ``--lr=0.1`` → ``lr=0.1``, a
    flag with no value → ``True``, a repeated flag → its values joined by
    spaces. A flag takes at most the one argument after it; other positional
    arguments are not params. The original radT differs (docs/guide/runs.md: *What a run
    holds*): it logs ``amp=""`` for a bare ``--amp`` and joins every word up
    to the next flag.
    """
    params: dict[str, list[str]] = {}
    current: str | None = None
    for arg in args:
        if arg.startswith("-") and len(arg) > 1 and not _NUMBER.match(arg) and arg != "--":
            name, has_value, value = arg.lstrip("-").partition("=")
            current = _param_name(name)
            params.setdefault(current, [])
            if has_value:
                params[current].append(value)
                current = None
        elif current is not None:
            params[current].append(arg)
            current = None
    return {
        name: (" ".join(values) if values else "True")[:MAX_PARAM_VALUE]
        for name, values in params.items()
        if name
    }


def _param_name(flag: str) -> str:
    return re.sub(r"[^\w\-. /:]", "_", flag)[:250]


def parse_pairs(
    pairs: list[str], what: str, form: str = "KEY=VALUE, e.g. team=vision"
) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings; raise UsageError, showing ``form``, for a malformed one."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"malformed {what} {pair!r}: expected {form}")
        parsed[key.strip()] = value
    return parsed


def add_listener_option(parser: argparse.ArgumentParser, example: str) -> None:
    """The ``-o/--listener-option LISTENER.KEY=VALUE`` argument (read by
    :func:`parse_listener_options`), with ``example`` in its help."""
    parser.add_argument(
        "-o",
        "--listener-option",
        action="append",
        default=[],
        metavar="LISTENER.KEY=VALUE",
        help=f"an option for one listener, e.g. {example}; repeatable",
    )


def parse_listener_options(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``top.per_core=1`` → ``{"top": {"per_core": "1"}}``."""
    form = "LISTENER.KEY=VALUE, e.g. top.per_core=1 (`radt listeners NAME` lists the keys)"
    options: dict[str, dict[str, str]] = {}
    for key, value in parse_pairs(pairs, "listener option", form).items():
        listener, dot, name = key.partition(".")
        if not dot or not name or not listener:
            raise UsageError(f"malformed listener option {key!r}: expected {form}")
        options.setdefault(listener, {})[name] = value
    return options
