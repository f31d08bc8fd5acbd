"""The table of figures: one spec per summary figure, from which every view of them is drawn.

A :class:`Figure` names a column of :func:`radt.summary` (its unit in the name:
``_j``, ``_w``, ``_ns``, ``_pct``…), says how it is reduced over a window when it
comes straight from samples, whether repeats aggregate it, whether it is a
headline metric a closing run logs, how the runs grid shows it, and the section
of docs/analysis.md that defines it. The summary's columns
(:data:`radt.analysis.summary.COLUMNS`, hence the export header), the repeats'
figures, the headline metrics (:data:`radt.analysis.closing.HEADLINE`), the runs
grid and the window figures (:func:`radt.analysis.windows.window_figures`) are
all made from :data:`CATALOG`; ``tests/test_catalog.py`` checks the docs.
"""

from __future__ import annotations

from dataclasses import dataclass

ROW = "figures-of-a-row"
CLIENT_WINDOW = "client-window"
BASIS = "basis"
ENERGY = "energy-cross-check-host-energy-and-estimates"
SLOWDOWN = "slowdown-baselines-and-normalised-figures"
DOCS = "docs/analysis.md"

OVER_TIME = ("mean", "max")
"""How a figure straight from samples reduces over its window (:attr:`Figure.over_time`)."""
ACROSS = ("sum", "mean")
"""How the GPUs' values of an instant combine (:attr:`Figure.across`)."""
SHOWS = ("number", "integer", "ratio", "signed", "percent")
"""How the runs grid formats a figure (:attr:`Figure.show`), besides ``si:<scale>:<unit>``."""
RUNS_SHOWS = ("number", "duration", "exact", "ms", "joules", "estimate", "slowdown")
"""How ``radt runs`` writes a figure (:attr:`Figure.runs_show`)."""


@dataclass(frozen=True)
class Figure:
    """One summary column: what it is, how it is made from samples, and how it shows."""

    name: str
    """The column, its unit in the name (``energy_j``, ``time_per_example_ns``)."""
    label: str
    """Its header in the runs grid, unit included."""
    anchor: str
    """The heading of docs/analysis.md that defines it (GitHub's anchor of it)."""
    show: str | None = None
    """How the grid formats it: ``number``, ``integer``, ``ratio``, ``signed``, ``percent``,
    ``si:<scale>:<unit>`` (ns stored, ``25.8ms`` shown); None for text."""
    width: int = 0
    """Its width in the runs grid; 0: not in the grid."""
    repeat: bool = False
    """Whether :func:`radt.analysis.summary.repeats` aggregates it."""
    headline: bool = False
    """Whether a closing run logs it as the metric ``radt/<name>``."""
    quantity: str | None = None
    """A figure read straight from samples: the per-GPU quantity (``power_w``), or
    ``tree:<quantity>`` for the run's process tree (``top/proc/<quantity>``)."""
    across: str = "sum"
    """Per instant, how the GPUs' values combine: ``sum`` (amounts), ``mean`` (shares)."""
    over_time: str = "mean"
    """How the window's values reduce to the figure: ``mean`` or ``max``."""
    attribution: bool = False
    """Filled by :mod:`radt.analysis.attribution` (energy cross-check, host energy, estimates)."""
    estimate: bool = False
    """An estimate, never a measurement: the grid sets it apart."""
    runs: str | None = None
    """Its header in ``radt runs``; None: not in that table."""
    runs_show: str = "number"
    """How ``radt runs`` writes it: ``duration``, ``exact`` (a duration, seconds under a
    minute), ``number``, ``ms`` (ns stored), ``joules`` (nJ stored), ``estimate`` (joules and
    its method), ``slowdown`` (``*`` against a spread baseline)."""
    runs_optional: bool = False
    """In ``radt runs`` only when a row has it (its listener recorded, an estimate made)."""

    def __post_init__(self) -> None:
        """A spec is checked where it is written: a bad field is a ValueError naming it, not a
        KeyError when the figure is first made or shown."""
        for field, value, known in (
            ("over_time", self.over_time, OVER_TIME),
            ("across", self.across, ACROSS),
            ("runs_show", self.runs_show, RUNS_SHOWS),
        ):
            if value not in known:
                raise ValueError(
                    f"figure {self.name}: {field}={value!r} is unknown; use one of "
                    + ", ".join(known)
                )
        if self.show is not None and self.show not in SHOWS and not _si_show(self.show):
            raise ValueError(
                f"figure {self.name}: show={self.show!r} is unknown; use one of "
                f"{', '.join(SHOWS)}, si:<scale>:<unit> or None"
            )
        if self.quantity is not None and not self.quantity.rpartition(":")[2]:
            raise ValueError(f"figure {self.name}: quantity={self.quantity!r} names no quantity")
        if self.quantity is not None and self.quantity.rpartition(":")[0] not in ("", "tree"):
            raise ValueError(
                f"figure {self.name}: quantity={self.quantity!r}: the only prefix is tree:"
            )
        if self.width < 0:
            raise ValueError(f"figure {self.name}: width={self.width} is below 0")


def _si_show(show: str) -> bool:
    """Whether ``show`` is ``si:<scale>:<unit>``, its scale a number."""
    parts = show.split(":")
    if len(parts) != 3 or parts[0] != "si" or not parts[2]:
        return False
    try:
        float(parts[1])
    except ValueError:
        return False
    return True


_SI_S = "si:1e-9:s"
_SI_J = "si:1e-9:J"

CATALOG: tuple[Figure, ...] = (
    Figure("duration_s", "duration (s)", ROW, "number", 120, runs="duration", runs_show="duration"),
    Figure("basis", "basis", BASIS, None, 130),
    Figure("warmup", "warm-up", CLIENT_WINDOW),
    Figure("window_start", "window start (UTC)", ROW),
    Figure("window_end", "window end (UTC)", ROW),
    Figure(
        "window_s",
        "window (s)",
        ROW,
        "number",
        115,
        repeat=True,
        headline=True,
        runs="window",
        runs_show="exact",
    ),
    Figure("examples_total", "examples (run)", ROW, "integer"),
    Figure("examples", "examples (window)", ROW, "integer", 150, repeat=True),
    Figure(
        "examples_per_s",
        "examples/s",
        ROW,
        "number",
        115,
        repeat=True,
        headline=True,
        runs="examples/s",
    ),
    Figure(
        "time_per_example_ns",
        "time/example",
        ROW,
        _SI_S,
        125,
        repeat=True,
        headline=True,
        runs="ms/example",
        runs_show="ms",
    ),
    Figure("cpu_s", "CPU (s)", ROW, "number"),
    Figure(
        "cpu_per_example_ns",
        "CPU/example",
        ROW,
        _SI_S,
        repeat=True,
        headline=True,
        runs="CPU ms/example",
        runs_show="ms",
        runs_optional=True,
    ),
    Figure("energy_j", "energy (J)", ROW, "number", 110, repeat=True, headline=True),
    Figure("energy_method", "energy method", ROW),
    Figure(
        "energy_per_example_nj",
        "energy/example",
        ROW,
        _SI_J,
        135,
        repeat=True,
        headline=True,
        runs="energy/example",
        runs_show="joules",
    ),
    Figure("energy_counter_j", "energy counter (J)", ENERGY, "number", attribution=True),
    Figure("energy_power_integral_j", "power integral (J)", ENERGY, "number", attribution=True),
    Figure(
        "energy_crosscheck_pct",
        "energy cross-check (%)",
        ENERGY,
        "signed",
        170,
        repeat=True,
        attribution=True,
    ),
    Figure(
        "host_energy_j", "host energy (J)", ENERGY, "number", 140, repeat=True, attribution=True
    ),
    Figure(
        "host_energy_per_example_nj",
        "host energy/example",
        ENERGY,
        _SI_J,
        160,
        repeat=True,
        attribution=True,
        runs="host energy/example",
        runs_show="joules",
        runs_optional=True,
    ),
    Figure(
        "total_energy_per_example_nj",
        "GPU+host energy/example",
        ENERGY,
        _SI_J,
        190,
        repeat=True,
        attribution=True,
    ),
    Figure("total_energy_parts", "GPU+host parts", ENERGY, attribution=True),
    Figure(
        "energy_j_est",
        "est. energy (J)",
        ENERGY,
        "number",
        130,
        repeat=True,
        attribution=True,
        estimate=True,
    ),
    Figure(
        "energy_per_example_nj_est",
        "est. energy/example",
        ENERGY,
        _SI_J,
        160,
        repeat=True,
        attribution=True,
        estimate=True,
        runs="est. energy/example",
        runs_show="estimate",
        runs_optional=True,
    ),
    Figure(
        "energy_est_method",
        "estimate method",
        ENERGY,
        None,
        150,
        attribution=True,
        estimate=True,
    ),
    Figure("idle_power_w", "idle floor power (W)", ENERGY, "number", attribution=True),
    Figure("idle_energy_j", "idle floor energy (J)", ENERGY, "number", 160, attribution=True),
    Figure("idle_method", "idle floor method", ENERGY, attribution=True),
    Figure("power_mean_w", "mean power (W)", ROW, "number", 135, repeat=True, quantity="power_w"),
    Figure("power_max_w", "peak power (W)", ROW, "number", quantity="power_w", over_time="max"),
    Figure(
        "util_mean_pct",
        "GPU util (%)",
        ROW,
        "number",
        120,
        repeat=True,
        quantity="util_pct",
        across="mean",
    ),
    Figure(
        "smact_mean_ratio", "SM activity", ROW, "ratio", 115, quantity="smact_ratio", across="mean"
    ),
    Figure(
        "gpu_mem_peak_mib",
        "GPU mem peak (MiB)",
        ROW,
        "integer",
        160,
        quantity="mem_used_mib",
        over_time="max",
    ),
    Figure(
        "host_mem_peak_mib",
        "host mem peak (MiB)",
        ROW,
        "integer",
        160,
        quantity="tree:rss_mib",
        over_time="max",
    ),
    Figure(
        "slowdown",
        "slowdown",
        SLOWDOWN,
        "ratio",
        110,
        repeat=True,
        headline=True,
        runs="slowdown",
        runs_show="slowdown",
    ),
    Figure("baseline_run_id", "baseline run", SLOWDOWN),
    Figure("baseline_cv_pct", "baseline spread (%)", SLOWDOWN, "percent", 160),
    Figure("examples_per_s_norm", "examples/s vs alone", SLOWDOWN, "ratio", repeat=True),
    Figure("time_per_example_norm", "time/example vs alone", SLOWDOWN, "ratio", 170, repeat=True),
    Figure(
        "energy_per_example_norm", "energy/example vs alone", SLOWDOWN, "ratio", 180, repeat=True
    ),
)
"""Every summary figure, in the summary's column order."""

BY_NAME = {figure.name: figure for figure in CATALOG}
SAMPLE_FIGURES: tuple[Figure, ...] = tuple(f for f in CATALOG if f.quantity)
"""The figures reduced over a window straight from the samples (besides ``energy_j``)."""
WINDOW_FIGURES: tuple[str, ...] = ("energy_j", *(f.name for f in SAMPLE_FIGURES))
"""The figures :func:`radt.analysis.windows.window_figures` computes from a run's samples."""
HEADLINE: tuple[str, ...] = tuple(f.name for f in CATALOG if f.headline)
REPEATED: tuple[str, ...] = tuple(f.name for f in CATALOG if f.repeat)
ATTRIBUTED: tuple[str, ...] = tuple(f.name for f in CATALOG if f.attribution)
