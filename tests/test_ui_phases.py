"""Phases on the time-series page, end to end: a real radT run that marks phases, ``radt ui`` in a
real process, Debian's headless Chromium through Playwright (helpers and fixtures of
test_ui_browser.py, whose skip rules apply)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import new_workspace, wait_for
from test_ui_browser import (  # noqa: F401 - browser and page are fixtures
    browser,
    figure,
    open_runs,
    page,
    serve,
    tick,
    wait_text,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

PHASED = """\
import time, radt
time.sleep(0.3)
for step in range(40):
    with radt.phase("data"):
        time.sleep(0.01)
    with radt.phase("forward"):
        time.sleep(0.03)
    radt.log_examples(8)
"""


@pytest.fixture(scope="module")
def phased_ui(tmp_path_factory, template_db) -> Iterator[str]:
    ws = new_workspace(tmp_path_factory.mktemp("ui-phases"), template_db)
    ws.script("phased.py", PHASED)
    done = ws.run(["-e", "ui-phases", "-n", "phased", "-l", "constpower", "phased.py"])
    assert done.returncode == 0, done.stderr
    with serve(ws) as url:
        yield url


CHART = "(() => document.querySelector('#ts-graph .js-plotly-plot'))()"
DRAG = (
    "shift => { const gd = " + CHART + "; const xa = gd._fullLayout.xaxis;"
    " const ya = gd._fullLayout.yaxis; const box = gd.getBoundingClientRect();"
    " const x0 = gd.data.filter(t => t.name.includes('· forward'))[0].x[0];"
    " const at = x => box.left + xa._offset + xa.l2p(x);"
    " return [at(x0 - 0.001 - shift), at(x0 + 0.08), box.top + ya._offset + ya._length / 2];"
    " }"
)
AXIS = "JSON.stringify([" + CHART + ".layout.xaxis, " + CHART + ".layout.uirevision])"


def zoom_in(page) -> None:  # noqa: F811 - a fixture's value
    """Zoom the time axis into two steps as a user does, dragging a box across the series with
    the mouse, and wait until the page draws that window. A zoom the page has not followed
    after 30 s is made again, a hair wider (three tries). (A zoom made through the
    ``Plotly.relayout`` API was once not followed in a CI run of two workers on two cores: unlike
    the mouse's, such a zoom is not a user's edit, which a redraw of the same figure keeps.)
    The failure shows the chart's axis after each try."""
    seen = []
    for attempt in range(3):
        start_x, end_x, y = page.evaluate(DRAG, attempt * 2e-3)
        page.mouse.move(start_x, y)
        page.mouse.down()
        page.mouse.move(end_x, y + 1, steps=8)
        page.mouse.up()
        try:
            wait_for(lambda: "zoomed in" in page.inner_text("#ts-info"), timeout=30)
            return
        except AssertionError:
            seen.append(page.evaluate(AXIS))
    info = page.inner_text("#ts-info")
    raise AssertionError(f"the page did not draw the zoomed window: axis {seen}; {info!r}")


LANES = "gd.layout[Object.keys(gd.layout).filter(k => k.startsWith('yaxis')).sort().pop()]"


def test_phase_lanes_under_the_series_and_single_intervals_when_zoomed(page, phased_ui):  # noqa: F811
    open_runs(page, phased_ui, "ui-phases")
    tick(page, "phased")
    page.click("#nav-time")
    page.wait_for_selector("#ts-graph .scatterlayer .trace", state="attached")
    wait_text(page, "#ts-info", "Phases: 80 intervals in view")
    lanes = figure(page, "ts-graph", f"{LANES}.ticktext")
    assert [re.sub(r" \d+%$", "", lane) for lane in lanes] == ["phased · data", "phased · forward"]
    shares = [int(re.search(r"(\d+)%$", lane).group(1)) for lane in lanes]
    assert shares[1] > shares[0] > 0  # forward takes three times data's time
    names = figure(page, "ts-graph", "gd.data.map(t => t.name)")
    assert set(lanes) <= set(names)
    # zoom into two steps, once the page has settled (a zoom made while a callback is still
    # drawing the first figure is replaced by that figure): every interval there is its own band
    wait_for(
        lambda: page.evaluate("document.querySelector('[data-dash-is-loading=\"true\"]') === null"),
        timeout=60,
    )
    zoom_in(page)
    info = page.inner_text("#ts-info")
    found = re.search(r"Phases: ([\d,]+) intervals? in view as ([\d,]+) bands?", info)
    assert found, info
    assert int(found.group(1)) < 80 and found.group(1) == found.group(2)  # nothing merged
    wait_for(lambda: "merged" not in page.inner_text("#ts-info"), timeout=30)
