"""``nsys``: runs the command under Nsight Systems and logs what its kernel summary says.

A *wrapping* listener (DESIGN.md): :meth:`NsysListener.wrap` puts
``nsys profile`` in front of the command; after the command ended,
:meth:`NsysListener.collect` keeps the report as the artifact
``radt/nsys/report.nsys-rep``, asks ``nsys stats`` for the CUDA GPU kernel
summary and emits, at collect time:

- ``nsys/kernels/total_time_ms``: the summed duration of every kernel (the
  report's ``Total Time`` column);
- ``nsys/kernels/count``: kernel launches (the sum of ``Instances``);
- ``nsys/kernels/unique``: distinct kernel names;
- ``nsys/capture/wall_ms``: the captured wall time (see below);
- ``nsys/kernels/gpu_busy_frac``: ``total_time / wall``. Kernels that overlap
  (several streams or GPUs) count once each, so the ratio may exceed 1.

and the 20 kernels with the most time, in the report's own columns, as the
artifact ``radt/nsys/kernels.csv``.

**Captured wall time.** ``nsys stats`` leaves the SQLite export of the report
beside it (``report.sqlite``); its ``ANALYSIS_DETAILS.duration`` is the span
nsys collected, which with an NVTX capture range is the range, not the whole
run. When that cannot be read, the wall time radT measured from the start of
the command to the start of collection is used instead (a little longer than
the command ran, so the fraction errs low). The tag ``radt.nsys.wall_source``
says which (``nsys`` or ``launcher``).

Options (``-o nsys.KEY=VALUE``):

- ``capture=nvtx``: record only inside the NVTX range named by ``range``
  (default ``profile``; in PyTorch ``torch.cuda.nvtx.range_push("profile")``
  ... ``range_pop()``), as the original radT did: ``--capture-range=nvtx
  --nvtx-capture=profile --capture-range-end=stop``, and
  ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0`` so that the unregistered strings
  PyTorch uses are matched. Without it (``capture=all``, the default) the
  whole run is recorded.
- ``trace=LIST``: what to trace, default ``cuda,nvtx,osrt``.
- ``timeout_s=SECONDS``: how long ``nsys stats`` may take (default 900).

A report the tool cannot summarise, a missing report, or a summary with no
kernel data gives one warning; the run goes on. Unreadable lines in the
summary are skipped and counted (tag ``radt.nsys.skipped_lines``).

The kernel summary is called ``cuda_gpu_kern_sum`` in Nsight Systems 2022 and
later and ``gpukernsum`` before; the new name is tried first.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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
from radt.tags import (
    RADT_NSYS_REPORT,
    RADT_NSYS_SKIPPED_LINES,
    RADT_NSYS_WALL_SOURCE,
)
from radt.words import count

from ._reports import (
    DEFAULT_TIMEOUT_S,
    ns_per,
    read_table,
    timeout_option,
    unit_of_column,
    write_csv,
)

ARTIFACT_DIR = "radt/nsys"
REPORT_NAMES = ("cuda_gpu_kern_sum", "gpukernsum")
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
TOP_KERNELS = 20
DEFAULT_TRACE = "cuda,nvtx,osrt"
NO_KERNEL_DATA = "does not contain CUDA kernel data"


@dataclass
class KernelSummary:
    """The CUDA GPU kernel summary of one report."""

    header: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    """The readable rows, as printed, in the order of the report."""
    total_ns: float = 0.0
    launches: int = 0
    unique: int = 0
    skipped: int = 0
    """Lines of the table that could not be read."""
    time_column: str = "Total Time (ns)"

    def top(self, n: int = TOP_KERNELS) -> list[dict[str, str]]:
        """The ``n`` rows with the most total time (all rows share one unit)."""
        return sorted(self.rows, key=lambda r: -number(r[self.time_column]))[:n]


def _time_column(fields: Sequence[str]) -> str | None:
    return next((f for f in fields if f.strip().startswith("Total Time")), None)


def _is_kernel_header(fields: list[str]) -> bool:
    return "Instances" in fields and "Name" in fields and _time_column(fields) is not None


def parse_kernel_summary(text: str) -> KernelSummary | None:
    """Read the output of ``nsys stats --report cuda_gpu_kern_sum --format csv``.

    Lines before the table ("Generating SQLite file ...", "Processing [...]
    with [...]...") are passed over. Returns None when there is no table.
    """
    time_columns = [f"Total Time ({u})" for u in ("ns", "us", "ms", "s")] + ["Total Time"]
    table = read_table(text, _is_kernel_header, required=[*time_columns, "Instances", "Name"])
    if table is None:
        return None
    column = _time_column(table.header)
    assert column is not None
    summary = KernelSummary(header=table.header, skipped=table.skipped, time_column=column)
    try:
        scale = ns_per(unit_of_column(column) or "ns")
    except ValueError:
        summary.skipped += len(table.rows)
        return summary
    names: set[str] = set()
    for row in table.rows:
        try:
            time = number(row[column])
            launches = number(row["Instances"])
            name = row["Name"]
            if time is None or launches is None:
                raise ValueError(f"no value: {row}")
            total = time * scale
            if total < 0 or launches < 0 or launches != int(launches) or not name.strip():
                raise ValueError(f"not a kernel row: {row}")
        except (KeyError, ValueError):
            summary.skipped += 1
            continue
        summary.rows.append(row)
        summary.total_ns += total
        summary.launches += int(launches)
        names.add(name)
    summary.unique = len(names)
    return summary


def capture_wall_ns(sqlite_path: Path) -> float | None:
    """The collection span nsys recorded (``ANALYSIS_DETAILS.duration``), or None."""
    if not sqlite_path.is_file():
        return None
    try:
        db = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True)
        with contextlib.closing(db):
            row = db.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()
    except sqlite3.Error:
        return None
    if not row or row[0] is None:
        return None
    try:
        duration = float(row[0])
    except (TypeError, ValueError):
        return None
    return duration if duration > 0 else None


class NsysListener(WrappingListener):
    """Wraps the command in ``nsys profile``; logs the kernel summary after it ends."""

    name = "nsys"
    declared_options = (
        Option("trace", str, DEFAULT_TRACE, "what nsys traces (its --trace)"),
        Option("capture", str, "all", "nvtx: record only inside the NVTX range", choices=CAPTURES),
        Option("range", str, DEFAULT_RANGE, "the NVTX push/pop range capture=nvtx records"),
        Option(
            "timeout_s",
            float,
            f"{DEFAULT_TIMEOUT_S:g}",
            "how long nsys stats may take",
            positive=True,
        ),
    )
    tool = "nsys"
    report_suffixes = REPORT_SUFFIXES
    records = "an Nsight Systems report of the command, its kernel totals and top kernels"
    cost = "the command runs under nsys profile, with its tracing overhead"

    def __init__(self) -> None:
        super().__init__()
        self._wrapped: float | None = None

    def wrap(self, argv: list[str], run: RunContext) -> list[str]:
        base = self.report_base(run)
        self._wrapped = time.time()
        trace = run.options.get("trace", DEFAULT_TRACE).strip() or DEFAULT_TRACE
        command = [
            "nsys",
            "profile",
            f"--output={base}",
            "--force-overwrite=true",
            f"--trace={trace}",
            "--sample=none",
            "--cpuctxsw=none",
        ]
        if self.capture(run, otherwise="recording the whole run"):
            command += [
                "--capture-range=nvtx",
                f"--nvtx-capture={self.capture_range}",
                "--capture-range-end=stop",
                "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0",
            ]
        return [*command, *argv]

    def collect(self, run: RunContext) -> None:
        report = self.report_or_warn(run, "see radt/output.log")
        if report is None:
            return
        run.attach(report, ARTIFACT_DIR)
        summary, name, failure = self.kernel_summary(report, run)
        if summary is None:
            run.warn(f"listener nsys: no kernel summary from {report.name}: {failure}")
            return
        run.set_tag(RADT_NSYS_REPORT, name)
        run.set_tag(RADT_NSYS_SKIPPED_LINES, str(summary.skipped))
        if summary.skipped:
            unreadable = count(summary.skipped, "unreadable line")
            run.warn(f"listener nsys: skipped {unreadable} of nsys stats")
        wall_ns = capture_wall_ns(report.with_suffix(".sqlite"))
        run.set_tag(RADT_NSYS_WALL_SOURCE, "nsys" if wall_ns else "launcher")
        if wall_ns is None:
            begun = self.started_s or self._wrapped
            wall_ns = (time.time() - begun) * 1e9 if begun else None
        values: dict[str, float | None] = {
            "kernels/total_time_ms": summary.total_ns / 1e6,
            "kernels/count": float(summary.launches),
            "kernels/unique": float(summary.unique),
            "capture/wall_ms": wall_ns / 1e6 if wall_ns else None,
            "kernels/gpu_busy_frac": summary.total_ns / wall_ns if wall_ns else None,
        }
        run.emit(samples_from(time.time(), self.name, values))
        table = run.workdir / "nsys" / "kernels.csv"
        write_csv(
            table, summary.header, ([r.get(c, "") for c in summary.header] for r in summary.top())
        )
        run.attach(table, ARTIFACT_DIR)

    def kernel_summary(
        self, report: Path, run: RunContext
    ) -> tuple[KernelSummary | None, str, str]:
        """Ask ``nsys stats`` for the kernel summary: (summary, report name used, why not)."""
        timeout_s = timeout_option(run.options, run.warn, self.name)
        first: tools.ToolResult | None = None
        for name in REPORT_NAMES:
            result = tools.run(
                [
                    "nsys",
                    "stats",
                    "--report",
                    name,
                    "--format",
                    "csv",
                    "--force-export=true",
                    str(report),
                ],
                timeout_s=timeout_s,
            )
            summary = parse_kernel_summary(result.stdout)
            if summary is not None:
                return summary, name, ""
            said = result.stdout + "\n" + result.stderr
            if NO_KERNEL_DATA in said:
                return None, name, "the report contains no CUDA kernel data"
            if result.error:  # timed out or could not start: another name will not help
                return None, name, result.reason()
            first = first or result
        assert first is not None
        reason = first.reason() if not first.ok else "no kernel table in its output"
        return (
            None,
            REPORT_NAMES[0],
            f"nsys stats {reason} (also tried {', '.join(REPORT_NAMES[1:])})",
        )
