"""``radt doctor``: its rows on this machine (nothing NVIDIA), on the stand-ins (everything),
and with each stand-in taken away in turn; ``--json`` and ``--require``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FAKES, FIXTURES, Workspace, new_workspace, path_without_nvidia_tools

from radt.doctor.probes import NAMES, slurm_row

TOOLS = ("nvidia-smi", "dcgmi", "nvidia-cuda-mps-control", "nsys", "ncu")
NOTHING_NVIDIA = {
    "driver", "nvml", "power_instant", "energy_counter", "dcgm", "dcgm_prof", "mps",
    "set_power", "set_mig", "set_clocks", "nsys", "ncu",
}  # fmt: skip


def doctor(ws: Workspace, *args: str, env: dict[str, str] | None = None):
    """``radt doctor --json ARGS`` in the workspace: (rows by name, the finished process)."""
    done = ws.run(["doctor", "--json", *args], env=env)
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}, done


def bin_without(tmp: Path, *left_out: str) -> str:
    """A folder with links to the stand-in tools but ``left_out``."""
    folder = tmp / ("bin-without-" + "-".join(left_out))
    folder.mkdir()
    for tool in TOOLS:
        if tool not in left_out:
            (folder / tool).symlink_to(FAKES / tool)
    return str(folder)


@pytest.fixture
def nothing(tmp_path, template_db, clean_env) -> Workspace:
    """This machine as it is: no NVIDIA tool on PATH, the real pynvml (no library)."""
    ws = new_workspace(tmp_path, template_db, plugins=False)
    ws.env["PATH"] = path_without_nvidia_tools()
    ws.env.pop("SLURM_JOB_ID", None)
    return ws


@pytest.fixture
def everything(tmp_path, template_db, clean_env) -> Workspace:
    """The stand-ins: fake tools and pynvml (one A100), a RAPL tree, an MPS pipe folder, a
    Slurm job; ``-o rapl.root=...`` goes in ``ws.env["RAPL_OPTION"]``."""
    ws = new_workspace(tmp_path, template_db, plugins=False)
    tree = tmp_path / "powercap"
    subprocess.run(
        [
            "python3",
            str(FAKES / "powercap.py"),
            "build",
            str(FIXTURES / "powercap_info_i5_13500.txt"),
            str(tree),
        ],
        check=True,
        capture_output=True,
    )
    ws.env.update(
        PATH=f"{bin_without(tmp_path)}{os.pathsep}{path_without_nvidia_tools()}",
        PYTHONPATH=str(FAKES / "pynvml"),
        FAKE_PYNVML_GPUS="1",
        CUDA_MPS_PIPE_DIRECTORY=str(tmp_path / "mps"),
        SLURM_JOB_ID="4242",
        SLURMD_NODENAME="node7",
        RAPL_OPTION=f"rapl.root={tree / 'class' / 'powercap'}",
    )
    return ws


def with_fakes(ws: Workspace, *args: str, env: dict[str, str] | None = None):
    return doctor(ws, "-o", ws.env["RAPL_OPTION"], *args, env=env)


def test_this_machine_has_nothing_nvidia(nothing):
    rows, done = doctor(nothing)
    assert list(rows) == NAMES  # no GPU rows
    no = {name for name, row in rows.items() if not row["ok"]}
    assert no >= NOTHING_NVIDIA
    assert rows["driver"]["why"] == "nvidia-smi not found on PATH"
    assert rows["nvml"]["why"] == "NVML library not found"
    assert rows["dcgm"]["why"] == "dcgmi not found"
    assert rows["set_power"]["why"] == "no GPU: nvidia-smi not found on PATH"
    assert rows["nsys"]["why"] == "nsys not found"
    assert all(rows[name]["fix"] for name in no)
    assert rows["tracking"]["ok"] and rows["tracking"]["why"] == str(nothing.root / "mlflow.db")
    assert rows["radt_home"]["ok"] and rows["radt_home"]["why"].startswith(f"{nothing.home}, ")
    installed = shutil.which("sbatch", path=nothing.env["PATH"]) is not None
    assert rows["slurm"] == {
        "name": "slurm",
        "what": "inside a Slurm job",
        "ok": False,
        "why": "not inside a Slurm job, though Slurm is installed here"
        if installed
        else "Slurm is not installed here (no sbatch on PATH)",
        "fix": ("" if installed else "on a Slurm cluster, ")
        + "run radT inside salloc or sbatch to record the job's tags",
    }
    assert done.stderr == ""


def test_the_slurm_row_is_a_sentence_whether_slurm_is_installed_or_not(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    absent = slurm_row()
    assert (absent.ok, absent.why) == (False, "Slurm is not installed here (no sbatch on PATH)")
    assert absent.fix == (
        "on a Slurm cluster, run radT inside salloc or sbatch to record the job's tags"
    )
    sbatch = tmp_path / "sbatch"
    sbatch.write_text("#!/bin/sh\nexit 0\n")
    sbatch.chmod(0o755)
    outside = slurm_row()
    assert (outside.ok, outside.why) == (
        False,
        "not inside a Slurm job, though Slurm is installed here",
    )
    assert outside.fix == "run radT inside salloc or sbatch to record the job's tags"
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "node7")
    inside = slurm_row()
    assert (inside.ok, inside.why, inside.fix) == (True, "job 4242 on node7", "")


def test_the_stand_ins_have_everything(everything):
    rows, _ = with_fakes(everything)
    assert list(rows) == ["driver", "gpu0", *NAMES[1:]]
    lacking = {name for name, row in rows.items() if not row["ok"]}
    assert lacking == {"torch_cuda"}, lacking  # the CPU build of torch: no stand-in for CUDA
    assert rows["driver"]["why"] == "driver 535.129.03, 1 GPU"
    assert rows["gpu0"]["why"] == (
        "NVIDIA A100-SXM4-40GB; MIG Disabled; compute mode Default; power limit 400.00 W "
        "(100.00-400.00 W); SM clock 210 of 1410 MHz"
    )
    assert rows["nvml"]["why"] == "driver 590.48.01, 1 GPU"
    assert rows["power_instant"]["why"] == "supported on 1 GPU"
    assert rows["set_power"]["why"] == "root"
    assert rows["set_clocks"]["why"] == "root; clock API restricted to root on GPU 0"
    assert rows["nsys"]["why"] == "NVIDIA Nsight Systems version 2024.6.2.225-246235244400v0"
    assert rows["ncu"]["why"] == "Version 2025.1.1.0 (build 35528883) (public-release)"
    assert rows["slurm"]["why"] == "job 4242 on node7"
    assert rows["mps"]["why"].endswith(
        f"(no daemon runs in {everything.env['CUDA_MPS_PIPE_DIRECTORY']})"
    )


def scenario(tmp: Path, **changes) -> str:
    """The default pynvml scenario with its first GPU changed (a value None: left out)."""
    data = json.loads((FIXTURES / "nvml_h100.json").read_text())
    for key, value in changes.items():
        if value is None:
            del data["gpus"][0][key]
        else:
            data["gpus"][0][key] = value
    path = tmp / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


NVML_ROWS = {"nvml", "power_instant", "energy_counter", "set_clocks"}
# Each stand-in taken away: (what changes in the environment, the rows that say no then).
# A callable gets the temporary folder and returns the change.
TAKEN_AWAY = {
    "driver fails": (
        lambda tmp: {"FAKE_NVIDIA_SMI_FAIL": "nvml"},
        {"driver", "set_power", "set_mig"},
    ),
    "no nvidia-smi": (
        lambda tmp: {"PATH": bin_without(tmp, "nvidia-smi")},
        {"driver", "set_power", "set_mig"},
    ),
    "nvml not loaded": (
        lambda tmp: {"FAKE_PYNVML_INIT_ERROR": "DRIVER_NOT_LOADED"},
        NVML_ROWS,
    ),
    "no nvml library": (lambda tmp: {"FAKE_PYNVML_MISSING": "1"}, NVML_ROWS),
    "no instant power": (
        lambda tmp: {"FAKE_PYNVML_SCENARIO": scenario(tmp, power_instant_mw=None)},
        {"power_instant"},
    ),
    "no energy counter": (
        lambda tmp: {
            "FAKE_PYNVML_SCENARIO": scenario(
                tmp, errors={"nvmlDeviceGetTotalEnergyConsumption": "NOT_SUPPORTED"}
            )
        },
        {"energy_counter"},
    ),
    "clock API fails": (
        lambda tmp: {
            "FAKE_PYNVML_SCENARIO": scenario(
                tmp, errors={"nvmlDeviceGetAPIRestriction": "NO_PERMISSION"}
            )
        },
        {"set_clocks"},
    ),
    "no dcgmi": (lambda tmp: {"PATH": bin_without(tmp, "dcgmi")}, {"dcgm", "dcgm_prof"}),
    "profiling busy": (lambda tmp: {"FAKE_DCGMI_PROF_BUSY": "1"}, {"dcgm_prof"}),
    "no mps": (lambda tmp: {"PATH": bin_without(tmp, "nvidia-cuda-mps-control")}, {"mps"}),
    "no nsys": (lambda tmp: {"PATH": bin_without(tmp, "nsys")}, {"nsys"}),
    "no ncu": (lambda tmp: {"PATH": bin_without(tmp, "ncu")}, {"ncu"}),
    "tracking down": (
        lambda tmp: {"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
        {"tracking"},
    ),
    "home unwritable": (
        lambda tmp: {"RADT_HOME": str(tmp / "scenario.json")},  # a file, not a folder
        {"radt_home"},
    ),
    "no slurm": (lambda tmp: {"SLURM_JOB_ID": None}, {"slurm"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(TAKEN_AWAY))
def test_each_stand_in_missing_in_turn(everything, tmp_path, case):
    change, expected = TAKEN_AWAY[case]
    (tmp_path / "scenario.json").write_text("{}")
    env = dict(everything.env)
    for key, value in change(tmp_path).items():
        if value is None:
            env.pop(key)
        elif key == "PATH":
            env[key] = f"{value}{os.pathsep}{path_without_nvidia_tools()}"
        else:
            env[key] = value
    rows, done = with_fakes(everything, env=env)
    lacking = {name for name, row in rows.items() if not row["ok"]} - {"torch_cuda"}
    assert lacking == expected, (lacking, done.stderr)
    for name in expected:
        assert rows[name]["why"] and rows[name]["fix"], rows[name]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_rows_say_the_tools_own_words(everything, tmp_path):
    env = {**everything.env, "FAKE_NVIDIA_SMI_FAIL": "nvml", "FAKE_DCGMI_PROF_BUSY": "1"}
    rows, _ = with_fakes(everything, env=env)
    assert rows["driver"]["why"].startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )
    assert "Error setting watches. Result: -33" in rows["dcgm_prof"]["why"]
    env = {**everything.env, "FAKE_PYNVML_SCENARIO": scenario(
        tmp_path, errors={"nvmlDeviceGetAPIRestriction": "NO_PERMISSION"}
    )}  # fmt: skip
    rows, _ = with_fakes(everything, env=env)
    assert rows["set_clocks"]["why"] == "NVMLError_NoPermission: Insufficient Permissions"
    assert rows["set_power"]["ok"]  # one failing query spoils its own row only


@pytest.mark.slow
def test_require_exits_1_naming_what_is_missing(nothing):
    done = nothing.run(["doctor", "--require", "tracking,nvml,dcgm"])
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "radt: error: missing: nvml (NVML library not found; pip install nvidia-ml-py, with "
        "the NVIDIA driver loaded); dcgm (dcgmi not found; install DCGM "
        "(datacenter-gpu-manager) and start nv-hostengine)"
    ]
    done = nothing.run(["doctor", "--require", "nvml,gpu9"])
    assert done.returncode == 2
    assert done.stderr.startswith("radt: error: --require: unknown capability gpu9; known: ")


@pytest.mark.slow
def test_require_passes_quietly(everything):
    done = everything.run(
        ["doctor", "-o", everything.env["RAPL_OPTION"], "--require", "nvml,dcgm,gpu0,rapl"]
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.slow
def test_table_has_a_line_per_row(everything):
    done = everything.run(["doctor", "-o", everything.env["RAPL_OPTION"]])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["capability", "ok", "details"]
    assert lines[2].split()[:3] == ["gpu0", "yes", "NVIDIA"]
    torch_line = next(line for line in lines if line.startswith("torch_cuda"))
    assert torch_line.split()[1] == "no"
    assert "no CUDA build -> install a CUDA build of PyTorch" in torch_line
    assert len(lines) == 1 + len(NAMES) + 1


@pytest.mark.slow
def test_clock_rights_unanswered_as_on_the_h200_vm(everything, tmp_path):
    """The real H200 in a VM (tests/fixtures/h200/pynvml.txt): NVML answers the clock API
    restriction query with Not Supported, yet root could lock clocks there
    (h200/nvidia_smi_lgc.txt); the row says so instead of "see the reason"."""
    env = {**everything.env, "FAKE_PYNVML_SCENARIO": scenario(
        tmp_path, errors={"nvmlDeviceGetAPIRestriction": "NOT_SUPPORTED"}
    )}  # fmt: skip
    rows, done = with_fakes(everything, env=env)
    assert rows["set_clocks"] == {
        "name": "set_clocks",
        "what": "set GPU clocks",
        "ok": True,
        "why": "root; NVML does not say who may lock clocks on GPU 0 (Not Supported, as in a "
        "VM); root could lock them on such a GPU (an H200 in a VM, driver 580)",
        "fix": "",
    }
    assert rows["set_power"]["ok"] and "Traceback" not in done.stderr
