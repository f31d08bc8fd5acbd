"""radT's parsers on what a real NVIDIA H200 (driver 580.159.04) printed: tests/fixtures/h200.

Every expected value below is read by hand from the fixture file named in the test; the
fixtures and the commands that printed them are listed in tests/fixtures/SOURCES.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES, Workspace, new_workspace, path_without_nvidia_tools
from radt.listeners.smi import QUERY, SmiListener

from radt.collocation import nvsmi
from radt.launch.environment import gpu_facts

H200 = FIXTURES / "h200"
UUID = "GPU-fc5b892f-ab4d-c5cd-09a1-c451b1527a38"
DOCTOR_QUERY = (
    "--query-gpu=index,name,driver_version,mig.mode.current,compute_mode,power.limit,"
    "power.min_limit,power.max_limit,clocks.sm,clocks.max.sm"
)
# radT's own calls as the shim saved them: the arguments → the file with what they printed.
REPLAYED = {
    "nvidia-smi": {
        "-L": "nvidia_smi_L.txt",
        f"{DOCTOR_QUERY} --format=csv,noheader,nounits": "doctor_query_gpu.csv",
        "-i 0 --query-gpu=mig.mode.current,mig.mode.pending --format=csv,noheader": (
            "nvidia_smi_mig_mode.csv"
        ),
    },
    "ncu": {"--version": "ncu_version.txt"},
}


def text(name: str) -> str:
    return (H200 / name).read_text()


def replay_bin(folder: Path) -> Path:
    """Stand-ins for nvidia-smi and ncu that print the H200's literal answers to the calls
    radT made there, and refuse any other call as nvidia-smi does."""
    folder.mkdir()
    for tool, answers in REPLAYED.items():
        script = folder / tool
        script.write_text(
            f"#!{sys.executable}\n"
            "import sys\n"
            f"answers = { ({k: str(H200 / v) for k, v in answers.items()})!r}\n"
            "path = answers.get(' '.join(sys.argv[1:]))\n"
            "if path is None:\n"
            "    print(\"Invalid combination of input arguments. Please run 'nvidia-smi -h' "
            'for help.")\n'
            "    sys.exit(2)\n"
            "sys.stdout.write(open(path).read())\n"
        )
        script.chmod(0o755)
    return folder


# --------------------------------------------------------------------------- nvidia-smi


def test_gpu_listing():
    assert nvsmi.parse_list(text("nvidia_smi_L.txt")) == [
        nvsmi.GpuListing(index=0, name="NVIDIA H200", uuid=UUID, migs=[])
    ]


def test_smi_listener_reads_the_idle_to_full_step():
    """Lines 4 and 16 of nvidia_smi_query_gpu_lms50.csv, cell by cell."""
    lines = text("nvidia_smi_query_gpu_lms50.csv").splitlines()
    assert len(lines) == 16
    listener = SmiListener()
    # nvidia-smi's local time is used when within MAX_SKEW_S of radT's clock
    listener.clock = lambda: datetime(2026, 11, 26, 1, 2, 40).timestamp()
    assert all(listener.parse(line) for line in lines)  # every real line parses
    values = {s.key: s.value for s in listener.parse(lines[3])}
    assert values == {
        "smi/gpu0/power_w": 178.84,
        "smi/gpu0/util_pct": 74.0,
        "smi/gpu0/mem_util_pct": 3.0,
        "smi/gpu0/mem_used_mib": 819.0,
        "smi/gpu0/mem_total_mib": 143771.0,
        "smi/gpu0/temp_c": 43.0,
        "smi/gpu0/sm_clock_mhz": 1980.0,
        "smi/gpu0/mem_clock_mhz": 3201.0,
        "smi/gpu0/pstate": 0.0,
        "smi/gpu0/power_limit_w": 700.0,
    }
    stamp = listener.parse(lines[3])[0].timestamp
    last = listener.parse(lines[15])
    assert {s.key: s.value for s in last}["smi/gpu0/power_w"] == 496.96
    assert round(last[0].timestamp - stamp, 3) == 0.612  # 01:02:40.171 - 01:02:39.559
    assert [field for field, _ in QUERY][:3] == ["timestamp", "index", "power.draw"]


def test_power_readings_of_the_580_layout():
    """nvidia_smi_q_power.txt: the 55-column layout with Average/Instantaneous Power Draw,
    Power Samples and GPU Memory Power Readings blocks."""
    (power,) = nvsmi.parse_power(text("nvidia_smi_q_power.txt"))
    assert power == nvsmi.PowerReadings(
        current=700.0, requested=700.0, default=700.0, min=200.0, max=700.0
    )
    assert power.setting == 700.0


def test_environment_facts_from_q():
    assert gpu_facts(text("nvidia_smi_q.txt")) == {
        "radt.gpu_driver": "580.159.04",
        "radt.cuda_version": "13.0",
        "radt.gpus": "NVIDIA H200",
        "radt.gpu_memory_mib": "143771",  # FB Memory Usage / Total : 143771 MiB
    }


def test_mig_profiles_and_no_instances():
    profiles = nvsmi.parse_lgip(text("nvidia_smi_mig_lgip.txt"))
    assert [(p.name, p.id, p.free, p.total, p.memory_gib) for p in profiles] == [
        ("1g.18gb", 19, 7, 7, 16.0),
        ("1g.18gb+me", 20, 1, 1, 16.0),
        ("1g.35gb", 15, 4, 4, 32.5),
        ("2g.35gb", 14, 3, 3, 32.5),
        ("3g.71gb", 9, 2, 2, 69.75),
        ("4g.71gb", 5, 1, 1, 69.75),
        ("7g.141gb", 0, 1, 1, 140.0),
    ]
    assert {p.gpu for p in profiles} == {0}
    assert [p.compute_slices for p in profiles] == [1, 1, 1, 2, 3, 4, 7]
    assert nvsmi.parse_lgi(text("nvidia_smi_mig_lgi.txt")) == []


def supported_graphics_mhz() -> dict[int, list[int]]:
    """nvidia_smi_query_supported_clocks.csv: graphics clocks per memory clock."""
    lines = text("nvidia_smi_query_supported_clocks.csv").splitlines()
    assert lines[0] == "timestamp, gpu_name, gpu_uuid, memory [MHz], graphics [MHz]"
    by_memory: dict[int, list[int]] = {}
    for line in lines[1:]:
        _, name, uuid, memory, graphics = (cell.strip() for cell in line.split(","))
        assert (name, uuid) == ("NVIDIA H200", UUID)
        by_memory.setdefault(int(memory.removesuffix(" MHz")), []).append(
            int(graphics.removesuffix(" MHz"))
        )
    return by_memory


def test_supported_clocks_of_the_h200():
    clocks = supported_graphics_mhz()
    assert list(clocks) == [3201, 2201]
    assert clocks[3201] == clocks[2201] == list(range(1980, 344, -15))  # 110 clocks
    assert 1410 in clocks[3201] and 1200 in clocks[3201]
    # the same numbers in -q -d SUPPORTED_CLOCKS
    q = text("nvidia_smi_q_clock.txt").splitlines()
    listed = [int(ln.split(":")[1].split()[0]) for ln in q if ln.startswith(" " * 12 + "Graphics")]
    assert listed == clocks[3201] + clocks[2201]


def test_fake_supported_clocks_print_the_real_layout(fakes_on_path):
    """The fake's `--query-supported-clocks` header and cells are laid out as the H200's."""
    done = subprocess.run(
        ["nvidia-smi", "--query-supported-clocks=memory,graphics", "--format=csv"],
        capture_output=True,
        text=True,
        check=True,
    )
    fake = done.stdout.splitlines()
    real = text("nvidia_smi_query_supported_clocks.csv").splitlines()
    assert fake[0] == real[0].split(", ", 3)[3]
    assert fake[1].endswith(" MHz") and fake[1].count(" MHz, ") == 1
    assert real[1].split(", ", 3)[3] == "3201 MHz, 1980 MHz"


def test_mps_without_a_daemon_says_what_the_fake_says(fakes_on_path, tmp_path):
    done = subprocess.run(
        ["nvidia-cuda-mps-control"],
        input="get_server_list\n",
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "nompspipe")},
        check=False,
    )
    assert done.stdout == text("nvidia_cuda_mps_control_no_daemon.txt")
    assert done.returncode == 1  # raw/mps_help.txt: [exit 1]
    assert text("nvidia_cuda_mps_control_server_list.txt").strip().isdigit()


# --------------------------------------------------------------------------- radt doctor


@pytest.fixture
def replayed(tmp_path, template_db, clean_env) -> Workspace:
    """A workspace whose nvidia-smi and ncu answer as the H200 did; no NVML library."""
    ws = new_workspace(tmp_path, template_db, plugins=False)
    ws.env["PATH"] = f"{replay_bin(tmp_path / 'h200-bin')}{os.pathsep}{path_without_nvidia_tools()}"
    ws.env.pop("SLURM_JOB_ID", None)
    return ws


@pytest.mark.slow
def test_doctor_rows_from_the_h200s_answers_are_the_h200s_rows(replayed):
    done = replayed.run(["doctor", "--json"])
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    on_the_h200 = {row["name"]: row for row in json.loads(text("doctor.json"))}
    for name in ("driver", "gpu0", "ncu"):
        assert rows[name] == on_the_h200[name], name
    assert rows["gpu0"]["why"] == (
        "NVIDIA H200; MIG Disabled; compute mode Default; power limit 700.00 W "
        "(200.00-700.00 W); SM clock 345 of 1980 MHz"
    )
    assert rows["ncu"]["why"] == "Version 2025.3.1.0 (build 36398880) (public-release)"


def test_mig_mode_from_the_h200(replayed, monkeypatch):
    from radt.collocation.common import mig_mode

    monkeypatch.setenv("PATH", replayed.env["PATH"])
    assert mig_mode(0) == ("Disabled", "Disabled")


def test_fake_lock_and_query_print_the_real_layout(fakes_on_path, tmp_path):
    """The fake's -lgc answer and its idle clock when locked, as the H200 printed them."""
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_STATE", str(tmp_path / "state.json"))

    def smi(*args: str) -> str:
        return subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, check=True
        ).stdout

    real = text("nvidia_smi_lgc.txt").replace("00000000:00:06.0", "00000000:2F:00.0")
    assert smi("-i", "0", "-lgc", "1410,1410") == real
    fields = "clocks.sm,clocks_event_reasons.active"
    fake = smi("-i", "0", f"--query-gpu={fields}", "--format=csv").splitlines()
    header, values = text("nvidia_smi_query_clocks_locked.csv").splitlines()
    cells = dict(zip(header.split(", "), values.split(", "), strict=True))
    assert fake == [
        "clocks.current.sm [MHz], clocks_event_reasons.active",
        f"{cells['clocks.current.sm [MHz]']}, {cells['clocks_event_reasons.active']}",
    ]
    assert smi("-i", "0", "-rgc") == "All done.\n"
