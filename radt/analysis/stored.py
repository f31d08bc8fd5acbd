"""A run's window figures, computed once when it ends and read back at every look.

When a lone run or a workload (with its runs) completes, :func:`family_figures`
computes the figures :func:`radt.analysis.summary.summary` shows for them (the
windows, the figures over them and the energy attribution) from their samples,
the same code as the summary's, and the closing step stores each run's as the
tag :data:`radt.tags.RADT_FIGURES` (JSON). :func:`restore` puts them back into the
summary's records, so that a look reads one page of runs instead of every
run's samples. The figures that compare runs with each other (slowdown,
normalised figures) are still computed at each look: they depend on which
runs are there. A run without the tag, a family whose runs changed since, or
a run of another version is computed from its samples as before.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from radt.analysis.attribution import ATTRIBUTION_KEYS
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_FIGURES,
    RunKind,
    child_order,
    run_kind,
    tag_filter,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from radt.analysis.runtree import Record
    from radt.analysis.windows import Timeline

VERSION = 3
"""Bumped whenever what the figures are changes: older tags are then recomputed."""
MAX_TAG_CHARS = 8000
"""MLflow's longest tag value; a longer state is not stored (the run is computed at looks)."""

log = logging.getLogger(__name__)

SUMMARY_KEYS = (
    "*/gpu*/energy_j",
    "*/gpu*/power_w",
    "*/gpu*/util_pct",
    "*/gpu*/smact_ratio",
    "*/gpu*/mem_used_mib",
    "top/proc/rss_mib",
    "top/proc/cpu_pct",
    "script/run/*",
    *ATTRIBUTION_KEYS,
)
"""The keys :func:`radt.analysis.summary.summary` loads: all that the figures and the windows
read."""


def family_of(record: Record, records: Mapping[str, Record]) -> str:
    """The run whose family ``record`` is computed with: its workload, else itself."""
    parent = record.tags.get(MLFLOW_PARENT_RUN_ID) or ""
    if record.level in ("client", "loader") and parent in records:
        return parent
    return record.run_id


def _number(value: Any) -> Any:
    if isinstance(value, str) or value is None:
        return value
    return float(value)


def state_of(record: Record, family: Sequence[str], kids: Sequence[Record] = ()) -> str:
    """``record``'s computed figures as the tag's JSON (NaN spelled ``NaN``)."""
    from radt.analysis.windows import counter_increase

    window = record.window
    state = {
        "version": VERSION,
        "level": record.level,
        "family": sorted(family),
        "window": [window.start_s, window.end_s, window.examples, window.basis, window.warmup],
        "window_note": window.note,
        "examples_total": float(record.examples_total),
        "figures": {name: _number(value) for name, value in record.figures.items()},
        "method": record.method,
        "notes": list(record.notes),
        "work": float(record.work),
        "has_device": record.has_device,
    }
    if record.level == "provider" and window.basis == "examples":
        # what the normalised figures need of each client's counter: its examples in the window
        state["kid_examples"] = {
            kid.run_id: float(
                counter_increase(*kid.timeline.counter_points(), window.start_s, window.end_s)
            )
            for kid in kids
        }
    return json.dumps(state, separators=(",", ":"))


def _load(record: Record, family: Sequence[str]) -> dict | None:
    text = record.tags.get(RADT_FIGURES)
    if not text:
        return None
    try:
        state = json.loads(text)
    except ValueError:
        return None
    if not isinstance(state, dict) or state.get("version") != VERSION:
        return None
    if state.get("level") != record.level or sorted(state.get("family") or ()) != sorted(family):
        return None
    return state


def restore(
    records: Mapping[str, Record], wanted: Sequence[str], children: Mapping[str, Sequence[Any]]
) -> set[str]:
    """Put the stored figures back into the records of ``wanted`` runs' families; return
    the ids restored. A family is restored whole (its workload and all its runs) or not."""
    from radt.analysis.windows import Window

    restored: set[str] = set()
    seen: set[str] = set()
    for run_id in wanted:
        root = family_of(records[run_id], records)
        if root in seen:
            continue
        seen.add(root)
        members = [root, *(k.info.run_id for k in children.get(root, []))]
        states = {m: _load(records[m], members) for m in members if m in records}
        if len(states) != len(members) or any(s is None for s in states.values()):
            continue
        for member, state in states.items():
            record = records[member]
            start_s, end_s, examples, basis, warmup = state["window"]
            record.window = Window(start_s, end_s, examples, basis, warmup, state["window_note"])
            record.examples_total = state["examples_total"]
            record.figures = dict(state["figures"])
            record.method = state["method"]
            record.notes = list(state["notes"])
            record.work = state["work"]
            record.kid_examples = dict(state.get("kid_examples", {}))
            record.device_recorded = bool(state.get("has_device"))
        restored.update(states)
    return restored


def family_figures(
    client,
    run,
    status: str,
    end_ms: int,
    tags: Mapping[str, str],
    samples_path: Path,
    cache_dir: Path | None = None,
    local: Callable[[str], Path | None] | None = None,
) -> dict[str, str]:
    """The :data:`radt.tags.RADT_FIGURES` value of each run of the family that ``run`` completes.

    ``run`` is the MLflow run as it is while it completes (still RUNNING); ``status``,
    ``end_ms`` (MLflow's end time) and ``tags`` as they will be; ``samples_path`` its
    compacted samples; ``local`` its runs' compacted samples on this machine, by run id
    (:func:`radt.analysis.loadsamples.prepare`).
    A lone run's family is itself; a workload's, itself and its runs (read from their
    samples artifacts). Empty when ``run`` is a run of a workload (the workload stores
    its runs' figures when it completes after them) or groups others.
    """
    from radt.analysis.attribution import attribute
    from radt.analysis.loadruns import grouping, probe, search_all
    from radt.analysis.loadsamples import _Plan, prepare
    from radt.analysis.runtree import Record

    if grouping(run) or probe(run):
        return {}
    info = run.info
    parent = tags.get(MLFLOW_PARENT_RUN_ID)
    kids = search_all(client, [info.experiment_id], tag_filter(MLFLOW_PARENT_RUN_ID, info.run_id))
    kids = sorted((k for k in kids if not (grouping(k) or probe(k))), key=child_order)
    level = run_kind(tags, has_children=bool(kids))
    if level != RunKind.WORKLOAD and parent:
        above = client.get_run(parent)
        if not (grouping(above) or probe(above)):
            return {}  # its workload's: stored when that completes
    own = Record.of(run, level)
    own.status = status
    own.tags = dict(tags)
    own.end_s = end_ms / 1000.0 if end_ms else math.nan
    records = {info.run_id: own}
    for kid in kids:
        records[kid.info.run_id] = Record.of(kid, run_kind(kid.data.tags))
    children = {info.run_id: kids} if kids else {}
    plans = [
        _Plan(run, None, None, samples_path, "artifact"),
        *prepare(client, kids, None, None, cache_dir, local),
    ]
    extra = _compute(client, records, plans, children)
    attribute(records, [run, *kids], extra, children)
    family = list(records)
    values = {}
    for run_id, record in records.items():
        if record.window is None:
            return {}
        clients = [records[k.info.run_id] for k in kids if records[k.info.run_id].level == "client"]
        value = state_of(record, family, clients if run_id == info.run_id else ())
        if len(value) > MAX_TAG_CHARS:
            log.debug("run %s: its figures exceed a tag; computed at each look", run_id)
            return {}
        values[run_id] = value
    return values


def run_series(
    pieces: Iterable[pa.Table | pd.DataFrame], tags: Mapping[str, str]
) -> tuple[dict, Timeline]:
    """A run's device series (:func:`device_series`) and :class:`Timeline` from its samples
    handed over a piece at a time (tables, or tidy frames): only one piece is a frame at once.

    The same as both computed from all the pieces as one frame: each key's pieces are
    joined in the order read and sorted by time, stably.
    """
    import numpy as np
    import pandas as pd

    from radt.analysis.figures import device_series
    from radt.analysis.windows import SCRIPT_KEYS, timeline

    parts: dict[tuple[str, str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    script = []
    for piece in pieces:
        frame = piece if isinstance(piece, pd.DataFrame) else piece.to_pandas()
        del piece
        for name, pair in device_series(frame).items():
            parts.setdefault(name, []).append(pair)
        rows = frame[frame["key"].isin(SCRIPT_KEYS)]
        if len(rows):
            script.append(rows.astype({"key": str}))
        del frame, rows
    series = {}
    while parts:
        name, pairs = parts.popitem()
        seconds = np.concatenate([p[0] for p in pairs])
        values = np.concatenate([p[1] for p in pairs])
        if len(pairs) > 1:
            order = np.argsort(seconds, kind="stable")
            seconds, values = seconds[order], values[order]
        series[name] = (seconds, values)
    return series, timeline(pd.concat(script) if script else None, tags)


def _compute(client, records: dict[str, Record], plans: Sequence, children) -> dict:
    """Windows and figures of every needed run: clients first, then their workloads; returns
    each run's samples of the attribution's keys (:data:`ATTRIBUTION_KEYS`), as tables.

    A run with a samples artifact is read a piece at a time (:func:`run_series`): memory
    holds the series the figures use, never the run's samples as a table. Runs read
    from MLflow's decimated metrics are small and read together, in parallel.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from radt.analysis.levels import _client, _loader, _provider
    from radt.analysis.loadsamples import KeyFilter, read_plans, run_pieces

    wanted, extra_keys = KeyFilter(SUMMARY_KEYS), KeyFilter(ATTRIBUTION_KEYS)
    decimated = read_plans(client, [p for p in plans if p.artifact is None], wanted)
    extra: dict[str, pa.Table] = {}

    def tap(pieces, kept: list) -> Iterable[pa.Table]:
        for piece in pieces:  # the attribution's own keys are kept aside as rows
            names = [k for k in pc.unique(piece["key"]).to_pylist() if k and extra_keys(k)]
            if names:
                kept.append(piece.filter(pc.is_in(piece["key"], value_set=pa.array(names))))
            yield piece

    for plan in plans:
        record = records[plan.run.info.run_id]
        if plan.artifact is None:
            pieces = [decimated.pop(record.run_id)]
        else:
            pieces = run_pieces(client, plan, wanted)
        kept: list[pa.Table] = []
        record.series, record.timeline = run_series(tap(pieces, kept), record.tags)
        if kept:
            extra[record.run_id] = pa.concat_tables(kept)
    needed = [plan.run for plan in plans]
    ids = {run.info.run_id for run in needed}
    for run in needed:
        record = records[run.info.run_id]
        if record.level == "provider":
            continue
        if record.level == "loader":
            _loader(record)
            continue
        parent = records.get(record.tags.get(MLFLOW_PARENT_RUN_ID) or "")
        parent = parent if parent is not None and parent.run_id in ids else None
        kids = children.get(parent.run_id, []) if parent else []
        siblings = sum(records[k.info.run_id].level == "client" for k in kids) if parent else 1
        _client(record, parent, siblings)
    for run in needed:
        record = records[run.info.run_id]
        if record.level != "provider":
            continue
        kids = [records[k.info.run_id] for k in children.get(record.run_id, [])]
        if all(k.window is not None for k in kids):  # else only loaded for a baseline's energy
            clients = [k for k in kids if k.level == "client"]
            _provider(record, clients, [k for k in kids if k.level == "loader"])
    return extra
