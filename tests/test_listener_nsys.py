"""The ``nsys`` listener: its parsing on the real fixture, its faults, and radT end to end.

The fake ``nsys`` in tests/fakes stands in for Nsight Systems (see its
docstring and tests/fixtures/SOURCES.md for what it prints and where from).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAKES, FIXTURES, Recorded
from radt.listeners.nsys import NsysListener, parse_kernel_summary

from radt.launch.registry import discover

FIXTURE = FIXTURES / "nsys_stats_cuda_gpu_kern_sum.csv"
# Sums over the 36 rows of the fixture (checked independently below with the csv module).
TOTAL_NS = 21_895_142
LAUNCHES = 652
UNIQUE = 36
PREAMBLE = (
    "Generating SQLite file /tmp/r/report.sqlite from /tmp/r/report.nsys-rep\n"
    "Processing [/tmp/r/report.sqlite] with "
    "[/opt/nvidia/nsight-systems/2025.3.2/host-linux-x64/reports/cuda_gpu_kern_sum.py]...\n"
)

SCRIPT = """
import sys, time
print("workload says hello", flush=True)
time.sleep(0.2)
sys.exit(0)
"""


def profiled(
    tmp_path: Path, options: dict[str, str] | None = None
) -> tuple[NsysListener, Recorded]:
    """Wrap a tiny command, run it under the fake nsys as the launcher would, and start."""
    run = Recorded(tmp_path, options)
    listener = NsysListener()
    argv = listener.wrap([sys.executable, "-c", "print('inside')"], run.context)
    listener.start(run.context)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "inside" in done.stdout
    return listener, run


# ------------------------------------------------------------------ parsing


def test_fixture_totals_are_exact():
    rows = list(csv.DictReader(io.StringIO(FIXTURE.read_text())))
    assert sum(int(r["Total Time (ns)"]) for r in rows) == TOTAL_NS
    assert sum(int(r["Instances"]) for r in rows) == LAUNCHES
    assert len({r["Name"] for r in rows}) == UNIQUE

    summary = parse_kernel_summary(FIXTURE.read_text())
    assert summary is not None
    assert summary.total_ns == TOTAL_NS
    assert summary.launches == LAUNCHES
    assert summary.unique == UNIQUE
    assert summary.skipped == 0
    top = summary.top()
    assert len(top) == 20
    assert top[0]["Name"].startswith("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm")
    assert [int(r["Total Time (ns)"]) for r in top] == sorted(
        (int(r["Total Time (ns)"]) for r in rows), reverse=True
    )[:20]


def test_lines_before_the_table_are_passed_over():
    summary = parse_kernel_summary(PREAMBLE + "\n" + FIXTURE.read_text())
    assert summary is not None
    assert (summary.total_ns, summary.launches, summary.skipped) == (TOTAL_NS, LAUNCHES, 0)


def test_garbage_and_truncated_lines_are_skipped_and_counted():
    lines = FIXTURE.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    last = rows.pop()  # 0.0,2336,2,1168.0,... the sqrt kernel
    assert last.startswith("0.0,2336,2,")
    garbage = [
        "this is not csv from nsys",
        '1.0,"12,345",xx,1.0,1.0,1,1,0.0,"bad instances"',
        "5.0,100,1,100.0,100.0,100,100,0.0,k,extra,fields,here",
        "0.1,-5,1,1.0,1.0,1,1,0.0,negative_time",
    ]
    text = "\n".join([header, *rows[:3], *garbage, *rows[3:], last[:14]]) + "\n"
    summary = parse_kernel_summary(text)
    assert summary is not None
    assert summary.skipped == len(garbage) + 1
    assert summary.total_ns == TOTAL_NS - 2336
    assert summary.launches == LAUNCHES - 2
    assert summary.unique == UNIQUE - 1


def test_other_time_units_are_converted():
    text = FIXTURE.read_text().replace("Total Time (ns)", "Total Time (us)", 1)
    summary = parse_kernel_summary(text)
    assert summary is not None and summary.total_ns == TOTAL_NS * 1000


@pytest.mark.parametrize(
    "text",
    [
        "",
        "SKIPPED: /tmp/r/report.sqlite does not contain CUDA kernel data.\n",
        PREAMBLE,
        FIXTURE.read_text().splitlines()[1] + "\n",  # a row without its header
    ],
)
def test_output_without_a_table_gives_none(text):
    assert parse_kernel_summary(text) is None


# ------------------------------------------------------------------ wrap and availability


def test_wrap_puts_nsys_profile_in_front(tmp_path):
    run = Recorded(tmp_path)
    argv = NsysListener().wrap(["python", "train.py", "--lr", "1"], run.context)
    base = run.context.workdir / "nsys" / "report"
    assert argv == [
        "nsys",
        "profile",
        f"--output={base}",
        "--force-overwrite=true",
        "--trace=cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "python",
        "train.py",
        "--lr",
        "1",
    ]
    assert run.tags["radt.nsys.capture"] == "all" and run.warnings == []


def test_wrap_with_an_nvtx_capture_range(tmp_path):
    run = Recorded(tmp_path, {"capture": "nvtx", "range": "train_step", "trace": "cuda,nvtx"})
    argv = NsysListener().wrap(["./a.out"], run.context)
    assert "--trace=cuda,nvtx" in argv
    assert argv[-5:] == [
        "--capture-range=nvtx",
        "--nvtx-capture=train_step",
        "--capture-range-end=stop",
        "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0",
        "./a.out",
    ]
    assert run.tags["radt.nsys.capture"] == "nvtx:train_step"


def test_wrap_with_an_unknown_capture_warns_once_and_records_everything(tmp_path):
    run = Recorded(tmp_path, {"capture": "cudaProfilerApi"})
    argv = NsysListener().wrap(["./a.out"], run.context)
    assert not any(a.startswith("--capture-range") for a in argv)
    assert len(run.warnings) == 1 and "unknown capture='cudaprofilerapi'" in run.warnings[0]


def test_unavailable_without_nsys(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert NsysListener().available() == "nsys not found"
    assert discover()["nsys"].reason == "nsys not found"


def test_available_with_the_fake(fakes_on_path):
    assert NsysListener().available() is None


# ------------------------------------------------------------------ collect


def test_collect_emits_the_summary_and_attaches_report_and_table(
    fakes_on_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_NSYS_DURATION_NS", "50000000")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.warnings == []
    assert run.values == {
        "nsys/kernels/total_time_ms": TOTAL_NS / 1e6,
        "nsys/kernels/count": LAUNCHES,
        "nsys/kernels/unique": UNIQUE,
        "nsys/capture/wall_ms": 50.0,
        "nsys/kernels/gpu_busy_frac": TOTAL_NS / 50e6,
    }
    assert len({s.timestamp for s in run.samples}) == 1
    assert run.attached == [("report.nsys-rep", "radt/nsys"), ("kernels.csv", "radt/nsys")]
    assert run.tags["radt.nsys.report"] == "cuda_gpu_kern_sum"
    assert run.tags["radt.nsys.wall_source"] == "nsys"
    assert run.tags["radt.nsys.skipped_lines"] == "0"
    table = list(csv.reader((run.context.workdir / "nsys" / "kernels.csv").open()))
    assert table[0] == next(csv.reader(io.StringIO(FIXTURE.read_text())))
    assert len(table) == 21 and table[1][1] == "5554208"


def test_collect_falls_back_to_the_old_report_name(fakes_on_path, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_OLD", "1")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.warnings == []
    assert run.tags["radt.nsys.report"] == "gpukernsum"
    assert run.values["nsys/kernels/total_time_ms"] == TOTAL_NS / 1e6


def test_collect_uses_the_launcher_wall_time_without_an_export_duration(
    fakes_on_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_NSYS_DURATION_NS", "0")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.tags["radt.nsys.wall_source"] == "launcher"
    wall_ms = run.values["nsys/capture/wall_ms"]
    assert 0 < wall_ms < 60_000
    assert run.values["nsys/kernels/gpu_busy_frac"] == pytest.approx(TOTAL_NS / 1e6 / wall_ms)


def test_a_stats_failure_is_one_warning_and_the_report_is_kept(
    fakes_on_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_NSYS_STATS_FAIL", "1")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert len(run.warnings) == 1
    assert "no kernel summary from report.nsys-rep" in run.warnings[0]
    assert "exit status 1: Use --force-export=true to update export file." in run.warnings[0]
    assert "also tried gpukernsum" in run.warnings[0]
    assert run.samples == []
    assert run.attached == [("report.nsys-rep", "radt/nsys")]


def test_a_report_without_kernels_is_one_warning(fakes_on_path, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_STATS_FAIL", "nokernels")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert len(run.warnings) == 1 and "contains no CUDA kernel data" in run.warnings[0]
    assert run.samples == []


def test_no_report_is_one_warning(fakes_on_path, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_REPORT", "1")
    listener, run = profiled(tmp_path, {"capture": "nvtx"})
    listener.collect(run.context)
    assert run.warnings == [
        "listener nsys: nsys wrote no report "
        "(see radt/output.log; was the NVTX range 'profile' ever opened?)"
    ]
    assert run.samples == [] and run.attached == []


def test_garbage_in_the_stats_output_is_counted_never_fatal(fakes_on_path, tmp_path, monkeypatch):
    lines = FIXTURE.read_text().splitlines()
    garbled = tmp_path / "garbled.csv"
    garbled.write_text("\n".join([lines[0], "@@@ garbage @@@", *lines[1:], lines[1][:20]]) + "\n")
    monkeypatch.setenv("FAKE_NSYS_STATS_CSV", str(garbled))
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.tags["radt.nsys.skipped_lines"] == "2"
    assert run.warnings == ["listener nsys: skipped 2 unreadable lines of nsys stats"]
    assert run.values["nsys/kernels/total_time_ms"] == TOTAL_NS / 1e6


def test_collect_before_wrap_is_one_warning(tmp_path):
    run = Recorded(tmp_path)
    NsysListener().collect(run.context)
    assert len(run.warnings) == 1 and run.samples == []


# ------------------------------------------------------------------ end to end


def fake_env(workspace, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in workspace.env.items() if not k.startswith("FAKE_NSYS_")}
    return {**env, "PATH": f"{FAKES}{os.pathsep}{env['PATH']}", **extra}


def artifact_paths(client, run_id: str, folder: str) -> list[str]:
    return sorted(a.path for a in client.list_artifacts(run_id, folder))


@pytest.mark.slow
def test_radt_runs_the_command_under_nsys_and_logs_its_summary(workspace, tmp_path):
    workspace.script("work.py", SCRIPT)
    env = fake_env(workspace, FAKE_NSYS_DURATION_NS="200000000")
    done = workspace.run(["-l", "nsys", "work.py"], env=env)
    assert done.returncode == 0, done.stderr
    assert "workload says hello" in done.stdout
    assert not [line for line in done.stderr.splitlines() if "listener nsys" in line]
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.listeners"] == "nsys"
    client = workspace.client()
    run_id = run.info.run_id
    log = Path(client.download_artifacts(run_id, "radt/output.log", str(tmp_path))).read_text()
    assert "workload says hello" in log
    assert "Collecting data..." in log and "Generated:" in log
    assert artifact_paths(client, run_id, "radt/nsys") == [
        "radt/nsys/kernels.csv",
        "radt/nsys/report.nsys-rep",
    ]
    kernels = Path(client.download_artifacts(run_id, "radt/nsys/kernels.csv", str(tmp_path)))
    assert len(list(csv.reader(kernels.open()))) == 21
    metrics = run.data.metrics
    assert metrics["system/nsys/kernels/total_time_ms"] == pytest.approx(TOTAL_NS / 1e6)
    assert metrics["system/nsys/kernels/count"] == LAUNCHES
    assert metrics["system/nsys/kernels/unique"] == UNIQUE
    assert metrics["system/nsys/capture/wall_ms"] == pytest.approx(200.0)
    assert metrics["system/nsys/kernels/gpu_busy_frac"] == pytest.approx(TOTAL_NS / 200e6)
    assert run.data.tags["radt.nsys.wall_source"] == "nsys"


@pytest.mark.slow
def test_radt_finishes_with_one_warning_when_nsys_stats_fails(workspace):
    workspace.script("work.py", SCRIPT)
    done = workspace.run(
        ["-l", "nsys", "work.py"], env=fake_env(workspace, FAKE_NSYS_STATS_FAIL="1")
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "listener nsys" in line]
    assert len(warnings) == 1 and "no kernel summary" in warnings[0], done.stderr
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert not any(k.startswith("system/nsys/") for k in run.data.metrics)
    assert artifact_paths(workspace.client(), run.info.run_id, "radt/nsys") == [
        "radt/nsys/report.nsys-rep"
    ]


@pytest.mark.slow
def test_radt_refuses_nsys_where_it_is_not_installed(workspace):
    env = {k: v for k, v in workspace.env.items()}
    if shutil.which("nsys", path=env["PATH"]):
        pytest.skip("a real nsys is on PATH here")
    workspace.script("work.py", SCRIPT)
    done = workspace.run(["-l", "nsys", "work.py"], env=env)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("radt: error:")]
    assert len(errors) == 1, done.stderr
    assert "listener not available here: nsys (nsys not found)" in errors[0]
    assert "workload says hello" not in done.stdout
    assert workspace.runs() == []


def test_not_chosen_when_no_listener_is_named(fakes_on_path):
    from radt.launch.registry import select

    found = discover()
    assert found["nsys"].reason is None and found["ncu"].reason is None
    chosen = {listener.name for listener in select(None, found)}
    assert "nsys" not in chosen and "ncu" not in chosen
    assert {listener.name for listener in select("nsys+ncu", found)} == {"nsys", "ncu"}


def test_an_unknown_time_unit_skips_every_row_without_raising():
    text = FIXTURE.read_text().replace("Total Time (ns)", "Total Time (fortnights)", 1)
    summary = parse_kernel_summary(text)
    assert summary is not None
    assert (summary.skipped, summary.launches, summary.top()) == (UNIQUE, 0, [])
