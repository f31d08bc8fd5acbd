"""What a newcomer meets first: examples/train.py's MLflow calls, radT's opening line,
``radt ui``'s and ``radt listeners``' output."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO
from servers import HttpServer, free_port


def test_train_logs_to_mlflow_once_per_epoch_not_per_step(workspace):
    """Two epochs of 20 steps each: ``loss`` and ``examples_per_s`` have one point per epoch
    (steps 0 and 1), so the steps' time holds no MLflow call."""
    done = workspace.run(
        [
            "-l",
            "none",
            str(REPO / "examples" / "train.py"),
            "--epochs",
            "2",
            "--examples",
            "1280",
            "--batch-size",
            "64",
            "--threads",
            "1",
        ],
        timeout=280,
    )
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    client = workspace.client()
    for key in ("loss", "examples_per_s"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(point.step for point in history) == [0, 1], key
    assert run.data.metrics["examples"] == 2560


def test_the_opening_line_names_the_experiment(workspace):
    workspace.script("quick.py", "print('hi')\n")
    done = workspace.run(["-e", "radt-demo", "-l", "none", "quick.py"])
    assert done.returncode == 0, done.stderr
    exp_id = workspace.client().get_experiment_by_name("radt-demo").experiment_id
    opening = [line for line in done.stderr.splitlines() if " in experiment " in line]
    assert len(opening) == 1
    assert opening[0].endswith(f" in experiment radt-demo (id {exp_id})")


def test_radt_ui_says_its_own_line_only(workspace):
    """Dash's "Dash is running on …" and Flask's "* Serving Flask app …" / "* Debug mode: off"
    do not follow radT's line."""
    port = free_port()
    server = HttpServer(
        [sys.executable, "-m", "radt", "ui", "--port", str(port)],
        folder=workspace.root,
        log_path=workspace.root / "ui.log",
        port=port,
        env=workspace.env,
    )
    with server:  # returns once the page answers: every start-up line is out
        pass
    said = [
        line
        for line in server.log_tail().splitlines()
        if line.strip() and not line.startswith("--- start")
    ]
    assert len(said) == 1, said
    assert said[0].startswith(f"radt ui: http://127.0.0.1:{port}/  (tracking store ")


def test_radt_listeners_says_what_each_records_and_which_are_opt_in(workspace):
    done = workspace.run(["listeners"])
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["listener", "available", "default", "details"]
    lines = {line.split()[0]: line for line in rows}
    assert "radt.listeners." not in done.stdout  # no class paths
    assert lines["top"].split()[1:4] == ["yes", "on", "records"]
    assert "process tree" in lines["top"]
    torch = lines["torch"].split()
    assert torch[2] == "opt-in"
    assert "PyTorch profiler" in lines["torch"] and "; costs: " in lines["torch"]
    # a plug-in without ``records`` is described by its docstring's first line
    assert "records Emits ``counter/seq/n`` = 0, 1, 2, … once per poll" in lines["counter"]
    assert lines["constpower"].split()[2] == "opt-in"
    assert rows[-1].startswith("opt-in listeners run only when -l names them, e.g. -l top+")


NO_ENSUREPIP = """#!/bin/sh
# Debian's python3 without python3-venv: `-m venv` makes a half folder, then fails
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"
    echo "The virtual environment was not successfully created because ensurepip is not"
    echo "available.  On Debian/Ubuntu systems, you need to install the python3-venv"
    exit 1
fi
exec {python} "$@"
"""


@pytest.mark.parametrize(
    ("python", "said"),
    [
        ("no-ensurepip", "cannot make a virtualenv (no ensurepip): install python3-venv"),
        ("no-such-python3", "no-such-python3 not found: install Python 3.10 or newer"),
    ],
)
def test_make_says_in_one_line_what_to_install_for_the_virtualenv(tmp_path, python, said):
    fake = tmp_path / "no-ensurepip"
    fake.write_text(NO_ENSUREPIP.format(python=sys.executable))
    fake.chmod(0o755)
    venv = tmp_path / "project" / ".venv"
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO), "venv", f"PYTHON={tmp_path / python}", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert not venv.exists()  # no half-made virtualenv for the next make to trust
