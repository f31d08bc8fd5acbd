"""The figures of a study: time and energy per example for providers (workloads) and clients (runs).

Vocabulary (DESIGN.md, "Analysis vocabulary"):

- a **provider** row is a workload: its parent run, which records the
  device-wide series (power, energy, utilisation) of the GPUs the workload used;
- a **client** row is one training process of a workload (a child run);
- a **run** row is a lone command (``radt train.py``): no parent, no children;
  it is its own provider and client, so both kinds of figures are its own.


Attribution: a provider's energy is that of its parent run's series. A client
with device series of its own (a lone run, or a listener that records per run)
has its own energy; a client that is the only run of its workload gets the
workload's energy and device figures (the GPU was its alone); a collocated
client's share of the GPU is not measured (NVML has no power per MIG slice or
per MPS client), so its energy is NaN and ``energy_method`` is ``none``.

Examples are the last value of the run's MLflow metric ``examples`` (the
cumulative count that ``radt.log_examples`` logs); a run without it has no
per-example figures. Units: ns = 1e9 × s, nJ = 1e9 × J.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from radt.analysis.figures import (
    DEVICE_FIGURES,
    NAN,
    energy_method,
    finite_sum,
    per_example,
    run_figures,
)
from radt.analysis.load import (
    KeyFilter,
    load_tables,
    open_client,
    run_columns,
    search_all,
    select_runs,
)

EXAMPLES_METRIC = "examples"
SUMMARY_KEYS = (
    "*/gpu*/energy_j",
    "*/gpu*/power_w",
    "*/gpu*/util_pct",
    "*/gpu*/smact_ratio",
    "*/gpu*/mem_used_mib",
    "top/proc/rss_mib",
)
"""The keys :func:`summary` loads: all that :func:`summarize_samples` reads."""
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
    "command",
    "params",
    "start",
    "end",
    "duration_s",
    "examples",
    "examples_per_s",
    "time_per_example_ns",
    "energy_j",
    "energy_method",
    "energy_per_example_nj",
    "power_mean_w",
    "power_max_w",
    "util_mean_pct",
    "smact_mean_ratio",
    "gpu_mem_peak_mib",
    "host_mem_peak_mib",
    "slowdown",
    "baseline_run_id",
    "experiment_id",
)
if TYPE_CHECKING:
    import pandas as pd


# --------------------------------------------------------------------------- runs → rows


def _examples(run) -> float:
    value = run.data.metrics.get(EXAMPLES_METRIC)
    return float(value) if value is not None else NAN


def _params(run) -> str | None:
    params = {k: v for k, v in run.data.params.items() if k != "radt.command"}
    return " ".join(f"{k}={v}" for k, v in sorted(params.items())) or None


def _command_key(run) -> str | None:
    """What makes two runs the same job: the ``radt.command`` tag, else the params."""
    return run.data.tags.get("radt.command") or run.data.params.get("radt.command") or _params(run)


def _duration(run) -> float:
    if run.info.end_time is None or not run.info.start_time:
        return NAN
    return (run.info.end_time - run.info.start_time) / 1000.0


def _stamp(millis: int | None) -> pd.Timestamp:
    import pandas as pd

    return pd.Timestamp(millis, unit="ms", tz="UTC") if millis else pd.NaT


def _mps(value: str | None) -> float:
    try:
        return float(value) if value is not None else NAN
    except ValueError:
        return NAN


def _row(run, level: str) -> dict:
    tags = run_columns(run)
    return {
        "level": level,
        "run_id": run.info.run_id,
        "run_name": tags["run_name"],
        "workload": tags["workload"],
        "letter": tags["letter"],
        "parent_run_id": tags["parent_run_id"],
        "status": tags["status"],
        "collocation": tags["collocation"],
        "mig_profile": tags["mig_profile"],
        "mps_thread_pct": _mps(tags["mps_thread_pct"]),
        "power_limit_w": tags["power_limit_w"],
        "command": run.data.tags.get("radt.command"),
        "params": _params(run),
        "start": _stamp(run.info.start_time),
        "end": _stamp(run.info.end_time),
        "duration_s": _duration(run),
        "experiment_id": run.info.experiment_id,
        "slowdown": NAN,
        "baseline_run_id": None,
    }


def _baselines(context: Iterable, parents: set[str]) -> dict[tuple[str, str], object]:
    """``(experiment id, command) → run``: the most recent FINISHED run alone (collocation none)."""
    found: dict[tuple[str, str], object] = {}
    for run in sorted(context, key=lambda r: r.info.start_time or 0):
        if run.info.run_id in parents or run.info.status != "FINISHED":
            continue
        if run.data.tags.get("radt.collocation") != "none":
            continue
        key = _command_key(run)
        tpe = per_example(_examples(run), _duration(run), None)["time_per_example_ns"]
        if key and math.isfinite(tpe):
            found[(run.info.experiment_id, key)] = run
    return found


def summary(
    experiment: str | None = None,
    runs: Iterable[str] | None = None,
    *,
    tracking_uri: str | None = None,
    cache_dir: Path | None = None,
) -> pd.DataFrame:
    """One row per workload (``provider``), per run of one (``client``), per lone run (``run``).

    Args:
        experiment: experiment name or id; all its runs unless ``runs`` narrows them.
        runs: run ids; the workload of each is added (its provider row).
        tracking_uri: else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.
        cache_dir: where samples artifacts are cached (default ``$RADT_HOME/cache``).

    Returns:
        The columns of :data:`COLUMNS`, a workload's provider row first and its
        clients after it (by letter), in order of start. Figures:

        - ``duration_s``: the run's MLflow wall time (end − start); for a
          provider, its parent run's (setup and teardown of the collocation
          included); NaN while running;
        - ``examples``: a client's last ``examples`` metric; a provider's: the
          sum over its clients that report examples;
        - ``time_per_example_ns`` = 1e9 × duration_s / examples (provider: the
          workload's wall time over all its clients' examples), ``examples_per_s``
          its inverse in seconds;
        - ``energy_j``, ``energy_method``, ``energy_per_example_nj`` = 1e9 ×
          energy_j / examples and the device figures of
          :func:`summarize_samples`: see the module docstring for how energy is
          measured and attributed; ``host_mem_peak_mib`` of a provider is the
          sum of its clients' peaks (an upper bound of the workload's peak);
        - ``slowdown`` of a client or lone run = its time per example / that of
          its baseline ``baseline_run_id``: the most recent FINISHED run of the
          same experiment with collocation ``none`` and the same command (the
          ``radt.command`` tag, else the params), with examples. NaN without one;
          a baseline run is its own baseline (1.0).
        - ``mps_thread_pct`` is a number; other tags are strings as recorded
          (``power_limit_w`` may read ``250+300`` for a workload on two GPUs).
    """
    import pandas as pd

    client = open_client(tracking_uri)
    chosen = select_runs(client, experiment, runs, include_workload=True)
    if runs is None:
        context = chosen
    else:
        context = search_all(client, sorted({r.info.experiment_id for r in chosen}))
    by_id = {r.info.run_id: r for r in [*context, *chosen]}
    children: dict[str, list] = {}
    for run in by_id.values():
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent:
            children.setdefault(parent, []).append(run)
    for kids in children.values():
        kids.sort(key=lambda r: (r.data.tags.get("radt.letter") or "", r.info.start_time or 0))
    parents = set(children) | {
        r.info.run_id
        for r in by_id.values()
        if "radt.workload_runs" in r.data.tags and "mlflow.parentRunId" not in r.data.tags
    }
    chosen_ids = {r.info.run_id for r in chosen}
    needed = [
        *chosen,
        *(
            kid
            for pid in sorted(chosen_ids & parents)
            for kid in children.get(pid, [])
            if kid.info.run_id not in chosen_ids
        ),
    ]
    tables, _ = load_tables(client, needed, KeyFilter(SUMMARY_KEYS), cache_dir=cache_dir)
    figures = {}
    for run in needed:
        own, used = run_figures(tables[run.info.run_id].to_pandas())
        figures[run.info.run_id] = (own, energy_method(used, run.data.tags))

    rows: dict[str, dict] = {}
    baselines = _baselines(context, parents)
    for run in chosen:
        run_id = run.info.run_id
        own, method = figures[run_id]
        if run_id in parents:
            row = _row(run, "provider")
            kids = children.get(run_id, [])
            examples = finite_sum(_examples(k) for k in kids)
            row["command"] = " | ".join(k.data.tags.get("radt.command", "?") for k in kids) or None
            row["params"] = None
            host = [figures[k.info.run_id][0]["host_mem_peak_mib"] for k in kids]
            own = dict(own)
            if not math.isfinite(own["host_mem_peak_mib"]):
                own["host_mem_peak_mib"] = finite_sum(host)
        else:
            parent = run.data.tags.get("mlflow.parentRunId")
            row = _row(run, "client" if parent else "run")
            examples = _examples(run)
            siblings = children.get(parent, []) if parent else []
            if method == "none" and len(siblings) == 1 and parent in figures:
                device, method = figures[parent]
                own = {**own, **{name: device[name] for name in DEVICE_FIGURES}}
            baseline = baselines.get((run.info.experiment_id, _command_key(run)))
            if baseline is not None:
                mine = per_example(examples, row["duration_s"], None)["time_per_example_ns"]
                base = per_example(_examples(baseline), _duration(baseline), None)
                row["slowdown"] = mine / base["time_per_example_ns"]
                row["baseline_run_id"] = baseline.info.run_id
        row.update(own)
        row["examples"] = float(examples)
        row["energy_method"] = method
        row.update(per_example(row["examples"], row["duration_s"], row["energy_j"]))
        rows[run_id] = row

    ordered: list[dict] = []
    for run in chosen:  # oldest first; a workload's clients follow its provider row
        run_id = run.info.run_id
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent in rows:
            continue
        ordered.append(rows[run_id])
        ordered.extend(
            rows[k.info.run_id] for k in children.get(run_id, []) if k.info.run_id in rows
        )
    frame = pd.DataFrame(ordered, columns=list(COLUMNS))
    for column in ("start", "end"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame
