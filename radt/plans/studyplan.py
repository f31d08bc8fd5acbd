"""A study's plan CSV: its rows (one per run of every workload, with the study's progress and
the searched batch sizes), its text, the Status and Run of the plan file as it is now, and
writing it beside the study (``STUDY.plan.csv``) under the plan lock.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from radt.errors import UsageError
from radt.plans import batch, columns
from radt.plans.model import clean
from radt.plans.scanner import physical_lines, read_text, scan
from radt.plans.study import SHARED_LOADER_FLAG, Study, StudyWorkload
from radt.plans.studyprogress import Progress
from radt.plans.writeback import _atomic_write, _locked, _quote, lock_path
from radt.tags import Mode

PLAN_COLUMNS = (
    "Experiment",
    "Workload",
    "Status",
    "Run",
    "Devices",
    "Collocation",
    "File",
    "Listeners",
    "Params",
    "PowerLimit",
    "Job",
)
LOADER_COLUMNS = (*PLAN_COLUMNS, "Role")
"""The plan's columns when the study has a ``loader:`` dimension."""


def default_plan_path(study_path: Path) -> Path:
    """``study.plan.csv`` beside ``study.yaml``."""
    return study_path.with_name(study_path.stem + ".plan.csv")


def plan_rows(
    study: Study,
    workloads: list[StudyWorkload],
    progress: dict[str, Progress],
    sizes: dict[tuple[str, str], int],
    old_runs: dict[tuple[str, int], tuple[str, str]],
) -> list[dict[str, str]]:
    """The plan's rows: one per run of every workload, with the study's progress.

    A workload with a shared loader starts with its loader row (``Role`` = loader, the
    study's ``loader_file``, no share of the GPU and no power limit; ``naive`` beside naive
    trainings, else ``-``), and its trainings get ``--shared-loader`` before their params,
    as in examples/shared_loader.csv.
    """
    rows = []
    for workload in workloads:
        entry = progress.get(workload.descriptor)
        status = entry.status if entry is not None else ""
        shared = workload.loader == "shared"
        cells: list[dict[str, str]] = []
        if shared:
            mode = workload.configuration.mode
            cells.append(
                {
                    "Collocation": Mode.NAIVE if mode == Mode.NAIVE else "-",
                    "File": study.loader_file or "-",
                    "Params": "-",
                    "PowerLimit": "-",
                    "GpuClock": "-",
                    "Job": "-",
                    "Role": "loader",
                }
            )
        for position, run in enumerate(workload.configuration.runs):
            params = [SHARED_LOADER_FLAG] if shared else []
            params += workload.argv_params
            size = sizes.get((workload.job, batch.slot_key(workload.configuration, position)))
            if study.batch is not None and size is not None:
                params += [study.batch.flag, str(size)]
            cells.append(
                {
                    "Collocation": run.label,
                    "File": study.file,
                    "Params": shlex.join(params) if params else "-",
                    "PowerLimit": "-"
                    if workload.power_limit_w is None
                    else f"{workload.power_limit_w:g}",
                    "GpuClock": "-"
                    if workload.gpu_clock_mhz is None
                    else str(workload.gpu_clock_mhz),
                    "Job": workload.job,
                    "Role": "-",
                }
            )
        for position, row in enumerate(cells):
            old_status, old_run = old_runs.get((workload.name, position), ("", ""))
            rows.append(
                {
                    "Experiment": study.experiment,
                    "Workload": workload.name,
                    "Status": status,
                    "Run": old_run if status and old_status == status else "",
                    "Devices": study.devices or "-",
                    "Listeners": study.listeners or "-",
                    **columns.study_cells(study.column_values),
                    **row,
                }
            )
    return rows


def plan_text(study: Study, rows: list[dict[str, str]], searched: bool) -> str:
    """The plan CSV: a comment header, the column line, the rows."""
    lines = [
        f"# The plan of study {study.name} ({study.path}), written by radT from the study:",
        "# edit the study, not this file. radT writes Status and Run here after each workload",
        "# and the progress into the study's status:; finished workloads are skipped.",
    ]
    if study.batch is not None and not searched:
        lines.append(
            f"# {study.batch.flag} is added to each row once its slot's largest batch size is "
            "found (when the study runs)."
        )
    if study.nodes > 1:
        lines.append(
            f"# nodes: {study.nodes}: radT runs each workload as one training on "
            f"{study.nodes} nodes (a job run with a node run per node); run the study, not this "
            "plan."
        )
    names = LOADER_COLUMNS if "loader" in study.extended else PLAN_COLUMNS
    if "gpu_clock" in study.extended:
        at = names.index("PowerLimit") + 1
        names = (*names[:at], "GpuClock", *names[at:])
    names = (*names, *columns.study_columns(study.column_values))
    lines.append(", ".join(names))
    for row in rows:
        lines.append(", ".join(_quote(row[name]) for name in names))
    return "\n".join(lines) + "\n"


def old_runs(plan_path: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(Workload, position) -> (Status, Run) of the plan file as it is now (none if absent)."""
    if not plan_path.exists():
        return {}
    try:
        _, text = read_text(plan_path)
    except (UsageError, OSError):
        return {}
    records, _ = scan(physical_lines(text))
    if not records:
        return {}
    header = [clean(cell).lower() for cell in records[0].cells]
    found: dict[tuple[str, int], tuple[str, str]] = {}
    counts: dict[str, int] = {}

    def cell(cells: list[str], name: str) -> str:
        return (
            clean(cells[header.index(name)])
            if name in header and header.index(name) < len(cells)
            else ""
        )

    for record in records[1:]:
        cells = record.cells
        workload = cell(cells, "workload")
        position = counts.get(workload, 0)
        counts[workload] = position + 1
        status = cell(cells, "status").split()[0].upper() if cell(cells, "status") else ""
        found[(workload, position)] = (status, cell(cells, "run"))
    return found


def write_plan(path: Path, text: str) -> None:
    """Write the plan file atomically, under the plan lock."""
    with _locked(lock_path(path)):
        _atomic_write(path, text.encode("utf-8"))
