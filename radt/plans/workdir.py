"""Where a plan row runs: in its script's folder, as the original radT does, or here.

The original radT resolves a row's ``File`` from the current folder, then runs
``python <file name>`` in the file's folder (``Popen(cwd=Path(File).parent)``),
so a script whose defaults are relative (``--data ./data``) finds them beside
itself. ``--workdir script`` (the default for plans) does the same:

- ``train.py …`` and ``python [options] train.py …`` run in ``train.py``'s
  folder, with the script named by its file name;
- a program given by a path (``scripts/run.sh``) runs in its folder as
  ``./run.sh``;
- anything without a file of its own (``python -m pkg.train``, a program on
  PATH) runs in the current folder.

``--workdir here`` runs every row in the current folder. A relative store
(``MLFLOW_TRACKING_URI=sqlite:///mlflow.db``) keeps naming the current folder's
store wherever a row runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from radt.errors import UsageError

MODES = ("script", "here")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`; else UsageError saying which are."""
    if mode not in MODES:
        raise UsageError(f"--workdir takes script or here, not {mode!r}")
    return mode


def _file_position(argv: list[str]) -> int | None:
    """Where in ``argv`` (as :func:`radt.launch.command.resolve_argv` made it) the file is."""
    if not argv:
        return None
    program = argv[0]
    if _PYTHON.match(Path(program).name):
        options = iter(enumerate(argv[1:], start=1))
        for position, arg in options:
            if arg in ("-m", "-c"):
                return None
            if arg in ("-X", "-W"):
                next(options, None)
            elif not arg.startswith("-"):
                return position if Path(arg).is_file() else None
        return None
    if os.sep in program and Path(program).is_file():
        return 0
    return None


def place(argv: list[str], mode: str) -> tuple[list[str], Path]:
    """The argv to run and the folder to run it in, for one plan row.

    ``argv`` is the resolved command (``[python, "examples/train.py", …]``);
    relative paths in it are taken from the current folder.
    """
    here = Path.cwd()
    position = _file_position(argv) if mode == "script" else None
    if position is None:
        return list(argv), here
    path = Path(argv[position]).expanduser()
    folder = (here / path).resolve().parent
    name = path.name if position else f".{os.sep}{path.name}"
    return [*argv[:position], name, *argv[position + 1 :]], folder


def absolute_store(uri: str) -> str:
    """``uri`` with a relative local store made absolute from the current folder.

    ``sqlite:///mlflow.db`` → ``sqlite:////abs/mlflow.db``; a plain folder
    (``mlruns``) → its absolute path; anything else as it is.
    """
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///") :]
        if path and not path.startswith("/") and not path.startswith(":memory:"):
            return f"sqlite:///{Path.cwd() / path}"
        return uri
    parts = urlsplit(uri)
    if not parts.scheme and parts.path and not Path(parts.path).is_absolute():
        return str(Path.cwd() / parts.path)
    return uri
