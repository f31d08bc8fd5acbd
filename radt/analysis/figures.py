"""The figure arithmetic: one run's samples into energy, power, utilisation and memory figures.

Pure functions of samples (tidy frames or arrays); :mod:`radt.analysis.summary`
assembles them into the table of runs and workloads.

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
Units: ns = 1e9 × s, nJ = 1e9 × J.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from radt.analysis.catalog import SAMPLE_FIGURES, WINDOW_FIGURES
from radt.quantities import (
    GPU_ENERGY,
    GPU_MEMORY,
    GPU_POWER,
    GPU_SM_ACTIVITY,
    GPU_UTILISATION,
    providers_of,
)
from radt.tags import RADT_NVML_ENERGY_METHOD

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

GAP_FACTOR = 5.0
"""An interval between power samples longer than this many median intervals is not integrated."""
EXAMPLES_METRIC = "examples"
SOURCES = {
    "power_w": GPU_POWER,
    "util_pct": GPU_UTILISATION,
    "smact_ratio": GPU_SM_ACTIVITY,
    "mem_used_mib": GPU_MEMORY,
}
"""Per GPU series of :data:`radt.analysis.catalog.SAMPLE_FIGURES`, the quantity it is
(:mod:`radt.quantities`: which listeners provide it, best first)."""
FIGURES = WINDOW_FIGURES
DEVICE_FIGURES = (
    "energy_j",
    *(f.name for f in SAMPLE_FIGURES if not f.quantity.startswith("tree:")),
)
"""The figures of the GPUs (all but the process tree's)."""
TREE_KEYS = ("top/proc/rss_mib", "top/proc/cpu_pct")
"""The process-tree series the figures read (memory peak, CPU time)."""
_GPU = re.compile(r"^gpu\d+$")
NAN = float("nan")


# --------------------------------------------------------------------------- samples → figures


def epoch_seconds(stamps: pd.Series) -> np.ndarray:
    """Timestamps (tz-aware, naive or already numeric seconds) as float epoch seconds."""
    import numpy as np
    import pandas as pd

    if pd.api.types.is_numeric_dtype(stamps):
        return stamps.to_numpy(np.float64)
    stamps = pd.to_datetime(stamps, utc=True)
    return ((stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)).to_numpy(np.float64)


def device_series(frame: pd.DataFrame) -> dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]:
    """``(listener, gpu entity, quantity) → (seconds, values)``, sorted by time, NaN dropped.

    Only GPU-level keys (``<listener>/gpu{i}/<quantity>``), ``top/proc/rss_mib`` and
    ``top/proc/cpu_pct`` (the run's process tree).
    """
    import numpy as np
    import pandas as pd

    if frame is None or len(frame) == 0:
        return {}
    keys = pd.unique(frame["key"])
    wanted: dict[str, tuple[str, str, str]] = {}
    for key in keys:
        parts = str(key).split("/")
        if len(parts) == 3 and (_GPU.match(parts[1]) or key in TREE_KEYS):
            wanted[str(key)] = (parts[0], parts[1], parts[2])
    if not wanted:
        return {}
    rows = frame[frame["key"].isin(list(wanted))]
    found = {}
    for key, group in rows.groupby(rows["key"].astype(str), sort=False):
        seconds = epoch_seconds(group["timestamp"])
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


def energy_per_gpu(
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
    from_counter: Callable[[np.ndarray, np.ndarray], float],
    from_power: Callable[[np.ndarray, np.ndarray], float],
) -> tuple[float, dict[str, tuple[str, str]], list[str]]:
    """GPU energy summed over the GPUs of ``series``, each GPU by the best source it has.

    Per GPU the energy counter (``nvml``, else ``dcgm``) through ``from_counter(seconds,
    joules)``, else power (``nvml``, ``dcgm``, ``smi``) through ``from_power(seconds,
    watts)``; either returns NaN when it cannot tell. Returns ``(joules, {gpu: (listener,
    "counter" | "integrated_power")}, GPUs with no energy)``; the joules are NaN when no GPU
    has any.
    """
    gpus = sorted(
        {
            gpu
            for (_, gpu, quantity) in series
            if quantity in ("energy_j", "power_w") and gpu.startswith("gpu")
        }
    )
    total, used, missing = 0.0, {}, []
    for gpu in gpus:
        joules = NAN
        for listener in providers_of(GPU_ENERGY):
            if (listener, gpu, "energy_j") in series:
                joules = from_counter(*series[listener, gpu, "energy_j"])
                if math.isfinite(joules):
                    used[gpu] = (listener, "counter")
                    break
        if not math.isfinite(joules):
            for listener in providers_of(GPU_POWER):
                if (listener, gpu, "power_w") in series:
                    joules = from_power(*series[listener, gpu, "power_w"])
                    if math.isfinite(joules):
                        used[gpu] = (listener, "integrated_power")
                        break
        if math.isfinite(joules):
            total += joules
        else:
            missing.append(gpu)
    return (total if used else NAN), used, missing


def all_samples_energy(
    series: Mapping[tuple[str, str, str], tuple[np.ndarray, np.ndarray]],
) -> tuple[float, dict[str, tuple[str, str]]]:
    """Joules over every GPU and all its samples, and per GPU its source (see energy_per_gpu)."""
    joules, used, _ = energy_per_gpu(
        series, lambda _seconds, joules: counter_energy(joules), integrate_power
    )
    return joules, used


def energy_method(
    used: Mapping[str, tuple[str, str]], tags: Mapping[str, str] | None = None
) -> str:
    """``counter``, ``integrated_power`` or ``none`` for the per-GPU sources of the energy.

    ``tags`` (the run's) tell when the ``nvml`` listener's ``energy_j`` is its
    own integral of power (a GPU without an energy counter).
    """
    if not used:
        return "none"
    tags = tags or {}
    for gpu, (listener, method) in used.items():
        if method == "integrated_power":
            return "integrated_power"
        if listener == "nvml" and tags.get(RADT_NVML_ENERGY_METHOD + gpu) == "integrated_power":
            return "integrated_power"
    return "counter"


def across_gpus(chosen: Mapping[str, tuple[np.ndarray, np.ndarray]], combine: str) -> np.ndarray:
    """The run's GPUs as one device: per instant, the GPUs' values summed (``combine="sum"``:
    power, memory) or averaged (``"mean"``: utilisation, SM activity).

    The instants are every GPU's sample times inside the span all GPUs' samples share,
    each GPU's value there interpolated linearly; one GPU's own values as they are.
    Empty when the GPUs' samples share no instant.
    """
    import numpy as np

    pairs = [(s, v) for s, v in chosen.values() if len(s)]
    if len(pairs) == 1:
        return pairs[0][1]
    if not pairs:
        return np.empty(0)
    lo, hi = max(s[0] for s, _ in pairs), min(s[-1] for s, _ in pairs)
    times = np.unique(np.concatenate([s[(s >= lo) & (s <= hi)] for s, _ in pairs]))
    if not len(times):
        return np.empty(0)
    stacked = np.vstack([np.interp(times, s, v) for s, v in pairs])
    return stacked.sum(axis=0) if combine == "sum" else stacked.mean(axis=0)


def sample_figures(
    chosen: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    tree: Mapping[str, np.ndarray],
) -> dict[str, float]:
    """The figures of :data:`radt.analysis.catalog.SAMPLE_FIGURES` over the samples given.

    ``chosen``: per GPU quantity, per GPU its ``(seconds, values)``, combined as the
    figure's ``across`` says (:func:`across_gpus`); ``tree``: per process-tree quantity its
    values. Each is then reduced over time as the figure's ``over_time`` says; NaN where
    there is none.
    """
    import numpy as np

    reduce = {"mean": np.mean, "max": np.max}
    figures = {}
    for figure in SAMPLE_FIGURES:
        kind, _, quantity = figure.quantity.rpartition(":")
        if kind == "tree":
            values = tree.get(quantity, np.empty(0))
        else:
            values = across_gpus(chosen.get(quantity, {}), figure.across)
        figures[figure.name] = float(reduce[figure.over_time](values)) if len(values) else NAN
    return figures


def finite_sum(values: Iterable[float]) -> float:
    """The sum of the finite values; NaN when there is none."""
    finite = [v for v in values if math.isfinite(v)]
    return float(sum(finite)) if finite else NAN


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
