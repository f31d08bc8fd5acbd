"""Phases (radt.phase): the arithmetic on hand-computed timelines, the phase records on the
run-API channel, their storage beside the spool, and radT end to end with a constant-power
stand-in for the GPU, on a real SQLite store."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import uuid

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from radt.analysis.figures import counter_energy, integrate_power
from radt.analysis.phases import INTERVAL_COLUMNS, UNMARKED, Cumulative, phase_table, union
from radt.analysis.windows import counter_energy_between
from radt.record.phases import SCHEMA, STREAM, PhaseWriter, compact_phases
from radt.tags import RADT_PHASE_ROWS

# ------------------------------------------------------------------ arithmetic

# An energy counter read every second: 100, 300, 100, 200 W in the four seconds.
COUNTER_S = np.array([100.0, 101.0, 102.0, 103.0, 104.0])
COUNTER_J = np.array([5000.0, 5100.0, 5400.0, 5500.0, 5700.0])
STEPS = pd.DataFrame(
    {
        "process": [7, 7, 7, 7],
        "phase": ["data", "forward", "data", "forward"],
        "start": [100.25, 100.75, 101.5, 103.0],
        "end": [100.75, 101.5, 102.5, 104.0],
    }
)


def row(table: pd.DataFrame, phase: str) -> pd.Series:
    found = table[table["phase"] == phase]
    assert len(found) == 1, table
    return found.iloc[0]


def test_phases_shorter_than_the_sampling_interval_get_the_fraction_they_cover():
    table = phase_table(STEPS, {("nvml", "gpu0", "energy_j"): (COUNTER_S, COUNTER_J)})
    assert list(table["phase"]) == ["forward", "data", UNMARKED]
    data, forward, unmarked = (row(table, p) for p in ("data", "forward", UNMARKED))
    # By hand: data = 0.5 s x 100 W + (0.5 s x 300 W + 0.5 s x 100 W) = 50 + 200 J;
    # forward = (0.25 s x 100 W + 0.5 s x 300 W) + 1 s x 200 W = 175 + 200 J;
    # the span 100.25..104 holds 675 J; outside the phases: 102.5..103 at 100 W = 50 J.
    assert (data["count"], data["time_s"], data["energy_j"]) == (2, 1.5, pytest.approx(250.0))
    assert (forward["count"], forward["time_s"]) == (2, 1.75)
    assert forward["energy_j"] == pytest.approx(375.0)
    assert unmarked["time_s"] == pytest.approx(0.5) and unmarked["energy_j"] == pytest.approx(50)
    assert data["time_share"] == pytest.approx(1.5 / 3.75)
    assert forward["time_share"] == pytest.approx(1.75 / 3.75)
    assert data["energy_share"] == pytest.approx(250 / 675)
    assert forward["energy_share"] == pytest.approx(375 / 675)
    assert unmarked["energy_share"] == pytest.approx(50 / 675)
    assert data["power_mean_w"] == pytest.approx(250 / 1.5)
    assert data["mean_ms"] == pytest.approx(750.0)
    assert data["below_interval_share"] == 0.5  # 0.5 s of its 0.5 s and 1 s is under 1 s
    assert forward["below_interval_share"] == 0.5
    assert set(table["energy_method"]) == {"counter"} and set(table["energy_scope"]) == {"run"}
    assert set(table["sampling_interval_s"]) == {1.0}
    assert table["note"].isna().all()
    assert table["energy_coverage"].iloc[:2].tolist() == [1.0, 1.0]


def test_without_a_counter_power_trapezoids_are_spread_alike_and_gaps_give_nothing():
    seconds = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 11.0])
    watts = np.array([100.0, 100.0, 200.0, 200.0, 300.0, 300.0])
    spans = pd.DataFrame({"process": [1], "phase": ["long"], "start": [2.5], "end": [10.5]})
    table = phase_table(spans, {("smi", "gpu0", "power_w"): (seconds, watts)})
    long = row(table, "long")
    # Trapezoids: 100, 150, 200 J in the first three seconds, a 7 s gap (> 5 medians), 300 J.
    # 2.5..3: half of 200 J; 10..10.5: half of 300 J. Covered: 0.5 s + 0.5 s of its 8 s.
    assert long["energy_j"] == pytest.approx(250.0)
    assert long["energy_coverage"] == pytest.approx(1 / 8)
    assert long["power_mean_w"] == pytest.approx(250.0)
    assert long["energy_method"] == "integrated_power"
    assert "outside the energy samples" in long["note"]


def test_whole_coverage_gives_the_same_energy_as_the_run_figures():
    rng = np.random.default_rng(3)
    seconds = np.cumsum(rng.uniform(0.05, 0.15, 200))
    watts = rng.uniform(80, 400, 200)
    counter = np.cumsum(watts * 0.1)
    counter[120:] -= counter[119] + 5  # a reset: the counter starts again near 0
    whole = (seconds[0], seconds[-1])
    joules, covered = Cumulative.from_counter(seconds, counter).between(*map(np.array, whole))
    assert joules == pytest.approx(counter_energy(counter))
    assert covered == pytest.approx(seconds[-1] - seconds[0])
    joules, _ = Cumulative.from_power(seconds, watts).between(*map(np.array, whole))
    assert joules == pytest.approx(integrate_power(seconds, watts))
    # inside the samples, the counter as the windows read it (interpolated at the bounds)
    cut = Cumulative.from_counter(seconds, counter)
    for lo, hi in rng.uniform(seconds[0], seconds[-1], (20, 2)):
        lo, hi = min(lo, hi), max(lo, hi)
        got, _ = cut.between(np.array([lo]), np.array([hi]))
        assert got[0] == pytest.approx(counter_energy_between(seconds, counter, lo, hi))


def test_processes_nested_phases_and_the_unmarked_rest():
    intervals = pd.DataFrame(
        {
            "process": [1, 1, 1, 2],
            "phase": ["step", "forward", "step", "step"],
            "start": [0.0, 0.5, 3.0, 1.0],
            "end": [2.0, 1.5, 4.0, 2.0],
        }
    )
    seconds = np.linspace(-1, 5, 61)
    table = phase_table(intervals, {("nvml", "gpu0", "energy_j"): (seconds, 10.0 * seconds)})
    step, forward, unmarked = (row(table, p) for p in ("step", "forward", UNMARKED))
    # Spans: process 1 from 0 to 4, process 2 from 1 to 2: 5 s. Outside any phase: 2..3.
    assert step["time_s"] == 4.0 and step["time_share"] == pytest.approx(4 / 5)
    assert forward["time_share"] == pytest.approx(1 / 5)  # nested: counted in step too
    assert unmarked["time_s"] == pytest.approx(1.0)
    assert step["energy_j"] == pytest.approx(40.0) and unmarked["energy_j"] == pytest.approx(10)
    assert step["energy_share"] == pytest.approx(step["time_share"])
    s, e = union(np.array([1, 1, 1, 2]), np.array([0.0, 0.5, 3.0, 1.0]), np.array([2.0, 1.5, 4, 2]))
    assert s.tolist() == [0.0, 3.0, 1.0] and e.tolist() == [2.0, 4.0, 2.0]


def test_without_energy_samples_times_stay_and_energy_is_missing_with_the_reason():
    table = phase_table(STEPS, {})
    data = row(table, "data")
    assert data["time_share"] == pytest.approx(0.4)
    assert math.isnan(data["energy_j"]) and math.isnan(data["energy_share"])
    assert set(table["energy_method"]) == {"none"}
    assert table["note"].iloc[0] == "no GPU energy or power samples: energy missing"
    outside = phase_table(STEPS, {("nvml", "gpu0", "energy_j"): (COUNTER_S + 50, COUNTER_J)})
    assert outside["energy_j"].iloc[:2].isna().all()  # none of it covered: missing, not 0
    assert "outside the energy samples" in outside["note"].iloc[0]


def test_rapl_packages_and_dram_give_the_cpu_share():
    from radt.analysis.phases import cpu_energy

    stamps = pd.to_datetime(np.repeat(COUNTER_S, 3), unit="s", utc=True)
    frame = pd.DataFrame(
        {
            "timestamp": stamps,
            "key": ["rapl/package0/energy_j", "rapl/dram0/energy_j", "rapl/core0/energy_j"] * 5,
            "value": np.column_stack([COUNTER_J, COUNTER_J / 10, COUNTER_J]).ravel(),
        }
    )
    table = phase_table(STEPS, {}, cpu_energy(frame))
    assert row(table, "data")["cpu_energy_j"] == pytest.approx(250 * 1.1)  # core is in package
    assert row(table, "data")["cpu_energy_share"] == pytest.approx(250 / 675)


# ------------------------------------------------------------------ storage beside the spool


def test_writer_batches_to_the_stream_and_compaction_keeps_whole_batches(tmp_path):
    warnings: list[str] = []
    writer = PhaseWriter(tmp_path, warnings.append)
    for i in range(5):
        writer.add(11, "data", 100.0 + i, 100.5 + i)
    writer.flush()
    writer.add(12, "fwd ü", 200.0, 200.25)
    writer.close()
    writer.close()
    rows, problem = compact_phases(tmp_path, "r1", tmp_path / "out" / "phases.parquet")
    assert (rows, problem, warnings) == (6, None, [])
    table = pq.read_table(tmp_path / "out" / "phases.parquet")
    assert table.schema == SCHEMA
    frame = table.to_pandas()
    assert list(frame["phase"].astype(str)) == ["data"] * 5 + ["fwd ü"]
    assert set(frame["run"].astype(str)) == {"r1"} and list(frame["process"])[-1] == 12
    assert frame["start"].iloc[-1] == pd.Timestamp(200.0, unit="s", tz="UTC")
    # radT killed in the middle of a batch: the stream is read up to its last whole batch
    stream = tmp_path / "phases" / STREAM
    whole = stream.read_bytes()
    stream.write_bytes(whole[:-40])
    rows, problem = compact_phases(tmp_path, "r1", tmp_path / "cut.parquet")
    assert rows == 5 and problem
    assert compact_phases(tmp_path / "none", "r1", tmp_path / "x.parquet") == (0, None)
    assert not (tmp_path / "x.parquet").exists()


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from radt.record.phases import PhaseWriter, compact_phases
folder = Path(sys.argv[1])
warnings = []
writer = PhaseWriter(folder, warnings.append)
writer.add(1, "early", 1.0, 2.0)
writer.flush()
_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
for i in range(20_000):
    writer.add(1, "late", 3.0 + i, 3.5 + i)
writer.close()
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
print(len(warnings), warnings[0] if warnings else "")
print(compact_phases(folder, "r", folder / "out.parquet"))
"""


def test_a_full_disk_keeps_what_was_written_and_warns_once(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    count, rest = done.stdout.splitlines()[0].split(" ", 1)
    assert count == "1" and rest.startswith("cannot keep phase intervals (")
    assert done.stdout.splitlines()[1] == "(1, None)"


# ------------------------------------------------------------------ the channel


def test_receiver_gives_phase_records_to_the_writer_and_counts_bad_ones(tmp_path):
    from radt.record.events import EventReceiver

    got, warnings = [], []
    writer = PhaseWriter(tmp_path, warnings.append)
    receiver = EventReceiver(f"test-{uuid.uuid4().hex}", got.extend, warnings.append, writer)
    address = "\0" + receiver.variable[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as script:
        script.sendto(
            b"radt1 10 100.5 phase 100.75 data%20loading\n"
            b"radt1 10 100.75 phase 101.0 forward\n"
            b"radt1 10 100.5 examples 64\n"
            b"radt1 10 101.0 phase 100.0 backward\n"  # ends before it starts
            b"radt1 10 101.0 phase 102.0\n"  # no name
            b"radt1 10 101.0 phase 102.0 %ff\n"  # not UTF-8
            b"radt1 10 101.0 phase nan x\n"
            b"radt1 11 103.0 phases_lost 7\n",
            address,
        )
    receiver.close()
    assert got == [(100.5, "script/run/examples", 64.0)]
    assert receiver.malformed == 4
    assert warnings[0] == (
        "7 phase intervals not recorded: the script made them faster than radT could take them"
    )
    compact_phases(tmp_path, "r", tmp_path / "p.parquet")
    frame = pd.read_parquet(tmp_path / "p.parquet")
    assert list(frame["phase"].astype(str)) == ["data loading", "forward"]


def test_a_datagram_of_phase_records_is_read_at_once_and_a_bad_one_line_by_line(tmp_path):
    from radt.record.events import EventReceiver

    warnings: list[str] = []
    writer = PhaseWriter(tmp_path, warnings.append)
    receiver = EventReceiver(f"test-{uuid.uuid4().hex}", list, warnings.append, writer)
    address = "\0" + receiver.variable[1:]
    good = "".join(
        f"radt1 {20 + i % 2} {1000 + i * 0.5!r} phase {1000.25 + i * 0.5!r} "
        f"{'fwd%2Fbwd' if i % 3 else 'data'}\n"
        for i in range(600)
    )
    bad = good.replace("radt1 20 1000.0 phase 1000.25 data", "radt1 20 1000.0 phase 999.0 data")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as script:
        script.sendto(good.encode(), address)
        script.sendto(bad.encode(), address)
    receiver.close()
    assert receiver.records == 1199 and receiver.malformed == 1
    compact_phases(tmp_path, "r", tmp_path / "p.parquet")
    frame = pd.read_parquet(tmp_path / "p.parquet")
    assert len(frame) == 1199
    first = frame.iloc[:600]
    assert list(first["process"]) == [20 + i % 2 for i in range(600)]
    assert list(first["phase"].astype(str)) == ["fwd/bwd" if i % 3 else "data" for i in range(600)]
    expected = pd.to_datetime([round((1000 + i * 0.5) * 1e6) for i in range(600)], unit="us")
    assert (first["start"].dt.tz_localize(None).to_numpy() == expected.to_numpy()).all()
    assert frame.iloc[600]["phase"] == "fwd/bwd"  # the bad record (the first) left out


def test_the_script_sends_every_interval_in_batches_with_its_own_times(tmp_path):
    """3,000 intervals in a tight loop reach the socket as a few datagrams: the first at
    once, then at most one batch a second, the rest at exit; a fork sends only its own."""
    script = tmp_path / "send.py"
    script.write_text(SENDER_SIMPLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    lines = "".join(seen["datagrams"]).splitlines()
    fields = [line.split(" ") for line in lines]
    assert all(len(f) == 6 and f[0] == "radt1" and f[3] == "phase" for f in fields)
    parent = [f for f in fields if f[1] == str(seen["pid"])]
    child = [f for f in fields if f[1] != str(seen["pid"])]
    names = [f[5] for f in parent]
    assert names.count("step") == 1500 and names.count("data%20loading%2F%C3%BC") == 1500
    assert names.count("decorated") == 1
    assert [f[5] for f in child] == ["in%20child"]
    starts = [float(f[2]) for f in parent]
    ends = [float(f[4]) for f in parent]
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    # the first interval went at once; the rest in batches, not one datagram each
    assert seen["datagrams"][0].count("\n") == 1
    assert len(seen["datagrams"]) < 100


SENDER_SIMPLE = """
import json, os, socket, radt
name = f"radt-phases-{os.getpid()}"
radt_side = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
radt_side.bind("\\0" + name)
radt_side.setblocking(False)
os.environ["RADT_EVENTS"] = "@" + name
datagrams = []
def drain():
    while True:
        try:
            datagrams.append(radt_side.recv(1 << 20).decode())
        except BlockingIOError:
            return
for i in range(3000):
    with radt.phase("data loading/ü" if i % 2 else "step"):
        pass
    drain()

@radt.phase("decorated")
def work(x):
    return x + 1

assert work(1) == 2 and work.__name__ == "work"
child = os.fork()
if child == 0:
    with radt.phase("in child"):
        pass
    raise SystemExit(0)  # the fork's own exit hook sends its interval
os.waitpid(child, 0)
drain()
while radt.run_api._channel.phase_lines or radt.run_api._channel.phases:
    radt.run_api.flush()  # radT's queue holds ten datagrams: drain as radT would
    drain()
print(json.dumps({"pid": os.getpid(), "datagrams": datagrams}))
"""


# ------------------------------------------------------------------ radT end to end

# The script reads its own clock through a wrapper, so it knows the exact time.time() value each
# phase boundary used (radt.phase reads the clock once on entry and once on exit).
TIMED = """
import json, time
real = time.time
reads = []
def clock():
    t = real()
    reads.append(t)
    return t
time.time = clock
import radt
time.sleep(0.5)  # the device listener is sampling before the first phase
mine = []
def timed(name, seconds):
    first = len(reads)
    with radt.phase(name):
        time.sleep(seconds)
    mine.append([name, reads[first], reads[-1]])
for i in range(6):
    timed("data", 0.02)
    timed("forward", 0.06)
    time.sleep(0.01)  # between phases: unmarked
    radt.log_examples(8)
with open("mine.json", "w") as f:
    json.dump(mine, f)
time.sleep(0.3)
"""


@pytest.mark.slow
def test_recorded_phases_carry_the_scripts_times_and_constant_power_gives_energy_by_time(
    workspace,
):
    from radt.analysis.phases import intervals, phases

    workspace.script("timed.py", TIMED)
    env = {**workspace.env, "RADT_TEST_POWER_W": "250"}
    done = workspace.run(["-l", "constpower", "timed.py"], env=env)
    assert done.returncode == 0, done.stderr
    mine = json.loads((workspace.root / "mine.json").read_text())
    run = workspace.only_run()
    artifacts = {a.path for a in workspace.client().list_artifacts(run.info.run_id, "radt")}
    assert "radt/phases.parquet" in artifacts
    assert run.data.tags[RADT_PHASE_ROWS] == "12"  # 6 data and 6 forward intervals
    found = intervals(runs=[run.info.run_id], tracking_uri=workspace.uri, cache_dir=workspace.home)
    assert list(found["phase"]) == [name for name, _, _ in mine]
    to_us = [round(t * 1e6) for _, start, end in mine for t in (start, end)]
    bounds = zip(found["start"], found["end"], strict=True)
    got_us = [t.value // 1000 for pair in bounds for t in pair]
    assert got_us == to_us  # exactly the script's own clock readings, to the µs
    assert set(found["process"]) == {found["process"].iloc[0]}
    assert set(found["run_name"]) == {run.info.run_name}

    table = phases(runs=[run.info.run_id], tracking_uri=workspace.uri, cache_dir=workspace.home)
    assert list(table["phase"]) == ["forward", "data", UNMARKED]
    span = mine[-1][2] - mine[0][1]
    interval = table["sampling_interval_s"].iloc[0]
    assert 0.02 <= interval <= 0.5  # constpower polls every 0.05 s (more under load)
    for name in ("data", "forward"):
        own = [end - start for n, start, end in mine if n == name]
        got = row(table, name)
        assert got["count"] == 6
        assert got["time_s"] == pytest.approx(sum(own), abs=12e-6)
        assert got["time_share"] == pytest.approx(sum(own) / span, abs=1e-4)
        # A constant 250 W: energy is 250 W x time and its share the time share (the
        # attribution's error bound, docs/analysis.md, is zero under a constant draw), up to
        # the samples' µs timestamps: 250 W x 1 µs at each of the 12 bounds.
        assert got["energy_coverage"] == pytest.approx(1.0)
        assert got["energy_j"] == pytest.approx(250 * got["time_s"], abs=250 * 12e-6)
        assert got["power_mean_w"] == pytest.approx(250.0, rel=1e-4)
        assert got["energy_share"] == pytest.approx(got["time_share"], abs=1e-4)
    total = table["time_share"].sum()
    assert total == pytest.approx(1.0, abs=1e-6)  # phases do not nest here
    assert table["energy_share"].sum() == pytest.approx(1.0, abs=1e-6)
    assert set(table["energy_method"]) == {"counter"}

    # the same tables through radt.summary and `radt export`
    from radt.analysis.summary import summary

    by = summary(runs=[run.info.run_id], tracking_uri=workspace.uri, by="phases")
    pd.testing.assert_frame_equal(by, table)
    done = workspace.run(["export", "--runs", run.info.run_id, "--phases", "-o", "iv.csv"])
    assert done.returncode == 0, done.stderr
    assert "wrote 12 phase intervals of 1 run to iv.csv" in done.stderr
    written = pd.read_csv(workspace.root / "iv.csv")
    assert list(written.columns) == list(INTERVAL_COLUMNS)
    assert list(written["phase"]) == list(found["phase"])
    assert written["duration_s"].tolist() == pytest.approx(found["duration_s"].tolist())
    done = workspace.run(
        ["export", "--runs", run.info.run_id, "--phase-summary", "-o", "table.parquet"]
    )
    assert done.returncode == 0, done.stderr
    written = pd.read_parquet(workspace.root / "table.parquet")
    assert list(written["phase"]) == list(table["phase"])
    assert written["energy_share"].tolist() == pytest.approx(table["energy_share"].tolist())
    done = workspace.run(
        ["export", "--runs", run.info.run_id, "--phases", "--keys", "x", "-o", "-"]
    )
    assert done.returncode != 0 and "--phases takes no --keys" in done.stderr

    # a run that marked no phase says so in its tag, and the analysis asks the store nothing
    workspace.script("plain.py", "pass\n")
    done = workspace.run(["-l", "none", "plain.py"])
    assert done.returncode == 0, done.stderr
    (plain,) = [
        r
        for r in workspace.client().search_runs([run.info.experiment_id])
        if r.info.run_id != run.info.run_id
    ]
    assert plain.data.tags[RADT_PHASE_ROWS] == "0"
    assert phases(
        runs=[plain.info.run_id], tracking_uri=workspace.uri, cache_dir=workspace.home
    ).empty
    assert not (workspace.home / plain.info.run_id / "phases.absent").exists()


# ------------------------------------------------------------------ the time-series bands


def test_bands_merge_below_a_pixel_and_stay_within_the_limit():
    from radt.frontend.phases import PIXELS, phase_bands
    from radt.frontend.series import RunLabel

    n = 200_000
    origin = 1_700_000_000.0
    starts = origin + np.arange(n) * 0.01  # 4 phases of 10 ms, one after another, 2,000 s
    frame = pd.DataFrame(
        {
            "run_id": "r1",
            "phase": np.array(["data", "forward", "backward", "step"])[np.arange(n) % 4],
            "start": pd.to_datetime(starts, unit="s", utc=True),
            "end": pd.to_datetime(starts + 0.01, unit="s", utc=True),
        }
    )
    runs = {"r1": RunLabel("r1", "run-a", int(origin * 1e6))}
    whole = phase_bands(frame, runs)
    # a pixel is 2,000 s / 1,500: each lane's 40 ms gaps merge; every lane is 1/4 of the time
    assert whole.intervals == n and whole.drawn == 4 and whole.left_out == 0
    assert whole.merge_s == pytest.approx(2000.0 / PIXELS, rel=1e-6)
    assert whole.lanes == [f"run-a · {p} 25%" for p in ("data", "forward", "backward", "step")]
    zoomed = phase_bands(frame, runs, lo=100.005, hi=100.405)  # each interval its own band
    assert zoomed.intervals == 41 and zoomed.drawn == 41
    limited = phase_bands(frame, runs, lo=100.005, hi=101.005, budget=8)  # 101 apart, 8 drawn
    assert (limited.intervals, limited.drawn, limited.left_out) == (101, 8, 93)
    trace = zoomed.traces[1]  # forward, 100.01 to 100.38: rectangles of 5 corners and a gap
    gaps = sum(v is None for v in trace.x)
    assert trace.fill == "toself" and gaps == 10 and len(trace.x) == 6 * gaps
    x = [v for v in trace.x if v is not None]
    assert min(x) == pytest.approx(100.01, abs=2e-6) and max(x) == pytest.approx(100.38, abs=2e-6)
    wall = phase_bands(
        frame, runs, relative=False, lo=(origin + 100.005) * 1e6, hi=(origin + 100.405) * 1e6
    )
    assert wall.drawn == 41
    assert pd.Timestamp(wall.traces[0].x[0]) == pd.Timestamp(origin + 100, unit="s")


def test_bands_of_runs_not_shown_or_without_phases_are_nothing():
    from radt.frontend.phases import phase_bands

    assert phase_bands(None, {}).traces == []
    empty = pd.DataFrame(columns=["run_id", "phase", "start", "end"])
    assert phase_bands(empty, {"r": object()}).drawn == 0


def test_the_time_series_figure_gets_a_phase_panel_at_the_bottom():
    from radt.frontend.pages.timeseries import _phases_note
    from radt.frontend.series import RunLabel, timeseries_figure

    origin = 1_700_000_000.0
    frame = pd.DataFrame(
        {
            "run_id": "r1",
            "key": "nvml/gpu0/power_w",
            "timestamp": pd.to_datetime(origin + np.arange(100) * 0.1, unit="s", utc=True),
            "value": 100.0,
        }
    )
    starts = origin + np.arange(40) * 0.2
    intervals = pd.DataFrame(
        {
            "run_id": "r1",
            "phase": np.array(["data", "forward"])[np.arange(40) % 2],
            "start": pd.to_datetime(starts, unit="s", utc=True),
            "end": pd.to_datetime(starts + 0.15, unit="s", utc=True),
        }
    )
    runs = {"r1": RunLabel("r1", "run-a", int(origin * 1e6))}
    plain, _ = timeseries_figure(frame, runs, ["nvml/gpu0/power_w"])
    fig, stats = timeseries_figure(frame, runs, ["nvml/gpu0/power_w"], phases=intervals)
    assert len(fig.data) == len(plain.data) + 2
    assert list(fig.layout.yaxis2.ticktext) == ["run-a · data 38%", "run-a · forward 38%"]
    assert fig.layout.xaxis2.title.text == "seconds since the run started"
    assert fig.layout.height > plain.layout.height
    assert (stats.phase_intervals, stats.phase_bands, stats.phase_left_out) == (40, 40, 0)
    assert _phases_note(stats, True) == ". Phases: 40 intervals in view as 40 bands"
    stats.phase_bands, stats.phase_left_out, stats.phase_merge_s = 30, 4, 0.002
    assert _phases_note(stats, True) == (
        ". Phases: 40 intervals in view as 30 bands (those closer than 2 ms merged; "
        "4 short bands not drawn; zoom in for single intervals)"
    )
