"""Reading a run's samples as Arrow tables in the samples schema.

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

import fnmatch
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeAlias

from radt.analysis.loadruns import TAG_COLUMNS

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
    local: Callable[[str], Path | None] | None = None,
) -> list[_Plan]:
    """What to read for each run: its time bounds and its cached samples artifact, if any
    (downloaded on a pool of threads); ``local`` gives, by run id, a file of the same samples
    already on this machine, read instead (a run radT has just closed)."""
    from concurrent.futures import ThreadPoolExecutor

    from radt.record.runfolder import radt_home

    cache = Path(cache_dir) if cache_dir is not None else radt_home() / "cache"
    plans = [
        _Plan(run, _bound(start, run_start(run)), _bound(end, run_start(run))) for run in selected
    ]
    workers = max(1, min(MAX_THREADS, 4 * len(plans)))
    with ThreadPoolExecutor(workers, thread_name_prefix="radt-load") as pool:
        for plan, path in zip(
            plans, pool.map(lambda p: samples_file(client, p.run, cache, local), plans), strict=True
        ):
            plan.artifact = path
            plan.source = "artifact" if path is not None else "metrics"
    return plans


def samples_file(
    client, run, cache_dir: Path, local: Callable[[str], Path | None] | None = None
) -> Path | None:
    """The run's samples as a local file: ``local``'s (by run id) where it has one, else the
    cached artifact (:func:`cached_samples`); None where neither is."""
    found = local(run.info.run_id) if local is not None else None
    return found if found is not None else cached_samples(client, run, cache_dir)


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
