"""The figures of a study: time and energy per example for providers (workloads) and clients (runs).

Vocabulary (DESIGN.md, "Analysis vocabulary"; docs/analysis.md defines every column):

- a **provider** row is a workload: its parent run, which records the
  device-wide series (power, energy, utilisation) of the GPUs the workload used;
- a **client** row is one training process of a workload (a child run);
- a **loader** row is a workload's shared data loader (a ``Role=loader`` plan
  row, tag ``radt.role=loader``): not a client, but its CPU is the workload's;
- a **run** row is a lone command (``radt train.py``): no parent, no children;
  it is its own provider and client, so both kinds of figures are its own.

Every figure is over a **window** (:mod:`radt.analysis.windows`): a client's
steady state (end of warm-up to last example), a provider's overlap of its
clients' windows. ``basis`` says what a row's figures are over:
``examples`` (a window with examples), ``duration`` (no examples: the command's
own duration), and for runs without counter samples (recorded before the
run-API channel, or a script that logs the metric ``examples`` itself)
``examples_lifetime`` / ``duration_lifetime``: the whole run, as radT 0.3.0.dev
reported it. Figures on different bases are never compared with each other.

Attribution: a provider's energy is that of its parent run's series. A client
with device series of its own (a lone run, or a listener that records per run)
has its own energy; a client that is the only run of its workload gets the
workload's energy and device figures over its own window (the GPU was its
alone); a collocated client's share of the GPU is not measured (NVML has no
power per MIG slice or per MPS client), so its energy is NaN and
``energy_method`` is ``none``; :mod:`radt.analysis.attribution` adds its
labelled estimate (``energy_j_est``), the energy cross-check and host energy.
CPU is per process tree (``top``): a client's own, a provider's the sum of its
clients' and its shared loader's, each across the window.
Units: ns = 1e9 × s, nJ = 1e9 × J.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from radt.analysis.attribution import (
    attribute,
)
from radt.analysis.baselines import (
    BASELINE_SPREAD_LIMIT_PCT,
    _norm_client,
    _norm_provider,
    _slowdown,
    baseline_spread_flagged,
    baseline_spread_pct,
    baselines_by_job,
)
from radt.analysis.catalog import CATALOG
from radt.analysis.distributed import JOB_COLUMNS, job_rows
from radt.analysis.figures import (
    NAN,
)
from radt.analysis.levels import NO_GPU_NOTE
from radt.analysis.loadruns import (
    OLDEST_FIRST,
    SEARCH_PAGE_RUNS,
    grouping,
    open_client,
    probe,
    run_columns,
    search_all,
    select_runs,
)
from radt.analysis.loadsamples import prepare
from radt.analysis.prefetch import first_page
from radt.analysis.runtree import (
    SHARED_LOADER,
    Record,
    _order,
    _seconds,
    configuration_label,
    job_of,
    loader_mode,
    strip_flags,
    workload_configuration,
)
from radt.analysis.stored import SUMMARY_KEYS, _compute, restore, run_series
from radt.analysis.tables import REPEAT_FIGURES, loader_comparison, repeats
from radt.errors import UsageError
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_COLLOCATION,
    RADT_COMMAND,
    RADT_SLURM_ARRAY_JOB_ID,
    RADT_SLURM_ARRAY_TASK_ID,
    RADT_SLURM_JOB_ID,
    RADT_SLURM_NODE,
    Mode,
    RunKind,
    RunTree,
)

__all__ = [
    "BASELINE_SPREAD_LIMIT_PCT",
    "COLUMNS",
    "NO_GPU_NOTE",
    "REPEAT_FIGURES",
    "SHARED_LOADER",
    "SUMMARY_KEYS",
    "Record",
    "baseline_spread_flagged",
    "baseline_spread_pct",
    "configuration_label",
    "job_of",
    "loader_comparison",
    "loader_summary",
    "repeats",
    "repeats_summary",
    "run_series",
    "strip_flags",
    "summary",
]
"""With what the summary is made of, from the modules that make it (run tree, per-level
figures, baselines, tables), as before they were split out."""

if TYPE_CHECKING:
    import pandas as pd


SLURM_COLUMNS = ("slurm_job_id", "slurm_node")
"""The Slurm job a run ran in, as squeue and a ``--slurm`` submission name it (``7_0``, the
array job id _ the task, for an array task; else ``radt.slurm.job_id``), and its node."""


def slurm_job(tags: dict[str, str]) -> str | None:
    """The Slurm job of a run with these tags: ``<array job id>_<task>`` or the job id."""
    array, task = tags.get(RADT_SLURM_ARRAY_JOB_ID), tags.get(RADT_SLURM_ARRAY_TASK_ID)
    if array and task:
        return f"{array}_{task}"
    return tags.get(RADT_SLURM_JOB_ID)


COLUMNS = (
    "level",
    "run_id",
    "run_name",
    "workload",
    "letter",
    "parent_run_id",
    "status",
    "collocation",
    "mig_profile",
    "mps_thread_pct",
    "power_limit_w",
    "gpu_clock_mhz",
    "job",
    "configuration",
    "loader",
    "command",
    "params",
    "start",
    "end",
    *(figure.name for figure in CATALOG),
    "window_note",
    "experiment_id",
    *SLURM_COLUMNS,
    *JOB_COLUMNS,
)
"""The summary's columns: the run's identity, its figures (:data:`radt.analysis.catalog.CATALOG`),
why any is missing."""


# --------------------------------------------------------------------------- rows


def _params(run) -> str | None:
    params = {k: v for k, v in run.data.params.items() if k != RADT_COMMAND}
    return " ".join(f"{k}={v}" for k, v in sorted(params.items())) or None


def _stamp_s(seconds: float):
    import pandas as pd

    return pd.Timestamp(seconds, unit="s", tz="UTC") if math.isfinite(seconds) else pd.NaT


def _mps(value: str | None) -> float:
    try:
        return float(value) if value is not None else NAN
    except ValueError:
        return NAN


def _row(record: Record, configuration: str) -> dict:
    run = record.run
    tags = run_columns(run)
    info = run.info
    window = record.window
    duration = (
        (info.end_time - info.start_time) / 1000.0
        if info.end_time is not None and info.start_time
        else NAN
    )
    row = {
        "level": record.level,
        "run_id": info.run_id,
        "run_name": tags["run_name"],
        "workload": tags["workload"],
        "letter": tags["letter"],
        "parent_run_id": tags["parent_run_id"],
        "status": tags["status"],
        "collocation": tags["collocation"],
        "mig_profile": tags["mig_profile"],
        "mps_thread_pct": _mps(tags["mps_thread_pct"]),
        "power_limit_w": tags["power_limit_w"],
        "gpu_clock_mhz": record.clock,
        "job": record.job,
        "configuration": configuration,
        "loader": loader_mode(run.data.tags),
        "command": run.data.tags.get(RADT_COMMAND),
        "params": _params(run),
        "start": _stamp_s(_seconds(info.start_time)),
        "end": _stamp_s(_seconds(info.end_time)),
        "duration_s": duration,
        "basis": record.basis,
        "warmup": window.warmup,
        "window_start": _stamp_s(window.start_s),
        "window_end": _stamp_s(window.end_s),
        "window_s": window.seconds,
        "examples_total": record.examples_total,
        "examples": window.examples,
        "energy_method": record.method,
        "slowdown": NAN,
        "baseline_run_id": None,
        "baseline_cv_pct": NAN,
        "experiment_id": info.experiment_id,
        "slurm_job_id": slurm_job(run.data.tags),
        "slurm_node": run.data.tags.get(RADT_SLURM_NODE),
    }
    row.update(record.figures)
    return row


def summary(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
    by: str | None = None,
) -> pd.DataFrame:
    """One row per workload (``provider``), per run of one (``client``), per lone run (``run``).

    Args:
        experiment: experiment name or id; all its runs unless ``runs`` narrows them.
        runs: run ids; the workload of each is added (its provider row).
        tracking_uri: else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.
        cache_dir: where samples artifacts are cached (default ``$RADT_HOME/cache``).
        by: another table instead, as before the tables had names of their own:
            ``"repeats"``: :func:`repeats_summary`; ``"loader"``: :func:`loader_summary`;
            ``"phases"``: :func:`radt.analysis.phases.phases`.

    Returns:
        The columns of :data:`COLUMNS`, a workload's provider row first and its
        clients after it (by letter), in order of start. docs/analysis.md
        defines each; in short:

        - ``job``, ``configuration``: what was trained and how the GPU was shared
          (``+ shared loader`` when the trainings shared one data loader);
          ``loader``: ``shared`` or ``own``;
        - ``basis``, ``warmup``, ``window_start``, ``window_end``, ``window_s``:
          the window every figure of the row is over and what set its start;
        - ``examples``: the examples in the window; ``examples_total``: the
          run's (a provider's: its clients') whole count;
        - ``examples_per_s``, ``time_per_example_ns`` (1e9 × window_s /
          examples), ``energy_j`` (GPU energy across the window),
          ``energy_method``, ``energy_per_example_nj`` (1e9 × energy_j /
          examples), and power, utilisation, SM activity and memory from the
          samples inside the window;
        - ``cpu_s``: CPU core-seconds of the process tree across the window (a
          workload: of all its runs, its shared loader included);
          ``cpu_per_example_ns`` (1e9 × cpu_s / examples);
        - ``duration_s``: the run's MLflow wall time (end − start), as before;
        - ``slowdown``: the client's time per example (on the duration basis:
          its window) over the mean of its baseline's repeats
          (``baseline_run_id``, space-separated): the FINISHED ``none`` runs of
          its Job on the same basis at the same power limit, else at the default;
          ``baseline_cv_pct``: how far those repeats spread (coefficient of
          variation, %; flagged over :data:`BASELINE_SPREAD_LIMIT_PCT`);
        - ``*_norm``: figures over the Job's ``none`` baseline at the default
          power limit (a provider: over what the baselines would need for the
          same examples);
        - ``energy_counter_j``, ``energy_power_integral_j``,
          ``energy_crosscheck_pct``: the counter against integrated power;
          ``host_energy_j`` (CPU + DRAM, rapl) and per example,
          ``total_energy_per_example_nj``; a collocated client's estimate
          ``energy_j_est`` by ``energy_est_method``; the idle floor
          (:mod:`radt.analysis.attribution`);
        - ``window_note``: why a figure is missing, ``; ``-separated.
    """
    if by is not None:
        tables = {"repeats": repeats_summary, "loader": loader_summary, "phases": _phases}
        if by not in tables:
            raise UsageError(f"by= takes 'repeats', 'phases', 'loader' or nothing, not {by!r}")
        return tables[by](experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir)
    ahead = experiment if runs is None else None  # its search: asked while MLflow is imported
    with first_page(tracking_uri, ahead, SEARCH_PAGE_RUNS, OLDEST_FIRST):
        return _summary(experiment, runs, tracking_uri, cache_dir)


def _summary(
    experiment: str | None,
    runs: Iterable[str] | None,
    tracking_uri: str | None,
    cache_dir: Path | None,
) -> pd.DataFrame:
    """:func:`summary`'s rows of the runs ``experiment`` and ``runs`` select."""
    import pandas as pd

    client = open_client(tracking_uri)
    chosen = select_runs(client, experiment, runs, include_workload=True)
    if runs is None:
        context = chosen
    else:
        context = search_all(client, sorted({r.info.experiment_id for r in chosen}))
    # a study's run and its batch-size probes are no measurements of their own
    chosen = [r for r in chosen if not (grouping(r) or probe(r))]
    context = [r for r in context if not (grouping(r) or probe(r))]
    by_id = {r.info.run_id: r for r in [*context, *chosen]}
    tree = RunTree(by_id.values())
    children = tree.children
    records = {run.info.run_id: Record.of(run, tree.kind(run)) for run in by_id.values()}
    parents = {i for i, record in records.items() if record.level == RunKind.WORKLOAD}
    chosen_ids = {r.info.run_id for r in chosen}
    wanted = set(chosen_ids)
    for pid in chosen_ids & parents:
        wanted |= {k.info.run_id for k in children.get(pid, [])}
    jobs = {(records[i].experiment_id, records[i].job) for i in wanted if records[i].job}
    for record in records.values():  # baselines of the chosen runs' jobs, with their workloads
        same_job = (record.experiment_id, record.job) in jobs
        alone = record.tags.get(RADT_COLLOCATION) in (Mode.NONE, None)
        if record.level != "provider" and same_job and alone:
            wanted.add(record.run_id)
            parent = record.tags.get(MLFLOW_PARENT_RUN_ID)
            if parent in records:
                wanted.add(parent)
    needed = [by_id[i] for i in sorted(wanted, key=lambda i: _order(by_id[i]))]
    stored = restore(records, [run.info.run_id for run in needed], children)
    needed = [run for run in needed if run.info.run_id not in stored]
    plans = prepare(client, needed, cache_dir=cache_dir)
    extra = _compute(client, records, plans, children)
    attribute(records, needed, extra, children)

    baselines = baselines_by_job(
        sorted(
            (r for r in (records[i] for i in wanted) if r.baseline_candidate),
            key=lambda r: (r.start_s, r.run_id),
        )
    )
    rows: dict[str, dict] = {}
    for run in chosen:
        record = records[run.info.run_id]
        kids = [records[k.info.run_id] for k in children.get(record.run_id, [])]
        if record.level == "provider":
            clients = [k for k in kids if k.level == "client"]
            shared = loader_mode(record.tags) == "shared"
            row = _row(record, workload_configuration([k.tags for k in clients], shared))
            row["job"] = " + ".join(dict.fromkeys(k.job for k in clients if k.job)) or None
            row["command"] = " | ".join(k.tags.get(RADT_COMMAND, "?") for k in clients) or None
            row["params"] = None
            row.update(_norm_provider(record, clients, baselines))
            parent = None
        else:
            parent = records.get(record.tags.get(MLFLOW_PARENT_RUN_ID) or "")
            kin = (
                [records[s.info.run_id] for s in children.get(parent.run_id, [])] if parent else []
            )
            siblings = [k for k in kin if k.level == "client"] if parent else [record]
            shared = loader_mode(record.tags) == "shared"
            row = _row(record, workload_configuration([s.tags for s in siblings], shared))
            if record.level != "loader":
                row.update(_slowdown(record, baselines))
                row.update(_norm_client(record, baselines))
        gpu = record.has_device or (
            record.level == "client" and parent is not None and parent.has_device
        )
        if not gpu and record.level != "loader":
            record.notes.append(NO_GPU_NOTE)
        row["window_note"] = "; ".join(dict.fromkeys(record.notes)) or None
        rows[record.run_id] = row

    ordered: list[dict] = []
    for run in chosen:  # oldest first; a workload's clients follow its provider row
        run_id = run.info.run_id
        parent = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
        if parent in rows:
            continue
        ordered.append(rows[run_id])
        ordered.extend(
            rows[k.info.run_id] for k in children.get(run_id, []) if k.info.run_id in rows
        )
    frame = pd.DataFrame(ordered, columns=list(COLUMNS))
    for column in ("start", "end", "window_start", "window_end"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    frame = job_rows(frame, by_id)
    return frame


def repeats_summary(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """The :func:`repeats` of the :func:`summary` of these runs: one row per Job ×
    configuration × power limit × basis, for providers and clients."""
    frame = summary(experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir)
    return repeats(frame)


def loader_summary(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """The :func:`loader_comparison` of the :func:`summary` of these runs: own loaders
    against one shared loader, per Job and configuration."""
    frame = summary(experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir)
    return loader_comparison(frame)


def _phases(experiment, runs, *, tracking_uri, cache_dir) -> pd.DataFrame:
    from radt.analysis.phases import phases

    return phases(experiment, runs, tracking_uri=tracking_uri, cache_dir=cache_dir)
