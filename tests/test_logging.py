"""The library logs through ``logging``: the command line and a script under radT print the
records as radT's one-line messages; a notebook (plain ``import radt``) prints nothing."""

from __future__ import annotations

import subprocess
import sys

SAY = "import logging; logging.getLogger('radt.plans.runner').warning('disk full')\n"


def _stderr(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stderr


def test_a_notebook_gets_no_lines_from_the_library():
    assert _stderr("import radt\n" + SAY) == ""


def test_the_command_line_prints_them_once_in_radts_style_even_with_a_root_handler():
    code = (
        "import logging, radt\nfrom radt.console import install_lines\n"
        "logging.basicConfig(format='root: %(message)s')\ninstall_lines()\n"
        + SAY
        + "logging.getLogger('radt.record.sync').debug('not shown')\n"
    )
    assert _stderr(code) == "radt: disk full\n"


def test_the_radt_command_says_its_lines_through_logging(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "radt", "sync", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"radt: nothing to sync in {tmp_path}\n"
