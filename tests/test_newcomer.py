"""What a newcomer meets first: examples/train.py's MLflow calls, radT's opening line,
``radt ui``'s and ``radt listeners``' output."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, default_signals
from servers import HttpServer, free_port


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_opening_line_names_the_experiment(workspace):
    workspace.script("quick.py", "print('hi')\n")
    done = workspace.run(["-e", "radt-demo", "-l", "none", "quick.py"])
    assert done.returncode == 0, done.stderr
    exp_id = workspace.client().get_experiment_by_name("radt-demo").experiment_id
    opening = [line for line in done.stderr.splitlines() if " in experiment " in line]
    assert len(opening) == 1
    assert opening[0].endswith(f" in experiment radt-demo (id {exp_id})")


@pytest.mark.slow
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
# Debian's python3 without python3-venv, which ships ensurepip: `-m venv` would fail
case "$*" in
    *ensurepip*) echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1;;
    *"-m venv"*) mkdir -p "$3/bin"; echo "ensurepip is not available" >&2; exit 1;;
esac
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


def test_make_n_makes_no_virtualenv(tmp_path):
    venv = tmp_path / ".venv"
    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), "demo", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"-m venv {venv}" in done.stdout and "radt ui" in done.stdout
    assert not venv.exists()


# --------------------------------------------------------------------------- the walk-through

GUIDES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
GUIDES += sorted((REPO / "examples").iterdir())


def guide_text() -> str:
    """README.md, the docs' pages and the examples' comments, each line's leading ``#`` and
    spaces dropped."""
    lines = []
    for path in GUIDES:
        if path.is_file():
            lines += [line.lstrip("# ") for line in path.read_text().splitlines()]
    return "\n".join(lines)


def git_ignores(path: str) -> bool:
    done = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", path], timeout=60)
    return done.returncode == 0


def test_copies_and_outputs_of_the_walk_throughs_go_where_git_ignores():
    text = guide_text()
    copies = re.findall(r"\bcp examples/\S+ (\S+)", text)
    written = re.findall(r"examples/analysis\.py \S+ (\S+)", text)
    written += re.findall(r"--frontier -o (\S+)", text)
    assert len(copies) >= 6 and written  # README's and every example's own
    for path in copies + written:
        assert path.startswith("scratch/") and git_ignores(path), path
    # no guide runs a tracked example in place (radT would write its progress into it)
    assert re.findall(r"\bradt examples/\S+\.(?:csv|ya?ml)\b", text) == []


def test_the_cpu_study_says_what_readme_says():
    study = (REPO / "examples" / "study_cpu.yaml").read_text()
    readme = " ".join((REPO / "README.md").read_text().split())
    for command in (
        "cp examples/study_cpu.yaml scratch/my-study.yaml",
        "radt scratch/my-study.yaml",
    ):
        assert command in study and command in readme, command
    assert "scratch/my-study.plan.csv" in study and "scratch/my-study.plan.csv" in readme


@pytest.mark.slow
def test_readme_walk_through_leaves_git_status_clean(tmp_path):
    """README's collocation walk-through, run as written in a checkout of the tracked files:
    afterwards `git status` shows nothing, and examples/analysis.py says where it wrote."""
    checkout = tmp_path / "radt"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True, timeout=60
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = REPO / name
        if source.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, checkout / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(checkout)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "checkout"]):
        subprocess.run(git + args, check=True, capture_output=True, timeout=120)

    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    (block,) = [b for b in blocks if "cp examples/collocation.csv" in b]
    commands = [line for line in block.splitlines() if not line.startswith("radt ui")]
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, argv in (("radt", f"{sys.executable} -m radt"), ("python", sys.executable)):
        (shims / name).write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        (shims / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_"))}
    env.update(
        PATH=f"{shims}{os.pathsep}{env['PATH']}",
        RADT_HOME=str(tmp_path / "home"),
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    done = subprocess.run(
        ["bash", "-e", "-c", "\n".join(commands)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    chart = checkout / "scratch" / "analysis.html"
    assert f"wrote the chart to {chart}" in done.stdout
    status = subprocess.run(
        git + ["status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert status.stdout == ""


def test_every_product_module_imports():
    """The fast tier (``make test-fast``) reaches every module at least this far."""
    import radt.frontend
    import radt.listeners

    import radt

    names = [
        info.name
        for package in (radt, radt.frontend, radt.listeners)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]
    assert {"radt.launch.launcher", "radt.listeners.top", "radt.frontend.serve"} <= set(names)
    for name in names:
        if not name.endswith(".__main__"):  # that one runs radT
            importlib.import_module(name)


def test_the_architecture_is_in_the_repository_and_names_every_module():
    """README links docs/architecture.md (not a file outside the clone), and it names every
    product module, so a module added without a word there fails here."""
    readme = (REPO / "README.md").read_text()
    assert "](docs/architecture.md)" in readme and "../shared/" not in readme
    text = (REPO / "docs" / "architecture.md").read_text()
    unnamed = [
        str(path.relative_to(REPO))
        for folder in ("radt", "listeners", "frontend")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and f"`{path.name}`" not in text
        and f"`{path.stem}`" not in text
        and f"{path.parent.name}/{path.name}" not in text
    ]
    assert unnamed == []


@pytest.mark.slow
def test_the_wheel_holds_every_module_of_the_tree(tmp_path):
    """The wheel built from the tree (what a cluster node or a GPU machine without the
    repository installs) holds every product module and asset, where the tree has them.

    An editable install finds a package that pyproject.toml forgets, and so do the tests;
    a wheel does not (a real H200 run first met ``No module named 'radt.slurm'`` this way)."""
    import zipfile

    tree = tmp_path / "tree"  # setuptools' build/ in the repository keeps what a past build held
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    )
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, tree / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(tree)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("radt-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    sources = {
        "radt": REPO / "radt",
        "radt/listeners": REPO / "listeners",
        "radt/frontend": REPO / "frontend",
    }
    wanted = {
        f"{inside}/{path.relative_to(folder).as_posix()}"
        for inside, folder in sources.items()
        for path in folder.rglob("*")
        if path.is_file()
        and (path.suffix == ".py" or "assets" in path.parts)
        and "__pycache__" not in path.parts
    }
    assert "radt/slurm/dispatch.py" in wanted
    assert wanted - held == set()


def test_a_plan_says_no_mlflow_progress_bars(workspace):
    """Where tqdm is installed (it comes with transformers, and on most GPU machines), MLflow
    draws "Downloading artifacts: 100%|…" each time radT reads a run's samples; radT's output
    holds its own lines only."""
    pytest.importorskip("tqdm")
    workspace.script("quick.py", "print('hi')\n")
    (workspace.root / "plan.csv").write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
        "bars, one, , , 0, none, quick.py, top, \n"
    )
    done = workspace.run(["plan.csv", "--workdir", "here"])
    assert done.returncode == 0, done.stderr
    assert "FINISHED" in done.stderr
    assert "Downloading" not in done.stderr + done.stdout
