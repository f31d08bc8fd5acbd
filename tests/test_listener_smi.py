"""The ``smi`` listener: parsing nvidia-smi's CSV, the fake nvidia-smi, faults, and radT end to end.

The end-to-end tests run real radT processes with ``smi`` and ``dcgm`` on the
fakes of tests/fakes, and without them.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from conftest import FAKES, FIXTURES, Recorded, path_without_nvidia_tools, pid_alive, wait_for
from radt.listeners.smi import MIN_INTERVAL_MS, QUERY, SmiListener, parse_timestamp, pstate

CSV = (FIXTURES / "nvidia_smi_query_gpu.csv").read_text().splitlines()
ROWS = [[cell.strip() for cell in line.split(",")] for line in CSV]
"""The fixture's cells: timestamp, index, uuid, name, power.draw, utilization.gpu, ..."""
FIXTURE_COLUMNS = [
    "timestamp", "index", "uuid", "name", "power.draw", "utilization.gpu", "utilization.memory",
    "memory.used", "memory.total", "temperature.gpu", "clocks.sm", "clocks.mem", "pstate",
    "power.limit",
]  # fmt: skip
KEYS = dict(QUERY[2:])
UUID0 = "GPU-faae5314-b87e-87c0-400b-b7cfb9e7b310"
UUID1 = "GPU-20af7308-7522-d66f-fe01-fb6f0551a4b9"


def as_query_line(row: list[str]) -> str:
    """A fixture row in the column order the listener asks for (no uuid or name)."""
    cells = dict(zip(FIXTURE_COLUMNS, row, strict=True))
    return ", ".join(cells[field] for field, _ in QUERY)


def expected(row: list[str]) -> dict[str, float]:
    """The samples a fixture row must give: every number as printed, placeholders left out."""
    cells = dict(zip(FIXTURE_COLUMNS, row, strict=True))
    values = {}
    for field, quantity in KEYS.items():
        text = cells[field]
        if text.startswith("["):
            continue
        values[f"smi/gpu{cells['index']}/{quantity}"] = (
            float(text[1:]) if field == "pstate" else float(text)
        )
    return values


def scripted_smi(folder: Path, lines: list[str], exit_code: int | None) -> Path:
    """A stand-in nvidia-smi: ``-L`` lists one GPU; a query prints ``lines``, then exits
    with ``exit_code`` (or waits to be killed when None)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "if '-L' in sys.argv:\n"
        f"    print('GPU 0: NVIDIA A100-SXM4-40GB (UUID: {UUID0})')\n"
        "    sys.exit(0)\n"
        f"for line in {lines!r}:\n"
        "    print(line, flush=True)\n"
        "    time.sleep(0.02)\n"
        f"if {exit_code!r} is None:\n"
        "    time.sleep(600)\n"
        f"sys.exit({exit_code!r} or 0)\n"
    )
    script.chmod(0o755)
    return folder


# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("row", ROWS, ids=[f"row{i + 1}" for i in range(len(ROWS))])
def test_each_fixture_row_gives_exactly_its_printed_values(row):
    listener = SmiListener()
    samples = listener.parse(as_query_line(row))
    assert {s.key: s.value for s in samples} == expected(row)
    assert len(samples) == len(expected(row))


def test_values_and_units_of_the_first_row():
    values = {s.key: s.value for s in SmiListener().parse(as_query_line(ROWS[0]))}
    assert values == {
        "smi/gpu0/power_w": 52.12,
        "smi/gpu0/util_pct": 0.0,
        "smi/gpu0/mem_util_pct": 0.0,
        "smi/gpu0/mem_used_mib": 4.0,
        "smi/gpu0/mem_total_mib": 40960.0,
        "smi/gpu0/temp_c": 22.0,
        "smi/gpu0/sm_clock_mhz": 210.0,
        "smi/gpu0/mem_clock_mhz": 1215.0,
        "smi/gpu0/pstate": 0.0,
        "smi/gpu0/power_limit_w": 400.0,
    }


@pytest.mark.parametrize("placeholder", ["[N/A]", "[Not Supported]"])
def test_placeholders_are_missing_never_zero(placeholder):
    row = next(r for r in ROWS if r[5] == placeholder)  # utilization.gpu
    keys = {s.key for s in SmiListener().parse(as_query_line(row))}
    assert "smi/gpu0/util_pct" not in keys and "smi/gpu0/mem_util_pct" not in keys
    assert "smi/gpu0/power_w" in keys


def test_pstates_and_their_placeholders():
    assert pstate("P0") == 0.0
    assert pstate("P8") == 8.0
    assert pstate("[N/A]") is None
    assert pstate("[Not Supported]") is None
    for garbage in ("Pfast", "8", "X3"):
        with pytest.raises(ValueError):
            pstate(garbage)


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        'Field "energy" is not a valid field to query.',
        as_query_line(ROWS[0])[:40],  # truncated mid-line
        as_query_line(ROWS[0]).replace("52.12", "52.1x"),
        as_query_line(ROWS[0]).replace(", 0, ", ", zero, ", 1),  # bad index
        as_query_line(ROWS[0]) + ", 1",  # one column too many
    ],
)
def test_garbled_lines_raise_so_the_reader_skips_and_counts_them(line):
    with pytest.raises(ValueError):
        SmiListener().parse(line)


def test_an_empty_line_is_nothing():
    assert SmiListener().parse("") == []


def test_sample_time_is_nvidia_smis_timestamp_when_plausible():
    stamp = datetime(2024, 1, 4, 14, 41, 13, 103000).timestamp()
    listener = SmiListener()
    listener.clock = lambda: stamp + 0.4
    samples = listener.parse(as_query_line(ROWS[0]))
    assert {s.timestamp for s in samples} == {stamp}


def test_sample_time_falls_back_to_the_read_time():
    listener = SmiListener()
    listener.clock = lambda: 2_000_000_000.0  # years after the fixture's timestamp
    assert {s.timestamp for s in listener.parse(as_query_line(ROWS[0]))} == {2_000_000_000.0}
    assert parse_timestamp("14:41:13", 5.0) == 5.0
    assert parse_timestamp("2024/13/45 99:99:99.000", 5.0) == 5.0


# --------------------------------------------------------------------------- the fake tool


def test_available_with_the_fake(fakes_on_path):
    assert SmiListener().available() is None


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"FAKE_NVIDIA_SMI_FAIL": "nvml"}, (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        )),
        ({"FAKE_NVIDIA_SMI_GPUS": "0"}, "no NVIDIA GPU"),
    ],
)  # fmt: skip
def test_available_says_why_not(fakes_on_path, env, reason):
    for name, value in env.items():
        fakes_on_path.setenv(name, value)
    assert SmiListener().available() == reason


def test_available_without_the_tool(clean_env):
    clean_env.setenv("PATH", path_without_nvidia_tools())
    assert SmiListener().available() == "nvidia-smi not found"


def test_command_asks_for_the_runs_gpus_at_the_interval(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "4")
    listener = SmiListener()
    run = Recorded(tmp_path, interval_s=0.25, devices=["2", UUID1[:12]]).context
    listener.start(run)
    try:
        argv = listener.process.args
    finally:
        listener.stop()
    assert argv == [
        "nvidia-smi",
        "--query-gpu=timestamp,index,power.draw,utilization.gpu,utilization.memory,memory.used,"
        "memory.total,temperature.gpu,clocks.sm,clocks.mem,pstate,power.limit",
        "--format=csv,noheader,nounits",
        "-lms",
        "250",
        "-i",
        "2,1",
    ]


def test_interval_default_and_floor(tmp_path):
    listener = SmiListener()
    assert listener.interval(Recorded(tmp_path, interval_s=None).context) == 0.5
    floor = listener.interval(Recorded(tmp_path, interval_s=0.001).context)
    assert floor == MIN_INTERVAL_MS / 1000.0


def test_cuda_visible_devices_and_mig_uuids_map_to_their_gpu(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    fakes_on_path.setenv("CUDA_VISIBLE_DEVICES", UUID1)
    listener = SmiListener()
    listener.start(Recorded(tmp_path).context)
    listener.stop()
    assert listener.process.args[-2:] == ["-i", "1"]


def test_an_unknown_device_refuses_to_start(fakes_on_path, tmp_path):
    listener = SmiListener()
    with pytest.raises(ValueError, match="smi watches nothing"):
        listener.start(Recorded(tmp_path, devices=["7"]).context)
    assert listener.process is None
    listener.stop()  # safe without a process


def test_streams_the_fakes_values_and_reaps_it_on_stop(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    collected = Recorded(tmp_path, interval_s=0.05)
    listener = SmiListener()
    listener.start(collected.context)
    pid = listener.process.pid
    try:
        wait_for(lambda: len(collected.series("smi/gpu1/power_w")) >= 8, timeout=30)
    finally:
        listener.stop()
    assert listener.process.returncode is not None  # reaped: wait() collected its status
    assert not pid_alive(pid)
    assert collected.warnings == []
    assert listener.skipped == 0
    # the fake cycles through the fixture rows; GPU i starts at row i
    power = [float(row[4]) for row in ROWS]
    for gpu in (0, 1):
        series = collected.series(f"smi/gpu{gpu}/power_w")
        assert series == [power[(s + gpu) % len(power)] for s in range(len(series))]
    listener.stop()  # twice is fine


def test_garbage_and_truncated_lines_are_skipped_and_counted(clean_env, tmp_path):
    good = [as_query_line(ROWS[0]), as_query_line(ROWS[2])]
    lines = [good[0], "garbage", good[1][:30], good[1]]
    clean_env.setenv("PATH", f"{scripted_smi(tmp_path / 'bin', lines, None)}{os.pathsep}"
                     f"{os.environ['PATH']}")  # fmt: skip
    collected = Recorded(tmp_path)
    listener = SmiListener()
    listener.start(collected.context)
    try:
        wait_for(lambda: listener.lines == 4)
        wait_for(lambda: len(collected.series("smi/gpu0/power_w")) == 2)
    finally:
        listener.stop()
    assert collected.series("smi/gpu0/power_w") == [52.12, 87.12]
    assert listener.skipped == 2
    assert len(collected.warnings) == 2
    assert "garbage" in collected.warnings[0]
    assert "skipped 2 of 4 output lines" in collected.warnings[1]


def test_a_tool_dying_mid_run_gives_exactly_one_warning(clean_env, tmp_path):
    lines = [as_query_line(ROWS[0]), as_query_line(ROWS[1])]
    folder = scripted_smi(tmp_path / "bin", lines, exit_code=1)
    clean_env.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    collected = Recorded(tmp_path)
    listener = SmiListener()
    listener.start(collected.context)
    wait_for(lambda: collected.warnings)
    listener.stop()
    assert collected.series("smi/gpu0/power_w") == [52.12, 53.16]
    assert len(collected.warnings) == 1
    assert "smi" in collected.warnings[0] and "exited with code 1" in collected.warnings[0]
    assert listener.process.returncode == 1


# --------------------------------------------------------------------------- through radT

TRAIN = """
import json, os, time

def called(log, wanted):
    try:
        with open(os.environ[log]) as f:
            return any(wanted(json.loads(line)["argv"]) for line in f)
    except OSError:
        return False

# On a loaded machine the fakes (Python scripts) take a while to start: wait until
# both streams run, so that the 2 s below are 2 s of samples, then "train".
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not (
    called("FAKE_NVIDIA_SMI_LOG", lambda a: any(x.startswith("--query-gpu") for x in a))
    and called("FAKE_DCGMI_LOG", lambda a: a[:1] == ["dmon"] and "-c" not in a)
):
    time.sleep(0.05)
time.sleep(2)
"""


def windows_mean(table: pd.DataFrame, key: str) -> dict[int, float]:
    """Mean of the samples of ``key`` per 1-second window, by the window's last sample (ms)."""
    rows = table[table.key == key]
    buckets = rows.groupby(rows.micros // 1_000_000)
    return {int(g.micros.max() // 1000): g.value.mean() for _, g in buckets}


@pytest.mark.slow
def test_through_radt_with_the_fakes_series_in_mlflow_and_the_samples(workspace, tmp_path):
    env = {k: v for k, v in workspace.env.items() if not k.startswith("FAKE_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PATH"] = f"{FAKES}{os.pathsep}{env['PATH']}"
    env["FAKE_NVIDIA_SMI_LOG"] = str(tmp_path / "nvidia-smi.jsonl")
    env["FAKE_DCGMI_LOG"] = str(tmp_path / "dcgmi.jsonl")
    workspace.script("train.py", TRAIN)
    args = ["-l", "smi+dcgm+top", "--interval", "0.1", "--", sys.executable, "train.py"]
    done = workspace.run(args, env=env)
    assert done.returncode == 0, done.stderr
    assert "listener" not in done.stderr, done.stderr  # no listener warned
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.dcgm.fields"] == (
        "1001,1002,1003,1004,1005,1006,1007,1008,1009,1010,1011,1012,155,156"
    )
    for key in ("system/smi/gpu0/power_w", "system/dcgm/gpu0/smact_ratio"):
        assert key in run.data.metrics

    client = workspace.client()
    local = client.download_artifacts(run.info.run_id, "radt/samples.parquet", str(tmp_path))
    table = pd.read_parquet(local).sort_values("timestamp", kind="stable")
    table["micros"] = (table.timestamp - pd.Timestamp(0, tz="UTC")) // pd.Timedelta("1us")

    # smi: the fake prints the fixture rows in turn, starting with the first
    power = table[table.key == "smi/gpu0/power_w"]
    printed = [float(row[4]) for row in ROWS]
    assert len(power) >= 5  # about 20 in 2 s at 0.1 s, fewer on a loaded machine
    assert power.value.tolist() == [printed[i % len(printed)] for i in range(len(power))]
    assert set(power.listener) == {"smi"}

    # dcgm: the first row is N/A (missing), then the fixture's SMACT values in turn
    smact_printed = [
        float(line.split()[3])
        for line in (FIXTURES / "dcgmi_dmon_prof.txt").read_text().splitlines()
        if line.startswith("GPU 0") and "N/A" not in line
    ]
    smact = table[table.key == "dcgm/gpu0/smact_ratio"]
    assert len(smact) >= 2
    assert smact.value.tolist() == [
        smact_printed[i % len(smact_printed)] for i in range(len(smact))
    ]
    assert set(smact.listener) == {"dcgm"}
    energy = table[table.key == "dcgm/gpu0/energy_j"].value.tolist()
    assert energy == pytest.approx([8.712 * i for i in range(len(energy))])

    # MLflow's points are the 1-second means of exactly those samples
    for key in ("smi/gpu0/power_w", "dcgm/gpu0/smact_ratio"):
        points = client.get_metric_history(run.info.run_id, f"system/{key}")
        means = windows_mean(table, key)
        assert points and len(points) == len(means)
        assert {p.timestamp: pytest.approx(p.value) for p in points} == means


@pytest.mark.slow
def test_without_the_tools_radt_runs_and_lists_them_unavailable(workspace):
    env = {k: v for k, v in workspace.env.items() if not k.startswith("FAKE_")}
    env["PATH"] = path_without_nvidia_tools()
    listed = workspace.run(["listeners"], env=env)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert lines["smi"].split()[1] == "no" and "nvidia-smi not found" in lines["smi"]
    assert lines["dcgm"].split()[1] == "no" and "dcgmi not found" in lines["dcgm"]

    done = workspace.run(["--", sys.executable, "-c", "print('trained')"], env=env)
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert not any(key.startswith(("system/smi/", "system/dcgm/")) for key in run.data.metrics)

    refused = workspace.run(["-l", "smi+top", "--", sys.executable, "-c", "pass"], env=env)
    assert refused.returncode != 0
    assert "smi (nvidia-smi not found)" in refused.stderr
