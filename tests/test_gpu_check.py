"""benchmarks/gpu_check.sh, the first script to run on a real GPU: its guard against GPU
settings (read from the script, and seen working in a dry run), a dry run of every step on
the stand-ins of tests/fakes, and benchmarks/gpu_check_fixtures.py, which turns what the
check brings back into fixtures."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import FAKES, REPO, default_signals, path_without_nvidia_tools

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
WHEELS_SCRIPT = REPO / "benchmarks" / "gpu_check_wheels.sh"
MUST_REFUSE = {"-pl", "-lgc", "-rgc", "-lmc", "-mig", "-c", "-r", "-pm", "-ac", "-rac"}
"""nvidia-smi's setting flags that the brief of the check names, and the other common ones."""
GUARD_PROBE = "nvidia-smi -i 4242 -pl 1"
"""The one setting call the script makes on purpose: the guard must refuse it."""
STEPS = [
    "system",
    "guard",
    "nvidia-smi-L",
    "nvidia-smi-q",
    "nvidia-smi-version",
    "driver",
    "supported-clocks",
    "venv",
    "install",
    "versions",
    "pip-list",
    "radt-version",
    "listeners",
    "doctor",
    "doctor-measure",
    "plan-none",
    "plan-naive",
    "plan-mps",
    "profile-torch",
    "profile-nsys",
    "profile-ncu",
    "runs-experiments",
    "runs",
    "runs-doctor",
    "export-summary",
    "export-samples",
    "export-doctor",
    "mps-cleanup",
]
RESULTS = [
    "manifest.tsv",
    "system.txt",
    "nvidia_smi_L.txt",
    "nvidia_smi_q.txt",
    "nvidia_smi_version.txt",
    "driver.csv",
    "supported_clocks.csv",
    "versions.txt",
    "pip_list.txt",
    "radt_version.txt",
    "listeners.txt",
    "doctor.json",
    "doctor_measure.json",
    "plan_before.csv",
    "plan.csv",
    "runs_experiments.txt",
    "runs.txt",
    "runs_doctor.txt",
    "summary.csv",
    "samples.parquet",
    "doctor_samples.parquet",
    "logs/guard_refused.txt",
]


def load_fixtures_module():
    spec = importlib.util.spec_from_file_location(
        "gpu_check_fixtures", REPO / "benchmarks" / "gpu_check_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def forbidden_flags() -> set[str]:
    """The FORBIDDEN list of the script (a shell string over several lines)."""
    match = re.search(r'^FORBIDDEN="([^"]*)"', SCRIPT.read_text(), re.MULTILINE)
    assert match, "gpu_check.sh defines no FORBIDDEN list"
    return set(match.group(1).split())


def smi_calls(text: str) -> list[list[str]]:
    """Each nvidia-smi call in a shell script, as its words up to the end of the command
    (continuation lines joined), leaving out the guard's own heredoc."""
    text = re.sub(r"<<EOF\n.*?\nEOF\n", "", text, flags=re.DOTALL)
    text = text.replace("\\\n", " ")
    calls = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for part in re.split(r"[|;&]|\$\(", line):
            words = part.split()
            if "nvidia-smi" in words:
                calls.append(words[words.index("nvidia-smi") :])
    return calls


def test_the_scripts_call_no_setting_flag_but_the_guard_probe():
    flags = forbidden_flags()
    assert flags >= MUST_REFUSE
    for script in (SCRIPT, WHEELS_SCRIPT):
        calls = smi_calls(script.read_text())
        setting = [" ".join(c) for c in calls if flags & {w.split("=")[0] for w in c}]
        assert setting == ([GUARD_PROBE] if script == SCRIPT else [])
    # the check's own calls are there to be found (the parser above sees them)
    assert ["nvidia-smi", "-q"] in smi_calls(SCRIPT.read_text())
    assert not re.search(r"nvidia-smi\s+mig\b", SCRIPT.read_text())


# ----------------------------------------------------------------------- the fixture helper


def run_fake_smi(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(FAKES / "nvidia-smi"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def returned_out(tmp_path, clean_env):
    """An $OUT as the check returns it (gpu_check.tar.gz), with the stand-in H100's texts."""
    env = {**os.environ, "FAKE_NVIDIA_SMI_MODEL": "h100-80gb"}
    tree = tmp_path / "src" / "gpu_check"
    tree.mkdir(parents=True)
    (tree / "nvidia_smi_q.txt").write_text(run_fake_smi(["-q"], env))
    (tree / "nvidia_smi_L.txt").write_text(run_fake_smi(["-L"], env))
    (tree / "driver.csv").write_text(
        run_fake_smi(["--query-gpu=index,name,uuid,driver_version", "--format=csv"], env)
    )
    (tree / "system.txt").write_text("2026-11-27T10:00:00Z\nLinux gpu-host 6.18 x86_64\n")
    (tree / "versions.txt").write_text("radt 0.3.0.dev0\ntorch 2.11.0+cu130\n")
    (tree / "samples.parquet").write_bytes(b"PAR1")
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(out / "gpu_check.tar.gz", "w:gz") as tar:
        tar.add(tree, arcname="gpu_check")
    return out, tree


def test_fixtures_land_under_the_gpu_and_its_driver(returned_out, tmp_path):
    fixtures = load_fixtures_module()
    out, tree = returned_out
    dest = tmp_path / "fixtures"
    target = fixtures.make_fixtures(out, dest)
    assert target == dest / "h100-80gb-hbm3" / "535.129.03"
    copied = sorted(p.name for p in target.iterdir())
    assert copied == sorted(
        [
            "SOURCES.md",
            "driver.csv",
            "nvidia_smi_L.txt",
            "nvidia_smi_q.txt",
            "system.txt",
            "versions.txt",
        ]
    )
    assert (target / "nvidia_smi_q.txt").read_text() == (tree / "nvidia_smi_q.txt").read_text()
    sources = (target / "SOURCES.md").read_text()
    assert sources.startswith("# NVIDIA H100 80GB HBM3, driver 535.129.03\n")
    assert "on 2026-11-27T10:00:00Z, on `Linux gpu-host 6.18 x86_64`" in sources
    assert "torch 2.11.0+cu130" in sources

    with pytest.raises(fixtures.FixtureError, match="exists already: --force replaces it"):
        fixtures.make_fixtures(out, dest)
    again = fixtures.make_fixtures(out, dest, samples=True, force=True)
    assert (again / "samples.parquet").read_bytes() == b"PAR1"


def test_fixtures_say_what_is_missing(tmp_path):
    fixtures = load_fixtures_module()
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check_fixtures.py"), str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"gpu_check_fixtures: error: {tmp_path} holds neither gpu_check.tar.gz nor "
        "gpu_check/driver.csv"
    ]
    assert fixtures.gpu_slug("NVIDIA H200") == "h200"
    assert fixtures.gpu_slug("NVIDIA A100-SXM4-40GB") == "a100-sxm4-40gb"


# ----------------------------------------------------------------------- the dry run


def unpack(tar: Path) -> dict[str, bytes]:
    with tarfile.open(tar) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


@pytest.mark.slow
@pytest.mark.timeout(4000)
def test_dry_run_on_the_stand_ins(tmp_path, clean_env):
    logs = tmp_path / "logs"
    logs.mkdir()
    out = tmp_path / "out"
    # the stand-in ncu, its arguments logged: the guard must give it --clock-control none
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "ncu").write_text(
        f'#!/bin/sh\necho "$*" >> {logs / "ncu.txt"}\nexec {sys.executable} {FAKES / "ncu"} "$@"\n'
    )
    (bin_ / "ncu").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_", "OUT"))}
    env.update(
        PATH=os.pathsep.join([str(bin_), str(FAKES), path_without_nvidia_tools()]),
        PYTHONPATH=str(FAKES / "pynvml"),
        FAKE_NVIDIA_SMI_MODEL="h100-80gb",
        FAKE_NVIDIA_SMI_LOG=str(logs / "smi.jsonl"),
        FAKE_NVIDIA_SMI_STATE=str(tmp_path / "smi-state.json"),
        FAKE_DCGMI_LOG=str(logs / "dcgmi.jsonl"),
        FAKE_MPS_LOG=str(logs / "mps.jsonl"),
        GPU_CHECK_DRY="1",
        GPU_CHECK_PYTHON=sys.executable,
        GPU_CHECK_WHEELS=str(tmp_path / "no-wheels"),  # what this Python lacks, none here
        OUT=str(out),
    )
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3900,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr

    # what comes back from a lent machine: at most 8 files, none deeper than 2 folders
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.tar.gz",
        "manifest.tsv",
        "store.tar.gz",
        "summary.txt",
    ]
    manifest = list(csv.DictReader(io.StringIO((out / "manifest.tsv").read_text()), delimiter="\t"))
    assert [row["step"] for row in manifest] == STEPS
    failed = {row["step"]: (row["status"], row["note"]) for row in manifest if row["status"] != "0"}
    assert failed == {}, done.stderr

    files = unpack(out / "gpu_check.tar.gz")
    assert sorted(f"gpu_check/{name}" for name in RESULTS if f"gpu_check/{name}" not in files) == []
    assert files["gpu_check/manifest.tsv"] == (out / "manifest.tsv").read_bytes()
    assert files["gpu_check/logs/guard_refused.txt"].decode() == f"{GUARD_PROBE}\n"
    assert "NVIDIA H100 80GB HBM3" in files["gpu_check/nvidia_smi_L.txt"].decode()
    doctor = json.loads(files["gpu_check/doctor.json"])
    assert doctor, "radt doctor --json gave no rows"
    assert "energy_counter_j" in json.loads(files["gpu_check/doctor_measure.json"])
    plan = list(
        csv.DictReader(io.StringIO(files["gpu_check/plan.csv"].decode()), skipinitialspace=True)
    )
    assert [(row["Workload"], row["Status"]) for row in plan] == [
        ("lone", "FINISHED"),
        ("naive-pair", "FINISHED"),
        ("naive-pair", "FINISHED"),
        ("mps-pair", "FINISHED"),
        ("mps-pair", "FINISHED"),
    ]
    assert all(row["Listeners"] == "nvml+smi+top+dcgm" for row in plan)
    store = unpack(out / "store.tar.gz")
    assert "work/mlflow.db" in store

    # no command it ran changed a GPU setting: none of the flags reached the stand-in, whose
    # state file (written on a change) was never made
    calls = [json.loads(line)["argv"] for line in (logs / "smi.jsonl").read_text().splitlines()]
    assert ["-q"] in calls
    reached = [argv for argv in calls if forbidden_flags() & {a.split("=")[0] for a in argv}]
    assert reached == []
    assert not (tmp_path / "smi-state.json").exists()
    ncu = (logs / "ncu.txt").read_text().splitlines()
    profiling = [line for line in ncu if not line.startswith(("--import", "--version"))]
    assert profiling and all(line.startswith("--clock-control none ") for line in profiling)
    # each MPS pair's daemon was started, and quit
    mps = [json.loads(line) for line in (logs / "mps.jsonl").read_text().splitlines()]
    assert sum(1 for call in mps if call["argv"] == ["-d"]) == 1
    assert sum(1 for call in mps if "quit" in call.get("stdin", [])) == 1

    # and what came back becomes fixtures
    fixtures = load_fixtures_module()
    target = fixtures.make_fixtures(out, tmp_path / "fixtures")
    assert target == tmp_path / "fixtures" / "h100-80gb-hbm3" / "535.129.03"
    assert (target / "plan.csv").read_bytes() == files["gpu_check/plan.csv"]
