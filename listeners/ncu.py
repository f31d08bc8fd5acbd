"""``ncu``: runs the command under Nsight Compute and logs how long the profiled kernels took.

A *wrapping* listener (DESIGN.md): :meth:`NcuListener.wrap` puts ``ncu`` in
front of the command (``--export`` to the run's working folder, every child
process, plus the metric ``gpu__time_duration.sum``); after the command ended,
:meth:`NcuListener.collect` keeps the report as the artifact
``radt/ncu/report.ncu-rep``, reads it back with
``ncu --import report.ncu-rep --csv --page details`` (one row per profiled
launch, section and metric) and emits, at collect time:

- ``ncu/kernels/count``: profiled kernel launches (distinct ``ID``);
- ``ncu/kernels/unique``: distinct kernel names;
- ``ncu/kernels/total_duration_ms``: the summed ``gpu__time_duration.sum`` of
  the launches (the Speed Of Light section's ``Duration`` where that metric
  is missing).

and one row per kernel name (launches, total, mean, min and max duration) as
the artifact ``radt/ncu/kernels.csv``.

Nsight Compute replays every kernel it profiles many times: a whole training
run under it takes very long. Limit it with options (``-o ncu.KEY=VALUE``):

- ``capture=nvtx``: profile only inside the NVTX push/pop range named by
  ``range`` (default ``profile``): ``--nvtx --nvtx-include profile/``;
- ``launch_count=N``: profile at most N launches (``--launch-count N``);
- ``timeout_s=SECONDS``: how long ``ncu --import`` may take (default 900).

A missing report (e.g. ``ERR_NVGPUCTRPERM``: no access to the GPU's
performance counters), a report ncu cannot read, or one with no kernel gives
one warning; the run goes on. Unreadable lines are skipped and counted (tag
``radt.ncu.skipped_lines``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from radt import tools
from radt.listener import (
    CAPTURES,
    DEFAULT_RANGE,
    Option,
    RunContext,
    WrappingListener,
    samples_from,
)
from radt.placeholders import number
from radt.tags import RADT_NCU_SKIPPED_LINES
from radt.words import count

from ._reports import (
    DEFAULT_TIMEOUT_S,
    ns_per,
    read_table,
    timeout_option,
    write_csv,
)

ARTIFACT_DIR = "radt/ncu"
DURATION_METRIC = "gpu__time_duration.sum"
SOL_SECTION = "GPU Speed Of Light Throughput"
SOL_DURATION = "Duration"
REQUIRED = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
KERNEL_COLUMNS = (
    "Kernel Name",
    "Launches",
    "Total Duration (ns)",
    "Avg Duration (ns)",
    "Min Duration (ns)",
    "Max Duration (ns)",
)


@dataclass
class KernelStats:
    """The profiled launches of one kernel name."""

    name: str
    durations_ns: list[float] = field(default_factory=list)

    def row(self) -> list[object]:
        d = self.durations_ns
        total = sum(d)
        return [self.name, len(d), round(total, 3), round(total / len(d), 3), min(d), max(d)]


@dataclass
class LaunchSummary:
    """What the details page of a report says about its launches."""

    launches: int = 0
    """Distinct launch ``ID``s in the report."""
    timed: int = 0
    """Launches with a duration."""
    total_ns: float = 0.0
    kernels: dict[str, KernelStats] = field(default_factory=dict)
    skipped: int = 0

    @property
    def unique(self) -> int:
        return len(self.kernels)

    def table(self) -> list[list[object]]:
        """One row per kernel name, the most total time first."""
        stats = sorted(self.kernels.values(), key=lambda k: -sum(k.durations_ns))
        return [k.row() for k in stats]


def _is_details_header(fields: list[str]) -> bool:
    return all(c in fields for c in REQUIRED)


def parse_details(text: str) -> LaunchSummary | None:
    """Read ``ncu --import REPORT --csv --page details``; None when there is no table.

    Lines before the table (``==PROF==``, ``==WARNING==``) are passed over.
    A launch's duration is its ``gpu__time_duration.sum`` row, else its Speed
    Of Light ``Duration`` row; units may be ``ns``/``us``/``ms``/``s`` or the
    older ``nsecond``/``usecond``/``msecond``/``second``, and values may carry
    thousands separators. A row whose ID or needed value cannot be read is
    skipped and counted; metrics the GPU cannot measure (``n/a``) are not
    errors.
    """
    table = read_table(text, _is_details_header, required=REQUIRED)
    if table is None:
        return None
    summary = LaunchSummary(skipped=table.skipped)
    names: dict[str, str] = {}
    metric: dict[str, float] = {}
    sol: dict[str, float] = {}
    for row in table.rows:
        launch, name = row["ID"].strip(), row["Kernel Name"]
        if not launch or not name:
            summary.skipped += 1
            continue
        wanted = row["Metric Name"] == DURATION_METRIC or (
            row["Metric Name"] == SOL_DURATION and row["Section Name"] == SOL_SECTION
        )
        if wanted:
            try:
                value = number(row["Metric Value"])
                if value is None:
                    raise ValueError("no value")
                duration = value * ns_per(row["Metric Unit"])
                if duration < 0:
                    raise ValueError("negative duration")
            except ValueError:
                summary.skipped += 1
                continue
            (metric if row["Metric Name"] == DURATION_METRIC else sol)[launch] = duration
        names.setdefault(launch, name)
    summary.launches = len(names)
    for launch, name in names.items():
        duration = metric.get(launch, sol.get(launch))
        if duration is None:
            continue
        summary.timed += 1
        summary.total_ns += duration
        summary.kernels.setdefault(name, KernelStats(name)).durations_ns.append(duration)
    return summary


class NcuListener(WrappingListener):
    """Wraps the command in ``ncu``; logs the profiled kernels' durations after it ends."""

    name = "ncu"
    declared_options = (
        Option("capture", str, "all", "nvtx: profile only inside the NVTX range", choices=CAPTURES),
        Option("range", str, DEFAULT_RANGE, "the NVTX push/pop range capture=nvtx profiles"),
        Option("launch_count", int, "", "profile at most this many kernel launches", least=1),
        Option(
            "timeout_s",
            float,
            f"{DEFAULT_TIMEOUT_S:g}",
            "how long ncu --import may take",
            positive=True,
        ),
    )
    tool = "ncu"
    report_suffixes = (".ncu-rep",)
    records = "an Nsight Compute report of the command's kernels, their totals and top kernels"
    cost = "ncu replays each profiled kernel: the command runs many times slower"

    def wrap(self, argv: list[str], run: RunContext) -> list[str]:
        command = [
            "ncu",
            "--export",
            str(self.report_base(run)),
            "--force-overwrite",
            "--target-processes",
            "all",
            "--metrics",
            DURATION_METRIC,
        ]
        if self.capture(run, otherwise="profiling every kernel"):
            command += ["--nvtx", "--nvtx-include", f"{self.capture_range}/"]
        count = run.options.get("launch_count")
        if count is not None:
            if count.strip().isdigit() and int(count) > 0:
                command += ["--launch-count", str(int(count))]
            else:
                run.warn(f"listener ncu: ignoring launch_count={count!r} (not a positive integer)")
        return [*command, *argv]

    def collect(self, run: RunContext) -> None:
        report = self.report_or_warn(
            run,
            "no kernel profiled, or no access to the GPU performance counters: see radt/output.log",
        )
        if report is None:
            return
        run.attach(report, ARTIFACT_DIR)
        result = tools.run(
            ["ncu", "--import", str(report), "--csv", "--page", "details"],
            timeout_s=timeout_option(run.options, run.warn, self.name),
        )
        summary = parse_details(result.stdout)
        if summary is None:
            why = result.reason() if not result.ok else "no details table in its output"
            run.warn(f"listener ncu: cannot read {report.name}: ncu --import {why}")
            return
        run.set_tag(RADT_NCU_SKIPPED_LINES, str(summary.skipped))
        if summary.skipped:
            unreadable = count(summary.skipped, "unreadable line")
            run.warn(f"listener ncu: skipped {unreadable} of ncu --import")
        if summary.launches == 0:
            run.warn(f"listener ncu: {report.name} holds no profiled kernel")
            return
        values: dict[str, float | None] = {
            "kernels/count": float(summary.launches),
            "kernels/unique": float(summary.unique),
            "kernels/total_duration_ms": summary.total_ns / 1e6 if summary.timed else None,
        }
        run.emit(samples_from(time.time(), self.name, values))
        table = run.workdir / "ncu" / "kernels.csv"
        write_csv(table, KERNEL_COLUMNS, summary.table())
        run.attach(table, ARTIFACT_DIR)
