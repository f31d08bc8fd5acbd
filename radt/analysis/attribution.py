"""Energy you can trust and attribute: the cross-check, host energy, per-client estimates.

Three additions to the rows of :func:`radt.analysis.summary.summary`
(docs/analysis.md, "Energy: cross-check, host energy and estimates", defines
them with worked numbers):

- **Cross-check** of a row's GPU energy: per GPU over the row's window, the
  energy counter's increase (``energy_counter_j``) and the trapezoid integral
  of the same listener's power (``energy_power_integral_j``), and how far the
  integral is from the counter (``energy_crosscheck_pct`` = 100 × (integral −
  counter) / counter; with several GPUs the sums, and the percentage of the GPU
  that differs most). More than :data:`CROSSCHECK_LIMIT_PCT` either way is
  flagged (:func:`crosscheck_flagged`).
- **Host energy**: the CPU packages and DRAM (``rapl/packageN`` +
  ``rapl/dramN``; ``rapl/psys`` where there is no package zone) across the
  window (``host_energy_j``), per example, and the sum of the parts present
  (GPU, host) per example (``total_energy_per_example_nj``, its parts named in
  ``total_energy_parts``: ``gpu+host``, ``gpu`` or ``host``). RAPL measures the whole machine: a
  workload's (or lone run's) host energy is the machine's; a collocated client
  has none of its own.
- **Per-client estimates** on a shared GPU (``energy_j_est``,
  ``energy_est_method``, ``energy_per_example_nj_est``), never in the measured
  columns. Over the client's window, cut at the GPU's energy samples, each
  piece's energy is the **idle floor** (the lowest power the GPU drew in the
  workload × the piece's length; ``idle_energy_j``, ``idle_method``), split
  equally among the clients whose command runs then, plus the rest, split by
  activity: MIG by each GPU instance's ``dcgm/gpu{g}/gi{i}/gract_ratio`` ×
  its compute slices (``mig_activity``), else by compute slices
  (``mig_slices``); otherwise by each client's ``nvml/gpu{g}/proc/sm_pct``
  (``sm_util``); a piece where that is unknown (or all zero) is split equally
  (``equal``). The method names every rule used (``sm_util+equal``) and a note
  says for how much of the window each. Over a common window the clients'
  estimates add up to the GPU's energy.

Units: ns = 1e9 × s, nJ = 1e9 × J; times are float epoch seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from radt.analysis.catalog import ATTRIBUTED
from radt.analysis.figures import (
    GAP_FACTOR,
    NAN,
    epoch_seconds,
)
from radt.analysis.windows import (
    LIFETIME_BASES,
    counter_energy_between,
    power_energy_between,
    sampling_interval,
    unwrap_counter,
)
from radt.quantities import GPU_ENERGY, GPU_POWER, providers_of
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_COLLOCATION,
    RADT_DEVICES,
    RADT_MIG_INSTANCE,
    RADT_MIG_PROFILE,
    RADT_NVML_ENERGY_METHOD,
    Mode,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from radt.analysis.summary import Record

CROSSCHECK_LIMIT_PCT = 5.0
"""A counter and a power integral further apart than this (either way) are flagged."""
REACH_FACTOR = 1.5
"""A piece without an activity sample of its own takes the next sample within this many of
that series' sampling intervals (a sample tells about the period that ends at its time)."""
ATTRIBUTION_KEYS = (
    "rapl/*/energy_j",
    "rapl/*/power_w",
    "nvml/gpu*/proc/sm_pct",
    "dcgm/gpu*/gi*/gract_ratio",
)
"""The keys, beyond the summary's own, that this module reads."""
ATTRIBUTION_COLUMNS = ATTRIBUTED
"""The summary columns this module fills (docs/analysis.md)."""
IDLE_METHOD = "lowest_power"
MIG_METHODS = ("mig_activity", "mig_slices", "equal")
SHARE_METHODS = ("sm_util", None, "equal")
"""The rule of each level of :func:`split_energy`: activity, fallback weights, equal."""
FALLBACK_WHY = {
    "mig_slices": "no GPU-instance activity (dcgm gract_ratio) samples",
    "equal": "no activity samples, or none above zero",
}
COLLOCATED_NOTE = "collocated: a run's share of the GPU's energy is not measured"
"""The summary's note on a collocated client, which an estimate completes."""
_EXTRA = re.compile(
    r"^(rapl/[a-z0-9]+/(energy_j|power_w)|nvml/gpu\d+/proc/sm_pct|dcgm/gpu\d+/gi\d+/gract_ratio)$"
)
_HOST_ZONE = re.compile(r"^(package|dram)\d+(die\d+)?$")
_MIG_INSTANCE = re.compile(r"GPU (\d+) GPU instance (\d+)")

Arrays = tuple[np.ndarray, np.ndarray]


# --------------------------------------------------------------------------- cross-check


def crosscheck_flagged(pct: Any) -> bool:
    """Whether a cross-check difference (%) is over :data:`CROSSCHECK_LIMIT_PCT` either way."""
    try:
        value = float(pct)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and abs(value) > CROSSCHECK_LIMIT_PCT


def _bounds(seconds: np.ndarray, start: float | None, end: float | None) -> tuple[float, float]:
    """The window, or the series' own extent where it is None (a whole run)."""
    if start is None or end is None:
        return float(seconds[0]), float(seconds[-1])
    return start, end


def crosscheck(
    series: Mapping[tuple[str, str, str], Arrays],
    start: float | None,
    end: float | None,
    tags: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """The counter and the power integral of the GPUs over ``[start, end]`` (None: all samples).

    Per GPU: the first listener of ``nvml``, ``dcgm`` with an energy counter and a power
    series (its own, else the first power listener's) that both cover the window. An
    ``nvml`` counter that is the listener's own integral of power (tag
    ``radt.nvml.energy_method.gpu{i}``) is no counter and is left out. Returns
    ``energy_counter_j`` and ``energy_power_integral_j`` (sums over those GPUs) and
    ``energy_crosscheck_pct`` (of the GPU that differs most); NaN where no GPU has both.
    """
    tags = tags or {}
    counters = integrals = 0.0
    worst = NAN
    gpus = sorted({gpu for (_, gpu, q) in series if q == "energy_j" and gpu.startswith("gpu")})
    for gpu in gpus:
        for listener in providers_of(GPU_ENERGY):
            counter = series.get((listener, gpu, "energy_j"))
            own = tags.get(RADT_NVML_ENERGY_METHOD + gpu) == "integrated_power"
            if counter is None or len(counter[0]) < 2 or (listener == "nvml" and own):
                continue
            power = series.get((listener, gpu, "power_w")) or next(
                (
                    series[k]
                    for k in ((p, gpu, "power_w") for p in providers_of(GPU_POWER))
                    if k in series
                ),
                None,
            )
            if power is None or len(power[0]) < 2:
                continue
            lo, hi = _bounds(counter[0], start, end)
            joules = counter_energy_between(*counter, lo, hi)
            lo, hi = _bounds(power[0], start, end)
            integral = power_energy_between(*power, lo, hi)
            if not (math.isfinite(joules) and math.isfinite(integral) and joules > 0):
                continue
            counters += joules
            integrals += integral
            pct = 100.0 * (integral - joules) / joules
            if not math.isfinite(worst) or abs(pct) > abs(worst):
                worst = pct
            break
    if not math.isfinite(worst):
        return {
            "energy_counter_j": NAN,
            "energy_power_integral_j": NAN,
            "energy_crosscheck_pct": NAN,
        }
    return {
        "energy_counter_j": counters,
        "energy_power_integral_j": integrals,
        "energy_crosscheck_pct": worst,
    }


# --------------------------------------------------------------------------- host energy


def host_zones(entities: Sequence[str]) -> list[str]:
    """The RAPL zones whose sum is the host's energy: packages and DRAM, else ``psys``.

    A package includes its cores and uncore (never added again); ``psys`` covers the
    package and DRAM and is used only where no package zone was recorded.
    """
    zones = sorted(e for e in set(entities) if _HOST_ZONE.match(e))
    if not zones and "psys" in entities:
        zones = ["psys"]
    return zones


def host_energy(
    rapl: Mapping[str, Arrays], start: float | None, end: float | None
) -> tuple[float, str | None]:
    """CPU + DRAM energy (J) over ``[start, end]`` (None: all samples), and why it is missing.

    ``rapl`` maps keys ``rapl/<zone>/energy_j`` (and ``power_w``) to ``(seconds, values)``.
    Per zone of :func:`host_zones` the energy counter at the bounds, else the integral of
    its power. NaN without RAPL series (no note) or when a zone does not cover the window.
    """
    entities = [key.split("/")[1] for key in rapl if key.startswith("rapl/")]
    zones = host_zones(entities)
    if not zones:
        return NAN, None
    total, uncovered = 0.0, []
    for zone in zones:
        joules = NAN
        counter = rapl.get(f"rapl/{zone}/energy_j")
        if counter is not None and len(counter[0]) >= 2:
            joules = counter_energy_between(*counter, *_bounds(counter[0], start, end))
        power = rapl.get(f"rapl/{zone}/power_w")
        if not math.isfinite(joules) and power is not None and len(power[0]) >= 2:
            joules = power_energy_between(*power, *_bounds(power[0], start, end))
        if math.isfinite(joules):
            total += joules
        else:
            uncovered.append(zone)
    if uncovered:
        return NAN, (
            f"the rapl samples of {', '.join(uncovered)} do not cover the window: "
            "host energy missing"
        )
    return total, None


# ----------------------------------------------------------------------- the GPU's energy in pieces


@dataclass(frozen=True)
class EnergyCurve:
    """A GPU's cumulative energy (J) as a function of time, from a counter or from power.

    :meth:`at` gives the same differences as
    :func:`radt.analysis.windows.counter_energy_between` and
    :func:`radt.analysis.windows.power_energy_between`: a counter interpolated
    linearly (one sampling interval of reach beyond its samples); power as the
    trapezoid of power interpolated linearly, held beyond the ends for one
    interval, nothing across a gap longer than ``GAP_FACTOR`` intervals.
    """

    seconds: np.ndarray
    values: np.ndarray
    """The counter (resets undone), or power (W)."""
    kind: str
    """``counter`` or ``integrated_power``."""

    @classmethod
    def of(cls, series: Mapping[tuple[str, str, str], Arrays], gpu: str) -> EnergyCurve | None:
        """The GPU's counter (``nvml``, else ``dcgm``), else its power; None without either."""
        for listener in providers_of(GPU_ENERGY):
            found = series.get((listener, gpu, "energy_j"))
            if found is not None and len(found[0]) >= 2:
                return cls(found[0], unwrap_counter(found[1]), "counter")
        for listener in providers_of(GPU_POWER):
            found = series.get((listener, gpu, "power_w"))
            if found is not None and len(found[0]) >= 2:
                return cls(found[0], np.asarray(found[1], np.float64), "integrated_power")
        return None

    def at(self, when: np.ndarray) -> np.ndarray:
        """The cumulative energy at each time of ``when`` (NaN beyond the reach)."""
        s, v = self.seconds, self.values
        when = np.asarray(when, np.float64)
        interval = sampling_interval(s)
        if not math.isfinite(interval):
            return np.full(when.shape, NAN)
        if self.kind == "counter":
            out = np.interp(when, s, v)
            before, after = when < s[0], when > s[-1]
            out[before] = v[0] + (v[1] - v[0]) / (s[1] - s[0]) * (when[before] - s[0])
            out[after] = v[-1] + (v[-1] - v[-2]) / (s[-1] - s[-2]) * (when[after] - s[-1])
        else:
            steps = np.diff(s)
            pieces = np.where(steps <= GAP_FACTOR * interval, (v[1:] + v[:-1]) / 2.0 * steps, 0.0)
            cumulative = np.concatenate([[0.0], np.cumsum(pieces)])
            j = np.clip(np.searchsorted(s, when, side="right") - 1, 0, len(s) - 2)
            u = np.clip(when - s[j], 0.0, steps[j])
            gap = steps[j] > GAP_FACTOR * interval
            slope = (v[j + 1] - v[j]) / steps[j]
            inside = cumulative[j] + np.where(gap, 0.0, v[j] * u + slope * u * u / 2.0)
            out = np.where(when < s[0], v[0] * (when - s[0]), inside)
            out = np.where(when > s[-1], cumulative[-1] + v[-1] * (when - s[-1]), out)
        far = (when < s[0] - interval) | (when > s[-1] + interval)
        return np.where(far, NAN, out)


def idle_floor_w(series: Mapping[tuple[str, str, str], Arrays], gpu: str) -> float:
    """The GPU's idle floor: the lowest power it drew in the samples (W); NaN without any.

    From the first power listener's ``power_w``; without power, the lowest
    average power between two readings of the energy counter (gaps left out).
    """
    for listener in providers_of(GPU_POWER):
        found = series.get((listener, gpu, "power_w"))
        if found is not None and len(found[1]):
            return float(np.min(found[1]))
    for listener in providers_of(GPU_ENERGY):
        found = series.get((listener, gpu, "energy_j"))
        if found is None or len(found[0]) < 3:
            continue
        seconds, joules = found[0], unwrap_counter(found[1])
        steps = np.diff(seconds)
        keep = (steps > 0) & (steps <= GAP_FACTOR * sampling_interval(seconds))
        if keep.any():
            return float(np.min(np.diff(joules)[keep] / steps[keep]))
    return NAN


def activity_on(seconds: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """An activity series over the pieces between ``edges``: one value per piece, NaN unknown.

    A sample tells about the period that ends at its time. A piece ``(a, b]``
    takes the mean of its samples; one without samples takes the next sample
    after ``b`` if it comes within :data:`REACH_FACTOR` sampling intervals.
    """
    seconds, values = np.asarray(seconds, np.float64), np.asarray(values, np.float64)
    edges = np.asarray(edges, np.float64)
    if not len(seconds):
        return np.full(len(edges) - 1, NAN)
    lo = np.searchsorted(seconds, edges[:-1], side="right")
    hi = np.searchsorted(seconds, edges[1:], side="right")
    sums = np.concatenate([[0.0], np.cumsum(values)])
    count = hi - lo
    mean = (sums[hi] - sums[lo]) / np.maximum(count, 1)
    interval = sampling_interval(seconds)
    reach = REACH_FACTOR * interval if math.isfinite(interval) else 0.0
    nxt = np.minimum(hi, len(seconds) - 1)
    near = (hi < len(seconds)) & (seconds[nxt] - edges[1:] <= reach)
    return np.where(count > 0, mean, np.where(near, values[nxt], NAN))


# --------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Sharer:
    """A client on a GPU, as the split sees it."""

    begin_s: float
    """When its command ran (it shares the idle floor then)."""
    end_s: float
    activity: Arrays | None = None
    """Its activity weight over time (``sm_pct``; MIG: ``gract_ratio`` × compute slices)."""
    fallback: float | None = None
    """Its weight where the activity is unknown (MIG: compute slices); None: equal."""


@dataclass(frozen=True)
class Split:
    """One client's estimated share of a GPU's energy over a window."""

    energy_j: float
    idle_j: float
    """Of which its share of the idle floor."""
    level_s: tuple[float, float, float]
    """Seconds of the window split by activity, by the fallback weights, equally."""


def split_energy(
    energy_j: np.ndarray,
    idle_j: np.ndarray,
    present: np.ndarray,
    weights: np.ndarray,
    fallback: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split each piece's energy among clients: the idle floor equally, the rest by weight.

    ``energy_j`` and ``idle_j`` are per piece (m,); ``present``, ``weights`` and
    ``fallback`` per client and piece (n, m). In a piece, the clients present share
    ``idle_j`` equally and ``energy_j − idle_j`` in proportion to ``weights`` when
    every present client's weight is known and their sum is above zero, else to
    ``fallback`` on the same terms, else equally. Returns each client's energy (n,)
    and idle share (n,), and per piece the level used (m,): 0 weights, 1 fallback,
    2 equal, -1 nobody present (nothing attributed).
    """
    present = np.asarray(present, bool)
    n_present = present.sum(axis=0)
    equal = np.where(n_present > 0, present / np.maximum(n_present, 1), 0.0)
    shares = equal.copy()
    level = np.where(n_present > 0, 2, -1)
    for rank, w in ((1, fallback), (0, weights)):  # the better rule last: it wins
        w = np.where(present, np.asarray(w, np.float64), 0.0)
        known = ~np.any(present & ~np.isfinite(w), axis=0)
        w = np.where(np.isfinite(w), w, 0.0)
        total = w.sum(axis=0)
        usable = known & (total > 0) & (n_present > 0)
        shares = np.where(usable, w / np.where(total > 0, total, 1.0), shares)
        level = np.where(usable, rank, level)
    active = np.asarray(energy_j) - np.asarray(idle_j)
    idle_share = (equal * np.asarray(idle_j)).sum(axis=1)
    return (shares * active).sum(axis=1) + idle_share, idle_share, level


def estimate_share(
    curve: EnergyCurve,
    idle_w: float,
    start: float,
    end: float,
    sharers: Sequence[Sharer],
    target: int,
) -> Split | None:
    """Client ``target``'s share of a GPU's energy from ``start`` to ``end`` (None: not covered).

    The window is cut at the curve's samples; :func:`split_energy` splits each
    piece among the ``sharers`` whose command runs at its middle, with
    ``idle_w`` (NaN: no floor, 0) × the piece's length as its idle floor.
    """
    inside = curve.seconds[(curve.seconds > start) & (curve.seconds < end)]
    edges = np.concatenate([[start], inside, [end]])
    cumulative = curve.at(edges)
    if not np.isfinite(cumulative).all():
        return None
    energy = np.diff(cumulative)
    lengths = np.diff(edges)
    idle = (idle_w if math.isfinite(idle_w) else 0.0) * lengths
    middle = (edges[:-1] + edges[1:]) / 2.0
    present = np.array([(middle >= s.begin_s) & (middle <= s.end_s) for s in sharers])
    weights = np.array(
        [
            activity_on(*s.activity, edges) if s.activity is not None else np.full(len(middle), NAN)
            for s in sharers
        ]
    )
    fallback = np.array(
        [np.full(len(middle), NAN if s.fallback is None else s.fallback) for s in sharers]
    )
    joules, idle_share, level = split_energy(energy, idle, present, weights, fallback)
    seconds = tuple(float(lengths[level == rank].sum()) for rank in (0, 1, 2))
    return Split(float(joules[target]), float(idle_share[target]), seconds)


def method_of(names: Sequence[str | None], level_s: Sequence[float]) -> tuple[str, str | None]:
    """The estimate's method (the rules used, joined by ``+``) and, when mixed, a note."""
    total = float(sum(level_s))
    used = [(names[i], s) for i, s in enumerate(level_s) if s > 0 and names[i]]
    if not used:
        return names[0] or "equal", None
    method = "+".join(name for name, _ in used)
    if len(used) == 1:
        return method, None
    parts = [f"{name} over {100.0 * s / total:.0f} %" for name, s in used]
    why = "; ".join(FALLBACK_WHY[name] for name, _ in used[1:] if name in FALLBACK_WHY)
    return method, f"estimated energy: {', '.join(parts)} of the window ({why})"


# --------------------------------------------------------------------------- summary rows


def extra_series(table: pa.Table | None) -> dict[str, Arrays]:
    """The series this module reads (``rapl/…``, ``…/proc/sm_pct``, ``…/gi{i}/gract_ratio``).

    ``key → (seconds, values)``, sorted by time, missing values dropped.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if table is None or table.num_rows == 0:
        return {}
    keys = [k for k in pc.unique(table["key"]).to_pylist() if k and _EXTRA.match(str(k))]
    if not keys:
        return {}
    rows = table.filter(pc.is_in(table["key"], value_set=pa.array(keys, pa.string())))
    frame = rows.select(["timestamp", "key", "value"]).to_pandas()
    found: dict[str, Arrays] = {}
    for key, group in frame.groupby(frame["key"].astype(str), sort=False):
        seconds = epoch_seconds(group["timestamp"])
        values = group["value"].to_numpy(np.float64)
        keep = np.isfinite(seconds) & np.isfinite(values)
        order = np.argsort(seconds[keep], kind="stable")
        if len(order):
            found[key] = (seconds[keep][order], values[keep][order])
    return found


def compute_slices(profile: str | None) -> int | None:
    """Compute slices of a MIG GPU-instance profile: ``3g.20gb`` → 3; None when unknown."""
    found = re.match(r"^(\d+)g", str(profile or "").strip())
    return int(found.group(1)) if found else None


def client_gpus(tags: Mapping[str, str], gpus: Sequence[str]) -> list[str]:
    """The GPUs (``gpu0``) of ``gpus`` a client ran on: its MIG instance's, its device
    indices, else all."""
    found = _MIG_INSTANCE.search(tags.get(RADT_MIG_INSTANCE) or "")
    if found:
        return [gpu for gpu in gpus if gpu == f"gpu{found.group(1)}"]
    entries = [d.strip() for d in (tags.get(RADT_DEVICES) or "").split(",") if d.strip()]
    if entries and all(entry.isdigit() for entry in entries):
        return [gpu for gpu in gpus if gpu in {f"gpu{int(e)}" for e in entries}]
    return list(gpus)


def _gpus(series: Mapping[tuple[str, str, str], Arrays]) -> list[str]:
    return sorted(
        {g for (_, g, q) in series if q in ("energy_j", "power_w") and g.startswith("gpu")}
    )


def _per_example(joules: float, record: Record) -> float:
    examples = record.window.examples if record.window is not None else NAN
    if not record.basis.startswith("examples") or not math.isfinite(examples) or examples <= 0:
        return NAN
    return 1e9 * joules / examples if math.isfinite(joules) else NAN


def _has_host(series: Mapping[str, Arrays]) -> bool:
    return bool(host_zones([k.split("/")[1] for k in series if k.startswith("rapl/")]))


def _whole(record: Record) -> bool:
    """Figures over all samples (runs and workloads without windows, as before windows)."""
    from radt.analysis.levels import _whole_run

    if record.level == "provider":
        return record.basis in LIFETIME_BASES
    return _whole_run(record)


def attribute(
    records: Mapping[str, Record],
    needed: Sequence[Any],
    tables: Mapping[str, pa.Table],
    children: Mapping[str, Sequence[Any]],
) -> None:
    """Add the cross-check, host energy, idle floor and estimates to the records' figures.

    ``records``, ``needed``, ``tables`` and ``children`` are
    :func:`radt.analysis.summary.summary`'s, after it computed every window.
    Measured rows (workloads, lone runs, a workload's only run) get the
    cross-check, host energy and idle floor over their window; collocated
    clients get the estimates. Notes go where the summary's go.
    """
    extra = {run.info.run_id: extra_series(tables.get(run.info.run_id)) for run in needed}
    for run in needed:
        record = records[run.info.run_id]
        if record.window is None or record.level == "loader":
            continue  # a shared loader takes no share: its CPU is in its workload's row
        parent_id = record.tags.get(MLFLOW_PARENT_RUN_ID) or ""
        parent = records.get(parent_id) if parent_id in extra else None
        kids = [records[k.info.run_id] for k in children.get(parent_id, [])] if parent else []
        kids = [k for k in kids if k.level == "client"]
        own_device = _gpus(record.series)
        if record.level == "client" and parent is not None and len(kids) > 1 and not own_device:
            _estimate(record, parent, kids, extra)
            continue
        device, rapl, tags = record.series, extra[record.run_id], record.tags
        if record.level == "client" and parent is not None:
            if not own_device:
                device, tags = parent.series, parent.tags
            if not rapl:
                rapl = extra[parent.run_id]
        _measured(record, device, rapl, tags)


def _measured(record: Record, device, rapl, tags) -> None:
    """Cross-check, host energy and idle floor of a row whose GPU energy is measured."""
    window = record.window
    if _whole(record):
        start = end = None
    elif window.valid:
        start, end = window.start_s, window.end_s
    else:
        return
    figures = record.figures
    figures.update(crosscheck(device, start, end, tags))
    host, note = host_energy(rapl, start, end)
    if note:
        record.notes.append(note)
    figures["host_energy_j"] = host
    figures["host_energy_per_example_nj"] = _per_example(host, record)
    parts = {"gpu": figures.get("energy_j", NAN), "host": host}
    present = {name: joules for name, joules in parts.items() if math.isfinite(joules)}
    figures["total_energy_per_example_nj"] = (
        _per_example(sum(present.values()), record) if present else NAN
    )
    figures["total_energy_parts"] = "+".join(present) or None
    floors, idle = [], 0.0
    for gpu in _gpus(device):
        floor = idle_floor_w(device, gpu)
        if not math.isfinite(floor):
            continue
        floors.append(floor)
        curve = EnergyCurve.of(device, gpu)
        lo, hi = (start, end) if start is not None else (curve.seconds[0], curve.seconds[-1])
        idle += floor * (hi - lo)
    if floors:
        figures["idle_power_w"] = float(sum(floors))
        figures["idle_energy_j"] = idle
        figures["idle_method"] = IDLE_METHOD


def _sharer(kid: Record, gpu: str, mig: bool, workload: Mapping[str, Arrays], own) -> Sharer:
    """How client ``kid`` takes part in the split of ``gpu``."""
    t, w = kid.timeline, kid.window
    begin = t.command_start_s if t is not None and math.isfinite(t.command_start_s) else NAN
    end = t.command_end_s if t is not None and math.isfinite(t.command_end_s) else NAN
    if not (math.isfinite(begin) and math.isfinite(end)) and w is not None and w.valid:
        begin, end = w.start_s, w.end_s
    if not (math.isfinite(begin) and math.isfinite(end)):
        begin, end = -math.inf, math.inf
    if not mig:
        return Sharer(begin, end, own.get(f"nvml/{gpu}/proc/sm_pct"))
    slices = compute_slices(kid.tags.get(RADT_MIG_PROFILE))
    found = _MIG_INSTANCE.search(kid.tags.get(RADT_MIG_INSTANCE) or "")
    activity = workload.get(f"dcgm/{gpu}/gi{found.group(2)}/gract_ratio") if found else None
    if activity is not None and slices is not None:
        activity = (activity[0], activity[1] * slices)
    elif slices is None:
        activity = None
    return Sharer(begin, end, activity, float(slices) if slices is not None else None)


def _estimate(record: Record, parent: Record, kids: Sequence[Record], extra) -> None:
    """A collocated client's estimated share of its workload's GPU energy over its window."""
    window = record.window
    if _has_host(extra[parent.run_id]):
        record.notes.append(
            "collocated: host energy (rapl) is the whole machine's, in the workload's row"
        )
    gpus = _gpus(parent.series)
    mine = client_gpus(record.tags, gpus)
    if not window.valid or not mine:
        return
    total = idle_total = floor_total = 0.0
    levels = np.zeros(3)
    names: tuple[str | None, ...] = SHARE_METHODS
    for gpu in mine:
        curve = EnergyCurve.of(parent.series, gpu)
        if curve is None:
            record.notes.append(f"no energy or power of {gpu}: estimated energy missing")
            return
        sharing = [k for k in kids if gpu in client_gpus(k.tags, gpus)]
        mig = all(k.tags.get(RADT_COLLOCATION) == Mode.MIG for k in sharing)
        names = MIG_METHODS if mig else SHARE_METHODS
        sharers = [
            _sharer(k, gpu, mig, extra[parent.run_id], extra.get(k.run_id, {})) for k in sharing
        ]
        floor = idle_floor_w(parent.series, gpu)
        split = estimate_share(
            curve, floor, window.start_s, window.end_s, sharers, sharing.index(record)
        )
        if split is None:
            record.notes.append(
                f"the samples of {gpu} do not cover the window: estimated energy missing"
            )
            return
        total += split.energy_j
        idle_total += split.idle_j
        floor_total += floor if math.isfinite(floor) else 0.0
        levels += split.level_s
    method, note = method_of(names, levels)
    record.notes[:] = [
        f"{n} (estimated: energy_j_est)" if n == COLLOCATED_NOTE else n for n in record.notes
    ]
    if note:
        record.notes.append(note)
    figures = record.figures
    figures["energy_j_est"] = total
    figures["energy_est_method"] = method
    figures["energy_per_example_nj_est"] = _per_example(total, record)
    if floor_total > 0:
        figures["idle_power_w"] = floor_total
        figures["idle_energy_j"] = idle_total
        figures["idle_method"] = IDLE_METHOD


def repeat_methods(group) -> dict[str, str | None]:
    """The estimate methods found in a repeats group (``, ``-joined), for the repeats table."""
    if "energy_est_method" not in group:
        return {"energy_est_method": None}
    found = sorted({str(m) for m in group["energy_est_method"].dropna()})
    return {"energy_est_method": ", ".join(found) or None}
