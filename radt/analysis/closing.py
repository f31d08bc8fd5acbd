"""The figures a run logs as it completes: a few headline metrics, tags, and a per-key table.

The launcher and ``radt sync`` hand :func:`summarize` to :func:`radt.record.finalize.finish`
for its ``summary`` step. The figures are those of :func:`radt.analysis.summary.summary` for the
same run, computed from what is at hand when the run closes:

- a lone run or a client: its client window from its own samples (its
  ``script/run/*`` counter is there) and its own device series;
- a workload (parent) run, which closes after its runs: the provider window
  over its runs' windows (their samples artifacts, else their local folders)
  and its own device series;
- ``slowdown``: against the headline metrics the Job's FINISHED ``none`` runs
  logged when they closed (tag ``radt.basis`` and ``radt/time_per_example_ns``
  or ``radt/window_s``), the run itself included when it is one.

MLflow's *Model metrics* tab then shows the script's own metrics and
:data:`HEADLINE` under ``radt/``; the per-key means and maxima go into the
artifact ``radt/summary.csv`` (:func:`key_table`). ``radt.summary`` recomputes
everything from the samples artifacts and is the reference.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radt.analysis.catalog import HEADLINE as HEADLINE_FIGURES
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_BASIS,
    RADT_COLLOCATION,
    RADT_FIGURES,
    RADT_LETTER,
    RADT_WARMUP,
    RADT_WINDOW_NOTE,
    Mode,
    run_kind,
    tag_filter,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    import pyarrow as pa
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from radt.analysis.summary import Record
    from radt.record.runfolder import RunFolder, RunState

log = logging.getLogger(__name__)

METRIC_PREFIX = "radt/"
"""Headline figures in MLflow: ``radt/examples_per_s`` …; never samples."""
HEADLINE = HEADLINE_FIGURES
"""The figures a closing run logs as ``radt/<name>`` (:data:`radt.analysis.catalog.CATALOG`)."""
TABLE_ARTIFACT = "radt/summary.csv"
MAX_TAG = 5000


@dataclass
class Closing:
    """What a closing run logs: ``radt/<figure>`` metrics and tags."""

    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    """Why no figures could be computed (the run completes all the same)."""


def key_table(samples: pa.Table | Iterable[pa.Table]) -> pa.Table:
    """Per key of the samples: ``key, count, mean, min, max`` (the old ``summary/<key>/…``).

    ``samples``: one table, or the tables of a run read a piece at a time (memory then
    holds one piece and a row per key and piece): each piece's count, sum, min and max,
    combined at the end (the mean is the sum over the count).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    partial = []
    for piece in [samples] if isinstance(samples, pa.Table) else samples:
        table = pa.table({"key": piece["key"].cast(pa.string()), "value": piece["value"]})
        partial.append(
            table.group_by("key").aggregate(
                [("value", "count"), ("value", "sum"), ("value", "min"), ("value", "max")]
            )
        )
    if not partial:
        partial.append(
            pa.table({"key": pa.array([], pa.string())}).append_column(
                "value_count", pa.array([], pa.int64())
            )
        )
        for name in ("value_sum", "value_min", "value_max"):
            partial[0] = partial[0].append_column(name, pa.array([], pa.float64()))
    grouped = pa.concat_tables(partial).group_by("key")
    grouped = grouped.aggregate(
        [("value_count", "sum"), ("value_sum", "sum"), ("value_min", "min"), ("value_max", "max")]
    )
    count = grouped["value_count_sum"]
    mean = pc.divide(grouped["value_sum_sum"], pc.cast(count, pa.float64()))
    table = pa.table(
        {
            "key": grouped["key"],
            "count": count,
            "mean": mean,
            "min": grouped["value_min_min"],
            "max": grouped["value_max_max"],
        }
    )
    return table.sort_by("key")


def closing_figures(
    client,
    run_id: str,
    experiment_id: str,
    status: str,
    tags: Mapping[str, str],
    samples: pd.DataFrame | Iterable[pa.Table],
    started_s: float,
    ended_s: float | None,
    examples_metric: float | None = None,
    params: Mapping[str, str] | None = None,
) -> Closing:
    """The headline figures and tags of a run that is completing (see the module docstring).

    ``samples`` are the run's own (tidy ``timestamp, key, value``; or its tables a piece
    at a time, :func:`radt.analysis.loadsamples.file_pieces`, so that memory holds the series the
    figures need, never the whole run), ``tags``
    its tags as they will be (MLflow's and those set at the end), ``status``
    its final status, ``examples_metric`` the last MLflow ``examples`` value.
    The store is read first (a failure there raises: the step is retried by
    ``radt sync``); a figure that cannot be computed never stops the run's
    completion: :attr:`Closing.problem` says why instead.
    """
    from radt.analysis.figures import NAN
    from radt.analysis.summary import Record

    record = Record(
        run_id=run_id,
        experiment_id=experiment_id,
        status=status,
        level=run_kind(tags),
        tags=dict(tags),
        params=dict(params or {}),
        start_s=started_s,
        end_s=ended_s if ended_s else NAN,
        mlflow_examples=NAN if examples_metric is None else float(examples_metric),
    )
    if record.level == "provider":
        kids = _clients_of(client, record)
        candidates: list = []
    else:
        kids, candidates = [], _baselines(client, record)
    try:
        return _figures(record, samples, ended_s, kids, candidates)
    except Exception as exc:  # noqa: BLE001 - the run completes whatever its figures do
        problem = f"the closing figures could not be computed ({type(exc).__name__}: {exc})"
        return Closing(tags={RADT_WINDOW_NOTE: problem[:MAX_TAG]}, problem=problem)


def _figures(record: Record, samples, ended_s, kids, candidates) -> Closing:
    import pandas as pd

    from radt.analysis.baselines import _slowdown
    from radt.analysis.figures import NAN
    from radt.analysis.levels import _client, _loader, _provider
    from radt.analysis.stored import run_series

    pieces = [samples] if isinstance(samples, pd.DataFrame) else samples
    record.series, record.timeline = run_series(pieces, record.tags)
    t = record.timeline
    if not (math.isfinite(t.command_start_s) and math.isfinite(t.command_end_s)) and ended_s:
        # The whole run, as before windows: not while radT stopped listeners after it.
        record.series = {
            name: (seconds[seconds <= ended_s], values[seconds <= ended_s])
            for name, (seconds, values) in record.series.items()
        }
    closing = Closing()
    if record.level == "provider":
        if kids is None:
            closing.tags[RADT_WINDOW_NOTE] = (
                "provider figures: a run's samples were not available when the workload closed; "
                "radt.summary computes them from the artifacts"
            )
            return closing
        clients = [kid for kid in kids if kid.level == "client"]
        loaders = [kid for kid in kids if kid.level == "loader"]
        for kid in clients:
            _client(kid, record, len(clients))
        for kid in loaders:
            _loader(kid)
        _provider(record, clients, loaders)
    elif record.level == "loader":
        _loader(record)
    else:
        _client(record, None, 1)
        if record.baseline_candidate:
            candidates = [*candidates, record]
        record.figures.update(_slowdown(record, candidates))
    for name in HEADLINE:
        value = record.window.seconds if name == "window_s" else record.figures.get(name, NAN)
        if value is not None and math.isfinite(value):
            closing.metrics[name] = float(value)
    closing.tags[RADT_BASIS] = record.basis
    closing.tags[RADT_WARMUP] = record.window.warmup
    notes = "; ".join(dict.fromkeys(record.notes))
    if notes:
        closing.tags[RADT_WINDOW_NOTE] = notes[:MAX_TAG]
    return closing


def _baselines(client, record: Record) -> list[Record]:
    """The FINISHED ``none`` runs of the experiment with the headline figures they logged."""
    from radt.analysis.figures import NAN
    from radt.analysis.loadruns import search_all
    from radt.analysis.summary import Record

    found = []
    runs = search_all(
        client,
        [record.experiment_id],
        f"{tag_filter(RADT_COLLOCATION, Mode.NONE)} and attributes.status = 'FINISHED'",
    )
    for run in runs:
        if run.info.run_id == record.run_id:
            continue
        candidate = Record.of(run, run_kind(run.data.tags))
        basis = run.data.tags.get(RADT_BASIS)
        if basis is None:
            continue  # recorded before radT logged its basis: radt.summary has it
        metric = "window_s" if basis.startswith("duration") else "time_per_example_ns"
        candidate.basis_ = basis
        candidate.work = float(run.data.metrics.get(METRIC_PREFIX + metric, NAN))
        if candidate.baseline_candidate:
            found.append(candidate)
    return found


def _clients_of(client, record: Record) -> list[Record] | None:
    """The workload's runs with their samples; None when one's samples cannot be read."""
    from radt.analysis.loadruns import search_all
    from radt.analysis.loadsamples import KeyFilter, file_pieces, samples_file
    from radt.analysis.summary import SUMMARY_KEYS, Record, run_series
    from radt.record.runfolder import radt_home

    runs = search_all(
        client, [record.experiment_id], tag_filter(MLFLOW_PARENT_RUN_ID, record.run_id)
    )
    runs.sort(key=lambda r: (r.data.tags.get(RADT_LETTER) or "", r.info.start_time or 0))
    kids = []
    for run in runs:
        path = samples_file(client, run, radt_home() / "cache", compacted_here)
        if path is None:
            return None
        kid = Record.of(run, run_kind(run.data.tags))
        try:  # a piece at a time: memory holds the series, not the run's samples
            kid.series, kid.timeline = run_series(
                file_pieces(path, KeyFilter(SUMMARY_KEYS)), kid.tags
            )
        except Exception:  # noqa: BLE001 - a damaged file: radt.summary reports it later
            return None
        kids.append(kid)
    return kids


def compacted_here(run_id: str) -> Path | None:
    """The run's compacted samples in its run folder on this machine, if it is there: a run
    of a workload closed by this radT keeps its folder until the workload run has closed, so
    that the workload run reads them rather than download what was just uploaded."""
    from radt.record.runfolder import runs_root

    local = runs_root() / run_id / "samples.parquet"
    return local if local.is_file() else None


def summarize(
    client: MlflowClient,
    folder: RunFolder,
    state: RunState,
    warn: Callable[[str], None] = lambda message: None,
    samples_path: Path | None = None,
) -> list[Metric]:
    """The run's summary, :func:`radt.record.finalize.finish`'s ``summary`` step: the
    per-key table, the headline metrics and tags.

    Writes ``radt/summary.csv`` (per key: count, mean, min, max; uploaded with
    the other attachments), adds ``radt.basis``, ``radt.warmup`` and
    ``radt.window_note`` to the tags set at the end, and returns the headline
    figures over the run's window as ``radt/<figure>`` metrics (see
    this module). The samples are read from ``samples_path``
    (default: the folder's compacted ``samples.parquet``).
    """
    from mlflow.entities import Metric

    from radt.analysis.loadsamples import KeyFilter, file_pieces
    from radt.analysis.summary import SUMMARY_KEYS

    # the samples a piece at a time: memory stays flat however long the run was
    path = samples_path or folder.path / "samples.parquet"
    table = key_table(file_pieces(path, KeyFilter(None)))
    if table.num_rows:
        target = folder.attachments / TABLE_ARTIFACT
        target.parent.mkdir(parents=True, exist_ok=True)
        table.to_pandas().to_csv(target, index=False)
    run = client.get_run(state.run_id)
    tags = {**run.data.tags, **state.tags}
    closing = closing_figures(
        client,
        state.run_id,
        state.experiment_id,
        state.status,
        tags,
        file_pieces(path, KeyFilter(SUMMARY_KEYS)),
        state.started_s,
        state.ended_s,
        run.data.metrics.get("examples"),
        run.data.params,
    )
    if closing.problem:
        warn(f"run {state.run_id}: {closing.problem}; radt.summary computes them from the samples")
    state.tags.update(closing.tags)
    when = round((state.ended_s or state.started_s) * 1000)
    _store_figures(client, run, state, {**tags, **closing.tags}, when, path)
    return [
        Metric(METRIC_PREFIX + name, closing.metrics[name], when, 0)
        for name in HEADLINE
        if name in closing.metrics and math.isfinite(closing.metrics[name])
    ]


def _store_figures(
    client: MlflowClient, run: Any, state: RunState, tags: dict, end_ms: int, path: Path
) -> None:
    """Store the window figures of the family the run completes (:mod:`radt.analysis.stored`):
    its own with the tags set at the end, its workload's runs' at once."""
    from radt.analysis.stored import family_figures

    try:
        values = family_figures(client, run, state.status, end_ms, tags, path, local=compacted_here)
    except Exception as exc:  # noqa: BLE001 - looks then compute them from the samples
        log.warning(
            "run %s: window figures not stored (%s: %s)", state.run_id, type(exc).__name__, exc
        )
        return
    for run_id, value in values.items():
        if run_id == state.run_id:
            state.tags[RADT_FIGURES] = value
        else:
            client.set_tag(run_id, RADT_FIGURES, value)
