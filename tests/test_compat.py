"""Compatibility: real tools' placeholder words, the original radT's listener names, plans and
scripts, params, and what a new user meets in the first hour (make demo, a plan run twice,
counts in messages)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from radt.gpus import GpuListing

# ----------------------------------------------------------------- 16. placeholders

PLACEHOLDERS = [
    "[N/A]",
    "[Not Supported]",
    "[Unknown Error]",
    "[GPU is lost]",
    "[Insufficient Permissions]",
    "N/A",
    "Not Found",
]


def scripted_nvidia_smi(folder: Path, stdout: str) -> str:
    """A stand-in ``nvidia-smi`` printing ``stdout``; returns a PATH that finds it first."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({stdout!r})\n")
    script.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.parametrize("word", PLACEHOLDERS)
def test_every_placeholder_word_is_a_missing_value(word):
    from radt.placeholders import is_placeholder

    assert is_placeholder(word) and is_placeholder(f"  {word} ")
    assert is_placeholder(word.lower())


@pytest.mark.parametrize("text", ["0", "12.2", "535.129.03", "Enabled", "P0", "", "N/A W"])
def test_values_are_not_placeholders(text):
    from radt.placeholders import is_placeholder

    assert not is_placeholder(text)


@pytest.mark.parametrize("word", PLACEHOLDERS)
def test_every_tool_reader_reads_a_placeholder_by_one_rule(word):
    """One number(): a placeholder is a missing value for the smi and dcgm listeners, and a
    report's (nsys, ncu) line without its value is skipped and counted, never read as zero."""
    from radt.listeners.ncu import parse_details
    from radt.listeners.nsys import parse_kernel_summary

    from radt.placeholders import number

    assert number(word) is None
    fixtures = Path(__file__).parent / "fixtures"
    header, first, *rest = (fixtures / "nsys_stats_cuda_gpu_kern_sum.csv").read_text().splitlines()
    whole = parse_kernel_summary("\n".join([header, first, *rest]))
    fields = first.split(",")
    fields[1] = word if "," not in word else f'"{word}"'
    summary = parse_kernel_summary("\n".join([header, ",".join(fields), *rest]))
    assert whole is not None and summary is not None
    assert summary.skipped == whole.skipped + 1
    assert summary.launches == whole.launches - int(fields[2])
    details = (fixtures / "ncu_details.csv").read_text()
    kept = parse_details(details)
    value = '"Duration","us","6.75"'
    assert kept is not None and details.count(value) == 1
    missing = parse_details(details.replace(value, f'"Duration","us","{word}"'))
    assert missing is not None and missing.skipped == kept.skipped + 1


@pytest.mark.parametrize(
    "text, value", [("6.75", 6.75), (" 13,485 ", 13485.0), ("9,495.42", 9495.42), ("0", 0.0)]
)
def test_tool_numbers_are_read_with_thousands_separators(text, value):
    from radt.placeholders import number

    assert number(text) == value


@pytest.mark.parametrize("text", ["", "abc", "inf", "nan", "12 W"])
def test_garbled_tool_values_are_refused(text):
    from radt.placeholders import number

    with pytest.raises(ValueError):
        number(text)


@pytest.mark.parametrize("word", PLACEHOLDERS)
def test_smi_and_dcgm_record_a_placeholder_as_missing(word):
    from radt.listeners.dcgm import DcgmListener
    from radt.listeners.smi import SmiListener

    smi = SmiListener()
    smi.clock = lambda: 1_700_000_000.0
    line = f"2023/11/14 22:13:20.000, 0, {word}, 100, {word}, 15995, 40960, 30, 1410, 1215, P0, 400"
    got = {s.key: s.value for s in smi.parse(line)}
    assert "smi/gpu0/power_w" not in got and "smi/gpu0/mem_util_pct" not in got
    assert got["smi/gpu0/util_pct"] == 100.0
    dcgm = DcgmListener()
    dcgm.fields = (1002, 155)
    dcgm.parse("#Entity   SMACT                       POWER             ")
    got = {s.key: s.value for s in dcgm.parse(f"GPU 0     {word:<28}61.500            ")}
    assert got == {"dcgm/gpu0/power_w": 61.5}


def test_environment_capture_leaves_out_a_placeholder_fact():
    """A vGPU host's ``nvidia-smi -q`` says ``CUDA Version : Not Found``: no tag, not that text."""
    from radt.launch.environment import gpu_facts

    text = (FIXTURES / "nvidia_smi_q_a100.txt").read_text()
    facts = gpu_facts(text)
    assert facts["radt.cuda_version"] == "12.2"
    vgpu_host = text.replace(
        "CUDA Version                              : 12.2",
        "CUDA Version                              : Not Found",
    )
    assert vgpu_host != text
    facts = gpu_facts(vgpu_host)
    assert "radt.cuda_version" not in facts
    assert facts["radt.gpu_driver"] == "535.129.03"
    assert facts["radt.gpus"] == "NVIDIA A100-SXM4-40GB"


def test_collocation_reads_a_placeholder_mig_mode_as_unknown_not_as_off(tmp_path, monkeypatch):
    from radt.collocation.mig import mode_problem

    gpu = GpuListing(0, "NVIDIA A100-SXM4-40GB", "GPU-0")
    monkeypatch.setenv(
        "PATH", scripted_nvidia_smi(tmp_path / "lost", "[GPU is lost], [GPU is lost]\n")
    )
    problem = mode_problem(gpu)
    assert problem is not None and "[GPU is lost]" in problem
    assert "MIG mode is off" not in problem and "\n" not in problem
    monkeypatch.setenv("PATH", scripted_nvidia_smi(tmp_path / "na", "[N/A], [N/A]\n"))
    assert mode_problem(gpu) == "GPU 0 (NVIDIA A100-SXM4-40GB) does not support MIG"
    monkeypatch.setenv("PATH", scripted_nvidia_smi(tmp_path / "ns", "N/A, N/A\n"))
    assert mode_problem(gpu) == "GPU 0 (NVIDIA A100-SXM4-40GB) does not support MIG"


def test_power_readings_read_a_placeholder_as_missing():
    from radt.collocation.nvsmi import parse_power

    text = (FIXTURES / "nvidia_smi_q_power.txt").read_text()
    (readings,) = parse_power(text)
    assert readings.current is not None
    for word in PLACEHOLDERS:
        changed = "\n".join(
            line.split(":")[0] + f": {word}" if "Power Limit" in line else line
            for line in text.splitlines()
        )
        (readings,) = parse_power(changed)
        assert (readings.current, readings.requested, readings.min, readings.max) == (None,) * 4


# -------------------------------------------------------- 17. the original radT's listener names


def found_listeners() -> dict:
    """The built-in listeners as discovery finds them, each taken to be able to run here."""
    from radt.launch.registry import Discovered, discover

    return {
        name: Discovered(d.name, d.target, d.listener, None)
        for name, d in discover().items()
        if d.listener is not None
    }


def test_the_original_listener_names_select_the_same_listeners(capsys, radt_lines):
    from radt.launch import registry

    registry.ALIASES_TOLD.clear()
    found = found_listeners()
    chosen = registry.select("smi+top+dcgmi", found)
    assert [listener.name for listener in chosen] == ["smi", "top", "dcgm"]
    chosen = registry.select("smi+top+dcgmi+iostat+free", found)  # the original's default
    assert [listener.name for listener in chosen] == ["smi", "top", "dcgm", "iostat"]
    assert [listener.name for listener in registry.select("ps+free", found)] == ["top"]
    told = capsys.readouterr().err.splitlines()
    assert told == [
        "radt: listener names of the original radT: dcgmi is dcgm; ps and free are parts of top"
    ]
    registry.select("dcgmi+ps", found)  # said once per radT process
    assert capsys.readouterr().err == ""


def test_an_unknown_name_is_still_refused_in_one_line():
    from radt.errors import UsageError
    from radt.launch.registry import select

    with pytest.raises(UsageError, match=r"^unknown listener nvtop; known listeners: ") as info:
        select("dcgmi+nvtop", found_listeners())
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_a_command_with_the_original_names_runs_and_says_so_once(workspace):
    workspace.script("job.py", "print('trained')\n")
    done = workspace.run(["-l", "top+ps+free", "job.py"])
    assert done.returncode == 0, done.stderr
    told = [line for line in done.stderr.splitlines() if "original radT" in line]
    assert told == [
        "radt: listener names of the original radT: dcgmi is dcgm; ps and free are parts of top"
    ]
    assert workspace.only_run().data.tags["radt.listeners"] == "top"


# ------------------------------------------------------ 18. plan rows run in their script's folder

JOB_WITH_DATA = """\
import argparse
import pathlib
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="./data")
args = parser.parse_args()
print(pathlib.Path(args.data, "x.txt").read_text().strip())
pathlib.Path("ran-here.txt").write_text(sys.argv[0])
"""
MODULE = """\
import pathlib

pathlib.Path("module-ran-here.txt").write_text("yes")
"""
WORKDIR_PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
wd, data, , , , none, sub/job.py, none,
wd, module, , , , none, python -m mod, none,
"""


def runs_by_name(workspace, experiment: str) -> dict:
    return {run.info.run_name: run for run in workspace.runs(experiment)}


@pytest.mark.slow
def test_a_plan_row_runs_in_its_scripts_folder_like_the_original(workspace):
    root = workspace.root
    (root / "sub" / "data").mkdir(parents=True)
    (root / "sub" / "data" / "x.txt").write_text("the data\n")
    workspace.script("sub/job.py", JOB_WITH_DATA)
    workspace.script("mod.py", MODULE)
    (root / "plan.csv").write_text(WORKDIR_PLAN)
    done = workspace.run(["plan.csv"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert "the data" in done.stderr + done.stdout
    # the script ran in sub/, named by its file name (as `python job.py` there)
    assert (root / "sub" / "ran-here.txt").read_text() == "job.py"
    assert not (root / "ran-here.txt").exists()
    # `python -m` has no script folder: it runs here
    assert (root / "module-ran-here.txt").exists()
    runs = runs_by_name(workspace, "wd")
    assert runs["data-A"].info.status == "FINISHED"
    assert runs["data-A"].data.tags["radt.workdir"] == str(root / "sub")
    assert runs["module-A"].data.tags["radt.workdir"] == str(root)
    assert runs["data-A"].data.tags["radt.command"] == "sub/job.py"


@pytest.mark.slow
def test_workdir_here_runs_every_row_from_the_current_folder(workspace):
    root = workspace.root
    (root / "sub" / "data").mkdir(parents=True)
    (root / "sub" / "data" / "x.txt").write_text("the data\n")
    workspace.script("sub/job.py", JOB_WITH_DATA)
    (root / "plan.csv").write_text(
        WORKDIR_PLAN.splitlines(keepends=True)[0] + WORKDIR_PLAN.splitlines(keepends=True)[1]
    )
    done = workspace.run(["--workdir", "here", "plan.csv"], timeout=300)
    assert done.returncode != 0  # ./data is not in the current folder
    assert "FileNotFoundError" in done.stderr + done.stdout
    run = runs_by_name(workspace, "wd")["data-A"]
    assert run.info.status == "FAILED" and run.data.tags["radt.workdir"] == str(root)


@pytest.mark.slow
def test_a_bad_workdir_is_one_line(workspace):
    (workspace.root / "plan.csv").write_text(WORKDIR_PLAN)
    done = workspace.run(["--workdir", "there", "plan.csv"])
    assert done.returncode == 2
    assert "--workdir" in done.stderr and "script" in done.stderr and "here" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_relative_sqlite_store_is_the_same_store_from_the_scripts_folder(workspace):
    """MLFLOW_TRACKING_URI=sqlite:///mlflow.db is the current folder's store wherever rows run."""
    root = workspace.root
    (root / "sub").mkdir()
    workspace.script("sub/logs.py", "import mlflow\n\nmlflow.log_metric('from_script', 7)\n")
    (root / "plan.csv").write_text(
        "Experiment, Workload, File, Listeners\nwd, logs, sub/logs.py, none\n"
    )
    env = {**workspace.env, "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
    done = workspace.run(["plan.csv"], env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    run = runs_by_name(workspace, "wd")["logs-A"]
    assert run.data.metrics["from_script"] == 7
    assert not (root / "sub" / "mlflow.db").exists()


def test_place_finds_the_file_of_each_kind_of_row(tmp_path, monkeypatch):
    from radt.plans.workdir import absolute_store, place

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "job.py").write_text("")
    (tmp_path / "sub" / "run.sh").write_text("")
    python = sys.executable
    sub = tmp_path / "sub"
    assert place([python, "sub/job.py", "--lr", "1"], "script") == (
        [python, "job.py", "--lr", "1"],
        sub,
    )
    assert place(["python3", "-u", "-X", "dev", "sub/job.py"], "script") == (
        ["python3", "-u", "-X", "dev", "job.py"],
        sub,
    )
    assert place(["sub/run.sh", "x"], "script") == (["./run.sh", "x"], sub)
    assert place(["python", "-m", "sub.job"], "script") == (["python", "-m", "sub.job"], tmp_path)
    assert place(["echo", "sub/job.py"], "script") == (["echo", "sub/job.py"], tmp_path)
    assert place([python, "sub/job.py"], "here") == ([python, "sub/job.py"], tmp_path)
    assert absolute_store("sqlite:///mlflow.db") == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert absolute_store("sqlite:////abs/mlflow.db") == "sqlite:////abs/mlflow.db"
    assert absolute_store("mlruns") == str(tmp_path / "mlruns")
    assert absolute_store("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    assert absolute_store("postgresql://u@h/db") == "postgresql://u@h/db"


# ------------------------------------------------------------------ 19. params, as the docs say

REPO = Path(__file__).resolve().parents[1]


def test_readme_says_what_radt_records_as_params_and_how_the_original_differs():
    import re
    import shlex

    from radt.launch.command import params_from_args

    readme = (REPO / "docs" / "guide" / "runs.md").read_text()  # README's "What a run holds"
    assert "the way the original radT does" not in readme
    section = readme[readme.index("- **params**") : readme.index("- **the script's own logging**")]
    examples = re.findall(r"`(--[^`]+)` → `([^`=]+)=([^`]*)`", section)
    assert len(examples) >= 3, section
    for flag, name, value in examples:
        assert params_from_args(shlex.split(flag)) == {name: value}, flag
    assert params_from_args(["--amp"]) == {"amp": "True"}  # the better value stays
    assert '`amp=""`' in section  # and the original's is named


# ------------------------------------------------------------------ 24. counting things in messages


def test_count_says_one_run_and_two_runs():
    from radt.words import count

    assert count(1, "run") == "1 run"
    assert count(0, "run") == "0 runs"
    assert count(2, "single run") == "2 single runs"
    assert count(1, "summary row") == "1 summary row"
    assert count(1234, "sample") == "1,234 samples"
    assert count(3, "entry") == "3 entries" and count(2, "key") == "2 keys"
    assert count(2, "run in them", "runs in them") == "2 runs in them"
    assert count(1, "run in them", "runs in them") == "1 run in them"


def test_the_ui_notes_count_one_thing_as_one():
    from radt.frontend.pages.compare import compare_note
    from radt.frontend.pages.runs import runs_note

    assert runs_note("radt-demo", ["run"]).startswith("radt-demo: 1 single run. ")
    assert runs_note("s", ["workload", "client", "client", "run"]).startswith(
        "s: 1 workload, 2 runs in them, 1 single run. "
    )
    assert compare_note(1, 1).startswith("The 1 workload of the 1 selected run. ")
    assert compare_note(2, 3).startswith("The 2 workloads of the 3 selected runs. ")
    assert compare_note(1, 0).startswith("Every workload of the experiment (1); ")


def test_no_message_counts_with_a_bracketed_s():
    import io
    import re
    import tokenize

    sources = [*REPO.glob("radt/**/*.py"), *REPO.glob("listeners/*.py")]
    sources += [*REPO.glob("frontend/**/*.py")]
    found = [
        f"{path.relative_to(REPO)}:{token.start[0]}"
        for path in sources
        for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        if token.type == tokenize.STRING and re.search(r"\w\(s\)(?!:)", token.string)
    ]
    assert found == []


@pytest.mark.slow
def test_export_counts_one_row_of_one_run(workspace):
    workspace.script("job.py", "print('trained')\n")
    assert workspace.run(["-l", "none", "job.py"]).returncode == 0
    done = workspace.run(["export", "-e", "Default", "--summary", "-o", "out.csv"])
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "radt: wrote 1 summary row of 1 run to out.csv"


# ------------------------------------------------------------------ 23. a new user's first hour


def test_make_demo_points_at_radt_ui_too():
    import subprocess

    done = subprocess.run(["make", "-n", "demo"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "radt ui" in done.stdout and "mlflow ui" in done.stdout


def test_no_instruction_runs_a_tracked_example_plan_in_place():
    import re

    texts = [REPO / "README.md", *REPO.glob("examples/*"), *REPO.glob("frontend/**/*.py")]
    texts += [*REPO.glob("docs/**/*.md")]
    found = [
        f"{path.relative_to(REPO)}: {match}"
        for path in texts
        if path.is_file()
        for match in re.findall(r"radt [^\n`\"]*examples/\S+\.csv", path.read_text())
    ]
    assert found == []


@pytest.mark.slow
def test_the_readme_example_plan_runs_on_a_copy_and_says_how_to_run_it_again(workspace):
    import filecmp
    import shlex
    import shutil
    import subprocess

    root = workspace.root
    shutil.copytree(REPO / "examples", root / "examples")
    readme = (REPO / "README.md").read_text()
    lines = [line.split("#")[0].strip() for line in readme.splitlines()]
    (at,) = [i for i, line in enumerate(lines) if line.startswith("cp examples/collocation.csv ")]
    assert lines[at - 1] == "mkdir -p scratch"  # README makes the scratch folder first
    subprocess.run(shlex.split(lines[at - 1]), cwd=root, check=True)
    copy = shlex.split(lines[at])
    subprocess.run(copy, cwd=root, check=True)
    study = copy[-1]
    assert f"radt {study}" in readme

    done = workspace.run([study], timeout=600)
    assert done.returncode == 0, done.stderr
    assert filecmp.cmp(root / "examples" / "collocation.csv", REPO / "examples" / "collocation.csv")
    assert [p.name for p in root.rglob("*.lock")] == []
    first = (root / study).read_text()
    assert first.count("FINISHED") == 3

    again = workspace.run([study])
    assert again.returncode == 0
    told = [line for line in again.stderr.splitlines() if "nothing to run" in line]
    assert len(told) == 1, again.stderr
    assert "--rerun-all" in told[0] and "2 workloads" in told[0]

    rerun = workspace.run(["--rerun-all", "--modes", "none", study], timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    runs = [run for run in workspace.runs("collocation-demo") if run.info.run_name == "alone-A"]
    assert len(runs) == 2
    assert (root / study).read_text().count("FINISHED") == 3
    assert (root / study).read_text() != first  # the new run's id is written back
