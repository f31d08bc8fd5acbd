"""``radt doctor --measure``: record the built-in load as a radT run and say, from its
samples, how far this GPU's readings are from each other (definitions: docs/analysis.md,
section "radt doctor --measure").

Nothing on the GPU is changed: no MIG mode, power limit, clock or compute mode.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from radt.errors import RadtError
from radt.tags import RADT_DOCTOR, RADT_DOCTOR_LOAD, tag_filter

log = logging.getLogger(__name__)

EXPERIMENT = "radt-doctor"
INTERVAL_S = 0.05
MIN_SECONDS = 5
"""The shortest load whose full phase (30 %) outlasts the averaged power's one second."""
STEP_LEVEL = 0.9
"""The share of the idle→full rise a reading must reach to count as having followed it."""
RATE_KEYS = {
    "nvml": "nvml/gpu{d}/power_w",
    "smi": "smi/gpu{d}/power_w",
    "top": "top/host/cpu_pct",
    "dcgm": "dcgm/gpu{d}/power_w",
}
"""The key whose timestamps give each listener's achieved rate and jitter."""


@dataclass
class Schedule:
    """When the load ran: its start (epoch s), measured seconds, and phases."""

    start: float
    seconds: float
    phases: list[dict]

    def bounds(self, phase: str, nth: int = 0) -> tuple[float, float]:
        """(from, to) in seconds from the start of the ``nth`` phase of that name."""
        found = [p for p in self.phases if p["phase"] == phase][nth]
        return found["from_s"], found["to_s"]


def _series(samples: pd.DataFrame, key: str, start: float) -> tuple[np.ndarray, np.ndarray]:
    """(seconds from ``start``, values) of one key, in time order, missing values left out."""
    rows = samples[(samples["key"] == key) & samples["value"].notna()]
    seconds = rows["timestamp"].map(lambda t: t.timestamp()).to_numpy(dtype=float) - start
    order = np.argsort(seconds, kind="stable")
    return seconds[order], rows["value"].to_numpy(dtype=float)[order]


def integral_j(t: np.ndarray, p: np.ndarray, lo: float, hi: float) -> float | None:
    """Trapezoidal integral of power readings over [lo, hi], the ends interpolated; None
    when the readings do not straddle both ends."""
    if len(t) < 2 or t[0] > lo or t[-1] < hi:
        return None
    inside = (t > lo) & (t < hi)
    tt = np.concatenate([[lo], t[inside], [hi]])
    pp = np.concatenate([[np.interp(lo, t, p)], p[inside], [np.interp(hi, t, p)]])
    return float(np.sum((tt[1:] - tt[:-1]) * (pp[1:] + pp[:-1]) / 2.0))


def counter_j(t: np.ndarray, e: np.ndarray, lo: float, hi: float) -> float | None:
    """The energy counter's rise over [lo, hi], each end interpolated between readings."""
    if len(t) < 2 or t[0] > lo or t[-1] < hi:
        return None
    return float(np.interp(hi, t, e) - np.interp(lo, t, e))


def lag_s(t: np.ndarray, p: np.ndarray, step_s: float, idle_w: float, full_w: float):
    """Seconds from the step to the first reading at or after it that is past 90 % of the
    rise from ``idle_w`` to ``full_w``; None when none is."""
    level = idle_w + STEP_LEVEL * (full_w - idle_w)
    after = (t >= step_s) & (p >= level)
    return float(t[after][0] - step_s) if after.any() else None


def rate(t: np.ndarray) -> tuple[float | None, float | None]:
    """(samples per second, standard deviation of the gaps in ms) of a series' timestamps."""
    if len(t) < 3:
        return None, None
    gaps = np.diff(t)
    return float((len(t) - 1) / (t[-1] - t[0])), float(np.std(gaps) * 1000.0)


def pct(value: float | None, reference: float | None) -> float | None:
    """How far ``value`` is from ``reference``, in % of it."""
    if value is None or reference in (None, 0):
        return None
    return 100.0 * (value - reference) / reference


def figures(samples: pd.DataFrame, sched: Schedule, device: int = 0) -> dict[str, float | None]:
    """The measurement's figures from a run's samples (tidy: ``key``, ``timestamp``,
    ``value``) and the load's schedule; every figure is defined in docs/analysis.md."""
    s, d = sched.start, device
    counter_t, counter_e = _series(samples, f"nvml/gpu{d}/energy_j", s)
    inst_t, inst_p = _series(samples, f"nvml/gpu{d}/power_w", s)
    avg_t, avg_p = _series(samples, f"nvml/gpu{d}/power_avg_w", s)
    smi_t, smi_p = _series(samples, f"smi/gpu{d}/power_w", s)
    lo, hi = 0.0, sched.seconds
    out: dict[str, float | None] = {
        "energy_counter_j": counter_j(counter_t, counter_e, lo, hi),
        "energy_instant_j": integral_j(inst_t, inst_p, lo, hi),
        "energy_average_j": integral_j(avg_t, avg_p, lo, hi),
    }
    out["instant_vs_counter_pct"] = pct(out["energy_instant_j"], out["energy_counter_j"])
    out["average_vs_counter_pct"] = pct(out["energy_average_j"], out["energy_counter_j"])
    smi_in, avg_in = smi_p[(smi_t >= lo) & (smi_t <= hi)], avg_p[(avg_t >= lo) & (avg_t <= hi)]
    out["smi_vs_nvml_pct"] = pct(
        float(smi_in.mean()) if len(smi_in) else None,
        float(avg_in.mean()) if len(avg_in) else None,
    )
    idle_lo, idle_hi = sched.bounds("idle")
    full_lo, full_hi = sched.bounds("full")
    idle = inst_p[(inst_t >= idle_lo) & (inst_t < idle_hi)]
    full = inst_p[(inst_t >= (full_lo + full_hi) / 2) & (inst_t < full_hi)]
    out["idle_power_w"] = float(np.median(idle)) if len(idle) else None
    out["full_power_w"] = float(np.median(full)) if len(full) else None
    for name, t, p in (("instant", inst_t, inst_p), ("average", avg_t, avg_p)):
        ok = out["idle_power_w"] is not None and out["full_power_w"] is not None
        out[f"lag_{name}_s"] = (
            lag_s(t, p, full_lo, out["idle_power_w"], out["full_power_w"]) if ok else None
        )
    for listener, key in RATE_KEYS.items():
        t, _ = _series(samples, key.format(d=d), s)
        out[f"{listener}_rate_hz"], out[f"{listener}_jitter_ms"] = rate(t)
    return out


LABELS = {
    "energy_counter_j": "energy, counter (J)",
    "energy_instant_j": "energy, integral of instant power (J)",
    "energy_average_j": "energy, integral of averaged power (J)",
    "instant_vs_counter_pct": "instant integral vs counter (%)",
    "average_vs_counter_pct": "averaged integral vs counter (%)",
    "smi_vs_nvml_pct": "nvidia-smi power vs NVML averaged power (%)",
    "idle_power_w": "idle power (W)",
    "full_power_w": "full-load power (W)",
    "lag_instant_s": "instant power: s to 90 % after the step",
    "lag_average_s": "averaged power: s to 90 % after the step",
    "recording_cpu_pct": "radT's own CPU while recording (% of one core)",
}


def report(values: dict[str, float | None]) -> str:
    """The figures as a two-column text table (``-`` where a figure has no value)."""
    labels = dict(LABELS)
    for listener in RATE_KEYS:
        labels[f"{listener}_rate_hz"] = f"{listener}: samples per second"
        labels[f"{listener}_jitter_ms"] = f"{listener}: jitter of the gaps (ms)"
    width = max(len(text) for text in labels.values())
    lines = []
    for key, text in labels.items():
        value = values.get(key)
        lines.append(f"{text:<{width}}  {'-' if value is None else f'{value:.3f}'}")
    return "\n".join(lines)


def listeners_here() -> str:
    """nvml+smi+top, and dcgm where it can run; RadtError when NVML cannot."""
    from radt.launch.registry import discover

    found = discover()
    reason = found["nvml"].reason if "nvml" in found else "the nvml listener is not installed"
    if reason:
        raise RadtError(f"--measure needs NVML: {reason}; `radt doctor` shows what is missing")
    names = [n for n in ("nvml", "smi", "top", "dcgm") if n in found and not found[n].reason]
    return "+".join(names)


def measure(device: int, seconds: float, listeners: str) -> dict[str, float | None]:
    """Record the built-in load on GPU ``device`` as a radT run in experiment
    ``radt-doctor``; return its figures, also logged on the run as ``doctor/...``."""
    from radt.analysis.load import load
    from radt.launch.launcher import LaunchOptions, launch
    from radt.record.runfolder import radt_home
    from radt.tracking import connect, resolve_tracking_uri

    folder = radt_home() / "doctor"
    folder.mkdir(parents=True, exist_ok=True)
    schedule_file = folder / "schedule.json"
    schedule_file.unlink(missing_ok=True)
    mark = uuid.uuid4().hex
    before, wall = os.times(), time.monotonic()
    code = launch(
        LaunchOptions(
            command=[
                sys.executable,
                "-m",
                RADT_DOCTOR_LOAD,
                "--seconds",
                f"{seconds:g}",
                "--schedule",
                str(schedule_file),
            ],
            experiment=EXPERIMENT,
            run_name=f"doctor-measure-gpu{device}",
            tags={RADT_DOCTOR: mark},
            listeners=listeners,
            interval_s=INTERVAL_S,
            devices=[str(device)],
        )
    )
    after, wall = os.times(), time.monotonic() - wall
    if code != 0:
        raise RadtError(f"the measurement run failed (exit status {code}); see its output log")
    uri, _ = resolve_tracking_uri()
    client = connect(uri)
    runs = client.search_runs(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id],
        filter_string=tag_filter(RADT_DOCTOR, mark),
    )
    run_id = runs[0].info.run_id
    sched = schedule_from(schedule_file)
    samples = load(runs=[run_id], tracking_uri=uri)
    values = figures(samples, sched, device)
    cpu_s = (after.user - before.user) + (after.system - before.system)
    values["recording_cpu_pct"] = 100.0 * cpu_s / wall
    client.log_artifact(run_id, str(schedule_file), "doctor")
    from mlflow.entities import Metric

    now_ms = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(f"doctor/{k}", v, now_ms, 0) for k, v in values.items() if v is not None],
    )
    return values


def schedule_from(path: Path) -> Schedule:
    """The schedule the load wrote."""
    return Schedule(**json.loads(path.read_text()))
