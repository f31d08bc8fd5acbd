"""A distributed job in the browser (issue 21): a real 2-node job recorded by radT
(test_ui_distributed.record_job), ``radt ui`` in a real process, Debian's headless Chromium
through Playwright (helpers and fixtures of test_ui_browser.py, whose skip rules apply)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import new_workspace, wait_for
from test_ui_browser import (  # noqa: F401 - browser and page are fixtures
    browser,
    column,
    grid_rows,
    open_runs,
    page,
    serve,
    shots,
    tick,
    trace_names,
)
from test_ui_distributed import EXPERIMENT, record_job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def job_ui(tmp_path_factory, template_db) -> Iterator[str]:
    ws = new_workspace(tmp_path_factory.mktemp("ui-nodes"), template_db)
    record_job(ws)
    with serve(ws) as url:
        yield url


def settled(page) -> None:  # noqa: F811 - the page fixture's name
    """Wait until no Dash callback is loading (an action taken before is undone by it)."""
    wait_for(
        lambda: page.evaluate("document.querySelector('[data-dash-is-loading=\"true\"]') === null"),
        timeout=60,
    )


def test_the_grid_shows_the_job_with_its_nodes_beneath_and_a_key_overlays_across_them(
    page,  # noqa: F811
    job_ui,
    shots,  # noqa: F811
):
    open_runs(page, job_ui, EXPERIMENT)
    assert grid_rows(page) == ["ddp", "a", "b"]
    assert column(page, "name", "pinned-left") == ["ddp", "↳ a", "↳ b"]
    assert column(page, "kind") == ["job", "node", "node"]
    assert "1 distributed job, 2 node runs in them" in page.inner_text("#runs-note")
    # the job's own figures, on its row only (the grid draws only the columns in view)
    page.evaluate("dash_ag_grid.getApi('runs-grid').ensureColumnVisible('gpus', 'start')")
    page.wait_for_selector("[role=columnheader][col-id='gpus']")
    assert column(page, "nodes") == ["2", "", ""]
    assert column(page, "gpus") == ["2", "", ""]
    per_gpu = column(page, "examples_per_s_per_gpu")
    assert per_gpu[0] and per_gpu[1:] == ["", ""]
    page.screenshot(path=str(shots / "runs-distributed.png"), full_page=True)

    settled(page)
    tick(page, "ddp")
    page.click("#nav-time")
    page.wait_for_selector("#ts-graph .scatterlayer .trace", state="attached")
    key = "nvml/gpu0/power_w"
    wait_for(lambda: sorted(trace_names(page)) == [f"node a · {key}", f"node b · {key}"], 60)
    axis = "seconds since the run started (a node's: its job's)"
    page.wait_for_selector(f'#ts-graph text:text-is("{axis}")')
    info = page.inner_text("#ts-info")
    assert info.startswith("2 traces") and "decimated stream" not in info, info  # nodes' artifacts
    page.screenshot(path=str(shots / "timeseries-nodes.png"), full_page=True)
