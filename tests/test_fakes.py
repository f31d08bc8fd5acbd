"""The fakes in tests/fakes print the real tools' formats (fixtures in tests/fixtures)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FAKES = TESTS / "fakes"
FIXTURES = TESTS / "fixtures"

QUERY_FIELDS = (
    "timestamp,index,uuid,name,power.draw,utilization.gpu,utilization.memory,memory.used,"
    "memory.total,temperature.gpu,clocks.sm,clocks.mem,pstate,power.limit"
)
MIG_LINE = re.compile(r"^  MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)$")
GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-f-]+)\)$")
TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$")


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "CUDA_MPS"))}
    e["PATH"] = f"{FAKES}{os.pathsep}{e.get('PATH', '')}"
    e["CUDA_MPS_PIPE_DIRECTORY"] = str(tmp_path / "mps")
    return e


def run(args, env, stdin=None, timeout=20):
    return subprocess.run(
        args, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def fixture(name):
    return (FIXTURES / name).read_text()


def without_timestamp(text):
    return [ln for ln in text.splitlines() if not ln.startswith("Timestamp")]


# --------------------------------------------------------------------------- files


def test_fakes_are_executable_python_scripts():
    for name in ("nvidia-smi", "dcgmi", "nvidia-cuda-mps-control"):
        path = FAKES / name
        assert os.access(path, os.X_OK), name
        assert path.read_text().startswith("#!/usr/bin/env python3\n"), name


def test_every_fixture_has_a_source_note():
    sources = fixture("SOURCES.md")
    for path in FIXTURES.iterdir():
        if path.name != "SOURCES.md":
            assert f"`{path.name}`" in sources, path.name


# --------------------------------------------------------------------------- nvidia-smi -q / -L


def test_query_prints_the_a100_fixture(env):
    res = run(["nvidia-smi", "-q"], env)
    assert res.returncode == 0
    assert "Driver Version                            : 535.129.03" in res.stdout
    assert without_timestamp(res.stdout) == without_timestamp(fixture("nvidia_smi_q_a100.txt"))


def test_query_power_display(env):
    res = run(["nvidia-smi", "-q", "-d", "POWER"], env)
    assert res.returncode == 0
    assert without_timestamp(res.stdout) == without_timestamp(fixture("nvidia_smi_q_power.txt"))
    for key in ("Current Power Limit", "Default Power Limit", "Min Power Limit", "Max Power Limit"):
        assert key in res.stdout


def test_query_several_gpus_and_one_selected(env):
    env["FAKE_NVIDIA_SMI_GPUS"] = "3"
    res = run(["nvidia-smi", "-q", "-i", "1"], env)
    assert "Attached GPUs                             : 3" in res.stdout
    assert "GPU 00000000:35:00.0" in res.stdout
    assert "GPU-20af7308-7522-d66f-fe01-fb6f0551a4b9" in res.stdout
    assert res.stdout.count("Product Name") == 1


def test_list_gpus(env):
    env["FAKE_NVIDIA_SMI_GPUS"] = "2"
    lines = run(["nvidia-smi", "-L"], env).stdout.splitlines()
    assert [GPU_LINE.match(ln).group(1) for ln in lines] == ["0", "1"]
    assert GPU_LINE.match(fixture("nvidia_smi_L_plain.txt").strip())


def test_mig_list_regex_matches_fixtures():
    for name in ("nvidia_smi_L.txt", "nvidia_smi_L_a100_mig.txt"):
        lines = fixture(name).splitlines()
        assert GPU_LINE.match(lines[0])
        assert all(MIG_LINE.match(ln) for ln in lines[1:]), name
    r450 = fixture("nvidia_smi_L_r450.txt").splitlines()
    assert all(re.search(r"\(UUID: MIG-GPU-[0-9a-f-]+/\d+/\d+\)$", ln) for ln in r450[1:])


# --------------------------------------------------------------------------- --query-gpu


def test_query_gpu_once(env):
    res = run(["nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv,noheader,nounits"], env)
    assert res.returncode == 0
    (line,) = res.stdout.splitlines()
    cols = line.split(", ")
    assert len(cols) == 14
    assert TIMESTAMP.match(cols[0])
    assert cols[1:4] == ["0", "GPU-faae5314-b87e-87c0-400b-b7cfb9e7b310", "NVIDIA A100-SXM4-40GB"]
    assert float(cols[4]) > 0
    assert cols[12] == "P0"
    assert cols[13] == "400.00"


def test_query_gpu_fixture_has_special_values():
    rows = [ln.split(", ") for ln in fixture("nvidia_smi_query_gpu.csv").splitlines()]
    assert all(len(r) == 14 for r in rows)
    values = {v for r in rows for v in r}
    assert {"[N/A]", "[Not Supported]", "P0"} <= values


def test_query_gpu_header_and_units(env):
    res = run(["nvidia-smi", "--query-gpu=index,power.draw,memory.used", "--format=csv"], env)
    header, row = res.stdout.splitlines()
    assert header == "index, power.draw [W], memory.used [MiB]"
    assert re.match(r"^0, \d+\.\d\d W, \d+ MiB$", row)


def test_query_gpu_streams_until_killed(env):
    env["FAKE_NVIDIA_SMI_GPUS"] = "2"
    proc = subprocess.Popen(
        [
            "nvidia-smi",
            f"--query-gpu={QUERY_FIELDS}",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 5
    try:
        while len(lines) < 4 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    assert len(lines) >= 4
    assert [ln.split(", ")[1] for ln in lines[:4]] == ["0", "1", "0", "1"]
    assert proc.returncode == -signal.SIGTERM


def _lines_until(proc: subprocess.Popen, enough, timeout: float = 60.0) -> list[str]:
    """Read ``proc``'s stdout line by line until ``enough(lines)``; fail after ``timeout``."""
    import threading

    assert proc.stdout is not None
    lines: list[str] = []
    watchdog = threading.Timer(timeout, proc.kill)  # a silent tool must not hang the suite
    watchdog.start()
    try:
        while not enough(lines):
            line = proc.stdout.readline()
            assert line, f"the tool ended or went silent after {lines}"
            lines.append(line.rstrip("\n"))
    finally:
        watchdog.cancel()
    return lines


def test_query_gpu_stream_rate(env):
    proc = subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=timestamp,power.draw",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    # Interrupt once it streams (a SIGINT before the tool set its handler tests nothing).
    first = _lines_until(proc, lambda lines: len(lines) >= 2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert len(first + out.splitlines()) >= 2


def test_query_gpu_select_and_mig_utilization(env):
    env["FAKE_NVIDIA_SMI_GPUS"] = "4"
    env["FAKE_NVIDIA_SMI_MIG"] = "1"
    res = run(
        [
            "nvidia-smi",
            "--query-gpu=index,utilization.gpu,mig.mode.current",
            "-i",
            "2,3",
            "--format=csv,noheader",
        ],
        env,
    )
    assert res.stdout.splitlines() == ["2, [N/A], Enabled", "3, [N/A], Enabled"]


def test_invalid_field_and_invalid_arguments(env):
    res = run(["nvidia-smi", "--query-gpu=index,energy", "--format=csv"], env)
    assert res.returncode == 2
    assert res.stdout == 'Field "energy" is not a valid field to query.\n\n'
    res = run(["nvidia-smi", "--no-such-flag"], env)
    assert res.returncode == 2
    assert "Invalid combination of input arguments" in res.stdout
    res = run(["nvidia-smi", "--query-gpu=index"], env)
    assert res.returncode == 2


def test_nvml_failure_mode(env):
    env["FAKE_NVIDIA_SMI_FAIL"] = "nvml"
    res = run(["nvidia-smi", "-L"], env)
    assert res.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in res.stdout


# --------------------------------------------------------------------------- -pl


def test_power_limit(env, tmp_path):
    env["FAKE_NVIDIA_SMI_STATE"] = str(tmp_path / "smi.json")
    res = run(["nvidia-smi", "-i", "0", "-pl", "250"], env)
    assert res.returncode == 0
    assert res.stdout == (
        "Power limit for GPU 00000000:2F:00.0 was set to 250.00 W from 400.00 W.\nAll done.\n"
    )
    pattern = r"^Power limit for GPU \S+ was set to \d+\.\d\d W from \d+\.\d\d W\.\nAll done\.\n$"
    assert re.match(pattern, fixture("nvidia_smi_pl.txt"))
    power = run(["nvidia-smi", "-q", "-d", "POWER"], env).stdout
    assert "Current Power Limit               : 250.00 W" in power
    limit = run(["nvidia-smi", "--query-gpu=power.limit", "--format=csv,noheader,nounits"], env)
    assert limit.stdout == "250.00\n"


def test_power_limit_without_permission(env):
    env["FAKE_NVIDIA_SMI_FAIL"] = "pl"
    res = run(["nvidia-smi", "-i", "0", "-pl", "250"], env)
    assert res.returncode == 4
    assert res.stdout == fixture("nvidia_smi_pl_permission.txt").replace(
        "00000000:01:00.0", "00000000:2F:00.0"
    )


def test_power_limit_out_of_range(env):
    res = run(["nvidia-smi", "-pl", "50"], env)
    assert res.returncode == 2
    assert res.stdout.splitlines()[0].startswith("Provided power limit 50.00 W is not a valid")
    assert res.stdout.splitlines()[1] == fixture("nvidia_smi_pl_invalid.txt").splitlines()[1]


# --------------------------------------------------------------------------- mig


def test_mig_needs_mig_mode(env):
    """As the real H200 (driver 580.159.04) answers with MIG mode off: the listing of GPU
    instances says so and exits 0; the profiles are listed all the same."""
    res = run(["nvidia-smi", "mig", "-lgi"], env)
    assert res.stdout == fixture("h200/nvidia_smi_mig_lgi.txt")
    assert res.returncode == 0
    res = run(["nvidia-smi", "mig", "-lgip"], env)
    assert res.returncode == 0
    assert res.stdout == fixture("nvidia_smi_mig_lgip.txt")
    res = run(["nvidia-smi", "mig", "-cgi", "9"], env)
    assert (res.stdout, res.returncode) == ("No MIG-enabled devices found.\n", 6)


@pytest.mark.slow
def test_mig_create_list_destroy(env, tmp_path):
    env["FAKE_NVIDIA_SMI_MIG"] = "1"
    env["FAKE_NVIDIA_SMI_STATE"] = str(tmp_path / "smi.json")
    env["FAKE_NVIDIA_SMI_LOG"] = str(tmp_path / "smi.log")

    assert run(["nvidia-smi", "mig", "-lgip"], env).stdout == fixture("nvidia_smi_mig_lgip.txt")
    created = run(["nvidia-smi", "mig", "-i", "0", "-cgi", "9,3g.20gb", "-C"], env)
    assert created.returncode == 0
    assert created.stdout == fixture("nvidia_smi_mig_create.txt")

    lgi = run(["nvidia-smi", "mig", "-lgi"], env).stdout.splitlines()
    ref = fixture("nvidia_smi_mig_lgi.txt").splitlines()
    assert lgi[:5] == ref[:5]
    assert {len(ln) for ln in lgi} == {len(ln) for ln in ref}
    assert [ln.split()[5] for ln in lgi if "MIG 3g" in ln] == ["1", "2"]

    lci = run(["nvidia-smi", "mig", "-lci"], env).stdout.splitlines()
    ref = fixture("nvidia_smi_mig_lci.txt").splitlines()
    assert lci[:6] == ref[:6]
    assert {len(ln) for ln in lci} == {len(ln) for ln in ref}

    listing = run(["nvidia-smi", "-L"], env).stdout.splitlines()
    migs = [MIG_LINE.match(ln) for ln in listing[1:]]
    assert [m.group(1) for m in migs] == ["3g.20gb", "3g.20gb"]
    assert len({m.group(3) for m in migs}) == 2

    full = run(["nvidia-smi", "mig", "-cgi", "19"], env)
    assert "Insufficient Resources" in full.stdout
    assert full.returncode != 0
    busy = run(["nvidia-smi", "mig", "-dgi"], env)
    assert "In use by another client" in busy.stdout

    dci = run(["nvidia-smi", "mig", "-dci"], env)
    dgi = run(["nvidia-smi", "mig", "-dgi"], env)
    ref = fixture("nvidia_smi_mig_destroy.txt").splitlines()
    assert dci.stdout.splitlines() == [ref[0], ref[0].replace("ID  1", "ID  2")]
    assert dgi.stdout.splitlines() == ref[3:]
    assert len(run(["nvidia-smi", "-L"], env).stdout.splitlines()) == 1

    logged = [json.loads(ln) for ln in (tmp_path / "smi.log").read_text().splitlines()]
    assert logged[1]["argv"] == ["mig", "-i", "0", "-cgi", "9,3g.20gb", "-C"]
    assert all(entry["prog"] == "nvidia-smi" for entry in logged)


# --------------------------------------------------------------------------- dcgmi


def test_dcgmi_dmon_matches_fixture_and_repeats_header(env):
    res = run(["dcgmi", "dmon", "-e", "1001,1002,1003,1004,1005", "-d", "10", "-c", "17"], env)
    assert res.returncode == 0
    assert res.stdout == fixture("dcgmi_dmon_prof.txt")
    assert res.stdout.count("#Entity") == 2


def test_dcgmi_dmon_mig_entities(env):
    res = run(["dcgmi", "dmon", "-e", "1001,1004", "-i", "i:21,i:22", "-d", "10", "-c", "2"], env)
    rows = res.stdout.splitlines()[2:]
    assert [r.split()[:2] for r in rows] == [["GPU-I", "21"], ["GPU-I", "22"]] * 2
    ref = fixture("dcgmi_dmon_prof_mig.txt").splitlines()
    assert ref[0].startswith("#Entity   GRACT")
    assert all(r.startswith("GPU-I ") for r in ref[2:])


def test_dcgmi_dmon_dcgm2_layout_matches_the_user_guides_capture(env):
    """FAKE_DCGMI_LAYOUT=2: DCGM 2.0-2.3's right-aligned columns, `# Entity` and `Id`."""
    env["FAKE_DCGMI_LAYOUT"] = "2"
    args = ["dcgmi", "dmon", "-e", "1001,1004", "-i", "0,i:0,i:1", "-d", "10", "-c", "10"]
    got = run(args, env).stdout.splitlines()
    ref = fixture("dcgmi_dmon_prof_dcgm2.txt").splitlines()
    assert [line.rstrip() for line in got[:2]] == ref[:2]

    def shape(line: str) -> str:
        return re.sub(r"\d", "9", line)

    # the fake's first sample is N/A (right-aligned like a number), then numbers
    assert got[2:5] == [
        "    GPU 0    N/A    N/A",
        "  GPU-I 0    N/A    N/A",
        "  GPU-I 1    N/A    N/A",
    ]
    assert [shape(line) for line in got[5:]] == [shape(line) for line in ref[5:]]


def test_dcgmi_dmon_dcgm2_layout_repeats_the_header_after_an_empty_line(env):
    env["FAKE_DCGMI_LAYOUT"] = "2"
    res = run(["dcgmi", "dmon", "-e", "155,156", "-d", "10", "-c", "17"], env)
    lines = res.stdout.splitlines()
    assert lines[0] == "# Entity       POWER             TOTEC"
    assert lines[1] == "      Id           W                mJ"
    first = lines.index("", 2)
    assert first == 2 + 15 and lines[first + 1 : first + 3] == lines[:2]
    assert re.fullmatch(r"    GPU 0 +\d+\.\d{3} +\d+", lines[2])


def test_dcgmi_dmon_streams_and_stops_on_sigint(env):
    proc = subprocess.Popen(
        ["dcgmi", "dmon", "-e", "155,1002", "-d", "100"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    first = _lines_until(proc, lambda lines: sum(ln.startswith("GPU 0") for ln in lines) >= 2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    lines = first + out.splitlines()
    assert lines[0].startswith("#Entity   POWER")
    assert len([ln for ln in lines if ln.startswith("GPU 0")]) >= 2
    assert lines[-1] == "dmon was stopped due to receiving a signal"


def test_dcgmi_profiling_busy(env):
    env["FAKE_DCGMI_PROF_BUSY"] = "1"
    res = run(["dcgmi", "dmon", "-e", "1002"], env)
    assert res.returncode == 223
    ref = fixture("dcgmi_dmon_error_watches.txt").splitlines()
    assert res.stdout.splitlines() == ref[:2]
    assert res.stderr.startswith(ref[2])
    ok = run(["dcgmi", "dmon", "-e", "155", "-c", "1"], env)
    assert ok.returncode == 0


def test_dcgmi_discovery_follows_nvidia_smi_state(env, tmp_path):
    env["FAKE_NVIDIA_SMI_MIG"] = "1"
    env["FAKE_NVIDIA_SMI_GPUS"] = "2"
    env["FAKE_NVIDIA_SMI_STATE"] = str(tmp_path / "smi.json")
    run(["nvidia-smi", "mig", "-cgi", "9,9", "-C"], env)
    res = run(["dcgmi", "discovery", "-c"], env)
    got = res.stdout.splitlines()
    ref = fixture("dcgmi_discovery_c.txt").splitlines()

    def masked(lines):
        return [re.sub(r"GPU-[0-9a-f-]+", "GPU-X", ln) for ln in lines]

    assert masked(got) == masked(ref)


@pytest.mark.slow
def test_other_gpu_models_generate_lgip_in_the_captured_layout(env):
    env["FAKE_NVIDIA_SMI_MIG"] = "1"
    ref = fixture("nvidia_smi_mig_lgip.txt").splitlines()
    for model, name, profiles, power in (
        ("h100-80gb", "NVIDIA H100 80GB HBM3", 7, ("700.00", "200.00", "700.00")),
        ("a100-80gb", "NVIDIA A100-SXM4-80GB", 6, ("400.00", "100.00", "400.00")),
    ):
        env["FAKE_NVIDIA_SMI_MODEL"] = model
        lgip = run(["nvidia-smi", "mig", "-lgip"], env).stdout.splitlines()
        assert lgip[:5] == ref[:5]
        assert {len(line) for line in lgip} == {len(ref[0])}
        rows = [line for line in lgip if " MIG " in line]
        assert len(rows) == profiles and rows[-1].split()[3] == "7g.80gb"
        assert run(["nvidia-smi", "-L"], env).stdout.startswith(f"GPU 0: {name} (UUID: ")
        limits = [
            line.split(": ")[1].split()[0]
            for line in run(["nvidia-smi", "-q", "-d", "POWER"], env).stdout.splitlines()
            if line.strip().startswith(("Default Power", "Min Power", "Max Power"))
        ][:3]
        assert tuple(limits) == power
    env["FAKE_NVIDIA_SMI_MODEL"] = "b200"
    res = run(["nvidia-smi", "-L"], env)
    assert res.returncode == 2 and "FAKE_NVIDIA_SMI_MODEL" in res.stderr


# --------------------------------------------------------------------------- MPS


@pytest.mark.slow
def test_mps_control(env, tmp_path):
    env["FAKE_MPS_LOG"] = str(tmp_path / "mps.log")
    res = run(["nvidia-cuda-mps-control"], env, stdin="get_server_list\n")
    assert res.returncode == 1
    assert res.stdout == fixture("nvidia_cuda_mps_control_no_daemon.txt")

    assert run(["nvidia-cuda-mps-control", "-d"], env).returncode == 0
    pipe = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
    assert (pipe / "nvidia-cuda-mps-control.pid").exists()
    assert run(["nvidia-cuda-mps-control"], env, stdin="get_server_list\n").stdout == ""
    run(["nvidia-cuda-mps-control"], env, stdin="start_server -uid 1000\n")
    res = run(["nvidia-cuda-mps-control"], env, stdin="get_server_list\n")
    assert res.stdout == fixture("nvidia_cuda_mps_control.txt")

    quit_ = run(["nvidia-cuda-mps-control"], env, stdin="quit\n")
    assert (quit_.returncode, quit_.stdout) == (0, "")
    assert not (pipe / "nvidia-cuda-mps-control.pid").exists()
    assert run(["nvidia-cuda-mps-control"], env, stdin="get_server_list\n").returncode == 1
    logged = [json.loads(ln) for ln in (tmp_path / "mps.log").read_text().splitlines()]
    assert logged[1]["argv"] == ["-d"]
    assert logged[-1]["stdin"] == ["get_server_list"]
