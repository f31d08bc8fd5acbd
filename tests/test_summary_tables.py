"""The summary's other tables by name: the tables ``summary(by=…)`` gave, and still gives."""

from __future__ import annotations

import pytest
from test_windows import COMMAND, study  # noqa: F401  (the recorded study, a fixture)

import radt
from radt.analysis.summary import loader_summary, repeats, repeats_summary, summary


def test_repeats_summary_is_the_repeats_of_the_summary(study):  # noqa: F811
    _, uri, _, ids = study
    table = repeats_summary("study", tracking_uri=uri)
    assert table.equals(repeats(summary("study", tracking_uri=uri)))
    assert table.equals(summary("study", tracking_uri=uri, by="repeats"))
    alone = table[
        (table["view"] == "client")
        & (table["configuration"] == "none")
        & (table["job"] == COMMAND)
        & (table["power_limit_w"] == "default")
    ].iloc[0]
    # the two alone runs: 4 and 5 ms per example
    assert alone["run_ids"] == f"{ids['alone1']} {ids['alone2']}"
    assert alone["time_per_example_ns_mean"] == pytest.approx(4.5e6)
    assert radt.repeats_summary is repeats_summary and radt.loader_summary is loader_summary


def test_loader_summary_without_a_shared_loader_is_an_empty_table(study):  # noqa: F811
    _, uri, _, _ = study
    table = loader_summary("study", tracking_uri=uri)
    assert table.empty and "cpu_per_example_ns_ratio" in table.columns
    assert table.columns.equals(summary("study", tracking_uri=uri, by="loader").columns)
