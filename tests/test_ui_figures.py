"""The UI's pure parts: downsampling, the time-series figure, the compare charts, the grid rows."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import plotly.io as pio
import pytest
from radt.frontend.charts import (
    basis_note,
    client_energy_figure,
    config_label,
    cpu_figure,
    efficiency_figure,
    focus,
    normalise,
    partition_share,
    power_label,
    slowdown_figure,
    throughput_energy_figure,
    utilisation_figure,
)
from radt.frontend.data import metric_keys
from radt.frontend.downsample import minmax_lttb, reduce, window
from radt.frontend.labels import PLOT_PX, label_box
from radt.frontend.pages.compare import CHARTS
from radt.frontend.pages.runs import COLUMNS as GRID_COLUMNS
from radt.frontend.pages.runs import CROSSCHECK_STYLE, grid_rows
from radt.frontend.series import (
    RunLabel,
    RunWindow,
    default_keys,
    panel_title,
    panels,
    relayout_window,
    split_unit,
    timeseries_figure,
)
from radt.frontend.style import MODE_COLOURS, wrap

from radt.analysis.summary import COLUMNS

T0 = pd.Timestamp("2026-01-01T00:00:00Z")


def annotations(fig) -> str:
    """The figure's texts, its line breaks (set to fit a card) as spaces."""
    return " ".join((a.text or "").replace("<br>", " ") for a in fig.layout.annotations)


# --------------------------------------------------------------------------- downsampling


def test_window_keeps_one_sample_beyond_each_edge():
    x = np.arange(10.0)
    assert window(x, 3.0, 5.0) == slice(2, 7)
    assert window(x, 2.5, 5.5) == slice(2, 7)
    assert window(x, None, None) == slice(0, 10)
    assert window(x, -5.0, 0.0) == slice(0, 2)
    assert window(x, 20.0, 30.0) == slice(9, 10)


def test_minmax_lttb_keeps_everything_within_the_budget():
    x = np.arange(100.0)
    assert np.array_equal(minmax_lttb(x, np.sin(x), 2000), np.arange(100))


def test_minmax_lttb_cuts_a_million_points_to_the_budget_keeping_the_extremes():
    n = 1_000_000
    x = np.arange(n, dtype=np.int64) * 1000
    y = np.sin(np.linspace(0, 60, n))
    y[123_457] = 50.0  # a spike
    y[765_432] = -50.0  # a dip
    chosen = minmax_lttb(x, y, 2000)
    assert len(chosen) == 2000
    assert np.all(np.diff(chosen) > 0)
    assert chosen[0] == 0 and chosen[-1] == n - 1
    assert 123_457 in chosen and 765_432 in chosen


def test_minmax_lttb_rejects_mismatched_inputs():
    with pytest.raises(ValueError):
        minmax_lttb(np.arange(10.0), np.arange(9.0), 4)
    with pytest.raises(ValueError):
        minmax_lttb(np.arange(10.0), np.arange(10.0), 2)


def test_reduce_drops_missing_values_and_counts_the_window():
    x = np.arange(10_000.0)
    y = np.ones_like(x)
    y[::2] = np.nan  # every other sample missing (N/A)
    xs, ys, n = reduce(x, y, 1000.0, 2000.0, budget=100)
    assert n == 502  # 500 odd samples inside and one beyond each edge
    assert len(xs) == 100 and np.all(np.isfinite(ys))
    assert xs[0] == 999.0 and xs[-1] == 2001.0
    xs, _, n = reduce(x[:50], y[:50], budget=100)
    assert n == len(xs) == 25


# --------------------------------------------------------------------------- time series


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("power_w", ("power", "W")),
        ("cpu_pct", ("cpu", "%")),
        ("mem_used_mib", ("mem used", "MiB")),
        ("energy_j", ("energy", "J")),
        ("smact_ratio", ("smact", "ratio")),
        ("sm_clock_mhz", ("sm clock", "MHz")),
        ("read_mib_s", ("read", "MiB/s")),
        ("temp_c", ("temp", "°C")),
        ("threads", ("threads", "")),
        ("examples", ("examples", "")),
    ],
)
def test_units_come_from_the_key_suffix(name, expected):
    assert split_unit(name) == expected


def test_panel_titles_and_one_panel_per_quantity():
    assert panel_title("power_w") == "power (W)"
    assert panel_title("load1") == "load1"
    keys = ["top/proc/cpu_pct", "nvml/gpu0/power_w", "top/host/cpu_pct", "nvml/gpu1/power_w"]
    assert panels(keys) == ["cpu_pct", "power_w"]


def _tidy(run_id: str, key: str, seconds, values, start: pd.Timestamp = T0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": run_id,
            "key": key,
            "timestamp": start + pd.to_timedelta(np.asarray(seconds, float), unit="s"),
            "value": np.asarray(values, float),
        }
    )


def _label(run_id: str, name: str, start: pd.Timestamp = T0, workload=False) -> RunLabel:
    return RunLabel(run_id, name, int(start.value // 1000), workload=workload)


def test_timeseries_overlays_runs_one_panel_per_quantity_with_units():
    later = T0 + pd.Timedelta(hours=1)
    frame = pd.concat(
        [
            _tidy("a", "top/proc/cpu_pct", range(10), range(10)),
            _tidy("b", "top/proc/cpu_pct", range(10), range(10), start=later),
            _tidy("w", "nvml/gpu0/power_w", range(10), [100] * 10),
            _tidy("a", "top/proc/rss_mib", range(10), [5] * 10),
        ]
    )
    runs = {"w": _label("w", "pair", workload=True), "a": _label("a", "pair-A")}
    runs["b"] = _label("b", "pair-B", start=later)
    keys = ["top/proc/cpu_pct", "nvml/gpu0/power_w"]
    fig, stats = timeseries_figure(frame, runs, keys, revision="r1")
    names = [t.name for t in fig.data]
    assert names == [
        "pair-A · top/proc/cpu_pct",
        "pair-B · top/proc/cpu_pct",
        "pair (workload) · nvml/gpu0/power_w",
    ]
    assert "cpu (%)" in annotations(fig) and "power (W)" in annotations(fig)
    assert fig.layout.yaxis.title.text == "%" and fig.layout.yaxis2.title.text == "W"
    assert fig.data[2].yaxis == "y2"
    # relative time: both runs start at 0 although they ran an hour apart
    assert fig.data[0].x[0] == 0 and fig.data[1].x[0] == 0
    assert fig.data[0].line.color != fig.data[1].line.color
    assert fig.layout.uirevision == "r1"
    assert (stats.traces, stats.samples, stats.shown) == (3, 30, 30)
    assert not stats.downsampled
    json.loads(pio.to_json(fig))  # serialisable as Dash sends it


def test_timeseries_downsamples_to_the_budget_and_zooms_to_full_resolution():
    n = 1_000_000
    frame = _tidy(
        "a", "nvml/gpu0/power_w", np.arange(n) * 0.001, np.random.default_rng(1).random(n)
    )
    runs = {"a": _label("a", "job")}
    fig, stats = timeseries_figure(frame, runs, ["nvml/gpu0/power_w"], budget=2000)
    assert len(fig.data[0].x) == 2000 and stats.samples == n and stats.downsampled
    fig, stats = timeseries_figure(
        frame, runs, ["nvml/gpu0/power_w"], window=(100.0, 101.0), budget=2000
    )
    assert stats.samples == 1003 and len(fig.data[0].x) == 1003 and not stats.downsampled
    assert list(fig.layout.xaxis.range) == [100.0, 101.0]


def test_timeseries_wall_time_uses_utc_datetimes_and_date_windows():
    frame = _tidy("a", "top/proc/cpu_pct", range(60), range(60))
    runs = {"a": _label("a", "job")}
    fig, _ = timeseries_figure(frame, runs, ["top/proc/cpu_pct"], relative=False)
    assert fig.data[0].x[0] == np.datetime64("2026-01-01T00:00:00")
    window = ("2026-01-01 00:00:10", "2026-01-01 00:00:20")
    fig, stats = timeseries_figure(frame, runs, ["top/proc/cpu_pct"], relative=False, window=window)
    assert stats.samples == 13  # 10 … 20 s, plus one beyond each edge
    assert fig.layout.xaxis.title.text == "time (UTC)"
    assert tuple(fig.layout.xaxis.range) == window


def test_timeseries_empty_states_say_why():
    frame = _tidy("a", "top/proc/cpu_pct", range(3), range(3))
    runs = {"a": _label("a", "job")}
    fig, stats = timeseries_figure(frame, runs, [])
    assert "Pick one or more metric keys" in annotations(fig) and stats.traces == 0
    fig, _ = timeseries_figure(frame, runs, ["nvml/gpu0/power_w"])
    assert "no samples of these keys" in annotations(fig)


def test_relayout_events():
    assert relayout_window({"xaxis.range[0]": 1.5, "xaxis.range[1]": 9}) == ("zoom", (1.5, 9))
    assert relayout_window({"xaxis3.range": ["2026-01-01", "2026-01-02"]}) == (
        "zoom",
        ("2026-01-01", "2026-01-02"),
    )
    assert relayout_window({"xaxis.autorange": True, "xaxis.showspikes": False}) == (
        "reset",
        None,
    )
    assert relayout_window({"autosize": True}) is None
    assert relayout_window({"yaxis.range[0]": 0, "yaxis.range[1]": 1}) is None
    assert relayout_window(None) is None


def test_default_keys_prefer_gpu_power_and_process_cpu():
    keys = ["iostat/vda/read_mib_s", "nvml/gpu0/power_w", "top/proc/cpu_pct", "loss"]
    assert default_keys(keys) == ["nvml/gpu0/power_w", "top/proc/cpu_pct"]
    assert default_keys(["iostat/vda/read_mib_s", "loss"]) == ["iostat/vda/read_mib_s"]
    assert default_keys([]) == []


def test_metric_keys_of_a_run():
    names = [
        "system/top/proc/cpu_pct",
        "examples",
        "summary/top/proc/cpu_pct/mean",
        "summary/nvml/gpu0/power_w/max",
        "radt/examples_per_s",  # a headline figure, no series
    ]
    assert metric_keys(names) == ("examples", "nvml/gpu0/power_w", "top/proc/cpu_pct")


def test_each_runs_window_is_a_band_in_every_panel():
    frame = pd.concat(
        [
            _tidy("a", "nvml/gpu0/power_w", range(20), [100] * 20),
            _tidy("a", "top/proc/cpu_pct", range(20), range(20)),
            _tidy("b", "top/proc/cpu_pct", range(20), range(20)),
        ]
    )
    runs = {"a": _label("a", "pair-A"), "b": _label("b", "pair-B", start=T0 + pd.Timedelta(1, "h"))}
    start = int(T0.value // 1000)
    windows = {
        "a": RunWindow(start + 4_000_000, start + 12_000_000, "examples"),
        "b": RunWindow(
            start + 3600_000_000 + 2_000_000, start + 3600_000_000 + 9_000_000, "duration"
        ),
        "gone": RunWindow(start, start + 1, "examples"),  # not shown: no band
    }
    keys = ["nvml/gpu0/power_w", "top/proc/cpu_pct"]
    fig, stats = timeseries_figure(frame, runs, keys, windows=windows)
    assert stats.bands == 2
    a, b = fig.layout.shapes  # one per run, over both panels
    assert (a.x0, a.x1) == (4.0, 12.0)  # seconds since the run started
    assert (b.x0, b.x1) == (2.0, 9.0) and "duration" in b.name
    # on the bottom panel's axis, which the top one matches, from the bottom to the top
    assert (a.xref, a.yref, a.y0, a.y1) == ("x2", "paper", 0, 1)
    assert fig.layout.xaxis.matches == "x2"
    assert a.name == "pair-A: window (examples)"
    label_a, label_b = fig.layout.annotations[-2:]  # the bands' labels, above the top panel
    assert label_a.text == a.name and label_b.text == b.name
    assert (label_a.x, label_a.xref, label_a.yref, label_a.y) == (4.0, "x2", "paper", 1)
    assert label_a.yanchor == "bottom" and label_a.yshift > 0
    assert a.fillcolor == fig.data[0].line.color
    assert not a.showlegend  # a shape in the legend stops plotly zooming the matched axes
    fig, _ = timeseries_figure(frame, runs, keys, windows=windows, relative=False)
    assert fig.layout.shapes[0].x0 == "2026-01-01T00:00:04"
    json.loads(pio.to_json(fig))


def test_window_labels_of_runs_that_start_together_are_on_lines_of_their_own():
    # the view: two runs, windows from about the same second: labels printed over
    # each other at the top left of both bands
    frame = pd.concat(
        [
            _tidy("a", "top/proc/cpu_pct", range(20), range(20)),
            _tidy("b", "top/proc/cpu_pct", range(20), range(20), start=T0 + pd.Timedelta(1, "h")),
        ]
    )
    runs = {"a": _label("a", "pair-A"), "b": _label("b", "pair-B", start=T0 + pd.Timedelta(1, "h"))}
    start = int(T0.value // 1000)
    windows = {
        "a": RunWindow(start + 4_000_000, start + 12_000_000, "examples"),
        "b": RunWindow(
            start + 3600_000_000 + 4_000_000, start + 3600_000_000 + 9_000_000, "examples"
        ),
    }
    fig, _ = timeseries_figure(frame, runs, ["top/proc/cpu_pct"], windows=windows)
    a, b = fig.layout.shapes
    label_a, label_b = fig.layout.annotations[-2:]
    assert a.x0 == b.x0 == label_a.x == label_b.x == 4.0
    assert label_b.yshift - label_a.yshift >= 14  # a 10-px line apart, at least
    # above the plot area, and the top margin holds both lines
    assert label_a.yshift >= 20 and fig.layout.margin.t >= label_b.yshift + 14


def test_phase_shares_are_of_each_runs_own_phase_span_and_the_panel_says_so():
    from radt.frontend.phases import phase_bands
    from radt.frontend.series import PHASES_TITLE

    # run a: 10 s of phases (data 2.5 s, step 7.5 s); run b the same in 5 s. Together in view
    # (0 → 10 s), b's shares of the view would sum to 50 %; of its own span they sum to 100 %.
    def steps(run_id, seconds):
        starts = np.arange(0.0, seconds, 1.0)
        return pd.DataFrame(
            {
                "run_id": run_id,
                "phase": np.repeat(["data", "step"], len(starts)),
                "start": pd.to_datetime(
                    T0.timestamp() + np.concatenate([starts, starts + 0.25]), unit="s", utc=True
                ),
                "end": pd.to_datetime(
                    T0.timestamp() + np.concatenate([starts + 0.25, starts + 1.0]),
                    unit="s",
                    utc=True,
                ),
            }
        )

    runs = {"a": _label("a", "run-a"), "b": _label("b", "run-b")}
    bands = phase_bands(pd.concat([steps("a", 10), steps("b", 5)]), runs)
    assert bands.lanes == [
        "run-a · data 25%",
        "run-a · step 75%",
        "run-b · data 25%",
        "run-b · step 75%",
    ]
    zoomed = phase_bands(pd.concat([steps("a", 10), steps("b", 5)]), runs, lo=4.0, hi=8.0)
    # run b in view: 4 → 5 s; data 4 → 4.25 s: 25 %
    assert zoomed.lanes[2:] == ["run-b · data 25%", "run-b · step 75%"]
    frame = _tidy("a", "top/proc/cpu_pct", range(10), range(10))
    fig, _ = timeseries_figure(frame, runs, ["top/proc/cpu_pct"], phases=steps("a", 10))
    assert PHASES_TITLE in annotations(fig) and "phase span in view" in PHASES_TITLE


# --------------------------------------------------------------------------- compare charts


def summary_frame(rows: list[dict]) -> pd.DataFrame:
    """A ``radt.summary`` frame with the columns it has; unset figures are NaN."""
    frame = pd.DataFrame([{c: row.get(c, math.nan) for c in COLUMNS} for row in rows])
    frame["start"] = pd.to_datetime(T0) + pd.to_timedelta(range(len(frame)), unit="min")
    return frame


def study(energy: bool = True) -> pd.DataFrame:
    """A baseline, a naive pair, a MIG 4g+3g pair at 250 W and an MPS 50/50 pair."""
    rows = []

    def workload(name, mode, clients, cap=None, nj=None, ns=None, slow=(), profiles=(), mps=None):
        rows.append(
            {
                "level": "provider",
                "run_id": name,
                "run_name": name,
                "workload": name,
                "collocation": mode,
                "power_limit_w": cap,
                "examples_per_s": 1e9 / ns,
                "time_per_example_ns": ns,
                "basis": "examples",
                "window_s": 30.0,
                "energy_per_example_nj": nj if energy else math.nan,
                "util_mean_pct": 80.0 if energy else math.nan,
            }
        )
        for i in range(clients):
            rows.append(
                {
                    "level": "client",
                    "run_id": f"{name}-{i}",
                    "run_name": f"{name}-{'AB'[i]}",
                    "workload": name,
                    "parent_run_id": name,
                    "collocation": mode,
                    "power_limit_w": cap,
                    "mig_profile": profiles[i] if profiles else None,
                    "mps_thread_pct": mps if mps is not None else math.nan,
                    "slowdown": slow[i],
                }
            )

    workload("alone", "none", 1, ns=2e6, nj=4e8, slow=(1.0,))
    workload("pair", "naive", 2, ns=1.5e6, nj=3e8, slow=(1.6, 1.8))
    workload(
        "mig",
        "mig",
        2,
        cap="250",
        ns=1.2e6,
        nj=2e8,
        slow=(1.5, 2.1),
        profiles=("4g.40gb", "3g.40gb"),
    )
    workload("mps", "mps", 2, ns=1.3e6, nj=2.5e8, slow=(1.7, 1.9), mps=50.0)
    return normalise(summary_frame(rows))


def test_partition_share_of_each_collocation_mode():
    row = pd.Series
    assert partition_share(row({"collocation": "mig", "mig_profile": "3g.40gb"})) == Fraction(3, 7)
    assert partition_share(row({"collocation": "mig", "mig_profile": "7g.80gb"})) == 1
    assert partition_share(row({"collocation": "mig", "mig_profile": "weird"})) is None
    assert partition_share(row({"collocation": "mps", "mps_thread_pct": 50.0}), 2) == Fraction(1, 2)
    assert partition_share(row({"collocation": "mps", "mps_thread_pct": math.nan}), 4) == Fraction(
        1, 4
    )
    assert partition_share(row({"collocation": "naive"}), 3) == Fraction(1, 3)
    assert partition_share(row({"collocation": "none"})) == 1


def test_labels_of_configurations():
    assert power_label("250") == "250 W" and power_label(None) == "default cap"
    assert power_label(math.nan) == "default cap"
    mig = pd.Series({"collocation": "mig", "mig_profile": "3g.40gb", "power_limit_w": "250"})
    assert config_label(mig) == "mig 3g.40gb · 250 W"
    assert config_label(pd.Series({"collocation": "mps", "mps_thread_pct": 50.0})) == (
        "mps 50% · default cap"
    )


def test_focus_keeps_the_workloads_of_the_selected_runs():
    frame = study()
    assert list(focus(frame, ["mig-1"])["run_id"]) == ["mig", "mig-0", "mig-1"]
    assert list(focus(frame, ["alone"])["run_id"]) == ["alone", "alone-0"]
    assert len(focus(frame, [])) == len(frame)


def test_efficiency_scatter_places_workloads_by_time_and_energy_and_says_down_left_is_better():
    fig = efficiency_figure(study())
    points = {name: (x, y) for t in fig.data for name, x, y in zip(t.text, t.x, t.y, strict=True)}
    assert set(points) == {"alone", "pair", "mig", "mps"}
    assert points["mig"] == pytest.approx((1.2e-3, 0.2))  # seconds and joules per example
    assert {t.name for t in fig.data} == {
        "none · default cap",
        "naive · default cap",
        "mig · 250 W",
        "mps · default cap",
    }
    assert "better" in annotations(fig)
    assert fig.layout.xaxis.ticksuffix == "s" and fig.layout.yaxis.ticksuffix == "J"


def test_points_say_their_window_and_basis_and_mixed_bases_are_kept_apart():
    frame = study()
    fig = efficiency_figure(frame)
    assert all("30 s window, examples basis" in list(t.customdata[:, 2]) for t in fig.data)
    assert "%{customdata[2]}" in fig.data[0].hovertemplate
    note = basis_note(frame)
    assert note == (
        "Workload figures are over their window: 4 workloads on basis examples, steady state "
        "(a workload: while all its runs were in theirs)."
    )  # no "[examples, 4]"
    old = frame.assign(basis=frame["basis"].where(frame["run_id"] != "pair", "examples_lifetime"))
    fig = efficiency_figure(old)
    names = {t.name for t in fig.data}
    assert "naive · default cap · examples_lifetime" in names
    assert "none · default cap · examples" in names
    lifetime = next(t for t in fig.data if t.name.endswith("examples_lifetime"))
    assert lifetime.marker.symbol.endswith("-open")
    note = basis_note(old)
    assert note.startswith("Mixed bases, not comparable")
    assert "1 workload on basis examples_lifetime, the whole run" in note
    assert "3 workloads on basis examples, steady state" in note and "[" not in note
    bars = throughput_energy_figure(frame)
    assert "over a %{customdata}" in bars.data[0].hovertemplate


def test_charts_without_energy_or_examples_carry_a_note_instead_of_an_empty_plot():
    fig = efficiency_figure(study(energy=False))
    assert not fig.data and "No GPU energy" in annotations(fig)
    fig = throughput_energy_figure(study(energy=False))
    assert fig.data and "no GPU energy recorded" in annotations(fig)
    fig = utilisation_figure(study(energy=False))
    assert not fig.data and "No GPU utilisation" in annotations(fig)
    no_examples = study().assign(time_per_example_ns=math.nan, examples_per_s=math.nan)
    assert "No run reports examples" in annotations(efficiency_figure(no_examples))
    assert "No run reports examples" in annotations(throughput_energy_figure(no_examples))
    no_baseline = study().assign(slowdown=math.nan)
    assert "needs a baseline" in annotations(slowdown_figure(no_baseline))


def test_bars_group_configurations_by_power_limit_and_colour_by_mode():
    fig = throughput_energy_figure(study())
    bars = [t for t in fig.data if t.type == "bar"]
    assert {t.name for t in bars} == {"none", "naive", "mig", "mps"}
    mig = [t for t in bars if t.name == "mig"]
    assert [list(level) for level in mig[0].x] == [["250 W"], ["mig"]]
    assert mig[0].y[0] == pytest.approx(1e9 / 1.2e6)
    assert mig[1].y[0] == pytest.approx(0.2) and mig[1].xaxis == "x2"
    assert mig[0].marker.color != [t for t in bars if t.name == "mps"][0].marker.color


def loader_study() -> pd.DataFrame:
    """Job ``train.py``: naive x3 with own loaders (two repeats: 15 and 17 ms CPU per
    example), the same with one shared loader (6 ms), none alone (12 ms) and a shared
    workload whose CPU is missing (no ``top`` samples for its loader)."""

    def provider(name, configuration, loader, cpu_ns, note=None):
        return {
            "level": "provider",
            "run_id": name,
            "run_name": name,
            "workload": name,
            "collocation": configuration.split()[0],
            "job": "train.py",
            "configuration": configuration,
            "loader": loader,
            "basis": "examples",
            "cpu_per_example_ns": cpu_ns,
            "window_note": note,
        }

    rows = [
        provider("alone", "none", "own", 12e6),
        provider("own-r1", "naive x3", "own", 15e6),
        provider("own-r2", "naive x3", "own", 17e6),
        provider("shared-r1", "naive x3 + shared loader", "shared", 6e6),
        provider("lost", "naive x2 + shared loader", "shared", math.nan, "run L: no samples"),
        {"level": "client", "run_id": "own-r1-A", "parent_run_id": "own-r1", "loader": "own"},
    ]
    return normalise(summary_frame(rows))


def test_cpu_per_example_by_configuration_sets_own_and_shared_loaders_side_by_side():
    fig = cpu_figure(loader_study())
    assert fig.layout.barmode == "group"
    alone, own, shared = fig.data
    assert (alone.name, own.name, shared.name) == (
        "none · own loaders",
        "naive · own loaders",
        "naive · shared loader",
    )
    # coloured by collocation mode as the page's legends, the shared loader hatched
    assert alone.marker.color == MODE_COLOURS["none"] != own.marker.color
    assert own.marker.color == shared.marker.color == MODE_COLOURS["naive"]
    assert not own.marker.pattern.shape and shared.marker.pattern.shape == "/"
    assert (own.offsetgroup, shared.offsetgroup) == ("own", "shared")
    assert [list(level) for level in alone.x] == [["train.py"], ["none"]]
    assert [list(level) for level in own.x] == [["train.py"], ["naive x3"]]
    assert list(alone.y) == pytest.approx([12.0])
    assert list(own.y) == pytest.approx([16.0])  # ms; naive x3: mean of 15 and 17
    assert [c[0] for c in own.customdata] == [2]
    assert own.customdata[0][1] == "own-r1, own-r2"
    assert [list(level) for level in shared.x] == [["train.py"], ["naive x3"]]
    assert list(shared.y) == pytest.approx([6.0])
    assert "lost: run L: no samples" in annotations(fig)
    assert fig.layout.title.text.endswith(": own loaders vs one shared loader")


def test_cpu_chart_names_a_missing_cpu_figure_with_its_own_reason_not_the_gpus():
    from radt.analysis.summary import NO_GPU_NOTE

    study_ = loader_study()
    study_["window_note"] = study_["window_note"].map(
        lambda n: NO_GPU_NOTE if not isinstance(n, str) else f"{n}; {NO_GPU_NOTE}"
    )
    text = annotations(cpu_figure(study_))
    assert "lost: run L: no samples" in text and "GPU listener" not in text


def test_cpu_title_names_only_the_loaders_there_are():
    study_ = loader_study()
    own = cpu_figure(study_[study_["loader"] == "own"])
    assert own.layout.title.text == (
        "CPU per example by configuration (each training its own data loader)"
    )  # not "vs one shared loader" when there is none
    shared = cpu_figure(study_[study_["loader"] == "shared"])
    assert (
        "shared data loader" in shared.layout.title.text and "own" not in shared.layout.title.text
    )


def test_throughput_legend_is_beside_the_chart_not_over_its_two_rows_of_x_labels():
    fig = throughput_energy_figure(study())
    legend = fig.layout.legend
    assert legend.x >= 1.0 and legend.xanchor == "left" and legend.orientation == "v"
    assert fig.layout.margin.r >= 100  # room for it


def test_cpu_per_example_without_top_says_what_it_needs():
    fig = cpu_figure(loader_study().assign(cpu_per_example_ns=math.nan))
    assert not fig.data and "needs the <i>top</i> listener" in annotations(fig)
    capped = loader_study().assign(power_limit_w="250")
    bars = cpu_figure(capped).data
    assert [list(t.x[1]) for t in bars[:2]] == [["none · 250 W"], ["naive x3 · 250 W"]]


def test_slowdown_against_partition_size_with_the_one_to_one_line():
    fig = slowdown_figure(study())
    line, *points = fig.data
    assert line.name.startswith("1:1") and list(line.x) == list(line.y)
    placed = {n: (x, y) for t in points for n, x, y in zip(t.text, t.x, t.y, strict=True)}
    assert placed["alone-A"] == pytest.approx((1.0, 1.0))
    assert placed["pair-B"] == pytest.approx((2.0, 1.8))  # naive among 2: half the GPU
    assert placed["mig-A"] == pytest.approx((7 / 4, 1.5))  # 4g of 7
    assert placed["mig-B"] == pytest.approx((7 / 3, 2.1))  # 3g of 7
    assert placed["mps-A"] == pytest.approx((2.0, 1.7))  # 50 % of the SMs


def test_slowdown_labels_cover_neither_each_other_nor_the_markers():
    # pair-B (2, 1.8), mps-A (2, 1.7) and pair-A (2, 1.6) sit 0.1 apart on one x: 13 px
    fig = slowdown_figure(study())
    top = fig.layout.xaxis.range[1]
    points = [
        (name, x / top * PLOT_PX[0], y / top * PLOT_PX[1], where)
        for t in fig.data[1:]
        for name, x, y, where in zip(t.text, t.x, t.y, t.textposition, strict=True)
    ]
    boxes = {name: label_box(x, y, name, where) for name, x, y, where in points}
    markers = {name: (x - 6, y - 6, x + 6, y + 6) for name, x, y, _ in points}

    def apart(a, b):
        return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]

    for one, box in boxes.items():
        assert all(apart(box, other) for name, other in boxes.items() if name != one), one
        assert all(apart(box, m) for name, m in markers.items() if name != one), one
    where = {name: w for name, _, _, w in points}
    assert where["mps-B"] == "top center"  # the highest of the column keeps the usual place
    assert len({where[n] for n in ("mps-B", "pair-B", "mps-A", "pair-A")}) > 1


def test_slowdown_against_a_baseline_whose_repeats_spread_is_flagged_with_the_spread():
    frame = study()
    frame.loc[frame["run_name"] == "pair-A", "baseline_cv_pct"] = 33.07  # 2,630 and 1,633 ex/s
    frame.loc[frame["run_name"] == "pair-B", "baseline_cv_pct"] = 3.4  # within 10 %
    fig = slowdown_figure(frame)
    flagged = [t for t in fig.data if "spread" in t.name]
    assert [t.name for t in flagged] == ["naive (baseline spread > 10 %)"]
    assert list(flagged[0].text) == ["pair-A"] and flagged[0].marker.symbol == "circle-open"
    assert "baseline repeats spread 33.1 % (over 10 %)" in flagged[0].customdata[0][3]
    assert "the baseline's repeats spread 33 % (over 10 %): slowdown uncertain" in annotations(fig)
    assert "spread" not in annotations(slowdown_figure(study()))


def test_utilisation_per_run():
    fig = utilisation_figure(study())
    assert [t.name for t in fig.data] == ["utilisation (%)"]
    assert list(fig.data[0].x) == [
        "alone (workload)",
        "pair (workload)",
        "mig (workload)",
        "mps (workload)",
    ]


def attributed(frame: pd.DataFrame) -> pd.DataFrame:
    """The study with the energy columns of radt.analysis.attribution on some rows.

    ``alone``: host 0.18 J and GPU+host 0.58 J per example, its power integral 10 %
    above the counter (flagged); ``pair``: 2 % off (not flagged); the MPS clients
    have estimates of 1.94 J and 2.16 J per example by ``sm_util+equal``; the
    lone run ``alone-0`` is measured at 0.4 J per example.
    """
    frame = frame.copy()
    at = frame.set_index("run_id").index.get_loc
    frame.loc[at("alone"), ["host_energy_per_example_nj", "total_energy_per_example_nj"]] = [
        0.18e9,
        0.58e9,
    ]
    frame.loc[at("alone"), "energy_crosscheck_pct"] = 10.0
    frame.loc[at("pair"), "energy_crosscheck_pct"] = -2.0
    frame.loc[at("alone-0"), ["time_per_example_ns", "energy_per_example_nj"]] = [2e6, 4e8]
    frame["energy_est_method"] = frame["energy_est_method"].astype(object)
    for run, nj in (("mps-0", 1.94e9), ("mps-1", 2.16e9)):
        frame.loc[at(run), ["time_per_example_ns", "energy_per_example_nj_est"]] = [3e6, nj]
        frame.loc[at(run), "energy_est_method"] = "sm_util+equal"
    return frame


def test_workload_hover_shows_host_energy_and_flags_a_crosscheck_over_5_percent():
    fig = efficiency_figure(attributed(study()))
    hover = {
        name: extra
        for t in fig.data
        for name, extra in zip(t.text, t.customdata[:, 3], strict=True)
    }
    assert "host (CPU+DRAM, whole machine): 180mJ per example, GPU+host 580mJ" in hover["alone"]
    assert "energy cross-check: the integral of power is +10.0 % off the counter" in hover["alone"]
    assert hover["pair"] == ""  # 2 % off: within the limit, no host energy recorded
    assert hover["mig"] == hover["mps"] == ""
    assert "%{customdata[3]}" in fig.data[0].hovertemplate
    json.loads(pio.to_json(fig))


def test_client_energy_draws_estimates_hollow_labelled_est_and_apart_from_measurements():
    fig = client_energy_figure(attributed(study()))
    traces = {t.name: t for t in fig.data}
    assert set(traces) == {"none · default cap", "mps · default cap · est."}
    measured, estimated = traces["none · default cap"], traces["mps · default cap · est."]
    assert list(measured.text) == ["alone-A"] and not measured.marker.symbol.endswith("-open")
    assert list(measured.y) == pytest.approx([0.4])
    assert list(estimated.text) == ["mps-A", "mps-B"]
    assert list(estimated.y) == pytest.approx([1.94, 2.16])  # joules per example
    assert list(estimated.x) == pytest.approx([3e-3, 3e-3])
    assert estimated.marker.symbol.endswith("-open")
    assert "(est.)" in estimated.hovertemplate and "(est.)" not in measured.hovertemplate
    assert set(estimated.customdata[:, 1]) == {"estimated by sm_util+equal"}
    assert set(measured.customdata[:, 1]) == {"measured"}
    json.loads(pio.to_json(fig))
    assert "cmp-clients" in CHARTS and CHARTS[-1] == "cmp-cpu"


def test_client_energy_without_energy_says_so():
    timed = study().assign(time_per_example_ns=3e6)  # no client has energy or an estimate
    fig = client_energy_figure(timed)
    assert not fig.data and "No GPU energy" in annotations(fig)
    no_examples = study().assign(time_per_example_ns=math.nan)
    assert "No run reports examples" in annotations(client_energy_figure(no_examples))


def test_grid_shows_host_energy_estimates_and_flags_the_crosscheck():
    rows = {r["run_id"]: r for r in grid_rows(attributed(study()))}
    json.dumps(list(rows.values()), allow_nan=False)
    assert rows["alone"]["host_energy_per_example_nj"] == pytest.approx(0.18e9)
    assert rows["mps-0"]["energy_est_method"] == "sm_util+equal"
    assert rows["mps-0"]["energy_per_example_nj"] is None  # never the measured column
    columns = {c["field"]: c for c in GRID_COLUMNS}
    for field in (
        "energy_crosscheck_pct",
        "host_energy_j",
        "host_energy_per_example_nj",
        "total_energy_per_example_nj",
        "energy_j_est",
        "energy_per_example_nj_est",
        "energy_est_method",
        "idle_energy_j",
    ):
        assert field in columns
    assert columns["energy_j_est"]["headerName"].startswith("est.")
    assert columns["energy_per_example_nj_est"]["headerName"].startswith("est.")
    (condition,) = CROSSCHECK_STYLE["styleConditions"]
    assert "Math.abs(params.data.energy_crosscheck_pct) > 5" in condition["condition"]
    assert columns["energy_crosscheck_pct"]["cellStyle"] is CROSSCHECK_STYLE


# --------------------------------------------------------------------------- runs grid


def test_grid_rows_are_json_safe_and_show_the_hierarchy():
    frame = study()
    rows = grid_rows(frame)
    json.dumps(rows, allow_nan=False)
    first, second = rows[0], rows[1]
    assert (first["name"], first["kind"]) == ("alone", "workload")
    assert (second["name"], second["kind"]) == ("↳ alone-A", "client")
    assert first["energy_j"] is None and first["start"] == "2026-01-01 00:00:00"
    fields = {c["field"] for c in GRID_COLUMNS}
    assert fields - {"name", "kind"} <= set(COLUMNS)
    for wanted in ("status", "collocation", "mig_profile", "mps_thread_pct", "power_limit_w"):
        assert wanted in fields


def _find(component, component_id: str):
    """The component with ``component_id`` in a Dash layout tree."""
    if getattr(component, "id", None) == component_id:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str):
            found = _find(child, component_id)
            if found is not None:
                return found
    return None


def test_grid_shows_the_whole_job_its_params_and_why_a_figure_is_missing():
    from radt.frontend.pages.runs import FULL_TEXT, MISSING_TIP, SPREAD_STYLE, layout

    columns = {c["field"]: c for c in GRID_COLUMNS}
    # `examples/train.py --ep…`: the job and its params are as wide as their text
    assert {"job", "params"} <= set(FULL_TEXT) and "params" in columns
    assert columns["job"]["tooltipField"] == "job" and columns["job"]["minWidth"] >= 320
    grid = _find(layout(), "runs-grid")
    assert grid.dashGridOptions["autoSizeStrategy"] == {
        "type": "fitCellContents",
        "colIds": ["job", "params"],
    }
    rows = {r["run_id"]: r for r in grid_rows(study().assign(params="epochs=3 lr=0.01"))}
    assert rows["pair-0"]["params"] == "epochs=3 lr=0.01"
    # a blank figure says why on hover (its row's window_note)
    for field in ("energy_per_example_nj", "examples_per_s", "power_mean_w", "slowdown"):
        assert "params.data.window_note" in columns[field]["tooltipValueGetter"]["function"]
    assert columns["examples_per_s"]["tooltipValueGetter"] is MISSING_TIP
    # the baseline spread: its own column, and the slowdown orange over 10 %
    assert columns["slowdown"]["cellStyle"] is SPREAD_STYLE
    assert columns["baseline_cv_pct"]["cellStyle"] is SPREAD_STYLE
    (condition,) = SPREAD_STYLE["styleConditions"]
    assert "params.data.baseline_cv_pct > 10" in condition["condition"]
    assert "repeats spread" in columns["slowdown"]["tooltipValueGetter"]["function"]


def test_the_key_list_shows_many_keys_at_a_time():
    from radt.frontend.pages.timeseries import layout

    keys = _find(layout(), "ts-keys")
    assert keys.maxHeight >= 480  # Dash's 200 px showed 3 of 42 keys under its search box


# --------------------------------------------------------------------------- widths


def test_a_long_empty_state_note_is_wrapped_to_fit_a_half_width_card():
    from radt.frontend.charts import NO_ENERGY
    from radt.frontend.style import WRAP_CHARS, empty_figure

    text = empty_figure(NO_ENERGY).layout.annotations[0].text
    lines = text.split("<br>")
    assert len(lines) == 3 and all(len(line) <= WRAP_CHARS for line in lines)
    assert " ".join(lines) == NO_ENERGY.replace("<br>", " ")  # no word lost
    assert wrap("short<br>lines") == "short<br>lines"  # its own breaks kept where they fit
    # tags take no room: 5 visible characters
    assert wrap("<i>abcde</i> fgh", width=9) == "<i>abcde</i> fgh"
    assert wrap("<i>abcde</i> fghij", width=9) == "<i>abcde</i><br>fghij"


def test_the_frontiers_empty_state_names_each_need_that_is_missing():
    from radt.frontend.frontier import FRONTIER_NEEDS, frontier_figure, no_frontier_note

    from radt.analysis.frontier import frontier_table

    def note(frame):
        text = frontier_figure(frontier_table(frame), summary=frame).layout.annotations[0].text
        return text.replace("<br>", " ")

    finished = study().assign(status="FINISHED", examples=1000.0, energy_j=50.0)
    cpu_only = finished.assign(energy_j=math.nan, energy_per_example_nj=math.nan)
    assert len(frontier_table(finished))  # a frontier with both
    text = note(cpu_only)  # examples counted, no energy
    assert "no GPU listener" in text and "counted examples" not in text
    uncounted = finished.assign(examples=math.nan, examples_total=math.nan)
    uncounted = uncounted.assign(time_per_example_ns=math.nan, energy_per_example_nj=math.nan)
    text = note(uncounted)  # energy, no examples
    assert "No run counted examples" in text and "GPU listener" not in text
    neither = cpu_only.assign(examples=math.nan, examples_total=math.nan)
    text = note(neither.assign(time_per_example_ns=math.nan))
    assert "counted examples" in text and "no GPU listener" in text
    assert set(FRONTIER_NEEDS) == {"examples", "energy"}
    assert "No finished workload" in no_frontier_note(None)  # nothing to tell them apart by


def test_padded_ranges_leave_room_for_a_points_label():
    from radt.frontend.charts import padded_range
    from radt.frontend.labels import label_positions

    assert padded_range([2.0]) == pytest.approx([1.7, 2.3])  # one point: of itself
    assert padded_range([1.0, 3.0], above=0.5) == pytest.approx([0.7, 4.0])
    assert padded_range([0.1, 10.0]) == pytest.approx([0.0, 11.485])  # not below 0
    # a point in the top right corner: its label goes where the plot has room for it
    (position,) = label_positions([10.0], [10.0], ["a-long-label"], (10.0, 10.0))
    assert position in ("bottom left", "middle left")


def test_runs_grid_puts_the_headline_figures_first_and_hides_blank_columns():
    from radt.frontend.pages.runs import FRONT, grid_columns

    order = [c["field"] for c in GRID_COLUMNS]
    assert order[: 1 + len(FRONT)] == ["name", *FRONT]
    assert order.index("slowdown") < order.index("collocation") < order.index("job")
    rows = grid_rows(study(energy=False).assign(mig_profile=None, mps_thread_pct=math.nan))
    hidden = {c["field"] for c in grid_columns(rows) if c.get("hide")}
    assert {"mig_profile", "mps_thread_pct", "slurm_job_id"} <= hidden
    assert not {"energy_per_example_nj", "slowdown", "collocation", "kind"} & hidden
    assert "power_limit_w" not in hidden  # the study's MIG pair ran at 250 W
    rows = grid_rows(study(energy=False).assign(power_limit_w=None))
    assert "power_limit_w" in {c["field"] for c in grid_columns(rows) if c.get("hide")}


def test_label_places_are_those_of_their_definition_on_crowded_charts():
    """The placement, computed over all boxes at once, gives the place the docstring's rule
    gives when each overlap is summed one by one."""
    import random

    from radt.frontend.labels import (
        LABEL_POSITIONS,
        MARKER_PX,
        PLOT_PX,
        label_box,
        label_positions,
    )

    def overlap(a, b):
        return max(min(a[2], b[2]) - max(a[0], b[0]), 0.0) * max(
            min(a[3], b[3]) - max(a[1], b[1]), 0.0
        )

    def by_definition(x, y, texts, span):
        scale = (PLOT_PX[0] / span[0], PLOT_PX[1] / span[1])
        points = [(px * scale[0], py * scale[1]) for px, py in zip(x, y, strict=True)]
        markers = [
            (px - MARKER_PX, py - MARKER_PX, px + MARKER_PX, py + MARKER_PX) for px, py in points
        ]
        placed, chosen = [], {}
        for i in sorted(range(len(points)), key=lambda k: (-points[k][1], points[k][0])):
            best = None
            for position in LABEL_POSITIONS:
                box = label_box(*points[i], texts[i], position)
                clash = sum(overlap(box, other) for other in placed)
                clash += sum(overlap(box, m) for j, m in enumerate(markers) if j != i)
                clash += overlap(box, box) - overlap(box, (0.0, 0.0, *PLOT_PX))
                if best is None or clash < best[0]:
                    best = (clash, position, box)
                if clash == 0:
                    break
            chosen[i] = best[1]
            placed.append(best[2])
        return [chosen[i] for i in range(len(points))]

    rng = random.Random(7)
    for n in (1, 2, 5, 30, 120):
        x = [rng.uniform(0.0, 4.0) for _ in range(n)]
        y = [rng.choice([1.0, 1.5, 2.0, rng.uniform(1.0, 3.0)]) for _ in range(n)]
        texts = [f"job-{rng.randrange(100)}" * rng.randint(1, 2) for _ in range(n)]
        assert label_positions(x, y, texts, (4.0, 3.0)) == by_definition(x, y, texts, (4.0, 3.0))
    assert label_positions([], [], [], (1.0, 1.0)) == []
