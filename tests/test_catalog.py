"""The table of figures: every view is drawn from it, the docs define every figure in it, and the
window figures it drives equal hand-computed values."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from conftest import REPO
from radt.frontend.pages.runs import COLUMNS as GRID_COLUMNS

from radt.analysis.catalog import CATALOG, DOCS, HEADLINE, REPEATED, WINDOW_FIGURES
from radt.analysis.closing import HEADLINE as CLOSING_HEADLINE
from radt.analysis.export import runs_table
from radt.analysis.figures import FIGURES
from radt.analysis.summary import COLUMNS, REPEAT_FIGURES
from radt.analysis.windows import run_figures, window_figures

DOC = (REPO / DOCS).read_text()


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_docs_define_every_figure_under_its_anchor():
    headings = [line.lstrip("#").strip() for line in DOC.splitlines() if line.startswith("#")]
    sections: dict[str, str] = {}
    for heading, body in zip(headings, re.split(r"^#+ .*$", DOC, flags=re.M)[1:], strict=True):
        sections[anchor(heading)] = body
    assert anchor("Energy: cross-check, host energy and estimates") == (
        "energy-cross-check-host-energy-and-estimates"
    )
    for figure in CATALOG:
        assert figure.anchor in sections, f"{figure.name}: no heading #{figure.anchor} in {DOCS}"
        assert f"`{figure.name}`" in sections[figure.anchor] or re.search(
            rf"`[^`]*\b{figure.name}\b[^`]*`", sections[figure.anchor]
        ), f"{figure.name} is not defined under #{figure.anchor}"


def test_docs_list_the_headline_metrics_of_the_table():
    listed = re.findall(r"`radt/(\w+)`", DOC)
    assert set(listed) == set(HEADLINE)
    assert CLOSING_HEADLINE == HEADLINE


def test_the_views_are_drawn_from_the_table():
    names = [figure.name for figure in CATALOG]
    assert len(set(names)) == len(names)
    assert [c for c in COLUMNS if c in names] == names
    assert REPEAT_FIGURES == REPEATED
    assert (
        FIGURES
        == WINDOW_FIGURES
        == (
            "energy_j",
            "power_mean_w",
            "power_max_w",
            "util_mean_pct",
            "smact_mean_ratio",
            "gpu_mem_peak_mib",
            "host_mem_peak_mib",
        )
    )
    grid = {column["field"]: column for column in GRID_COLUMNS}
    for figure in CATALOG:
        assert (figure.name in grid) == bool(figure.width)
        if figure.width:
            assert grid[figure.name]["headerName"] == figure.label


def test_radt_runs_shows_an_optional_figure_only_when_a_row_has_it():
    row = {name: math.nan for name in COLUMNS}
    row.update(
        level="run",
        run_name="alone",
        status="FINISHED",
        run_id="r1",
        basis="examples",
        duration_s=75.0,
        window_s=20.0,
        examples_per_s=200.0,
        time_per_example_ns=5e6,
        energy_per_example_nj=0.5e9,
        slurm_job_id=None,
    )
    header = runs_table(pd.DataFrame([row], columns=list(COLUMNS))).splitlines()[0].split("  ")
    header = [cell.strip() for cell in header if cell.strip()]
    assert header[4:] == [
        "duration",
        "window",
        "examples/s",
        "ms/example",
        "energy/example",
        "slowdown",
        "basis",
        "run id",
    ]
    row["cpu_per_example_ns"] = 2.5e6
    text = runs_table(pd.DataFrame([row], columns=list(COLUMNS)))
    head, line = text.splitlines()
    assert "ms/example  CPU ms/example  energy/example" in head
    assert line.split()[4:10] == ["1:15", "20.0s", "200.0", "5.000", "2.500", "500"]


def _steady(seconds, value):
    return np.asarray(seconds, np.float64), np.full(len(seconds), float(value))


def series():
    """Two GPUs, 0-10 s at 1 s: 100 W and 50 W (gpu1 also 200 W at 5 s), 40 % and 60 %
    utilisation, 1000 and 3000 MiB used; the process tree's RSS 100, 300, 200 MiB."""
    t = np.arange(11.0)
    power1 = np.full(11, 50.0)
    power1[5] = 200.0
    return {
        ("nvml", "gpu0", "power_w"): _steady(t, 100.0),
        ("nvml", "gpu1", "power_w"): (t, power1),
        ("nvml", "gpu0", "util_pct"): _steady(t, 40.0),
        ("nvml", "gpu1", "util_pct"): _steady(t, 60.0),
        ("nvml", "gpu0", "mem_used_mib"): _steady(t, 1000.0),
        ("nvml", "gpu1", "mem_used_mib"): _steady(t, 3000.0),
        ("top", "proc", "rss_mib"): (np.array([1.0, 5.0, 9.0]), np.array([100.0, 300.0, 200.0])),
    }


def test_window_figures_over_the_whole_run_are_the_run_figures():
    whole, used, note = window_figures(series())
    assert (whole, used) == run_figures(None, series=series()) and note is None
    # energy: 100 W × 10 s + 50 W × 10 s + the spike's triangle (150 W × 1 s)
    assert whole["energy_j"] == pytest.approx(1650.0)
    assert whole["power_mean_w"] == pytest.approx((150.0 * 10 + 300.0) / 11)
    assert whole["power_max_w"] == pytest.approx(300.0)
    assert whole["util_mean_pct"] == pytest.approx(50.0)
    assert math.isnan(whole["smact_mean_ratio"])
    assert whole["gpu_mem_peak_mib"] == pytest.approx(4000.0)
    assert whole["host_mem_peak_mib"] == pytest.approx(300.0)


def test_window_figures_reduce_the_samples_inside_the_window():
    figures, _, _ = window_figures(series(), 6.0, 10.0)
    assert figures["energy_j"] == pytest.approx(150.0 * 4)
    assert figures["power_mean_w"] == pytest.approx(150.0)
    assert figures["power_max_w"] == pytest.approx(150.0)
    assert figures["host_mem_peak_mib"] == pytest.approx(200.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("over_time", "min", "over_time='min' is unknown; use one of mean, max"),
        ("across", "median", "across='median' is unknown; use one of sum, mean"),
        ("runs_show", "watts", "runs_show='watts' is unknown"),
        ("show", "si:nano:s", "show='si:nano:s' is unknown"),
        ("show", "bold", "show='bold' is unknown"),
        ("quantity", "proc:rss_mib", "the only prefix is tree:"),
        ("quantity", "tree:", "names no quantity"),
        ("width", -1, "width=-1 is below 0"),
    ],
)
def test_a_figure_with_a_bad_field_is_refused_where_it_is_defined(field, value, message):
    from radt.analysis.catalog import Figure

    spec = {"show": "number", "quantity": "power_w", field: value}
    with pytest.raises(ValueError, match=f"^figure odd: {field}=") as err:
        Figure("odd", "odd", "figures-of-a-row", **spec)
    assert message in str(err.value)
    # the table's own figures, and the forms it uses, pass
    assert Figure("ok", "ok", "a", "si:1e-9:J", quantity="tree:rss_mib", over_time="max").show


def test_the_reductions_a_figure_may_name_are_those_the_figures_make():
    from radt.analysis.catalog import OVER_TIME
    from radt.analysis.figures import sample_figures

    assert {figure.over_time for figure in CATALOG} <= set(OVER_TIME)
    assert set(sample_figures({}, {})) == {f.name for f in CATALOG if f.quantity}


def test_each_docs_section_defines_a_column_in_one_row():
    """A name is defined once where it is defined: two rows of one section would give it two
    meanings."""
    for heading, body in zip(
        re.findall(r"^#+ (.*)$", DOC, flags=re.M),
        re.split(r"^#+ .*$", DOC, flags=re.M)[1:],
        strict=True,
    ):
        rows = [line.split("|")[1] for line in body.splitlines() if line.startswith("| `")]
        names = [name for cell in rows for name in re.findall(r"`([^`]+)`", cell)]
        twice = sorted({name for name in names if names.count(name) > 1})
        assert not twice, f"{DOCS} #{heading}: {', '.join(twice)} defined in two rows"
