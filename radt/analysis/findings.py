"""A study's findings: ranked sentences computed from its repeats, and what to run per objective.

Everything here reads the tables the figure catalog already makes (the provider and client
views of :func:`radt.analysis.tables.repeats` over FINISHED runs, and the frontier of
:func:`radt.analysis.frontier.frontier_table`); nothing is measured or computed twice.
docs/analysis.md ("Findings") states each rule:

- a **point** is one Job × configuration × power limit × GPU clock of the provider view on the
  ``examples`` basis; it is compared with its Job **alone on the full GPU at full power**, the
  point ``none`` at the default power limit and clock, through the normalised figures
  ``examples_per_s_norm`` and ``energy_per_example_norm`` (over that baseline's mean);
- **noise rule**: a difference is claimed only when the point's repeats and the baseline's
  repeats do not overlap (their min–max ranges of the normalised figure are disjoint) and each
  side has at least :data:`MIN_REPEATS` repeats; otherwise it is "within noise" (or, with one
  repeat, "not judged: one repeat") and never claimed;
- a Job × configuration × clock with the same verdicts at every power limit is stated once
  ("at every power limit, …"); a configuration × power limit × clock run for several Jobs
  with the same verdicts for every Job is stated once ("for every Job, …"), else the spread
  of the normalised figures across Jobs is given (± half their range, in %);
- **ranking**: findings that claim a difference first; among them by the claimed difference
  in the objective's figure (improvement first), then in the other figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from radt.errors import UsageError
from radt.plans.columns import JOB
from radt.tags import Mode
from radt.words import count

if TYPE_CHECKING:
    import pandas as pd

MIN_REPEATS = 2
"""Repeats a side needs before a difference between two sides is judged."""
THROUGHPUT, ENERGY, SLOWDOWN = "throughput", "energy", "slowdown"
OBJECTIVES = (THROUGHPUT, ENERGY)
THROUGHPUT_NORM = "examples_per_s_norm"
ENERGY_NORM = "energy_per_example_norm"
DEFAULT = "default"
BASELINE_WORDS = "alone on the full GPU at full power"
THE_BASELINE = f"the Job {BASELINE_WORDS}"
FINDING_COLUMNS = (
    "rank",
    "kind",
    "sentence",
    "job",
    "configuration",
    "power_limit_w",
    "gpu_clock_mhz",
    "throughput_pct",
    "throughput_verdict",
    "energy_pct",
    "energy_verdict",
    "n",
    "baseline_n",
    "run_ids",
    "baseline_run_ids",
)
"""The findings table: one row per finding, best first. ``throughput_pct`` and ``energy_pct``:
the point's mean examples/s and energy per example over its baseline's, minus 1, in % (a range's
ends for a finding over several points: the one furthest from 0); ``*_verdict``: ``more``,
``less``, ``within noise``, ``not judged`` (one repeat) or ``unknown`` (a figure missing)."""
PLAN_COLUMNS = (
    "objective",
    "job",
    "winner",
    "winner_value",
    "winner_range",
    "runner_up",
    "runner_up_value",
    "margin_pct",
    "margin_verdict",
    "sentence",
    "run_ids",
)
"""The "what to run" table: per objective and Job, the winner and the runner-up."""


@dataclass(frozen=True)
class Objective:
    """What a study is run for: ``throughput`` (examples/s), ``energy`` (energy per example),
    or ``slowdown`` (examples/s among the configurations whose every job stays within
    ``bound`` × its time per example alone)."""

    name: str
    bound: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> Objective:
        """``throughput``, ``energy`` or ``slowdown:1.2``; a bad one is a one-line UsageError."""
        text = (text or THROUGHPUT).strip().lower()
        if text in OBJECTIVES:
            return cls(text)
        if text.startswith(f"{SLOWDOWN}:"):
            try:
                bound = float(text.split(":", 1)[1])
            except ValueError:
                bound = math.nan
            if math.isfinite(bound) and bound >= 1.0:
                return cls(SLOWDOWN, bound)
        raise UsageError(
            f"--objective takes throughput, energy or slowdown:BOUND (a number ≥ 1, e.g. "
            f"slowdown:1.2), not {text!r}"
        )

    def __str__(self) -> str:
        return f"{self.name}:{self.bound:g}" if self.bound is not None else self.name


# --------------------------------------------------------------------------- words


def power_words(power) -> str:
    """A power limit as the page writes it: ``full power`` or ``200 W``."""
    if power in (None, DEFAULT) or (isinstance(power, float) and math.isnan(power)):
        return "full power"
    return f"{float(power):g} W"


def clock_words(clock) -> str:
    """A locked GPU clock as the page writes it, empty for the default."""
    if clock in (None, DEFAULT) or (isinstance(clock, float) and math.isnan(clock)):
        return ""
    return f" at {float(clock):g} MHz"


def _name(configuration: str) -> str:
    return "the full GPU alone" if configuration == Mode.NONE.value else configuration


def setting_words(configuration: str, power, clock) -> str:
    """``naive x2 at 200 W``; the job alone at a cap is ``the full GPU alone at 200 W``."""
    return f"{_name(configuration)} at {power_words(power)}{clock_words(clock)}"


def row_setting(row) -> str:
    """:func:`setting_words` of a table row (its configuration, power limit and clock)."""
    return setting_words(row["configuration"], row["power_limit_w"], row["gpu_clock_mhz"])


def _pct(value: float) -> str:
    return f"{abs(value):.1f} %"


def _ratio(mean: float, low: float, high: float) -> str:
    return f"{mean:.3f}× ({low:.3f}–{high:.3f})"


# --------------------------------------------------------------------------- points


@dataclass
class Side:
    """One figure of one point: the repeats' mean, min, max and count."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, row, figure: str) -> Side:
        def num(key: str) -> float:
            value = row.get(f"{figure}_{key}")
            try:
                return float(value)
            except (TypeError, ValueError):
                return math.nan

        return cls(num("mean"), num("min"), num("max"), int(row.get("count") or 0))

    @property
    def known(self) -> bool:
        return math.isfinite(self.mean)


def verdict(point: Side, base: Side, higher: str = "more", lower: str = "less") -> str:
    """The noise rule: ``more``/``less`` only when both sides have :data:`MIN_REPEATS` repeats
    and their ranges are disjoint; ``within noise`` when they overlap; ``not judged`` else."""
    if not (point.known and base.known):
        return "unknown"
    if point.n < MIN_REPEATS or base.n < MIN_REPEATS:
        return "not judged"
    if point.low > base.high:
        return higher
    if point.high < base.low:
        return lower
    return "within noise"


@dataclass
class Point:
    """A provider-view point against its Job's baseline."""

    job: str
    configuration: str
    power: object
    clock: object
    throughput: Side
    energy: Side
    run_ids: str
    base_throughput: Side | None = None
    base_energy: Side | None = None
    base_run_ids: str = ""
    slowdown_max: float = math.nan
    slowdown_mean: float = math.nan
    note: str | None = None
    covered: bool = field(default=False)

    @property
    def is_baseline(self) -> bool:
        return (
            self.configuration == Mode.NONE.value
            and self.power == DEFAULT
            and self.clock == DEFAULT
        )

    @property
    def label(self) -> str:
        return setting_words(self.configuration, self.power, self.clock)

    def verdicts(self) -> tuple[str, str]:
        if self.base_throughput is None or self.base_energy is None:
            return "not judged", "not judged"
        return (
            verdict(self.throughput, self.base_throughput),
            verdict(self.energy, self.base_energy),
        )

    @property
    def throughput_pct(self) -> float:
        return 100.0 * (self.throughput.mean - 1.0)

    @property
    def energy_pct(self) -> float:
        return 100.0 * (self.energy.mean - 1.0)


def points(repeats: pd.DataFrame) -> list[Point]:
    """The provider-view points on the ``examples`` basis of a repeats table (FINISHED runs),
    each with its Job's baseline point and the worst and mean slowdown of its clients."""
    provider = repeats[(repeats["view"] == "provider") & (repeats["basis"] == "examples")]
    clients = repeats[(repeats["view"] == "client") & (repeats["basis"] == "examples")]
    slow = {}
    for _, row in clients.iterrows():
        key = (row["configuration"], row["power_limit_w"], row["gpu_clock_mhz"])
        worst, mean = float(row["slowdown_max"]), float(row["slowdown_mean"])
        jobs = slow.setdefault(key, {})
        jobs[row["job"]] = (worst, mean)
    found = []
    for _, row in provider.iterrows():
        point = Point(
            str(row["job"]),
            str(row["configuration"]),
            row["power_limit_w"],
            row["gpu_clock_mhz"],
            Side.of(row, THROUGHPUT_NORM),
            Side.of(row, ENERGY_NORM),
            str(row["run_ids"]),
        )
        key = (point.configuration, point.power, point.clock)
        jobs = slow.get(key, {})
        mine = [v for j, v in jobs.items() if j in point.job.split(" + ")]
        if mine:
            point.slowdown_max = max(v[0] for v in mine)
            point.slowdown_mean = sum(v[1] for v in mine) / len(mine)
        found.append(point)
    bases = {p.job: p for p in found if p.is_baseline}
    for point in found:
        base = bases.get(point.job)
        if base is None:
            point.note = (
                f"no comparison: {point.job} has no FINISHED run {BASELINE_WORDS} (configuration "
                f"none at the default power limit and clock)"
            )
            continue
        point.base_throughput, point.base_energy = base.throughput, base.energy
        point.base_run_ids = base.run_ids
    return found


# --------------------------------------------------------------------------- findings


def _phrase(verdict_: str, pct: float, what: str, more: str, less: str) -> str:
    if verdict_ in ("more", "less"):
        return f"{_pct(pct)} {more if verdict_ == 'more' else less} {what}"
    if verdict_ == "within noise":
        return f"{what} within noise"
    if verdict_ == "unknown":
        return f"{what} unknown (a figure is missing: see the runs' missing figures)"
    return f"{what} not judged (one repeat)"


def _phrases(t_verdict: str, t_pct: str | float, e_verdict: str, e_pct: str | float) -> str:
    def words(v, pct, what, more, less):
        if isinstance(pct, str):  # a range, already written
            if v in ("more", "less"):
                return f"{pct} {more if v == 'more' else less} {what}"
            return _phrase(v, 0.0, what, more, less)
        return _phrase(v, pct, what, more, less)

    return (
        words(t_verdict, t_pct, "examples/s", "more", "fewer")
        + ", "
        + words(e_verdict, e_pct, "energy per example", "more", "less")
    )


def _claims(t_verdict: str, e_verdict: str) -> bool:
    return t_verdict in ("more", "less") or e_verdict in ("more", "less")


def _point_finding(point: Point) -> dict:
    tv, ev = point.verdicts()
    numbers = (
        f"examples/s {_ratio(point.throughput.mean, point.throughput.low, point.throughput.high)}"
        f" of alone's {_ratio(1.0, point.base_throughput.low, point.base_throughput.high)}"
        if point.base_throughput and point.throughput.known
        else "examples/s unknown"
    )
    energy = (
        f"energy per example {_ratio(point.energy.mean, point.energy.low, point.energy.high)}"
        f" of alone's {_ratio(1.0, point.base_energy.low, point.base_energy.high)}"
        if point.base_energy and point.energy.known
        else "energy per example unknown"
    )
    sentence = (
        f"{point.job}: {point.label} gives "
        f"{_phrases(tv, point.throughput_pct, ev, point.energy_pct)}"
        f" than {THE_BASELINE} ({numbers}; {energy}; n = {point.throughput.n} vs "
        f"{point.base_throughput.n if point.base_throughput else 0})."
    )
    return {
        "kind": "point",
        "sentence": sentence,
        "job": point.job,
        "configuration": point.configuration,
        "power_limit_w": point.power,
        "gpu_clock_mhz": point.clock,
        "throughput_pct": point.throughput_pct,
        "throughput_verdict": tv,
        "energy_pct": point.energy_pct,
        "energy_verdict": ev,
        "n": point.throughput.n,
        "baseline_n": point.base_throughput.n if point.base_throughput else 0,
        "run_ids": point.run_ids,
        "baseline_run_ids": point.base_run_ids,
    }


def _range(values: Sequence[float]) -> str:
    low, high = min(abs(v) for v in values), max(abs(v) for v in values)
    return f"{low:.1f} %" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{high:.1f} %"


def _furthest(values: Sequence[float]) -> float:
    return max(values, key=abs)


def _group_finding(kind: str, group: list[Point], over: str, jobs: str) -> dict:
    tv, ev = group[0].verdicts()
    t_values = [p.throughput_pct for p in group]
    e_values = [p.energy_pct for p in group]
    first = group[0]
    if kind == "every power":
        powers = ", ".join(power_words(p.power) for p in group)
        head = (
            f"{first.job}: at every power limit ({powers}), "
            f"{_name(first.configuration)}{clock_words(first.clock)}"
        )
    else:
        head = f"For every Job ({jobs}), {first.label}"
    sentence = (
        f"{head} gives {_phrases(tv, _range(t_values), ev, _range(e_values))} than each Job "
        f"{BASELINE_WORDS} (n = {min(p.throughput.n for p in group)}–"
        f"{max(p.throughput.n for p in group)} repeats a {over}; spread across the {over}s "
        f"±{_half_range(t_values):.1f} % examples/s, ±{_half_range(e_values):.1f} % energy)."
    )
    return {
        "kind": kind,
        "sentence": sentence,
        "job": jobs,
        "configuration": first.configuration,
        "power_limit_w": first.power if kind != "every power" else "every",
        "gpu_clock_mhz": first.clock,
        "throughput_pct": _furthest(t_values),
        "throughput_verdict": tv,
        "energy_pct": _furthest(e_values),
        "energy_verdict": ev,
        "n": min(p.throughput.n for p in group),
        "baseline_n": min(p.base_throughput.n for p in group if p.base_throughput),
        "run_ids": " ".join(p.run_ids for p in group),
        "baseline_run_ids": " ".join(dict.fromkeys(p.base_run_ids for p in group)),
    }


def _half_range(values: Sequence[float]) -> float:
    return (max(values) - min(values)) / 2.0


def _spread_finding(group: list[Point]) -> dict:
    first = group[0]
    jobs = ", ".join(p.job for p in group)
    t_values = [p.throughput_pct for p in group]
    e_values = [p.energy_pct for p in group]
    sentence = (
        f"Between Jobs ({jobs}), {first.label} differs: against each Job {BASELINE_WORDS}, "
        f"examples/s {min(t_values):+.1f} to {max(t_values):+.1f} % (±{_half_range(t_values):.1f} "
        f"%), energy per example {min(e_values):+.1f} to {max(e_values):+.1f} % "
        f"(±{_half_range(e_values):.1f} %)."
    )
    return {
        "kind": "spread across Jobs",
        "sentence": sentence,
        "job": jobs,
        "configuration": first.configuration,
        "power_limit_w": first.power,
        "gpu_clock_mhz": first.clock,
        "throughput_pct": _half_range(t_values),
        "throughput_verdict": "spread",
        "energy_pct": _half_range(e_values),
        "energy_verdict": "spread",
        "n": min(p.throughput.n for p in group),
        "baseline_n": min(p.base_throughput.n for p in group if p.base_throughput),
        "run_ids": " ".join(p.run_ids for p in group),
        "baseline_run_ids": " ".join(dict.fromkeys(p.base_run_ids for p in group)),
    }


def _frontier_findings(frontier: pd.DataFrame) -> list[dict]:
    out = []
    if frontier is None or frontier.empty:
        return out
    for job, part in frontier[frontier["basis"] == "examples"].groupby("job", sort=False):
        on = part[part["on_frontier"] == True]  # noqa: E712 (a column of True/False/None)
        if on.empty:
            continue
        names = ", ".join(row_setting(r) for _, r in on.iterrows())
        off = part[part["on_frontier"] == False]  # noqa: E712
        if off.empty:
            tail = "every point run is on it."
        else:
            worst = off.loc[off["energy_bloat_pct"].astype(float).idxmax()]
            tail = (
                f"{count(len(off), 'other point')} use{'s' if len(off) == 1 else ''} up to "
                f"{float(worst['energy_bloat_pct']):.1f} % more "
                f"energy per example than a frontier point at least as fast ("
                f"{row_setting(worst)})."
            )
        out.append(
            {
                "kind": "frontier",
                "sentence": f"{job}: the time–energy frontier (nothing is both faster and "
                f"cheaper per example) holds {names}; {tail} Points are repeat means.",
                "job": job,
                "configuration": None,
                "power_limit_w": None,
                "gpu_clock_mhz": None,
                "throughput_pct": math.nan,
                "throughput_verdict": "frontier",
                "energy_pct": math.nan,
                "energy_verdict": "frontier",
                "n": int(part["count"].min()),
                "baseline_n": 0,
                "run_ids": " ".join(part["run_ids"].astype(str)),
                "baseline_run_ids": "",
            }
        )
    return out


def findings(
    repeats: pd.DataFrame, frontier: pd.DataFrame | None = None, objective: Objective | None = None
) -> pd.DataFrame:
    """The ranked findings of a repeats table over FINISHED runs (columns
    :data:`FINDING_COLUMNS`), by the rules of the module; ``frontier`` adds one per Job."""
    import pandas as pd

    objective = objective or Objective(THROUGHPUT)
    found = [p for p in points(repeats) if not p.is_baseline and p.note is None]
    rows: list[dict] = []
    # the same verdicts at every power limit: stated once
    by_setting: dict[tuple, list[Point]] = {}
    for p in found:
        by_setting.setdefault((p.job, p.configuration, p.clock), []).append(p)
    for group in by_setting.values():
        powers = {str(p.power) for p in group}
        if len(powers) < 2 or len({p.verdicts() for p in group}) != 1:
            continue
        if not _claims(*group[0].verdicts()):
            continue
        group.sort(key=lambda p: -1.0 if p.power == DEFAULT else float(p.power))
        rows.append(_group_finding("every power", group, "power limit", group[0].job))
        for p in group:
            p.covered = True
    # several Jobs at one setting: the same verdicts once, else the spread across Jobs
    by_jobs: dict[tuple, list[Point]] = {}
    for p in found:
        by_jobs.setdefault((p.configuration, str(p.power), str(p.clock)), []).append(p)
    for group in by_jobs.values():
        if len({p.job for p in group}) < 2:
            continue
        same = len({p.verdicts() for p in group}) == 1 and _claims(*group[0].verdicts())
        if same and not any(p.covered for p in group):
            jobs = ", ".join(p.job for p in group)
            rows.append(_group_finding("every Job", group, JOB, jobs))
            for p in group:
                p.covered = True
        elif not same:
            rows.append(_spread_finding(group))
    rows.extend(_point_finding(p) for p in found if not p.covered)
    rows.extend(_frontier_findings(frontier))

    first = ENERGY if objective.name == ENERGY else THROUGHPUT

    def gain(row: dict, which: str) -> float:
        pct, v = row[f"{which}_pct"], row[f"{which}_verdict"]
        if v not in ("more", "less") or not math.isfinite(pct):
            return 0.0
        return pct if which == THROUGHPUT else -pct  # less energy is the improvement

    def rank_key(row: dict) -> tuple:
        claimed = row["throughput_verdict"] in ("more", "less") or row["energy_verdict"] in (
            "more",
            "less",
        )
        other = ENERGY if first == THROUGHPUT else THROUGHPUT
        order = {"every power": 0, "every Job": 0}
        return (
            not claimed,
            row["kind"] in ("frontier", "spread across Jobs"),
            -gain(row, first),
            -gain(row, other),
            order.get(row["kind"], 1),
        )

    rows.sort(key=rank_key)
    for i, row in enumerate(rows, 1):
        row["rank"] = i
    return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


# --------------------------------------------------------------------------- what to run


def what_to_run(repeats: pd.DataFrame, objective: Objective | None = None) -> pd.DataFrame:
    """Per objective (throughput, energy, and ``objective`` when it is a slowdown bound) and
    Job: the winning point, by how much it beats the runner-up (and whether by more than the
    noise), columns :data:`PLAN_COLUMNS`. Points without a baseline are not candidates."""
    import pandas as pd

    candidates = [p for p in points(repeats) if p.note is None]
    objectives = [Objective(THROUGHPUT), Objective(ENERGY)]
    if objective is not None and objective.name == SLOWDOWN:
        objectives.append(objective)
    rows = []
    jobs = list(dict.fromkeys(p.job for p in candidates))
    for goal in objectives:
        for job in jobs:
            mine = [p for p in candidates if p.job == job]
            if goal.name == SLOWDOWN:
                mine = [
                    p
                    for p in mine
                    if p.is_baseline
                    or (math.isfinite(p.slowdown_max) and p.slowdown_max <= goal.bound)
                ]
            rows.append(_pick(goal, job, mine))
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS))


def _pick(goal: Objective, job: str, mine: list[Point]) -> dict:
    energy = goal.name == ENERGY

    def side(p: Point) -> Side:
        return p.energy if energy else p.throughput

    mine = [p for p in mine if side(p).known]
    ranked = sorted(mine, key=lambda p: side(p).mean if energy else -side(p).mean)
    row = {"objective": str(goal), "job": job, "run_ids": ""}
    what = "energy per example" if energy else "examples/s"
    if goal.name == SLOWDOWN:
        what = f"examples/s with every job within {goal.bound:g}× its time per example alone"
    if not ranked:
        row["sentence"] = f"{job}: no configuration has {what} to compare (missing figures)."
        return row
    win = ranked[0]
    row.update(
        winner=win.label,
        winner_value=side(win).mean,
        winner_range=f"{side(win).low:.3f}–{side(win).high:.3f}",
        run_ids=win.run_ids,
    )
    lead = f"{job}, for {'the least ' if energy else 'the most '}{what}: run {win.label} "
    lead += f"({side(win).mean:.3f}× alone's, n = {side(win).n})"
    if len(ranked) == 1:
        row["sentence"] = lead + "; no other configuration qualifies."
        return row
    second = ranked[1]
    margin = 100.0 * (
        (side(second).mean / side(win).mean - 1.0)
        if energy
        else (side(win).mean / side(second).mean - 1.0)
    )
    noise = verdict(side(win), side(second))
    row.update(
        runner_up=second.label,
        runner_up_value=side(second).mean,
        margin_pct=margin,
        margin_verdict="within noise" if noise != ("less" if energy else "more") else "ahead",
    )
    if row["margin_verdict"] == "ahead":
        how = (
            f"{margin:.1f} % {'less energy per example' if energy else 'more examples/s'} "
            f"than the runner-up"
        )
    elif noise == "not judged":
        how = f"{margin:.1f} % ahead of the runner-up by the means, not judged (one repeat)"
        row["margin_verdict"] = "not judged"
    else:
        how = f"within noise of the runner-up ({margin:.1f} % by the means)"
    row["sentence"] = (
        f"{lead}: {how}, {second.label} ({side(second).mean:.3f}× alone's, n = {side(second).n})."
    )
    return row
