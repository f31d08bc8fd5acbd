"""The ``ncu`` listener: its parsing on the real fixture, its faults, and radT end to end.

The fake ``ncu`` in tests/fakes stands in for Nsight Compute (see its
docstring and tests/fixtures/SOURCES.md for what it prints and where from).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAKES, FIXTURES, Recorded
from radt.listeners.ncu import KERNEL_COLUMNS, NcuListener, parse_details

from radt.launch.registry import discover

FIXTURE = FIXTURES / "ncu_details.csv"
KERNEL = FIXTURE.read_text().splitlines()[1].split('","')[4]
DURATION_NS = 6750.0  # gpu__time_duration.sum of the one launch: 6.75 us

SCRIPT = """
import time
print("workload says hello", flush=True)
time.sleep(0.2)
"""


def profiled(tmp_path: Path, options: dict[str, str] | None = None) -> tuple[NcuListener, Recorded]:
    """Wrap a tiny command and run it under the fake ncu as the launcher would."""
    run = Recorded(tmp_path, options)
    listener = NcuListener()
    argv = listener.wrap([sys.executable, "-c", "print('inside')"], run.context)
    listener.start(run.context)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "inside" in done.stdout and "==PROF== Connected to process" in done.stdout
    return listener, run


def relaunched(text: str, launch: str, *, drop_metric: bool, unit: str, value: str) -> list[str]:
    """The fixture's rows as another launch (``ID`` = launch) whose SOL Duration is unit/value."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = next(csv.reader([line]))
        if drop_metric and fields[12] == "gpu__time_duration.sum":
            continue
        fields[0] = launch
        if fields[11] == "GPU Speed Of Light Throughput" and fields[12] == "Duration":
            fields[13], fields[14] = unit, value
        rows.append(",".join(f'"{f}"' for f in fields))
    return rows


# ------------------------------------------------------------------ parsing


def test_fixture_has_one_launch_of_6_75_us():
    summary = parse_details(FIXTURE.read_text())
    assert summary is not None
    assert (summary.launches, summary.timed, summary.unique, summary.skipped) == (1, 1, 1, 0)
    assert summary.total_ns == DURATION_NS
    assert summary.table() == [[KERNEL, 1, DURATION_NS, DURATION_NS, DURATION_NS, DURATION_NS]]


def test_launches_are_summed_with_the_metric_first_and_sol_duration_as_fallback():
    text = FIXTURE.read_text()
    more = relaunched(text, "1", drop_metric=True, unit="usecond", value="1,234.5")
    also = relaunched(text, "2", drop_metric=False, unit="msecond", value="99")
    summary = parse_details(
        "==PROF== Connected to process 1 (python)\n" + text + "\n".join(more + also)
    )
    assert summary is not None
    assert (summary.launches, summary.timed, summary.unique, summary.skipped) == (3, 3, 1, 0)
    # Launch 2 keeps its own gpu__time_duration.sum (6.75 us), not the SOL row.
    assert summary.total_ns == DURATION_NS + 1_234_500 + DURATION_NS
    assert summary.table()[0][1] == 3


def test_garbage_and_truncated_lines_are_skipped_and_counted():
    lines = FIXTURE.read_text().splitlines()
    bad_value = lines[6].replace('"6.75"', '"six"')  # the gpu__time_duration.sum row
    assert bad_value != lines[6]
    text = "\n".join(
        [
            lines[0],
            *lines[1:6],
            bad_value,
            "==PROF== Disconnected from process 1740670",
            '"0","1740670","python3.12"',
            *lines[7:],
            lines[-1][:300],
        ]
    )
    summary = parse_details(text)
    assert summary is not None
    assert summary.skipped == 4
    # The bad metric row is skipped; the SOL Duration of the same launch stands in.
    assert (summary.launches, summary.timed, summary.total_ns) == (1, 1, DURATION_NS)


@pytest.mark.parametrize(
    "text",
    ["", "==ERROR== ERR_NVGPUCTRPERM - no permission\n", "==WARNING== No kernels were profiled.\n"],
)
def test_output_without_a_table_gives_none(text):
    assert parse_details(text) is None


def test_a_launch_without_a_duration_is_counted_but_not_timed():
    lines = FIXTURE.read_text().splitlines()
    kept = [
        line
        for line in lines
        if '"gpu__time_duration.sum"' not in line and '"Duration"' not in line
    ]
    summary = parse_details("\n".join(kept))
    assert summary is not None
    assert (summary.launches, summary.timed, summary.total_ns) == (1, 0, 0.0)


# ------------------------------------------------------------------ wrap and availability


def test_wrap_puts_ncu_in_front(tmp_path):
    run = Recorded(tmp_path)
    argv = NcuListener().wrap(["python", "train.py"], run.context)
    assert argv == [
        "ncu",
        "--export",
        str(run.context.workdir / "ncu" / "report"),
        "--force-overwrite",
        "--target-processes",
        "all",
        "--metrics",
        "gpu__time_duration.sum",
        "python",
        "train.py",
    ]
    assert run.tags["radt.ncu.capture"] == "all"


def test_wrap_with_nvtx_range_and_launch_count(tmp_path):
    run = Recorded(tmp_path, {"capture": "nvtx", "launch_count": "50"})
    argv = NcuListener().wrap(["./a.out"], run.context)
    assert argv[-6:] == ["--nvtx", "--nvtx-include", "profile/", "--launch-count", "50", "./a.out"]
    assert run.warnings == []


@pytest.mark.parametrize("options", [{"launch_count": "lots"}, {"capture": "range"}])
def test_wrap_with_a_bad_option_warns_once(tmp_path, options):
    run = Recorded(tmp_path, options)
    argv = NcuListener().wrap(["./a.out"], run.context)
    assert len(run.warnings) == 1 and argv[-1] == "./a.out"
    assert "--launch-count" not in argv and "--nvtx" not in argv


def test_unavailable_without_ncu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert NcuListener().available() == "ncu not found"
    assert discover()["ncu"].reason == "ncu not found"


# ------------------------------------------------------------------ collect


def test_collect_emits_counts_and_attaches_report_and_table(fakes_on_path, tmp_path):
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.warnings == []
    assert run.values == {
        "ncu/kernels/count": 1,
        "ncu/kernels/unique": 1,
        "ncu/kernels/total_duration_ms": DURATION_NS / 1e6,
    }
    assert run.attached == [("report.ncu-rep", "radt/ncu"), ("kernels.csv", "radt/ncu")]
    table = list(csv.reader((run.context.workdir / "ncu" / "kernels.csv").open()))
    assert table == [list(KERNEL_COLUMNS), [KERNEL, "1", "6750.0", "6750.0", "6750.0", "6750.0"]]


def test_an_import_failure_is_one_warning_and_the_report_is_kept(
    fakes_on_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_NCU_IMPORT_FAIL", "1")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert len(run.warnings) == 1
    assert "cannot read report.ncu-rep: ncu --import exit status 1" in run.warnings[0]
    assert run.samples == [] and run.attached == [("report.ncu-rep", "radt/ncu")]


def test_no_access_to_the_counters_means_no_report_and_one_warning(
    fakes_on_path, tmp_path, monkeypatch
):
    monkeypatch.setenv("FAKE_NCU_PERM", "1")
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert len(run.warnings) == 1 and "ncu wrote no report" in run.warnings[0]
    assert run.samples == [] and run.attached == []


def test_garbage_import_output_is_counted_never_fatal(fakes_on_path, tmp_path, monkeypatch):
    garbled = tmp_path / "garbled.csv"
    garbled.write_text(FIXTURE.read_text() + "%%% not csv %%%\n" + '"0","1"\n')
    monkeypatch.setenv("FAKE_NCU_CSV", str(garbled))
    listener, run = profiled(tmp_path)
    listener.collect(run.context)
    assert run.tags["radt.ncu.skipped_lines"] == "2"
    assert run.warnings == ["listener ncu: skipped 2 unreadable lines of ncu --import"]
    assert run.values["ncu/kernels/count"] == 1


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_radt_runs_the_command_under_ncu_and_logs_its_kernels(workspace, tmp_path):
    workspace.script("work.py", SCRIPT)
    env = {k: v for k, v in workspace.env.items() if not k.startswith("FAKE_NCU_")}
    env["PATH"] = f"{FAKES}{os.pathsep}{env['PATH']}"
    done = workspace.run(["-l", "ncu", "-o", "ncu.capture=nvtx", "work.py"], env=env)
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stderr.splitlines() if "listener ncu" in line]
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    client = workspace.client()
    log = Path(client.download_artifacts(run.info.run_id, "radt/output.log", str(tmp_path)))
    assert "workload says hello" in log.read_text()
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "radt/ncu")) == [
        "radt/ncu/kernels.csv",
        "radt/ncu/report.ncu-rep",
    ]
    assert run.data.metrics["system/ncu/kernels/count"] == 1
    assert run.data.metrics["system/ncu/kernels/total_duration_ms"] == pytest.approx(0.00675)
    assert run.data.tags["radt.ncu.capture"] == "nvtx:profile"


@pytest.mark.slow
def test_radt_refuses_ncu_where_it_is_not_installed(workspace):
    if shutil.which("ncu", path=workspace.env["PATH"]):
        pytest.skip("a real ncu is on PATH here")
    workspace.script("work.py", SCRIPT)
    done = workspace.run(["-l", "ncu", "work.py"])
    assert done.returncode == 2
    assert "listener not available here: ncu (ncu not found)" in done.stderr
    assert workspace.runs() == []
