"""The truth matrix (issue 29): every way a run starts × every headline figure, each against
the value computed by hand from a known-timeline script (tests/truth.py; docs/analysis.md,
*The truth matrix*). One recorded run per path, shared by its figures' tests."""

from __future__ import annotations

import pytest
from truth import PATHS, Case, record

# The figures each path must give; a cell the case did not make fails naming itself.
FIGURES = {
    "lone": [
        "window_s",
        "examples",
        "examples_per_s",
        "time_per_example_ns",
        "energy_j",
        "energy_per_example_nj",
        "power_mean_w",
        "slowdown",
        "phase train time_s",
        "phase train energy_j",
        "phase eval time_s",
        "phase eval energy_j",
    ],
    "manual": [
        "window_s",
        "examples",
        "examples_per_s",
        "time_per_example_ns",
        "energy_j",
        "energy_per_example_nj",
    ],
    "autolog": [
        "window_s",
        "examples",
        "examples_per_s",
        "time_per_example_ns",
        "energy_j",
        "energy_per_example_nj",
    ],
    "hf": [
        "window_s",
        "examples",
        "examples_per_s",
        "time_per_example_ns",
        "energy_j",
        "energy_per_example_nj",
    ],
    "lightning": [
        "window_s",
        "examples",
        "examples_per_s",
        "time_per_example_ns",
        "energy_j",
        "energy_per_example_nj",
    ],
}
PAIR = [
    *(
        f"client {c} {f}"
        for c in "AB"
        for f in (
            "window_s",
            "examples",
            "examples_per_s",
            "time_per_example_ns",
            "slowdown",
            "time_per_example_norm",
        )
    ),
    *(
        f"provider {f}"
        for f in (
            "window_s",
            "examples",
            "examples_per_s",
            "time_per_example_ns",
            "energy_j",
            "energy_per_example_nj",
            "time_per_example_norm",
            "energy_per_example_norm",
        )
    ),
]
for path in ("naive pair", "mps pair", "study", "shared loader", "slurm study"):
    FIGURES[path] = PAIR
FIGURES["2-node group"] = [
    "job window_s",
    "job examples",
    "job examples_per_s",
    "job time_per_example_ns",
    "job energy_j",
    "job energy_per_example_nj",
    "job gpus",
    "job examples_per_s_per_gpu",
    "job scaling_efficiency",
]


def cells():
    for path, figures in FIGURES.items():
        marks = [getattr(pytest.mark, name) for name in PATHS[path][1]]
        for figure in figures:
            yield pytest.param(path, figure, marks=marks, id=f"{path}:{figure}".replace(" ", "-"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, template_db):
    """Each path's case, recorded the first time one of its cells asks."""
    cases: dict[str, Case] = {}

    def get(path: str) -> Case:
        if path not in cases:
            base = tmp_path_factory.mktemp(path.replace(" ", "-"))
            cases[path] = record(path, base, template_db)
        return cases[path]

    return get


@pytest.mark.parametrize(("path", "figure"), list(cells()))
def test_truth(recorded, path, figure):
    case = recorded(path)
    if case.skipped:
        pytest.skip(case.skipped)
    assert case.failure is None, f"{path}: {case.failure}"
    assert figure in case.cells, f"{path} gave no {figure}"
    cell = case.cells[figure]
    assert cell.ok, (
        f"{path} × {figure}: expected {cell.expected:.6g}, measured {cell.measured:.6g} "
        f"({cell.error_pct:+.2f} %, tolerance {cell.tolerance_pct} %); "
        f"radT's note: {cell.note or '-'}"
    )
