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


def test_the_original_listener_names_select_the_same_listeners(capsys):
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


def test_a_command_with_the_original_names_runs_and_says_so_once(workspace):
    workspace.script("job.py", "print('trained')\n")
    done = workspace.run(["-l", "top+ps+free", "job.py"])
    assert done.returncode == 0, done.stderr
    told = [line for line in done.stderr.splitlines() if "original radT" in line]
    assert told == [
        "radt: listener names of the original radT: dcgmi is dcgm; ps and free are parts of top"
    ]
    assert workspace.only_run().data.tags["radt.listeners"] == "top"
