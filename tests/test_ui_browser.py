"""The web UI end to end: real radT runs in a real SQLite store, ``radt ui`` in a real process,
driven by Debian's headless Chromium through Playwright.

Screenshots of each page go to ``$RADT_UI_SCREENSHOTS`` (default: the module's
temporary folder, named in the test output). Without /usr/bin/chromium the tests
are skipped, except under CI (``CI`` set), where they must run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from chromium import CHROMIUM, INSTALL, launch
from conftest import Workspace, new_workspace, wait_for
from radt.frontend.labels import PLOT_PX
from servers import HttpServer, answers, free_port

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip(
        f"{CHROMIUM} is missing: {INSTALL} to run the browser tests; CI installs it and "
        "always runs them",
        allow_module_level=True,
    )
if not os.environ.get("CI"):
    pytest.importorskip("playwright", reason="pip install playwright (the test extra)")
from playwright.sync_api import Page, sync_playwright  # noqa: E402

JOB = """\
import time

import mlflow

n, end = 0, time.time() + 2.0
while time.time() < end:
    sum(i * i for i in range(20000))
    n += 16
mlflow.log_metric("examples", n)
"""
PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
ui-study, alone, , , 0, none, job.py, top+iostat,
ui-study, pair, , , 0, naive, job.py, top+iostat,
ui-study, pair, , , 0, naive, job.py, top+iostat,
"""
pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(600),  # the first test also waits for the study's radT runs
]
TIMEOUT_MS = 60_000


@dataclass
class Study:
    """The store filled by ``radt plan.csv`` and the ids of its runs by name."""

    ws: Workspace
    runs: dict[str, str]


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("RADT_UI_SCREENSHOTS") or tmp_path_factory.mktemp("screens"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots in {folder}")
    return folder


@pytest.fixture(scope="module")
def study(tmp_path_factory, template_db) -> Study:
    """Two workloads (alone; a naive pair) of a tiny CPU job, and an empty experiment."""
    ws = new_workspace(tmp_path_factory.mktemp("ui"), template_db, plugins=False)
    root = ws.root
    ws.script("job.py", JOB)
    (root / "plan.csv").write_text(PLAN)
    done = ws.run(["--interval", "0.2", "plan.csv"], timeout=300)
    assert done.returncode == 0, done.stderr
    ws.client().create_experiment("empty-study", str(root / "mlruns" / "empty"))
    runs = {r.info.run_name: r.info.run_id for r in ws.runs("ui-study")}
    assert sorted(runs) == ["alone", "alone-A", "pair", "pair-A", "pair-B"], runs
    return Study(ws, runs)


@contextlib.contextmanager
def serve(ws: Workspace, *args: str) -> Iterator[str]:
    """``radt ui`` on a free loopback port in its own process; yields its URL, always stops it."""
    port = free_port()
    server = HttpServer(
        [sys.executable, "-m", "radt", "ui", "--port", str(port), *args],
        folder=ws.root,
        log_path=ws.root / f"ui-{port}.log",
        port=port,
        env=ws.env,
    )
    with server:
        url = f"{server.url}/"
        assert url in server.log_tail(), server.log_tail()  # it says where it serves
        yield url


@pytest.fixture(scope="module")
def ui(study) -> Iterator[str]:
    with serve(study.ws) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, tmp_path) -> Iterator[Page]:
    """A fresh tab (own session storage) that fails the test on any console error."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True)
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    yield tab
    context.close()
    assert not errors, f"console errors: {errors}"


# --------------------------------------------------------------------------- helpers


def column(page: Page, col: str, container: str = "center") -> list[str]:
    """The cells of column ``col`` top to bottom (rows ordered by their ``row-index``)."""
    cells = page.locator(f".ag-{container}-cols-container .ag-row").evaluate_all(
        "(rows, col) => rows.map(r => [+r.getAttribute('row-index'),"
        " (r.querySelector(`[col-id='${col}']`) || {}).innerText])",
        col,
    )
    return [text for _, text in sorted(cells)]


def grid_rows(page: Page) -> list[str]:
    """The run names in the grid, top to bottom."""
    page.wait_for_selector(".ag-pinned-left-cols-container .ag-row")
    return [text.strip("↳ ").strip() for text in column(page, "name", "pinned-left")]


def tick(page: Page, *names: str) -> None:
    """Tick the checkboxes of the runs named ``names`` and wait for the selection bar."""
    for name in names:
        cell = page.locator("[col-id='name']").filter(
            has_text=re.compile(rf"^(↳ )?{re.escape(name)}$")
        )
        row = page.locator(".ag-pinned-left-cols-container .ag-row").filter(has=cell)
        row.locator("input[type=checkbox]").check()
    wait_text(page, "#selection-text", f"{len(names)} selected")


def pick(page: Page, dropdown: str, option: str) -> None:
    """Choose ``option`` in the Dash dropdown ``dropdown`` (typing it into its search box)."""
    page.click(f"#{dropdown}")
    search = page.locator(".dash-dropdown-content .dash-dropdown-search")
    if search.count():
        search.fill(option)
    page.locator(".dash-dropdown-content .dash-dropdown-option", has_text=option).first.click()
    page.keyboard.press("Escape")


def figure(page: Page, graph: str, what: str):
    """Evaluate ``what`` on the plotly graph div of ``#graph`` (as ``gd``)."""
    script = f"document.querySelector('#{graph} .js-plotly-plot')"
    return page.evaluate(f"(() => {{ const gd = {script}; return gd ? {what} : null; }})()")


def annotations(page: Page, graph: str) -> list[str]:
    """The texts drawn on the chart ``#graph`` (subplot titles, notes)."""
    return page.locator(f"#{graph} .annotation-text").evaluate_all(
        "els => els.map(e => e.textContent)"
    )


def trace_names(page: Page, graph: str = "ts-graph") -> list[str]:
    """The names of the traces of chart ``#graph`` ([] while it is not drawn yet)."""
    return figure(page, graph, "(gd.data || []).map(t => t.name)") or []


def boxes(page: Page, selector: str) -> list[list[float]]:
    """The boxes ``[left, top, right, bottom]`` of the elements ``selector`` as drawn."""
    return page.locator(selector).evaluate_all(
        "els => els.map(e => { const r = e.getBoundingClientRect();"
        " return [r.left, r.top, r.right, r.bottom]; })"
    )


def window_labels(page: Page) -> list[list[float]]:
    """The boxes of the time series' window labels (``pair-A: window (examples)``)."""
    return page.locator("#ts-graph .annotation-text").evaluate_all(
        "els => els.filter(e => e.textContent.includes(': window (')).map(e => {"
        " const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"
    )


def overlapping(these: list[list[float]], those: list[list[float]]) -> list:
    """The pairs of distinct boxes, one of each list, that share area."""
    return [
        (a, b)
        for a in these
        for b in those
        if a is not b and min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])
    ]


def wait_text(page: Page, selector: str, text: str, present: bool = True) -> None:
    """Wait until the element ``selector`` exists and its text holds ``text`` (or not)."""
    page.wait_for_selector(selector)
    script = "([s, t, p]) => (document.querySelector(s).innerText.includes(t)) === p"
    page.wait_for_function(script, arg=[selector, text, present])


def open_runs(page: Page, url: str, experiment: str = "ui-study") -> None:
    """The Runs page showing ``experiment`` (the UI opens the one with the newest run)."""
    page.goto(url)
    page.wait_for_selector("#exp-picker .dash-dropdown-value-item")
    if page.inner_text("#exp-picker").strip() != experiment:
        pick(page, "exp-picker", experiment)
    wait_text(page, "#runs-note", f"{experiment}: ")


# --------------------------------------------------------------------------- tests


def test_runs_page_lists_workloads_and_runs_with_their_collocation(page, ui, study, shots):
    open_runs(page, ui)
    assert grid_rows(page) == ["alone", "alone-A", "pair", "pair-A", "pair-B"]
    center = page.locator(".ag-center-cols-container").inner_text()
    assert "naive" in center and "none" in center and "FINISHED" in center
    assert "workload" in center and "client" in center
    note = page.inner_text("#runs-note")
    assert "2 workloads" in note
    header = page.inner_text(".radt-header")
    assert "mlflow.db" in header
    page.screenshot(path=str(shots / "runs.png"), full_page=True)


def test_grid_sorts_and_filters(page, ui):
    open_runs(page, ui)
    page.fill("#runs-filter", "pair-")
    wait_for(lambda: grid_rows(page) == ["pair-A", "pair-B"], timeout=20)
    page.fill("#runs-filter", "")
    wait_for(lambda: len(grid_rows(page)) == 5, timeout=20)
    header = "[role=columnheader][col-id='duration_s']"
    # past the whole job and its params: the grid draws only the columns in view
    page.evaluate("dash_ag_grid.getApi('runs-grid').ensureColumnVisible('duration_s', 'start')")
    page.click(f"{header} .ag-header-cell-label")
    page.wait_for_selector(f"{header}[aria-sort='ascending']")
    durations = [float(text) for text in column(page, "duration_s")]
    assert durations == sorted(durations) and len(durations) == 5


def test_selected_runs_overlay_their_series_with_their_workloads(page, ui, study, shots):
    open_runs(page, ui)
    tick(page, "alone-A", "pair-A")
    page.click("#nav-time")
    page.wait_for_selector("#ts-graph .scatterlayer .trace")
    wait_for(lambda: "top/proc/cpu_pct" in " ".join(trace_names(page)), timeout=30)
    names = trace_names(page)
    assert "alone-A · top/proc/cpu_pct" in names
    assert "pair-A · top/proc/cpu_pct" in names
    assert "pair-B · top/proc/cpu_pct" not in names
    # each run's window (what its figures are over) is a band in the run's colour
    bands = "(gd.layout.shapes || []).map(s => s.name)"
    wait_for(lambda: len(figure(page, "ts-graph", bands)) == 4, timeout=30)
    shown = figure(page, "ts-graph", bands)
    assert any(name.startswith("alone-A: window (") for name in shown), shown
    assert any(name.startswith("pair (workload): window (") for name in shown), shown
    assert "Shaded: each run's window" in page.inner_text("#ts-info")
    # runs' windows start together (seconds since each run started): each label on its own line
    labels = window_labels(page)
    assert len(labels) == 4 and not overlapping(labels, labels), labels
    # the workloads' device-wide series come with their runs
    pick(page, "ts-keys", "iostat/net/recv_mib_s")
    wait_for(lambda: len(trace_names(page)) == 4, timeout=30)
    names = trace_names(page)
    assert "alone (workload) · iostat/net/recv_mib_s" in names
    assert "pair (workload) · iostat/net/recv_mib_s" in names
    titles = annotations(page, "ts-graph")
    assert "cpu (%)" in titles and "recv (MiB/s)" in titles
    assert "No GPU metrics in these runs" in page.inner_text("#ts-message")
    page.screenshot(path=str(shots / "timeseries.png"), full_page=True)
    # zooming in reloads the visible window only, even when a resize comes with it (a
    # full-page screenshot resizes the window, and plotly then reports {"autosize": true}:
    # Dash sees only the last of two events that come together)
    full = figure(page, "ts-graph", "gd._fullData.map(t => t._length)")
    page.evaluate(
        "(() => { const gd = document.querySelector('#ts-graph .js-plotly-plot');"
        " return Plotly.relayout(gd, {'xaxis.range[0]': 1.0, 'xaxis.range[1]': 2.0})"
        " .then(() => gd.emit('plotly_relayout', {autosize: true})); })()"
    )
    wait_text(page, "#ts-info", "zoomed in")
    zoomed = figure(page, "ts-graph", "gd._fullData.map(t => t._length)")
    assert sum(zoomed) < sum(full)
    assert figure(page, "ts-graph", "gd.layout.xaxis.range") == [1.0, 2.0]
    # a double-click (autorange) goes back to the whole run
    page.evaluate(
        "Plotly.relayout(document.querySelector('#ts-graph .js-plotly-plot'), "
        "{'xaxis.autorange': true})"
    )
    wait_text(page, "#ts-info", "zoomed in", present=False)
    assert figure(page, "ts-graph", "gd._fullData.map(t => t._length)") == full
    # wall time
    page.click("text=wall time (UTC)")
    page.wait_for_selector("#ts-graph text:text-is('time (UTC)')")


def test_a_link_naming_runs_opens_their_time_series(page, ui, study):
    """``radt report --ui`` links: ``/timeseries?runs=ID,ID`` selects those runs."""
    ids = [study.runs["alone-A"], study.runs["pair-B"]]
    page.goto(f"{ui}timeseries?runs={','.join(ids)}")
    page.wait_for_selector("#ts-graph .scatterlayer .trace")
    wait_for(lambda: "top/proc/cpu_pct" in " ".join(trace_names(page)), timeout=30)
    names = trace_names(page)
    assert "alone-A · top/proc/cpu_pct" in names and "pair-B · top/proc/cpu_pct" in names
    assert "pair-A · top/proc/cpu_pct" not in names
    assert page.inner_text("#selection-text").startswith("2 selected: alone-A, pair-B")
    # the Runs page shows the same runs ticked
    page.click("#nav-runs")
    page.wait_for_selector(".ag-center-cols-container .ag-row")
    wait_for(lambda: page.locator(".ag-center-cols-container .ag-row-selected").count() == 2)
    # a run the store does not have: one line
    page.goto(f"{ui}timeseries?runs=0123456789abcdef0123456789abcdef")
    wait_text(page, "#link-banner", "no run with id '0123456789abcdef")


def test_selection_survives_page_changes(page, ui):
    open_runs(page, ui)
    tick(page, "pair-A", "pair-B")
    page.click("#nav-compare")
    page.wait_for_selector("#cmp-slowdown .js-plotly-plot")
    page.click("#nav-runs")
    page.wait_for_selector(".ag-center-cols-container .ag-row")
    wait_for(lambda: page.locator(".ag-center-cols-container .ag-row-selected").count() == 2)
    assert page.inner_text("#selection-text").startswith("2 selected: pair-A, pair-B")


def test_compare_page_draws_the_study_charts(page, ui, study, shots):
    open_runs(page, ui)
    tick(page, "alone-A", "pair-A", "pair-B")
    page.click("#nav-compare")
    for graph in ("cmp-efficiency", "cmp-bars", "cmp-slowdown", "cmp-util"):
        page.wait_for_selector(f"#{graph} .js-plotly-plot .main-svg")
    wait_for(lambda: len(trace_names(page, "cmp-slowdown")) >= 3, timeout=30)
    slowdown = trace_names(page, "cmp-slowdown")
    assert slowdown[0].startswith("1:1") and {"none", "naive"} <= set(slowdown)
    points = figure(page, "cmp-slowdown", "gd.data.slice(1).map(t => Array.from(t.text))")
    assert sorted(sum(points, [])) == ["alone-A", "pair-A", "pair-B"]
    bars = figure(page, "cmp-bars", "gd.data.filter(t => t.type == 'bar').length")
    assert bars >= 2
    # labels as drawn: the slowdown points' apart, the bars' legend off their x labels
    labels = boxes(page, "#cmp-slowdown .textpoint text")
    (area,) = boxes(page, "#cmp-slowdown .nsewdrag")  # the labels were placed for PLOT_PX
    assert area[2] - area[0] >= PLOT_PX[0] and area[3] - area[1] >= PLOT_PX[1], area
    assert len(labels) == 3 and not overlapping(labels, labels), labels
    markers = boxes(page, "#cmp-slowdown .scatterlayer .point")
    assert len(markers) == 3 and not overlapping(labels, markers), (labels, markers)
    legend = boxes(page, "#cmp-bars .legend .traces")
    ticks = boxes(page, "#cmp-bars .xaxislayer-above text")
    assert legend and ticks and not overlapping(legend, ticks), (legend, ticks)
    notes = " ".join(annotations(page, "cmp-efficiency"))
    assert "No GPU energy" in notes  # a CPU-only study: a note, not an empty plot
    assert "Workload figures are over their window" in page.inner_text("#cmp-note")
    assert "No GPU utilisation" in page.inner_text("#cmp-util")
    page.wait_for_selector("#cmp-cpu .js-plotly-plot .main-svg")
    wait_for(
        lambda: trace_names(page, "cmp-cpu") == ["none · own loaders", "naive · own loaders"],
        timeout=30,
    )
    page.screenshot(path=str(shots / "compare.png"), full_page=True)


def test_compare_in_a_fresh_tab_shows_the_experiment_the_runs_page_would(page, ui, shots):
    page.goto(ui + "compare")
    page.wait_for_selector("#cmp-slowdown .js-plotly-plot .main-svg")
    wait_for(lambda: page.inner_text("#cmp-note").strip(), timeout=60)
    note = page.inner_text("#cmp-note")
    assert "No experiment chosen" not in note
    assert note.startswith("Every workload of the experiment (2)"), note
    wait_for(lambda: len(trace_names(page, "cmp-slowdown")) >= 3, timeout=30)
    page.screenshot(path=str(shots / "compare-fresh-tab.png"), full_page=True)


def test_every_runs_column_is_reachable_at_1400_px_with_the_run_pinned(page, ui, shots):
    """The grid is wider than the window: buttons scroll it (no scrollbar needed: overlay
    scrollbars, as on macOS and in headless Chromium, show nothing until one scrolls)."""
    open_runs(page, ui)
    grid = page.locator("#runs-grid .ag-root-wrapper").bounding_box()
    assert grid["x"] + grid["width"] <= 1400  # the grid fits the window

    def inside(col: str) -> bool:
        header = page.locator(f"[role=columnheader][col-id='{col}']")
        if header.count() == 0:  # not rendered: far outside the view
            return False
        box = header.bounding_box()
        return box is not None and box["x"] + box["width"] <= grid["x"] + grid["width"] + 1

    assert not inside("run_id")  # cut off at first
    right = page.locator("#runs-right")
    assert right.is_visible() and "scroll" in (right.get_attribute("title") or "")
    for _ in range(8):
        if inside("run_id"):
            break
        right.click()
        page.wait_for_timeout(300)
    wait_for(lambda: inside("run_id"), timeout=20)
    run = page.locator("[role=columnheader][col-id='name']").bounding_box()
    assert run is not None and grid["x"] <= run["x"] < grid["x"] + 100  # pinned at the left
    assert column(page, "name", "pinned-left")[:1] == ["alone"]
    page.screenshot(path=str(shots / "runs-scrolled.png"), full_page=True)
    for _ in range(8):
        page.locator("#runs-left").click()
        page.wait_for_timeout(300)
    wait_for(lambda: inside("kind") and not inside("run_id"), timeout=20)


def test_export_downloads_the_tables_radt_export_writes(page, ui, study, tmp_path):
    from radt.analysis.load import TIDY_COLUMNS, load
    from radt.analysis.summary import COLUMNS

    open_runs(page, ui)
    tick(page, "alone-A", "pair-A")
    chosen = {study.runs["alone-A"], study.runs["pair-A"]}
    workloads = {study.runs["alone"], study.runs["pair"]}
    with page.expect_download() as got:
        page.click("#export-samples")
    path = tmp_path / got.value.suggested_filename
    got.value.save_as(path)
    assert path.suffix == ".csv"
    samples = pd.read_csv(path)
    assert list(samples.columns) == list(TIDY_COLUMNS)
    assert set(samples["run_id"]) == chosen | workloads
    assert "top/proc/cpu_pct" in set(samples["key"])
    expected = load(runs=sorted(chosen), tracking_uri=study.ws.uri)
    assert len(samples) == len(expected)

    page.click("label:has-text('Parquet')")
    with page.expect_download() as got:
        page.click("#export-summary")
    path = tmp_path / got.value.suggested_filename
    got.value.save_as(path)
    assert path.suffix == ".parquet"
    summary = pd.read_parquet(path)
    assert list(summary.columns) == list(COLUMNS)
    assert set(summary["run_id"]) == chosen | workloads
    assert set(summary["level"]) == {"provider", "client"}


def test_empty_states_say_what_to_do(page, ui):
    page.goto(ui + "timeseries")
    page.wait_for_selector("#ts-message .radt-empty")
    assert "No runs selected" in page.inner_text("#ts-message")
    open_runs(page, ui)
    pick(page, "exp-picker", "empty-study")
    wait_text(page, "#runs-note", "has no runs yet")
    assert "cp examples/collocation.csv my-study.csv" in page.inner_text("#runs-note")
    page.goto(ui + "nowhere")
    page.wait_for_selector("text=No page here")
    assert "Traceback" not in page.content()


def test_unreachable_tracking_server_is_one_line_banner(browser, study, shots):
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(study.ws, "--tracking-uri", dead) as url:
        context = browser.new_context(viewport={"width": 1400, "height": 700})
        tab = context.new_page()
        tab.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.goto(url)
        tab.wait_for_selector("#banner-text")
        banner = tab.inner_text("#banner-text")
        assert dead in banner and "start the server" in banner
        assert "\n" not in banner.strip()
        tab.wait_for_selector("#runs-note .radt-empty")
        assert "Traceback" not in tab.content()
        tab.screenshot(path=str(shots / "unreachable.png"), full_page=True)
        context.close()
        assert not errors


def test_ui_listens_on_loopback_only(ui):
    import psutil

    port = int(ui.rsplit(":", 1)[1].strip("/"))
    others = [
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET and not address.address.startswith("127.")
    ]
    for address in others:
        with socket.socket() as probe:
            probe.settimeout(1)
            assert probe.connect_ex((address, port)) != 0, f"radt ui answers on {address}"
    assert answers(ui)


def test_running_runs_refresh_live_until_they_end(page, ui, study):
    from mlflow.entities import Metric

    client = study.ws.client()
    exp = client.create_experiment("live-study", str(study.ws.root / "mlruns" / "live"))
    run_id = client.create_run(exp, run_name="still-going").info.run_id
    now = int(time.time() * 1000)

    def log(first: int, count: int) -> None:
        points = [
            Metric("system/top/proc/cpu_pct", float(i % 7), now + 200 * i, i)
            for i in range(first, first + count)
        ]
        client.log_batch(run_id, metrics=points)

    log(0, 10)
    selection = {"experiment": exp, "runs": [{"run_id": run_id, "run_name": "still-going"}]}
    page.add_init_script(
        f"sessionStorage.setItem('selection', {json.dumps(json.dumps(selection))});"
        f"sessionStorage.setItem('keys', {json.dumps(json.dumps(['top/proc/cpu_pct']))});"
    )
    page.goto(ui + "timeseries")
    wait_text(page, "#ts-info", "Live")
    assert "still-going still running" in page.inner_text("#ts-info")
    length = "gd._fullData.length ? gd._fullData[0]._length : 0"
    wait_for(lambda: figure(page, "ts-graph", length) == 10, timeout=30)
    log(10, 5)
    wait_for(lambda: figure(page, "ts-graph", length) == 15, timeout=30)
    client.set_terminated(run_id, "FINISHED")
    wait_text(page, "#ts-info", "Live", present=False)
    assert "decimated stream" in page.inner_text("#ts-info")  # no samples artifact: MLflow's


def test_ui_reads_an_mlflow_server_too(page, study, tmp_path, shots):
    import shutil

    from mlflow_server import MlflowServer

    folder = tmp_path / "server"
    folder.mkdir()
    shutil.copy(study.ws.root / "mlflow.db", folder / "mlflow.db")
    with MlflowServer(folder) as server, serve(study.ws, "--tracking-uri", server.uri) as url:
        open_runs(page, url)
        assert grid_rows(page) == ["alone", "alone-A", "pair", "pair-A", "pair-B"]
        assert server.uri in page.inner_text(".radt-header")
        tick(page, "pair-B")
        page.click("#nav-time")
        page.wait_for_selector("#ts-graph .scatterlayer .trace")
        wait_for(lambda: "pair-B · top/proc/cpu_pct" in trace_names(page), timeout=60)
        page.screenshot(path=str(shots / "timeseries-server.png"), full_page=True)
        page.goto("about:blank")  # no request in flight when the servers stop


# --------------------------------------------------------------------------- widths

WIDTHS = (1024, 1280, 1920)
"""The window widths the layout tests take each page at."""


def inside(box: list[float], frame: list[float], slack: float = 1.0) -> bool:
    """Whether ``box`` lies within ``frame`` (both ``[left, top, right, bottom]``)."""
    return (
        box[0] >= frame[0] - slack
        and box[1] >= frame[1] - slack
        and box[2] <= frame[2] + slack
        and box[3] <= frame[3] + slack
    )


def plot_area(page: Page, graph: str) -> list[float]:
    """The box of the (first) plot area of the chart ``#graph``, where its traces are drawn."""
    return boxes(page, f"#{graph} .draglayer .xy .nsewdrag")[0]


def fill(page: Page, selector: str) -> list[str]:
    """The fill colours (``rgb(…)``) of the elements ``selector`` as drawn."""
    return page.locator(selector).evaluate_all("els => els.map(e => getComputedStyle(e).fill)")


COMPARE_GRAPHS = ("cmp-frontier", "cmp-efficiency", "cmp-slowdown", "cmp-bars", "cmp-util")


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_page_fits_the_window_and_colours_cpu_bars_by_mode(page, ui, shots, width):
    page.set_viewport_size({"width": width, "height": 900})
    open_runs(page, ui)  # the study (another test's experiment may be newer), no run ticked
    page.click("#nav-compare")
    for graph in (*COMPARE_GRAPHS, "cmp-cpu"):
        page.wait_for_selector(f"#{graph} .js-plotly-plot .main-svg")
    wait_for(lambda: len(trace_names(page, "cmp-cpu")) == 2, timeout=60)
    wait_for(lambda: "No energy" in " ".join(annotations(page, "cmp-frontier")), timeout=60)
    view = [0, 0, width, 10_000]
    # the notes of empty charts (a CPU-only study: no energy, no utilisation, no frontier)
    # and every other text on a chart lie within their chart, and the chart in the window
    for graph in COMPARE_GRAPHS:
        (svg,) = boxes(page, f"#{graph} .main-svg:first-of-type")
        assert inside(svg, view), (graph, svg)
        drawn = (".annotation-text", ".gtitle", ".legendtext", ".textpoint text")
        texts = boxes(page, ", ".join(f"#{graph} {what}" for what in drawn))
        assert texts and all(inside(t, svg) for t in texts), (graph, svg, texts)
    note = page.locator("#cmp-note")
    assert note.evaluate("e => e.scrollWidth <= e.clientWidth")  # its text wraps
    assert inside(boxes(page, "#cmp-note")[0], view)
    notes = " ".join(annotations(page, "cmp-efficiency"))
    assert "No GPU energy" in notes
    # the frontier says which of its needs is missing: energy (the job counted examples)
    frontier = " ".join(annotations(page, "cmp-frontier"))
    assert "No energy: no GPU listener" in frontier and "counted examples" not in frontier
    # CPU per example: each mode's bars in the colour of that mode in the legends above
    legend = dict(
        page.locator("#cmp-bars .legend .traces").evaluate_all(
            "els => els.map(e => [e.querySelector('.legendtext').textContent,"
            " getComputedStyle(e.querySelector('.legendpoints path')).fill])"
        )
    )
    assert set(legend) == {"none", "naive"} and len(set(legend.values())) == 2, legend
    for index, name in enumerate(trace_names(page, "cmp-cpu")):
        mode = name.split(" · ")[0]
        drawn = set(fill(page, f"#cmp-cpu .barlayer .trace:nth-child({index + 1}) .point path"))
        assert drawn == {legend[mode]}, (name, drawn, legend)
    page.screenshot(path=str(shots / f"compare-{width}.png"), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_single_points_label_is_inside_its_chart(page, ui, shots, width):
    page.set_viewport_size({"width": width, "height": 900})
    open_runs(page, ui)
    tick(page, "alone-A")
    page.click("#nav-compare")
    page.wait_for_selector("#cmp-slowdown .js-plotly-plot .main-svg")
    wait_for(lambda: len(boxes(page, "#cmp-slowdown .textpoint text")) == 1, timeout=60)
    (label,) = boxes(page, "#cmp-slowdown .textpoint text")
    area = plot_area(page, "cmp-slowdown")
    assert inside(label, area), (label, area)
    page.screenshot(path=str(shots / f"single-point-{width}.png"), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_window_labels_sit_above_the_lines_at_every_width(page, ui, shots, width):
    page.set_viewport_size({"width": width, "height": 900})
    open_runs(page, ui)
    tick(page, "alone-A", "pair-A")
    page.click("#nav-time")
    page.wait_for_selector("#ts-graph .scatterlayer .trace")
    wait_for(lambda: len(window_labels(page)) == 4, timeout=60)
    labels = window_labels(page)
    area = plot_area(page, "ts-graph")  # the top panel, where the CPU lines are
    lines = boxes(page, "#ts-graph .scatterlayer .trace .js-line")
    assert lines and not overlapping(labels, lines), (labels, lines)
    assert all(label[3] <= area[1] for label in labels), (labels, area)  # above the plot
    (svg,) = boxes(page, "#ts-graph .main-svg:first-of-type")
    assert all(inside(label, svg) for label in labels), (labels, svg)
    titles = boxes(page, "#ts-graph .annotation-text")
    titles = [t for t in titles if t not in labels]
    assert not overlapping(labels, titles) and not overlapping(labels, labels)
    page.screenshot(path=str(shots / f"timeseries-{width}.png"), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_grid_shows_the_headline_figures_first_and_hides_blank_columns(page, ui, shots, width):
    from radt.frontend.pages.runs import FRONT

    page.set_viewport_size({"width": width, "height": 900})
    open_runs(page, ui)
    wait_for(lambda: len(grid_rows(page)) == 5, timeout=30)
    (grid,) = boxes(page, "#runs-grid .ag-root-wrapper")
    assert grid[2] <= width
    for field in FRONT:
        header = boxes(page, f"[role=columnheader][col-id='{field}']")
        assert header and inside(header[0], grid), (field, header, grid)
    # after the run, the figures; the configuration after them
    lefts = [boxes(page, f"[role=columnheader][col-id='{f}']")[0][0] for f in FRONT]
    assert lefts == sorted(lefts)
    visible = "f => dash_ag_grid.getApi('runs-grid').getColumn(f).isVisible()"
    # a CPU-only study without power caps: these are blank in every row
    for field in ("mig_profile", "mps_thread_pct", "power_limit_w", "slurm_job_id"):
        wait_for(lambda f=field: not page.evaluate(visible, f), timeout=30)
    for field in ("collocation", "kind", "energy_per_example_nj", "run_id"):
        assert page.evaluate(visible, field), field
    page.screenshot(path=str(shots / f"runs-{width}.png"), full_page=True)


ASSETS = Path(__file__).resolve().parents[1] / "frontend" / "assets"


def card_width(window: int) -> int:
    """About the width of a chart in a half-width Compare card (full width under 1100 px)."""
    page_width = window - 40
    return page_width - 14 if window <= 1100 else (page_width - 12) // 2 - 14


@pytest.mark.parametrize("width", WIDTHS)
def test_labelled_points_at_the_edge_keep_their_labels_inside_the_plot(browser, shots, width):
    """The charts with labelled points, drawn by the UI's plotly bundle in a card's width: a
    single point, and the highest and rightmost of several, with their labels whole."""
    from radt.frontend.charts import efficiency_figure
    from radt.frontend.frontier import frontier_figure
    from test_ui_figures import study

    from radt.analysis.frontier import frontier_table

    frame = study()
    one = frame[frame["run_id"] == "alone"]
    figures = {
        "efficiency": efficiency_figure(frame),
        "efficiency-one": efficiency_figure(one),
        "frontier-one": frontier_figure(frontier_table(one.assign(status="FINISHED"))),
    }
    context = browser.new_context(viewport={"width": width, "height": 900})
    tab = context.new_page()
    try:
        tab.set_content("<html><body style='margin:0'></body></html>")
        tab.add_script_tag(path=str(ASSETS / "plotly-basic.min.js"))
        for name, fig in figures.items():
            tab.evaluate(
                "([fig, w]) => { document.body.innerHTML = `<div id='g' style='width:${w}px'>"
                "</div>`; return Plotly.newPlot('g', fig.data, fig.layout); }",
                [json.loads(fig.to_json()), card_width(width)],
            )
            area = plot_area(tab, "g")
            labels = boxes(tab, "#g .textpoint text")
            assert all(inside(b, area) for b in labels), (name, labels, area)
            (svg,) = boxes(tab, "#g .main-svg:first-of-type")
            notes = boxes(tab, "#g .annotation-text")  # the frontier's optima, with arrows
            assert labels or notes, name
            assert all(inside(b, svg) for b in notes), (name, notes, svg)
            tab.screenshot(path=str(shots / f"{name}-{width}.png"))
    finally:
        context.close()
