"""Loading recorded runs into pandas: tidy (one row per sample) or wide (one column per key).

The runs are found in the store by :mod:`radt.analysis.loadruns` and their samples read by
:mod:`radt.analysis.loadsamples` (from each ended run's ``radt/samples.parquet`` artifact, else
MLflow's metric history); here they become the frames, after a check that they fit in memory,
or, for the wide frame with ``freq``, are averaged into time bins as they are read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from radt.analysis.loadruns import TAG_COLUMNS, open_client, run_columns, select_runs
from radt.analysis.loadsamples import (
    KeyFilter,
    TimeBound,
    _hi_us,
    _lo_us,
    _Plan,
    _run_pieces,
    _time_order,
    prepare,
    read_plans,
    run_start,
)
from radt.errors import AnalysisError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# numpy, pandas and pyarrow are imported where they are used, so that
# ``import radt`` (which exports load, load_wide and summary) stays light.

SAMPLE_COLUMNS = ("run_id", "key", "timestamp", "value", "listener", "entity")
TIDY_COLUMNS = (*SAMPLE_COLUMNS, *TAG_COLUMNS)


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
