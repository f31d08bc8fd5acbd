"""The figures of a study: time and energy per example for providers (workloads) and clients (runs).

Vocabulary (DESIGN.md, "Analysis vocabulary"):

- a **provider** row is a workload: its parent run, which records the
  device-wide series (power, energy, utilisation) of the GPUs the workload used;
- a **client** row is one training process of a workload (a child run);
- a **run** row is a lone command (``radt train.py``): no parent, no children;
  it is its own provider and client, so both kinds of figures are its own.

Energy (J) of a run, per GPU, from the first of these that it recorded:

1. an energy counter series ``nvml/gpu{i}/energy_j``, else ``dcgm/gpu{i}/energy_j``:
   the counter counts from an arbitrary origin, so the energy is its last value
   minus its first (if the counter went backwards, a reset, the sum of its
   increases). A counter covers sampling gaps exactly;
2. the trapezoid integral of ``nvml``, else ``dcgm``, else ``smi``
   ``/gpu{i}/power_w`` over time. Values the tool reported as N/A are missing
   samples: a short hole is bridged by the trapezoid, but an interval longer
   than ``GAP_FACTOR`` (5) times the median sampling interval is a gap and is
   not integrated (what the GPU drew then is unknown, and would otherwise be
   guessed from the two ends).

The GPU energies are summed; ``energy_method`` is ``counter`` when every GPU had
a counter, ``integrated_power`` when any GPU's energy is integrated power
(including the ``nvml`` listener's own integration on GPUs without a counter,
which its tag ``radt.nvml.energy_method.gpu{i}`` records), ``none`` without
either. Energy spans the samples, not the run's wall time.

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
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from radt.load import (
    KeyFilter,
    load_tables,
    open_client,
    run_columns,
    search_all,
    select_runs,
)

GAP_FACTOR = 5.0
"""An interval between power samples longer than this many median intervals is not integrated."""
EXAMPLES_METRIC = "examples"
ENERGY_LISTENERS = ("nvml", "dcgm")
POWER_LISTENERS = ("nvml", "dcgm", "smi")
UTIL_LISTENERS = ("nvml", "smi")
MEMORY_LISTENERS = ("nvml", "smi")
SUMMARY_KEYS = (
    "*/gpu*/energy_j",
    "*/gpu*/power_w",
    "*/gpu*/util_pct",
    "*/gpu*/smact_ratio",
    "*/gpu*/mem_used_mib",
    "top/proc/rss_mib",
)
"""The keys :func:`summary` loads: all that :func:`summarize_samples` reads."""
FIGURES = (
    "energy_j",
    "power_mean_w",
    "power_max_w",
    "util_mean_pct",
    "smact_mean_ratio",
    "gpu_mem_peak_mib",
    "host_mem_peak_mib",
)
DEVICE_FIGURES = FIGURES[:-1]
"""The figures of the GPUs (all but host memory)."""
PER_EXAMPLE = ("examples_per_s", "time_per_example_ns", "energy_per_example_nj")
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
    import numpy as np
    import pandas as pd

_GPU = re.compile(r"^gpu\d+$")
NAN = float("nan")


# --------------------------------------------------------------------------- samples → figures


def _seconds(stamps: pd.Series) -> np.ndarray:
    """Timestamps (tz-aware, naive or already numeric seconds) as float epoch seconds."""
    import numpy as np
    import pandas as pd

    if pd.api.types.is_numeric_dtype(stamps):
        return stamps.to_numpy(np.float64)
    stamps = pd.to_datetime(stamps, utc=True)
    return ((stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(np.float64)


def _series(frame: pd.DataFrame) -> dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]:
    """``(listener, gpu entity, quantity) → (seconds, values)``, sorted by time, NaN dropped.

    Only GPU-level keys (``<listener>/gpu{i}/<quantity>``) and ``top/proc/rss_mib``.
    """
    import numpy as np
    import pandas as pd

    if frame is None or len(frame) == 0:
        return {}
    keys = pd.unique(frame["key"])
    wanted: dict[str, tuple[str, str, str]] = {}
    for key in keys:
        parts = str(key).split("/")
        if len(parts) == 3 and (_GPU.match(parts[1]) or key == "top/proc/rss_mib"):
            wanted[str(key)] = (parts[0], parts[1], parts[2])
    if not wanted:
        return {}
    rows = frame[frame["key"].isin(list(wanted))]
    found = {}
    for key, group in rows.groupby(rows["key"].astype(str), sort=False):
        seconds = _seconds(group["timestamp"])
        values = group["value"].to_numpy(np.float64)
        keep = np.isfinite(values) & np.isfinite(seconds)
        seconds, values = seconds[keep], values[keep]
        order = np.argsort(seconds, kind="stable")
        if len(order):
            found[wanted[key]] = (seconds[order], values[order])
    return found


def counter_energy(values: np.ndarray) -> float:
    """Joules counted by an energy counter series: last − first (resets: sum of increases)."""
    import numpy as np

    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return NAN
    steps = np.diff(values)
    if (steps >= 0).all():
        return float(values[-1] - values[0])
    return float(steps[steps > 0].sum())


def integrate_power(
    seconds: np.ndarray, watts: np.ndarray, gap_factor: float = GAP_FACTOR
) -> float:
    """Trapezoid integral of power (J), skipping intervals longer than ``gap_factor`` × median."""
    import numpy as np

    seconds = np.asarray(seconds, np.float64)
    watts = np.asarray(watts, np.float64)
    keep = np.isfinite(seconds) & np.isfinite(watts)
    seconds, watts = seconds[keep], watts[keep]
    order = np.argsort(seconds, kind="stable")
    seconds, watts = seconds[order], watts[order]
    if len(seconds) < 2:
        return NAN
    steps = np.diff(seconds)
    positive = steps[steps > 0]
    if not len(positive):
        return NAN
    limit = gap_factor * float(np.median(positive))
    inside = steps <= limit
    return float(np.sum(((watts[1:] + watts[:-1]) / 2.0 * steps)[inside]))


def _energy(
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
) -> tuple[float, dict[str, tuple[str, str]]]:
    """Joules over every GPU and, per GPU, ``(listener, "counter" | "integrated_power")``."""
    gpus = sorted({gpu for (_, gpu, quantity) in series if quantity in ("energy_j", "power_w")})
    total, used = 0.0, {}
    for gpu in gpus:
        joules = NAN
        for listener in ENERGY_LISTENERS:
            if (listener, gpu, "energy_j") in series:
                joules = counter_energy(series[listener, gpu, "energy_j"][1])
                if math.isfinite(joules):
                    used[gpu] = (listener, "counter")
                    break
        if not math.isfinite(joules):
            for listener in POWER_LISTENERS:
                if (listener, gpu, "power_w") in series:
                    joules = integrate_power(*series[listener, gpu, "power_w"])
                    if math.isfinite(joules):
                        used[gpu] = (listener, "integrated_power")
                        break
        if math.isfinite(joules):
            total += joules
    return (total if used else NAN), used


def energy_method(
    used: Mapping[str, tuple[str, str]], tags: Mapping[str, str] | None = None
) -> str:
    """``counter``, ``integrated_power`` or ``none`` for the per-GPU sources of :func:`_energy`.

    ``tags`` (the run's) tell when the ``nvml`` listener's ``energy_j`` is its
    own integral of power (a GPU without an energy counter).
    """
    if not used:
        return "none"
    tags = tags or {}
    for gpu, (listener, method) in used.items():
        if method == "integrated_power":
            return "integrated_power"
        if listener == "nvml" and tags.get(f"radt.nvml.energy_method.{gpu}") == "integrated_power":
            return "integrated_power"
    return "counter"


def _first(
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
    quantity: str,
    listeners: Iterable[str],
) -> dict[str, np.ndarray]:
    """Per GPU, the values of ``quantity`` from the first listener that has them."""
    chosen: dict[str, np.ndarray] = {}
    for listener in listeners:
        for (source, gpu, name), (_, values) in series.items():
            if source == listener and name == quantity and gpu.startswith("gpu"):
                chosen.setdefault(gpu, values)
    return chosen


def _figures(frame: pd.DataFrame) -> tuple[dict[str, float], dict[str, tuple[str, str]]]:
    import numpy as np

    series = _series(frame)
    joules, used = _energy(series)
    power = _first(series, "power_w", POWER_LISTENERS)
    util = _first(series, "util_pct", UTIL_LISTENERS)
    smact = _first(series, "smact_ratio", ("dcgm",))
    memory = _first(series, "mem_used_mib", MEMORY_LISTENERS)
    rss = series.get(("top", "proc", "rss_mib"))
    figures = {
        "energy_j": joules,
        "power_mean_w": _sum(float(np.mean(v)) for v in power.values()),
        "power_max_w": _peak(power.values()),
        "util_mean_pct": _mean(float(np.mean(v)) for v in util.values()),
        "smact_mean_ratio": _mean(float(np.mean(v)) for v in smact.values()),
        "gpu_mem_peak_mib": _peak(memory.values()),
        "host_mem_peak_mib": float(np.max(rss[1])) if rss is not None and len(rss[1]) else NAN,
    }
    return figures, used


def _total(values: Iterable[float]) -> float:
    """The sum of the finite values; NaN when there is none."""
    finite = [v for v in values if math.isfinite(v)]
    return float(sum(finite)) if finite else NAN


def _sum(values: Iterable[float]) -> float:
    values = list(values)
    return float(sum(values)) if values else NAN


def _mean(values: Iterable[float]) -> float:
    import numpy as np

    values = list(values)
    return float(np.mean(values)) if values else NAN


def _peak(arrays: Iterable[np.ndarray]) -> float:
    import numpy as np

    peaks = [float(np.max(a)) for a in arrays if len(a)]
    return max(peaks) if peaks else NAN


def per_example(
    examples: float | None, duration_s: float | None, energy_j: float | None
) -> dict[str, float]:
    """``examples_per_s``, ``time_per_example_ns``, ``energy_per_example_nj``; NaN if unknown."""
    n = _number(examples)
    seconds = _number(duration_s)
    joules = _number(energy_j)
    has = math.isfinite(n) and n > 0
    return {
        "examples_per_s": n / seconds if has and math.isfinite(seconds) and seconds > 0 else NAN,
        "time_per_example_ns": 1e9 * seconds / n if has and math.isfinite(seconds) else NAN,
        "energy_per_example_nj": 1e9 * joules / n if has and math.isfinite(joules) else NAN,
    }


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return NAN
    return number


def summarize_samples(
    frame: pd.DataFrame,
    examples: float | None = None,
    duration_s: float | None = None,
) -> dict[str, float]:
    """The energy, power, utilisation and memory figures of ONE run's samples.

    ``frame`` has the tidy columns ``timestamp``, ``key`` and ``value`` (as
    :func:`radt.load` returns them, or as ``radt/samples.parquet`` holds them;
    timestamps tz-aware, naive UTC, or numeric epoch seconds). Returns floats,
    NaN where the samples do not tell:

    - ``energy_j``: see the module docstring (counter, else integrated power);
    - ``power_mean_w``: mean draw summed over the GPUs; ``power_max_w``: the
      highest draw of one GPU (``nvml``, else ``dcgm``, else ``smi``);
    - ``util_mean_pct``: mean GPU utilisation over the GPUs (``nvml``, else ``smi``);
    - ``smact_mean_ratio``: mean SM activity over the GPUs (``dcgm``);
    - ``gpu_mem_peak_mib``: the most memory used on one GPU (``nvml``, else ``smi``);
    - ``host_mem_peak_mib``: peak RSS of the run's process tree (``top/proc/rss_mib``);
    - with ``examples`` and ``duration_s`` also ``examples_per_s``,
      ``time_per_example_ns`` and ``energy_per_example_nj``.
    """
    figures, _ = _figures(frame)
    if examples is not None or duration_s is not None:
        figures.update(per_example(examples, duration_s, figures["energy_j"]))
    return figures


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
        own, used = _figures(tables[run.info.run_id].to_pandas())
        figures[run.info.run_id] = (own, energy_method(used, run.data.tags))

    rows: dict[str, dict] = {}
    baselines = _baselines(context, parents)
    for run in chosen:
        run_id = run.info.run_id
        own, method = figures[run_id]
        if run_id in parents:
            row = _row(run, "provider")
            kids = children.get(run_id, [])
            examples = _total(_examples(k) for k in kids)
            row["command"] = " | ".join(k.data.tags.get("radt.command", "?") for k in kids) or None
            row["params"] = None
            host = [figures[k.info.run_id][0]["host_mem_peak_mib"] for k in kids]
            own = dict(own)
            if not math.isfinite(own["host_mem_peak_mib"]):
                own["host_mem_peak_mib"] = _total(host)
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
