"""Baselines: the Job's runs alone on the GPU that a run is compared with, the slowdown against
them, how far their repeats spread, and the figures normalised to them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from radt.analysis.figures import NAN
from radt.analysis.runtree import Record

# --------------------------------------------------------------------------- baselines


def baselines_by_job(candidates: Iterable[Record]) -> dict[tuple, list[Record]]:
    """Candidates by experiment, Job and basis (in their order), for :func:`choose_baseline`:
    one look-up per row instead of a pass over all candidates."""
    found: dict[tuple, list[Record]] = {}
    for c in candidates:
        found.setdefault((c.experiment_id, c.job, c.basis), []).append(c)
    return found


def choose_baseline(
    candidates: Iterable[Record] | Mapping[tuple, list[Record]],
    experiment_id: str,
    job: str | None,
    basis: str,
    power,
    clock=None,
    manual: bool = False,
) -> tuple[list[Record], str | None]:
    """The Job's ``none`` runs on the same basis and window rule (``--manual`` or not): at the
    same power limit and GPU clock, else at the default of both.

    ``candidates``: records, or records by :func:`baselines_by_job`; ``manual``: whether the
    run's window follows ``radt --manual`` (:attr:`Record.manual`). Returns the chosen runs
    (repeats; empty when none) and, when empty, why.
    """
    if job is None:
        return [], "no baseline: the run's job is unknown (no radt.command or radt.job)"
    if isinstance(candidates, Mapping):
        same = candidates.get((experiment_id, job, basis), [])
    else:
        same = [
            c
            for c in candidates
            if c.experiment_id == experiment_id and c.job == job and c.basis == basis
        ]
    ruled = [c for c in same if c.manual == manual]
    if same and not ruled:
        return [], _other_rule(manual, basis)
    same = ruled
    for wanted in dict.fromkeys([(power, clock), (None, None)]):
        chosen = [c for c in same if (c.power, c.clock) == wanted]
        if chosen:
            return chosen, None
    setting = " and ".join(
        [*([f"{power} W"] if power else []), *([f"{clock} MHz"] if clock else [])]
    )
    where = (
        f"at {setting} or the default power limit and clock"
        if setting
        else "at the default power limit and clock"
    )
    return [], f"no baseline: no FINISHED none run of this job on basis {basis} {where}"


def _other_rule(manual: bool, basis: str) -> str:
    """Why a run has no baseline when its Job's runs alone all follow the other window rule."""
    own, theirs = ("", "not ") if manual else ("not ", "")
    return (
        f"no baseline: this run's window does {own}start at radt.run.RADTBenchmark() (--manual) "
        f"and those of its job's none runs on basis {basis} do {theirs}(windows of different "
        "rules are not compared)"
    )


def _mean(values: Iterable[float]) -> float:
    values = [v for v in values if math.isfinite(v)]
    return float(sum(values) / len(values)) if values else NAN


BASELINE_SPREAD_LIMIT_PCT = 10.0
"""A baseline whose repeats' coefficient of variation is over this is flagged (docs/analysis.md)."""


def baseline_spread_pct(works: Iterable[float]) -> float:
    """The coefficient of variation of a baseline's repeats, in %: 100 × sample std / mean.

    ``works`` are the repeats' times per unit of work (ns per example, or window
    seconds on the duration bases); NaN with fewer than two finite ones.
    """
    values = [v for v in works if math.isfinite(v)]
    if len(values) < 2:
        return NAN
    mean = statistics.fmean(values)
    return 100.0 * statistics.stdev(values, mean) / mean if mean else NAN


def baseline_spread_flagged(pct: Any) -> bool:
    """Whether a baseline's spread (%) is over :data:`BASELINE_SPREAD_LIMIT_PCT`."""
    try:
        value = float(pct)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > BASELINE_SPREAD_LIMIT_PCT


def _slowdown(record: Record, candidates: Sequence[Record] | Mapping) -> dict[str, Any]:
    found, why = choose_baseline(
        candidates,
        record.experiment_id,
        record.job,
        record.basis,
        record.power,
        record.clock,
        record.manual,
    )
    if not found:
        record.notes.append(why)
        return {"slowdown": NAN, "baseline_run_id": None, "baseline_cv_pct": NAN}
    base = _mean(c.work for c in found)
    return {
        "slowdown": record.work / base,
        "baseline_run_id": " ".join(c.run_id for c in found),
        "baseline_cv_pct": baseline_spread_pct(c.work for c in found),
    }


def _norm_client(record: Record, candidates: Sequence[Record] | Mapping) -> dict[str, float]:
    """A client's figures over its Job's baseline at the default power limit."""
    found, why = choose_baseline(
        candidates, record.experiment_id, record.job, record.basis, None, None, record.manual
    )
    if not found:
        if record.power is not None or record.clock is not None:
            record.notes.append(why.replace("no baseline", "no normalised figures"))
        return {}
    time_norm = record.work / _mean(c.work for c in found)
    energy = "energy_per_example_nj" if record.basis.startswith("examples") else "energy_j"
    return {
        "time_per_example_norm": time_norm,
        "examples_per_s_norm": 1.0 / time_norm if time_norm else NAN,
        "energy_per_example_norm": record.figures.get(energy, NAN)
        / _mean(c.figures.get(energy, NAN) for c in found),
    }


def _norm_provider(
    record: Record, kids: Sequence[Record], candidates: Sequence[Record] | Mapping
) -> dict[str, float]:
    """A workload's figures over what its clients' baselines would need for the same examples.

    time_per_example_norm = window / Σ nᵢ·tᵢ and energy_per_example_norm =
    energy / Σ nᵢ·eᵢ, where nᵢ are client i's examples in the provider window
    and tᵢ, eᵢ the time and energy per example of its Job's baseline at the
    default power limit: for one Job, the provider's time (energy) per
    example over the baseline's.
    """
    from radt.analysis.windows import counter_increase

    window = record.window
    if record.basis not in ("examples", "examples_lifetime") or not math.isfinite(window.examples):
        return {}
    time_base = energy_base = 0.0
    for kid in kids:
        found, why = choose_baseline(
            candidates, kid.experiment_id, kid.job, kid.basis, None, None, kid.manual
        )
        if not found:
            record.notes.append(why.replace("no baseline", "no normalised figures"))
            return {}
        if record.basis == "examples" and kid.run_id in record.kid_examples:
            n = record.kid_examples[kid.run_id]
        elif record.basis == "examples":
            n = counter_increase(*kid.timeline.counter_points(), window.start_s, window.end_s)
        else:
            n = kid.examples_total
        time_base += n * _mean(c.work for c in found)
        energy_base += n * _mean(c.figures.get("energy_per_example_nj", NAN) for c in found)
    time_norm = 1e9 * window.seconds / time_base if time_base else NAN
    return {
        "time_per_example_norm": time_norm,
        "examples_per_s_norm": 1.0 / time_norm if time_norm else NAN,
        "energy_per_example_norm": 1e9 * record.figures.get("energy_j", NAN) / energy_base
        if energy_base
        else NAN,
    }
