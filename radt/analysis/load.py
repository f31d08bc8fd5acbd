"""Loading recorded runs into pandas: tidy (one row per sample) or wide (one column per key).

Where the samples of a run come from:

- a run that has ended (FINISHED, FAILED or KILLED) is read from its
  ``radt/samples.parquet`` artifact, every sample at full rate. The artifact is
  downloaded once into ``<cache_dir>/<run_id>/samples.parquet`` (default
  ``$RADT_HOME/cache``; a finished run's artifact does not change) and only
  the keys and times asked for are kept, filtering on the dictionary of keys
  before anything is decoded;
- a run that is still RUNNING (its artifact does not exist yet), or one that
  has no such artifact (made by the original radT, by MLflow's own system
  metrics or by plain ``mlflow.log_metric``), is read from MLflow's metric
  history instead, one ``get_metric_history`` per key, many at once. For radT's
  own keys that is the decimated stream (about one mean point per second);
- the metrics the training script logs itself (``loss``, ``examples``,
  ``epoch`` …) are not in the artifact: they are read from the metric history
  of every run, with the listener ``mlflow``.

Keys are radT's (``nvml/gpu0/power_w``): MLflow's ``system/`` prefix is
stripped. The figures radT logs when a run completes (``radt/...``; runs recorded
before windows have ``summary/...``) are not samples and are never loaded (see
:func:`radt.summary`).
"""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeAlias

from radt.errors import AnalysisError
from radt.tags import (
    JOB_ROLE,
    MLFLOW_PARENT_RUN_ID,
    RADT_COLLOCATION,
    RADT_GROUP_ROLE,
    RADT_LETTER,
    RADT_MIG_PROFILE,
    RADT_MPS_THREAD_PCT,
    RADT_POWER_LIMIT_W,
    RADT_PROBE,
    RADT_STUDY_FILE,
    RADT_WORKLOAD,
    tag_filter,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# numpy, pandas and pyarrow are imported where they are used, so that
# ``import radt`` (which exports load, load_wide and summary) stays light.

SAMPLES_ARTIFACT = "radt/samples.parquet"
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
MLFLOW_PREFIX = "system/"
SUMMARY_PREFIX = "summary/"
HEADLINE_PREFIX = "radt/"
"""The headline figures radT logs when a run completes (``radt/examples_per_s`` …)."""
SCRIPT_LISTENER = "mlflow"
"""The ``listener`` of the metrics a training script logs itself."""
MAX_THREADS = 16

TAG_COLUMNS: dict[str, str | None] = {
    "run_name": None,
    "status": None,
    "parent_run_id": MLFLOW_PARENT_RUN_ID,
    "workload": RADT_WORKLOAD,
    "collocation": RADT_COLLOCATION,
    "mig_profile": RADT_MIG_PROFILE,
    "mps_thread_pct": RADT_MPS_THREAD_PCT,
    "power_limit_w": RADT_POWER_LIMIT_W,
    "letter": RADT_LETTER,
}
"""Run columns of the tidy frame and the MLflow tag each comes from (None: run info)."""
SAMPLE_COLUMNS = ("run_id", "key", "timestamp", "value", "listener", "entity")
TIDY_COLUMNS = (*SAMPLE_COLUMNS, *TAG_COLUMNS)


@cache
def _arrow() -> SimpleNamespace:
    """The Arrow types and schemas of samples (built on first use): a samples artifact's, and
    the tidy frame's with the run's columns."""
    import pyarrow as pa

    from radt.record.compact import ARTIFACT_SCHEMA as samples
    from radt.record.compact import STAMP as stamp
    from radt.record.compact import TEXT as text

    tidy = pa.schema(
        [
            ("run_id", text),
            ("key", text),
            ("timestamp", stamp),
            ("value", pa.float64()),
            ("listener", text),
            ("entity", text),
            *((name, text) for name in TAG_COLUMNS),
        ]
    )
    return SimpleNamespace(text=text, stamp=stamp, samples=samples, tidy=tidy)


TimeBound: TypeAlias = "datetime | date | pd.Timestamp | str | float | int | timedelta | None"
"""A ``start``/``end`` bound: absolute (datetime, Timestamp, ISO string; naive means
UTC) or relative to each run's start (seconds as a number, or a timedelta)."""


# --------------------------------------------------------------------------- store


def open_client(tracking_uri: str | None = None):
    """An ``MlflowClient`` for ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.

    Raises AnalysisError when no store is named and ./mlflow.db does not exist
    (rather than creating an empty one), TrackingUnreachable when the store
    does not answer.
    """
    from radt.tracking import DEFAULT_DB, connect, resolve_tracking_uri

    uri, embedded = resolve_tracking_uri(tracking_uri)
    if embedded and not (Path.cwd() / DEFAULT_DB).exists():
        raise AnalysisError(
            f"no tracking store: MLFLOW_TRACKING_URI is not set and there is no {DEFAULT_DB} "
            f"in {Path.cwd()}; set it, pass --tracking-uri (tracking_uri=), "
            "or work in the folder where radT ran"
        )
    return connect(uri)


def find_experiment(client, name_or_id: str):
    """The experiment named (or numbered) ``name_or_id``; AnalysisError when there is none."""
    experiment = client.get_experiment_by_name(str(name_or_id))
    if experiment is None and str(name_or_id).isdigit():
        with contextlib.suppress(Exception):
            experiment = client.get_experiment(str(name_or_id))
    if experiment is None or experiment.lifecycle_stage == "deleted":
        raise AnalysisError(
            f"no experiment named {name_or_id!r} at {_store_name(client)}; "
            "`radt runs` lists the experiments (as does `mlflow experiments search`)"
        )
    return experiment


_SHARED_SEARCHES: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "radt_shared_searches", default=None
)


@contextlib.contextmanager
def searches_shared() -> Iterator[None]:
    """Within the block, :func:`search_all` asks the store each search once: the parts of one
    answer (a report's summary, phases and study facts) read the same experiment's runs."""
    token = _SHARED_SEARCHES.set({})
    try:
        yield
    finally:
        _SHARED_SEARCHES.reset(token)


def search_all(client, experiment_ids: Sequence[str], filter_string: str = "") -> list:
    """Every active run of the experiments (all pages), oldest first (asked once per search
    inside :func:`searches_shared`)."""
    shared = _SHARED_SEARCHES.get()
    key = (getattr(client, "tracking_uri", id(client)), tuple(experiment_ids), filter_string)
    if shared is not None and key in shared:
        return list(shared[key])
    found = _search_pages(client, experiment_ids, filter_string)
    if shared is not None:
        shared[key] = found
    return list(found)


def _search_pages(client, experiment_ids: Sequence[str], filter_string: str) -> list:
    found: list = []
    token = None
    while True:
        page = client.search_runs(
            list(experiment_ids),
            filter_string,
            max_results=10_000,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        found.extend(page)
        token = page.token
        if not token:
            return found


def select_runs(
    client,
    experiment: str | None,
    runs: Iterable[str] | None,
    include_workload: bool = True,
) -> list:
    """The MLflow runs that ``experiment`` and ``runs`` select, oldest first.

    With both, the runs must belong to the experiment. A selected job run of a distributed
    training comes with its node runs (:func:`with_nodes`): they hold its samples. With
    ``include_workload``, the workload (parent) run of each selected run is added: the
    device-wide series (power, energy) of a workload are recorded in its parent run.
    """
    if experiment is None and runs is None:
        raise AnalysisError("name an experiment (experiment=, -e) or runs (runs=, --runs)")
    exp = find_experiment(client, experiment) if experiment is not None else None
    if runs is None:
        return search_all(client, [exp.experiment_id])
    wanted = list(dict.fromkeys(str(r) for r in ([runs] if isinstance(runs, str) else runs)))
    chosen = [_get_run(client, run_id) for run_id in wanted]
    if exp is not None:
        outside = [r.info.run_id for r in chosen if r.info.experiment_id != exp.experiment_id]
        if outside:
            raise AnalysisError(
                f"run {outside[0]} is not in experiment {exp.name!r}; "
                "leave out -e/experiment= or choose runs of that experiment"
            )
    chosen = with_nodes(client, chosen)
    if include_workload:
        have = {r.info.run_id for r in chosen}
        for run in list(chosen):
            parent = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
            if parent and parent not in have and not grouping(run):
                with contextlib.suppress(AnalysisError):
                    found = _get_run(client, parent)
                    if not grouping(found):  # a study's run is not a workload
                        chosen.append(found)
                    have.add(parent)
    return sorted(chosen, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def with_nodes(client, runs: Sequence) -> list:
    """``runs`` and, after each job run of a distributed training among them, its node runs
    (the runs that name it their parent), each once: a job run holds only its figures,
    its nodes the samples. A node run brings no other node (its job is its workload, added by
    :func:`select_runs`). The one expansion of a job that ``radt.load``, ``radt export`` and
    the UI share."""
    found = list(runs)
    have = {r.info.run_id for r in found}
    for job in [r for r in runs if r.data.tags.get(RADT_GROUP_ROLE) == JOB_ROLE]:
        for node in search_all(
            client, [job.info.experiment_id], tag_filter(MLFLOW_PARENT_RUN_ID, job.info.run_id)
        ):
            if node.info.run_id not in have:
                found.append(node)
                have.add(node.info.run_id)
    return found


def grouping(run) -> bool:
    """Whether ``run`` only groups others: a study's run (tag ``radt.study_file``) or a
    batch-size search's (``radt.probe=search``); it has no samples or figures of its own."""
    tags = run.data.tags
    return RADT_STUDY_FILE in tags or tags.get(RADT_PROBE) == "search"


def probe(run) -> bool:
    """Whether ``run`` belongs to a batch-size search (tag ``radt.probe``): not a measurement."""
    return RADT_PROBE in run.data.tags


def _get_run(client, run_id: str):
    try:
        return client.get_run(run_id)
    except Exception as exc:
        raise AnalysisError(
            f"no run with id {run_id!r} at {_store_name(client)} ({_first_line(exc)})"
        ) from exc


def _store_name(client) -> str:
    from radt.tracking import redact

    inner = getattr(client, "_tracking_client", None)
    return redact(str(getattr(inner, "tracking_uri", None) or "the tracking store"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def run_columns(run) -> dict[str, str | None]:
    """The run columns of the tidy frame for one MLflow run (``-`` tags become None)."""
    tags = run.data.tags
    values: dict[str, str | None] = {}
    for column, tag in TAG_COLUMNS.items():
        if column == "run_name":
            value = run.info.run_name
        elif column == "status":
            value = run.info.status
        else:
            value = tags.get(tag)
        values[column] = None if value in (None, "", "-") else str(value)
    return values


# --------------------------------------------------------------------------- keys and times


class KeyFilter:
    """Exact keys and shell-style patterns (``nvml/*/power_w``; ``*`` also matches ``/``)."""

    def __init__(self, keys: Iterable[str] | None) -> None:
        if isinstance(keys, str):
            keys = [keys]
        self.everything = keys is None
        wanted = [k[len(MLFLOW_PREFIX) :] if k.startswith(MLFLOW_PREFIX) else k for k in keys or []]
        self.exact = {k for k in wanted if not any(c in k for c in "*?[")}
        self.patterns = [k for k in wanted if k not in self.exact]

    def __call__(self, key: str) -> bool:
        """Whether ``key`` (without ``system/``) is asked for."""
        if self.everything or key in self.exact:
            return True
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.patterns)


def _bound(value: TimeBound, run_start: pd.Timestamp) -> pd.Timestamp | None:
    """An absolute UTC bound: numbers and timedeltas count from the run's start."""
    import numpy as np
    import pandas as pd

    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("start/end must be a time, a timedelta or seconds, not a bool")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return run_start + pd.Timedelta(seconds=float(value))
    if isinstance(value, (timedelta, pd.Timedelta)):
        return run_start + pd.Timedelta(value)
    stamp = pd.Timestamp(value)
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def run_start(run) -> pd.Timestamp:
    """The run's MLflow start time, UTC."""
    import pandas as pd

    return pd.Timestamp(run.info.start_time or 0, unit="ms", tz="UTC")


def describe_key(mlflow_key: str) -> tuple[str, str, str]:
    """An MLflow metric name as ``(key, listener, entity)`` of the tidy frame.

    ``system/nvml/gpu0/power_w`` → ``(nvml/gpu0/power_w, nvml, gpu0)`` (as the
    samples artifact has it); the original radT's ``system/SMI - Power Draw`` →
    listener ``smi``; MLflow's own ``system/gpu_0_power_usage_watts`` → listener
    ``system``; a metric of the training script (``loss``) → listener ``mlflow``.
    """
    from radt.record.spool import _split_key

    if not mlflow_key.startswith(MLFLOW_PREFIX):
        return mlflow_key, SCRIPT_LISTENER, ""
    key = mlflow_key[len(MLFLOW_PREFIX) :]
    if key.count("/") >= 2:
        listener, entity = _split_key(key)
        return key, listener, entity
    if " - " in key:
        return key, key.split(" - ", 1)[0].strip().lower() or "system", ""
    return key, "system", ""


# --------------------------------------------------------------------------- sources


@dataclass
class _Plan:
    """What to read for one run."""

    run: Any
    lo: pd.Timestamp | None
    hi: pd.Timestamp | None
    artifact: Path | None = None
    source: str = "metrics"


def cached_samples(client, run, cache_dir: Path) -> Path | None:
    """The local copy of the run's samples artifact, downloaded on first use; None if absent.

    Only a run that has ended is cached (its artifact no longer changes). The
    download lands in a temporary folder beside the cache entry and is renamed
    into place, so an interrupted download never leaves a partial file.
    """
    return cached_artifact(client, run, cache_dir, SAMPLES_ARTIFACT)


def cached_artifact(client, run, cache_dir: Path, artifact: str) -> Path | None:
    """The local copy of one artifact file of an ended run (as :func:`cached_samples`)."""
    import tempfile

    run_id = run.info.run_id
    target = cache_dir / run_id / Path(artifact).name
    if target.exists():
        return target
    if run.info.status not in TERMINAL:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=target.parent))
    try:
        try:
            local = client.download_artifacts(run_id, artifact, str(scratch))
        except Exception:
            return None  # no artifact: the run is read from its metric history
        if not Path(local).is_file():
            return None
        os.replace(local, target)
        return target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def read_samples(
    path: Path,
    keys: KeyFilter,
    lo: pd.Timestamp | None = None,
    hi: pd.Timestamp | None = None,
) -> pa.Table:
    """The samples of one ``samples.parquet`` file whose key ``keys`` accepts, within [lo, hi].

    The artifact is read through its key index: only the row groups holding the
    keys and times asked for (:mod:`radt.analysis.artifact`).
    """
    from radt.analysis.artifact import Artifact

    table = Artifact(path).read(keys, keys.everything, _lo_us(lo), _hi_us(hi))
    return _conform(table)


def _lo_us(bound: pd.Timestamp | None) -> int | None:
    """A lower time bound as whole microseconds (``timestamp >= bound``)."""
    return None if bound is None else -(-bound.value // 1000)


def _hi_us(bound: pd.Timestamp | None) -> int | None:
    """An upper time bound as whole microseconds (``timestamp <= bound``)."""
    return None if bound is None else bound.value // 1000


def _conform(table: pa.Table) -> pa.Table:
    """Cast to the samples schema (dictionary keys, UTC microseconds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for field in _arrow().samples:
        column = table.column(field.name)
        if pa.types.is_dictionary(field.type) and not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column.cast(pa.string()))
        columns.append(column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=_arrow().samples)


def metric_history(
    client,
    run_id: str,
    mlflow_key: str,
    lo: pd.Timestamp | None = None,
    hi: pd.Timestamp | None = None,
) -> pa.Table:
    """One metric's whole history as samples (the key as :func:`describe_key` names it)."""
    import numpy as np
    import pyarrow as pa

    points = client.get_metric_history(run_id, mlflow_key)
    key, listener, entity = describe_key(mlflow_key)
    millis = np.fromiter((p.timestamp for p in points), np.int64, len(points))
    values = np.fromiter((p.value for p in points), np.float64, len(points))
    order = np.argsort(millis, kind="stable")
    micros, values = millis[order] * 1000, values[order]
    keep = np.ones(len(micros), bool)
    if lo is not None:
        keep &= micros >= lo.value // 1000
    if hi is not None:
        keep &= micros <= hi.value // 1000
    micros, values = micros[keep], values[keep]
    return pa.table(
        [
            pa.array(micros, pa.int64()).cast(_arrow().stamp),
            _constant(key, len(micros)),
            pa.array(values, pa.float64()),
            _constant(listener, len(micros)),
            _constant(entity, len(micros)),
        ],
        schema=_arrow().samples,
    )


def _constant(value: str | None, n: int) -> pa.DictionaryArray:
    """A dictionary array of ``n`` times ``value`` (all null when None), without copies."""
    import numpy as np
    import pyarrow as pa

    if value is None:
        return pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, np.int32)), pa.array([value], pa.string())
    )


def _time_order(table: pa.Table):
    """The order of the rows by time, then key (as strings), ties in their order; None
    when they are in that order already.

    Without a copy of the keys as strings: each row's key becomes its rank among
    the dictionary's values. A key-sorted artifact needs one stable sort by time
    (a merge of its keys' sorted runs), and none at all for a single key.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows < 2:
        return None
    column = table.column("key")
    names = sorted({name for chunk in column.chunks for name in chunk.dictionary.to_pylist()})
    position = {name: i for i, name in enumerate(names)}
    rank_type = np.int16 if len(names) < 2**15 else np.int32
    ranks = np.concatenate(
        [
            np.fromiter((position[k] for k in chunk.dictionary.to_pylist()), rank_type)[
                chunk.indices.to_numpy(zero_copy_only=False)
            ]
            for chunk in column.chunks
            if len(chunk)
        ]
    )
    micros = pc.cast(table.column("timestamp"), pa.int64()).to_numpy()
    if np.all(ranks[1:] >= ranks[:-1]):
        if len(names) == 1 or ranks[0] == ranks[-1]:
            return None if np.all(micros[1:] >= micros[:-1]) else np.argsort(micros, kind="stable")
        return np.argsort(micros, kind="stable")
    by_key = np.argsort(ranks, kind="stable")  # radix sort of the small ranks
    del ranks
    return by_key[np.argsort(micros[by_key], kind="stable")]


def _sort_samples(table: pa.Table) -> pa.Table:
    """Rows ordered by time, then key (as strings); ties keep their order. The caller
    hands the table over (keeps no reference), so its columns are freed as they are sorted.
    """
    import pyarrow as pa

    order = _time_order(table)
    if order is None:
        return table
    indices = pa.array(order)
    del order
    schema, columns = table.schema, table.columns
    del table  # with the caller's reference gone, each column is freed once taken
    for i in range(len(columns)):
        columns[i] = columns[i].take(indices)
    return pa.Table.from_arrays(columns, schema=schema)


def _script_keys(run, keys: KeyFilter, with_system: bool) -> list[str]:
    """The run's MLflow metric names to read from history."""
    names = []
    for name in run.data.metrics:
        if name.startswith((SUMMARY_PREFIX, HEADLINE_PREFIX)):
            continue
        if name.startswith(MLFLOW_PREFIX) and not with_system:
            continue
        if keys(describe_key(name)[0]):
            names.append(name)
    return sorted(names)


def prepare(
    client,
    selected: Sequence,
    start: TimeBound = None,
    end: TimeBound = None,
    cache_dir: Path | None = None,
) -> list[_Plan]:
    """What to read for each run: its time bounds and its cached samples artifact, if any
    (downloaded on a pool of threads)."""
    from concurrent.futures import ThreadPoolExecutor

    from radt.record.runfolder import radt_home

    cache = Path(cache_dir) if cache_dir is not None else radt_home() / "cache"
    plans = [
        _Plan(run, _bound(start, run_start(run)), _bound(end, run_start(run))) for run in selected
    ]
    workers = max(1, min(MAX_THREADS, 4 * len(plans)))
    with ThreadPoolExecutor(workers, thread_name_prefix="radt-load") as pool:
        for plan, path in zip(
            plans, pool.map(lambda p: cached_samples(client, p.run, cache), plans), strict=True
        ):
            plan.artifact = path
            plan.source = "artifact" if path is not None else "metrics"
    return plans


def read_plans(
    client, plans: Sequence[_Plan], keys: KeyFilter, ordered: bool = True
) -> dict[str, pa.Table]:
    """The samples of each planned run as one Arrow table, ordered by time, then key
    (with ``ordered`` False: in the order read, which :func:`_tidy_frame` sorts itself)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    workers = max(1, min(MAX_THREADS, 4 * len(plans)))
    with ThreadPoolExecutor(workers, thread_name_prefix="radt-load") as pool:
        jobs = []
        for index, plan in enumerate(plans):
            run_id = plan.run.info.run_id
            if plan.artifact is not None:
                jobs.append(
                    (index, pool.submit(read_samples, plan.artifact, keys, plan.lo, plan.hi))
                )
            for name in _script_keys(plan.run, keys, with_system=plan.artifact is None):
                jobs.append(
                    (index, pool.submit(metric_history, client, run_id, name, plan.lo, plan.hi))
                )
        parts: dict[int, list[pa.Table]] = {}
        for index, future in jobs:
            parts.setdefault(index, []).append(future.result())
        jobs.clear()  # the futures hold the tables too: each is freed once sorted
        future = None
    tables: dict[str, pa.Table] = {}
    for index, plan in enumerate(plans):
        pieces = parts.pop(index, [])
        if len(pieces) > 1:
            table = pa.concat_tables(pieces)
        elif pieces:
            table = pieces.pop()
        else:
            table = _arrow().samples.empty_table()
        del pieces
        tables[plan.run.info.run_id] = _sort_samples(table) if ordered else table
        del table
    return tables


def load_tables(
    client,
    selected: Sequence,
    keys: KeyFilter,
    start: TimeBound = None,
    end: TimeBound = None,
    cache_dir: Path | None = None,
) -> tuple[dict[str, pa.Table], dict[str, str]]:
    """The samples of each run as Arrow tables, and where they came from.

    Returns ``({run_id: table}, {run_id: "artifact" | "metrics"})``: downloads
    (or cache hits) and metric histories run on a pool of threads. Each table is
    ordered by time, then key.
    """
    plans = prepare(client, selected, start, end, cache_dir)
    return read_plans(client, plans, keys), {p.run.info.run_id: p.source for p in plans}


# --------------------------------------------------------------------------- memory

BYTES_PER_ROW = 64
"""Memory :func:`load` needs per sample at its peak (measured: 10 M samples, 642 MiB): the
tidy frame (about 30 bytes: time, value, one- or two-byte codes of the text columns) and,
while it is built, the Arrow table it comes from (28 bytes) and the time order (8)."""
LIMIT_VARIABLE = "RADT_LOAD_LIMIT_MIB"


def memory_limit() -> int:
    """Bytes :func:`load` may use: ``$RADT_LOAD_LIMIT_MIB``, else 80 % of the memory
    available now."""
    import psutil

    given = os.environ.get(LIMIT_VARIABLE, "").strip()
    if given:
        try:
            return int(float(given) * 2**20)
        except ValueError:
            raise AnalysisError(
                f"{LIMIT_VARIABLE} must be a number of MiB, got {given!r}"
            ) from None
    return int(psutil.virtual_memory().available * 0.8)


def _gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**29 else f"{size / 2**20:.0f} MiB"


def check_fits(plans: Sequence[_Plan], keys: KeyFilter) -> None:
    """Refuse, with what to ask for instead, a load larger than :func:`memory_limit`.

    The rows are counted from each artifact's key index before anything is read
    (runs read from MLflow's decimated metrics are small and not counted).
    """
    from radt.analysis.artifact import Artifact

    counts = []
    for plan in plans:
        if plan.artifact is None:
            continue
        artifact = Artifact(plan.artifact)
        rows = artifact.estimate_rows(keys, _lo_us(plan.lo), _hi_us(plan.hi))
        counts.append((rows, plan.run.info.run_id, artifact.keys()))
    rows = sum(c[0] for c in counts)
    need, limit = rows * BYTES_PER_ROW, memory_limit()
    if need <= limit:
        return
    _, biggest, names = max(counts)
    example = next((k for k in names if k.endswith("power_w")), (names or ["KEY"])[0])
    held = f"run {biggest} holds {len(names)} keys, e.g. {example!r}; " if names else ""
    raise AnalysisError(
        f"loading {rows:,} samples needs about {_gib(need)} of memory, more than the "
        f"{_gib(limit)} available ({LIMIT_VARIABLE} sets the limit); ask for less: {held}"
        "fewer keys (keys=[...], patterns such as 'nvml/*/power_w'), a time window "
        "(start=, end=: seconds from each run's start, or times), or "
        "radt.load_wide(..., freq='10s'), which averages each key into time bins as it reads"
    )


def _tidy_frame(selected: Sequence, tables: dict[str, pa.Table]) -> pd.DataFrame:
    """The tidy frame of the runs' samples, ordered by run, time, key, built column by
    column into its final arrays.

    ``tables`` is handed over and emptied. Each column of the frame is filled from
    every run's table, and that column of the tables is then dropped and its memory
    given back, so memory peaks near the frame's own size (8 + 8 bytes of time and
    value, a code of one or two bytes for each text column) plus the tables and
    their sort orders, never two copies of everything.
    """
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    runs = list(selected)
    owned = [tables.pop(r.info.run_id) for r in runs]
    counts = [t.num_rows for t in owned]
    total = sum(counts)
    orders = [_time_order(t) for t in owned]
    pool = pa.default_memory_pool()

    def fill(name: str, target: np.ndarray, convert) -> np.ndarray:
        first = 0
        for i, (count, order) in enumerate(zip(counts, orders, strict=True)):
            part = convert(owned[i].column(name))
            target[first : first + count] = part if order is None else part[order]
            owned[i] = owned[i].drop_columns([name])  # its memory goes back
            first += count
            del part
        pool.release_unused()
        return target

    columns: dict[str, object] = {}
    micros = fill(
        "timestamp",
        np.empty(total, np.int64),
        lambda c: pc.cast(c, pa.int64()).to_numpy(),
    )
    columns["timestamp"] = pd.Series(micros.view("datetime64[us]")).dt.tz_localize("UTC")
    del micros
    columns["value"] = fill("value", np.empty(total, np.float64), lambda c: c.to_numpy())
    for name in ("key", "listener", "entity"):
        categories: dict[str, int] = {}
        for table in owned:
            for chunk in table.column(name).chunks:
                for value in chunk.dictionary.to_pylist():
                    categories.setdefault(value, len(categories))
        kind = _code_type(len(categories))

        def codes(column, categories=categories, kind=kind):
            pieces = [
                np.array([categories[v] for v in chunk.dictionary.to_pylist()], kind)[
                    chunk.indices.to_numpy(zero_copy_only=False)
                ]
                for chunk in column.chunks
            ]
            return np.concatenate(pieces) if pieces else np.empty(0, kind)

        columns[name] = pd.Categorical.from_codes(
            fill(name, np.empty(total, kind), codes), list(categories)
        )
    owned.clear()
    orders.clear()
    run_codes = np.repeat(np.arange(len(runs), dtype=_code_type(len(runs))), counts)
    columns["run_id"] = pd.Categorical.from_codes(run_codes, [r.info.run_id for r in runs])
    tags = [run_columns(run) for run in runs]
    for name in TAG_COLUMNS:
        known: dict[str, int] = {}
        per_run = [-1 if t[name] is None else known.setdefault(t[name], len(known)) for t in tags]
        columns[name] = pd.Categorical.from_codes(
            np.repeat(np.array(per_run, _code_type(len(known))), counts), list(known)
        )
    return pd.DataFrame({name: columns.pop(name) for name in TIDY_COLUMNS}, copy=False)


def _code_type(categories: int):
    """The integer type pandas gives codes of that many categories (no copy on wrapping)."""
    import numpy as np

    for kind in (np.int8, np.int16, np.int32):
        if categories < np.iinfo(kind).max:
            return kind
    return np.int64


# --------------------------------------------------------------------------- the API


def load(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    keys: Iterable[str] | None = None,
    start: TimeBound = None,
    end: TimeBound = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
    include_workload: bool = True,
) -> pd.DataFrame:
    """Every sample of the selected runs, one row per sample (tidy).

    Args:
        experiment: experiment name or id; all its active runs unless ``runs`` narrows them.
        runs: run ids; a distributed training's job run brings its node runs, which hold
            its samples. With ``include_workload`` (default) the workload (parent)
            run of each is loaded too, since a workload's device-wide series
            (power, energy, utilisation) are recorded in its parent run.
        keys: exact keys (``nvml/gpu0/power_w``) and shell-style patterns
            (``nvml/*/power_w``, ``top/*``; ``*`` also matches ``/``); a leading
            ``system/`` is ignored. None: every key, including the metrics the
            training script logged (``loss``, ``examples``; listener ``mlflow``).
        start, end: keep samples with ``start <= timestamp <= end``. A datetime,
            Timestamp or string is an absolute time (naive means UTC); a number
            (seconds) or a timedelta counts from each run's own start, so
            ``start=60`` drops every run's first minute.
        tracking_uri: else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.
        cache_dir: where samples artifacts are kept; default ``$RADT_HOME/cache``.

    Returns:
        Columns ``run_id, key, timestamp, value, listener, entity`` and the run's
        ``run_name, status, parent_run_id, workload, collocation, mig_profile,
        mps_thread_pct, power_limit_w, letter`` (tags as recorded, strings; a
        tag that is absent or ``-`` is missing). ``timestamp`` is
        ``datetime64[us, UTC]``, ``value`` float64, every text column categorical.
        Rows are ordered by run (oldest first), then time, then key. ``frame.attrs
        ["radt.source"]`` says for each run id whether its samples came from the
        ``artifact`` (full rate) or MLflow's ``metrics`` (decimated).

    Raises:
        AnalysisError: unknown experiment or run, no tracking store, or more samples than
            fit in memory (:func:`check_fits`: the message says how to ask for less).
    """
    client = open_client(tracking_uri)
    selected = select_runs(client, experiment, runs, include_workload)
    wanted = KeyFilter(keys)
    plans = prepare(client, selected, start, end, cache_dir)
    check_fits(plans, wanted)
    tables = read_plans(client, plans, wanted, ordered=False)
    frame = _tidy_frame(selected, tables)
    frame.attrs["radt.source"] = {p.run.info.run_id: p.source for p in plans}
    return frame


def load_wide(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    keys: Iterable[str] | None = None,
    start: TimeBound = None,
    end: TimeBound = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
    include_workload: bool = True,
    freq: str = "1s",
) -> pd.DataFrame:
    """The samples of :func:`load` pivoted to one column per key on a common time base.

    Each run's time is cut into bins of ``freq`` (a pandas offset such as
    ``"1s"``, ``"100ms"``) counted from the run's MLflow start, and each key's
    samples in a bin are averaged. The index is ``(run_id, elapsed_s)``:
    ``elapsed_s`` is the start of the bin in seconds since the run started, so
    runs line up for comparison; the column ``timestamp`` is the bin's start in
    UTC. A bin without any sample has no row; a key without a sample in a bin
    is NaN. Columns are the keys, sorted. Other arguments are those of
    :func:`load`; join run tags from :func:`radt.summary` on ``run_id``.

    The samples are read and averaged a piece at a time (about a million rows),
    so memory holds the bins, not the samples: the way to look at all of a
    day-long run. AnalysisError when the table of bins itself would not fit
    (:func:`check_wide_fits`: a longer ``freq``, fewer keys or a time window).
    """
    import numpy as np
    import pandas as pd

    step = pd.Timedelta(freq)
    if step <= pd.Timedelta(0):
        raise AnalysisError(f"freq must be a positive duration, got {freq!r}")
    client = open_client(tracking_uri)
    selected = select_runs(client, experiment, runs, include_workload)
    wanted = KeyFilter(keys)
    plans = prepare(client, selected, start, end, cache_dir)
    sources = {p.run.info.run_id: p.source for p in plans}
    check_wide_fits(plans, wanted, step)
    frames = []
    for plan in plans:
        run_id = plan.run.info.run_id
        names, bins, means = _binned_means(client, plan, wanted, step.value)
        if not len(bins):
            continue
        rows, row_of = np.unique(bins, return_inverse=True)
        grid = np.full((len(rows), len(names)), np.nan)
        grid[row_of, means[0]] = means[1]
        elapsed = rows * step.total_seconds()
        stamps = run_start(plan.run) + pd.to_timedelta(rows * step.value, unit="ns")
        part = pd.DataFrame(grid, columns=names)
        part.insert(0, "timestamp", pd.DatetimeIndex(stamps).astype("datetime64[us, UTC]"))
        part.index = pd.MultiIndex.from_arrays(
            [np.full(len(rows), run_id, object), elapsed], names=["run_id", "elapsed_s"]
        )
        frames.append(part)
    if not frames:
        wide = pd.DataFrame(
            {"timestamp": pd.Series(dtype="datetime64[us, UTC]")},
            index=pd.MultiIndex.from_arrays([[], []], names=["run_id", "elapsed_s"]),
        )
        wide.attrs["radt.source"] = sources
        return wide
    wide = pd.concat(frames) if len(frames) > 1 else frames[0]
    keys_sorted = sorted(c for c in wide.columns if c != "timestamp")
    wide = wide.reindex(columns=["timestamp", *keys_sorted])
    wide.attrs["radt.source"] = sources
    return wide


def run_pieces(client, plan: _Plan, keys: KeyFilter) -> Iterable[pa.Table]:
    """The samples of one planned run in the samples schema, a piece at a time (about a
    million rows each): what :func:`read_plans` reads for it, never all of it at once."""
    for piece in _run_pieces(client, plan, keys):
        yield _conform(piece)


def file_pieces(path: Path, keys: KeyFilter, max_rows: int | None = None) -> Iterable[pa.Table]:
    """The samples of one ``samples.parquet`` file that ``keys`` accepts, a piece of about
    ``max_rows`` rows at a time (default: the artifact's piece size; what
    :func:`read_samples` returns whole)."""
    from radt.analysis.artifact import PIECE_ROWS, Artifact

    pieces = Artifact(path).pieces(keys, keys.everything, max_rows=max_rows or PIECE_ROWS)
    for piece in pieces:
        yield _conform(piece)


def _run_pieces(client, plan: _Plan, keys: KeyFilter):
    """The samples of one planned run, a piece at a time: the artifact's (key-sorted) pieces,
    then each metric read from MLflow's history."""
    if plan.artifact is not None:
        from radt.analysis.artifact import Artifact

        artifact = Artifact(plan.artifact)
        yield from artifact.pieces(keys, keys.everything, _lo_us(plan.lo), _hi_us(plan.hi))
    for name in _script_keys(plan.run, keys, with_system=plan.artifact is None):
        yield metric_history(client, plan.run.info.run_id, name, plan.lo, plan.hi)


def _binned_means(client, plan: _Plan, keys: KeyFilter, step_ns: int):
    """One run's samples averaged per key and time bin, a piece at a time.

    Returns the keys, and for every (key, bin) holding samples: the bin (counted
    from the run's start), and (the key's position in the keys, the mean).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    origin_us = run_start(plan.run).value // 1000
    names: list[str] = []
    position: dict[str, int] = {}
    partial: list[tuple[np.ndarray, ...]] = []
    for piece in _run_pieces(client, plan, keys):
        column = piece.column("key")
        codes = []
        for chunk in column.chunks:
            if not pa.types.is_dictionary(chunk.type):
                chunk = chunk.dictionary_encode()
            lookup = np.array(
                [position.setdefault(k, len(position)) for k in chunk.dictionary.to_pylist()],
                np.int64,
            )
            codes.append(lookup[chunk.indices.to_numpy(zero_copy_only=False)])
        code = np.concatenate(codes) if codes else np.empty(0, np.int64)
        micros = pc.cast(piece.column("timestamp"), pa.int64()).to_numpy()
        values = piece.column("value").to_numpy()
        del piece, column
        bins = (micros - origin_us) * 1000 // step_ns
        partial.append(_sums(code, bins, values, np.ones(len(values), np.int64)))
    names = sorted(position, key=position.__getitem__)
    if not partial:
        return names, np.empty(0, np.int64), (np.empty(0, np.int64), np.empty(0))
    code, bins, sums, counts = (np.concatenate(p) for p in zip(*partial, strict=True))
    code, bins, sums, counts = _sums(code, bins, sums, counts)
    return names, bins, (code, sums / counts)


def _sums(code, bins, values, counts):
    """Sums of ``values`` and ``counts`` per (code, bin), sorted by code, then bin."""
    import numpy as np

    if len(code) == 0:
        return code, bins, values, counts
    ordered = np.all((code[1:] > code[:-1]) | ((code[1:] == code[:-1]) & (bins[1:] >= bins[:-1])))
    if not ordered:
        order = np.lexsort((bins, code))
        code, bins, values, counts = code[order], bins[order], values[order], counts[order]
    starts = np.flatnonzero(
        np.concatenate([[True], (code[1:] != code[:-1]) | (bins[1:] != bins[:-1])])
    )
    return (
        code[starts],
        bins[starts],
        np.add.reduceat(values, starts),
        np.add.reduceat(counts, starts),
    )


def check_wide_fits(plans: Sequence[_Plan], keys: KeyFilter, step) -> None:
    """Refuse a :func:`load_wide` whose table (bins × keys) would not fit in memory."""
    from radt.analysis.artifact import Artifact

    cells = 0
    for plan in plans:
        if plan.artifact is None:
            continue
        artifact = Artifact(plan.artifact)
        lo, hi = _lo_us(plan.lo), _hi_us(plan.hi)
        entries = list(artifact._wanted(keys, lo, hi)) if artifact.index is not None else []
        if not entries:
            continue
        first = min(e.first_us for e in entries) if lo is None else lo
        last = max(e.last_us for e in entries) if hi is None else hi
        bins = min(
            max(1, (last - first) * 1000 // step.value + 1),
            sum(e.rows for e in entries),
        )
        cells += bins * len(entries)
    need, limit = cells * 8 * 3, memory_limit()
    if need > limit:
        raise AnalysisError(
            f"a table with {cells:,} cells of {step} bins needs about {_gib(need)} of memory, "
            f"more than the {_gib(limit)} available ({LIMIT_VARIABLE} sets the limit); ask for "
            "less: a longer freq=, fewer keys (keys=[...]) or a time window (start=, end=)"
        )
