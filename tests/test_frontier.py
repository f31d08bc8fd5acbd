"""The time–energy frontier: exact Pareto sets and energy bloat of synthetic summaries.

The summaries are built by hand (the columns :func:`radt.summary` returns), so every expected
figure below is computed from the numbers in this file.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from radt.analysis.frontier import COLUMNS, frontier_table

NAN = math.nan


def row(
    run_id,
    job,
    configuration,
    power,
    t,
    e,
    *,
    level="provider",
    status="FINISHED",
    basis="examples",
    t_norm=NAN,
    e_norm=NAN,
):
    return {
        "level": level,
        "run_id": run_id,
        "status": status,
        "job": job,
        "configuration": configuration,
        "power_limit_w": power,
        "basis": basis,
        "time_per_example_ns": t,
        "energy_per_example_nj": e,
        "time_per_example_norm": t_norm,
        "energy_per_example_norm": e_norm,
        "examples_per_s": 1e9 / t if t == t else NAN,
    }


# Job A's points (t ns, e nJ per example), as in the test's docstring:
# P1 none/default (100, 50) = mean of two repeats (90, 48) and (110, 52)
# P2 naive x2/default (80, 60), P3 mps x2/default (70, 65), P4 4g+3g/default (75, 55)
# P5 none/150 (130, 40), P6 4g+3g/150 (90, 45), P7 naive x2/150 (95, 70)
ROWS = [
    row("a1", "A", "none", None, 90, 48, level="run", t_norm=0.9, e_norm=0.96),
    row("a2", "A", "none", None, 110, 52, level="run", t_norm=1.1, e_norm=1.04),
    row("a3", "A", "naive x2", None, 80, 60),
    {**row("a3c", "A", "naive x2", None, 160, NAN, level="client")},  # clients are not points
    row("a4", "A", "mps x2", None, 70, 65),
    row("a5", "A", "4g.40gb+3g.40gb", None, 75, 55),
    row("a6", "A", "none", "150", 130, 40, level="run"),
    row("a7", "A", "4g.40gb+3g.40gb", "150", 90, 45),
    row("a8", "A", "naive x2", "150", 95, 70),
    row("a9", "A", "mps x2", "150", 10, 10, status="KILLED"),  # would dominate: not finished
    row("a10", "A", "none", None, 500, 500, basis="duration"),  # another basis: its own group
    row("b1", "B", "none", None, 200, NAN, level="run"),  # no energy: listed, not on or off
    row("b2", "B", "naive x2", None, 150, 120),
]


def table(rows=ROWS, by="job") -> pd.DataFrame:
    return frontier_table(pd.DataFrame(rows), by=by)


def point(result, job, configuration, power="default", basis="examples"):
    found = result[
        (result["job"] == job)
        & (result["configuration"] == configuration)
        & (result["power_limit_w"] == power)
        & (result["basis"] == basis)
    ]
    assert len(found) == 1, found
    return found.iloc[0]


def test_pareto_set_is_exactly_the_undominated_points():
    result = table()
    assert list(result.columns) == list(COLUMNS)
    a = result[(result["job"] == "A") & (result["basis"] == "examples")]
    on = {(p.configuration, p.power_limit_w) for p in a.itertuples() if p.on_frontier}
    assert on == {
        ("mps x2", "default"),
        ("4g.40gb+3g.40gb", "default"),
        ("4g.40gb+3g.40gb", "150"),
        ("none", "150"),
    }
    assert len(a) == 7  # the KILLED workload is no point
    assert list(a["time_per_example_ns"]) == [70, 75, 80, 90, 95, 100, 130]  # sorted by time


def test_repeats_are_averaged_into_one_point():
    p1 = point(table(), "A", "none")
    assert (p1["count"], p1["time_per_example_ns"], p1["energy_per_example_nj"]) == (2, 100, 50)
    assert p1["time_per_example_norm"] == pytest.approx(1.0)
    assert p1["energy_per_example_norm"] == pytest.approx(1.0)
    assert p1["time_per_example_ns_std"] == pytest.approx(math.sqrt(200))
    assert sorted(p1["run_ids"].split()) == ["a1", "a2"]


def test_energy_bloat_against_the_cheapest_frontier_point_at_least_as_fast():
    result = table()
    assert point(result, "A", "none")["energy_bloat_pct"] == pytest.approx(100 * (50 / 45 - 1))
    assert point(result, "A", "naive x2")["energy_bloat_pct"] == pytest.approx(100 * (60 / 55 - 1))
    assert point(result, "A", "naive x2", "150")["energy_bloat_pct"] == pytest.approx(
        100 * (70 / 45 - 1)
    )
    for configuration, power in (("mps x2", "default"), ("none", "150")):
        assert point(result, "A", configuration, power)["energy_bloat_pct"] == 0


def test_energy_and_time_optimal_points():
    result = table()
    a = result[(result["job"] == "A") & (result["basis"] == "examples")]
    assert [(p.configuration, p.power_limit_w) for p in a.itertuples() if p.energy_optimal] == [
        ("none", "150")
    ]
    assert [(p.configuration, p.power_limit_w) for p in a.itertuples() if p.time_optimal] == [
        ("mps x2", "default")
    ]


def test_missing_figures_are_listed_with_their_reason_and_bases_never_mix():
    result = table()
    b1 = point(result, "B", "none")
    assert b1["on_frontier"] is None and math.isnan(b1["energy_bloat_pct"])
    assert "no energy per example" in b1["frontier_note"]
    b2 = point(result, "B", "naive x2")
    assert b2["on_frontier"] is True and b2["energy_optimal"] and b2["time_optimal"]
    duration = point(result, "A", "none", basis="duration")
    assert duration["on_frontier"] is True  # alone on its basis, not beaten by the others


def test_one_frontier_over_every_job_when_by_is_none():
    result = table(by=None)
    examples = result[result["basis"] == "examples"]
    on = {(p.job, p.configuration, p.power_limit_w) for p in examples.itertuples() if p.on_frontier}
    assert on == {
        ("A", "mps x2", "default"),
        ("A", "4g.40gb+3g.40gb", "default"),
        ("A", "4g.40gb+3g.40gb", "150"),
        ("A", "none", "150"),
    }
    assert point(result, "B", "naive x2")["on_frontier"] is False


def test_ties_are_both_on_the_frontier_and_empty_frames_give_empty_tables():
    rows = [row("x", "J", "naive x2", None, 50, 50), row("y", "J", "mps x2", None, 50, 50)]
    result = table(rows)
    assert list(result["on_frontier"]) == [True, True]
    assert list(result["energy_bloat_pct"]) == [0, 0]
    assert table([]).empty and list(table([]).columns) == list(COLUMNS)


def test_frontier_figure_draws_the_line_fades_dominated_points_and_labels_the_optima():
    from radt.frontend.frontier import frontier_figure

    result = table([r for r in ROWS if r["job"] == "A"])
    figure = frontier_figure(result)
    (line,) = [t for t in figure.data if t.mode == "lines"]
    assert list(line.x) == pytest.approx([70e-9, 75e-9, 90e-9, 130e-9])  # the Pareto points
    faded = [t for t in figure.data if t.mode == "markers" and t.opacity == 0.3]
    assert sum(len(t.x) for t in faded) == 3  # P1, P2, P7 (not the duration-basis point)
    labels = sorted(a.text for a in figure.layout.annotations)
    assert labels == ["energy-optimal: none · 150 W", "time-optimal: mps x2 · default cap"]
    normalised = frontier_figure(result, normalised=True)
    assert [len(t.x) for t in normalised.data if t.mode == "markers"] == [1]  # only P1 has norms
    empty = frontier_figure(result.iloc[0:0])
    assert "No finished workload" in empty.layout.annotations[0].text


# --------------------------------------------------------------------------- end to end

STUDY = """\
name: frontier-demo
experiment: frontier
file: job.py
listeners: nvml+top
collocation: [none, naive x2]
repeats: 2
"""
JOB = """\
import time

import radt

start = time.time()
next_epoch, epoch = start + 1.0, 0
while time.time() < start + 3.5:
    sum(i * i for i in range(3000))
    radt.log_examples(8)
    if time.time() >= next_epoch:
        radt.log_epoch(epoch)
        epoch, next_epoch = epoch + 1, next_epoch + 1.0
"""


@pytest.mark.browser
def test_a_study_gives_its_frontier_in_export_and_on_the_compare_page(tmp_path, template_db):
    """A CPU study with GPU energy from the fake pynvml: radt.frontier, `radt export --frontier`
    and the Compare page's frontier chart all show the same points."""
    import os
    import sys

    from conftest import FAKES, new_workspace, wait_for

    from radt.analysis.frontier import frontier

    ws = new_workspace(tmp_path, template_db)
    ws.script("job.py", JOB)
    (ws.root / "study.yaml").write_text(STUDY)
    ws.env["PYTHONPATH"] = os.pathsep.join([str(FAKES / "pynvml"), ws.env["PYTHONPATH"]])
    done = ws.run(["study.yaml", "--interval", "0.1"], timeout=600)
    assert done.returncode == 0, done.stderr
    result = frontier("frontier", tracking_uri=ws.uri)
    assert sorted(result["configuration"]) == ["naive x2", "none"]
    assert list(result["count"]) == [2, 2] and set(result["power_limit_w"]) == {"default"}
    assert result["time_per_example_ns"].notna().all()
    assert result["energy_per_example_nj"].notna().all()
    assert result["on_frontier"].any() and result["energy_optimal"].sum() == 1
    assert (result["energy_bloat_pct"] >= 0).all()
    study_runs = [r.info.run_id for r in ws.runs("frontier") if "radt.study_file" in r.data.tags]
    assert not set(study_runs) & {i for ids in result["run_ids"] for i in ids.split()}
    exported = ws.run(["export", "-e", "frontier", "--frontier", "-o", "frontier.csv"])
    assert exported.returncode == 0, exported.stderr
    assert "wrote 2 frontier points" in exported.stderr
    table = pd.read_csv(ws.root / "frontier.csv")
    assert list(table.columns) == list(COLUMNS)
    assert list(table["on_frontier"]) == list(result["on_frontier"])

    chromium = pytest.importorskip("chromium")
    if not chromium.CHROMIUM.exists():
        pytest.skip(f"{chromium.CHROMIUM} is missing: {chromium.INSTALL}")
    playwright = pytest.importorskip("playwright.sync_api")
    from servers import HttpServer, free_port

    port = free_port()
    server = HttpServer(
        [sys.executable, "-m", "radt", "ui", "--port", str(port)],
        folder=ws.root,
        log_path=ws.root / "ui.log",
        port=port,
        env=ws.env,
    )
    with server, playwright.sync_playwright() as play:
        browser = chromium.launch(play)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(f"{server.url}/compare")
            page.wait_for_selector("#cmp-frontier .js-plotly-plot .main-svg")

            def names():
                return page.evaluate(
                    "(() => { const gd = document.querySelector('#cmp-frontier .js-plotly-plot');"
                    " return gd && gd.data ? gd.data.map(t => t.name) : []; })()"
                )

            traces = wait_for(lambda: names() if "frontier" in names() else None, timeout=60)
            assert any(name.startswith(("none", "naive")) for name in traces)
            labels = page.evaluate(
                "(() => document.querySelector('#cmp-frontier .js-plotly-plot')"
                ".layout.annotations.map(a => a.text))()"
            )
            assert any(text.startswith("energy-optimal: ") for text in labels)
            page.click("text=over the whole GPU at full power")
            wait_for(lambda: "normalised" in page.inner_text("#cmp-frontier"), timeout=60)
        finally:
            browser.close()


def test_a_job_without_gpu_energy_takes_the_hosts_and_says_so():
    # Job C ran on a machine without a GPU; rapl gave host energy per example (nJ):
    # none (100 ns, 30 nJ), naive x2 (60 ns, 40 nJ), mps x2 (90 ns, 45 nJ: dominated by
    # naive x2, bloat 100 × (45 / 40 − 1) = 12.5 %). Job A keeps its GPU energy.
    host_rows = [
        {**row("c1", "C", "none", None, 100, NAN, level="run"), "host_energy_per_example_nj": 30},
        {**row("c2", "C", "naive x2", None, 60, NAN), "host_energy_per_example_nj": 40},
        {**row("c3", "C", "mps x2", None, 90, NAN), "host_energy_per_example_nj": 45},
        {**row("a3", "A", "naive x2", None, 80, 60), "host_energy_per_example_nj": 1000},
    ]
    result = table(host_rows)
    c = result[result["job"] == "C"].set_index("configuration")
    assert set(c["energy_source"]) == {"host"}
    assert c.loc["none", "energy_per_example_nj"] == 30
    assert [bool(c.loc[k, "on_frontier"]) for k in ("none", "naive x2", "mps x2")] == [
        True,
        True,
        False,
    ]
    assert c.loc["mps x2", "energy_bloat_pct"] == pytest.approx(12.5)
    assert c.loc["none", "energy_optimal"] and c.loc["naive x2", "time_optimal"]
    assert math.isnan(c.loc["none", "energy_per_example_norm"])
    a = point(result, "A", "naive x2")
    assert a["energy_source"] == "gpu" and a["energy_per_example_nj"] == 60


# Job C across the clock dial (t ns, e nJ per example), power limit × locked SM clock:
# Q1 none/default/default (100, 50), Q2 none/default/1410 MHz (120, 40),
# Q3 none/default/1200 MHz (140, 42), Q4 none/150 W/1410 MHz (130, 38).
# Q3 is beaten by Q2 (faster and cheaper); Q1, Q2, Q4 are on the frontier.
CLOCK_ROWS = [
    {**row("c1", "C", "none", None, 100, 50, level="run"), "gpu_clock_mhz": None},
    {**row("c2", "C", "none", None, 120, 40, level="run"), "gpu_clock_mhz": "1410"},
    {**row("c3", "C", "none", None, 140, 42, level="run"), "gpu_clock_mhz": "1200"},
    {**row("c4", "C", "none", "150", 130, 38, level="run"), "gpu_clock_mhz": "1410"},
]


def test_a_locked_clock_is_a_point_of_its_own():
    result = table(CLOCK_ROWS)
    points = {(p.power_limit_w, p.gpu_clock_mhz): p for p in result.itertuples() if p.job == "C"}
    assert list(points) == [  # sorted by time
        ("default", "default"),
        ("default", "1410"),
        ("150", "1410"),
        ("default", "1200"),
    ]
    assert {k: p.count for k, p in points.items()} == dict.fromkeys(points, 1)  # never merged
    assert {k for k, p in points.items() if p.on_frontier} == {
        ("default", "default"),
        ("default", "1410"),
        ("150", "1410"),
    }
    # Q3 (140, 42): the cheapest frontier point at least as fast is Q4 (130, 38)
    assert points[("default", "1200")].energy_bloat_pct == pytest.approx(100 * (42 / 38 - 1))
    assert [k for k, p in points.items() if p.energy_optimal] == [("150", "1410")]
    assert [k for k, p in points.items() if p.time_optimal] == [("default", "default")]


def test_a_frame_without_the_clock_column_is_at_the_default_clock():
    result = table([row("d1", "D", "none", None, 100, 50, level="run")])
    assert list(result["gpu_clock_mhz"]) == ["default"]


def test_baseline_is_at_the_same_clock_else_the_default():
    from types import SimpleNamespace

    from radt.analysis.baselines import choose_baseline

    def none_run(run_id, power=None, clock=None):
        return SimpleNamespace(
            run_id=run_id,
            experiment_id="1",
            job="C",
            basis="examples",
            power=power,
            clock=clock,
            manual=False,
        )

    runs = [none_run("c1"), none_run("c2", clock="1410"), none_run("c4", "150", "1410")]
    chosen = {
        setting: [c.run_id for c in choose_baseline(runs, "1", "C", "examples", *setting)[0]]
        for setting in [(None, None), (None, "1410"), ("150", "1410"), (None, "1200")]
    }
    assert chosen == {
        (None, None): ["c1"],  # not averaged with the run at 1410 MHz
        (None, "1410"): ["c2"],
        ("150", "1410"): ["c4"],
        (None, "1200"): ["c1"],  # no none run at 1200 MHz: the default's
    }
    _, why = choose_baseline(runs[1:], "1", "C", "examples", None, "1200")
    assert why == (
        "no baseline: no FINISHED none run of this job on basis examples at 1200 MHz or the "
        "default power limit and clock"
    )


def test_compare_page_frontier_names_the_clock_of_each_point():
    from radt.frontend.charts import config_label, setting_label
    from radt.frontend.frontier import frontier_figure

    figure = frontier_figure(table(CLOCK_ROWS))
    markers = [t.name for t in figure.data if t.mode == "markers"]
    assert markers == [
        "none · default cap",
        "none · default cap · 1410 MHz",
        "none · 150 W · 1410 MHz",
        "none · default cap · 1200 MHz (dominated)",
    ]
    notes = {a.text for a in figure.layout.annotations if "optimal" in a.text}
    assert notes == {
        "energy-optimal: none · 150 W · 1410 MHz",
        "time-optimal: none · default cap",
    }
    assert setting_label("250", "1410") == "250 W · 1410 MHz"
    assert setting_label(None, "default") == setting_label(None, None) == "default cap"
    clocked = pd.Series({"collocation": "naive", "power_limit_w": None, "gpu_clock_mhz": "1200"})
    assert config_label(clocked) == "naive · default cap · 1200 MHz"
