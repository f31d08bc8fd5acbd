"""The truth matrix (issue 29): every way a run starts × every headline figure, each against
the value computed by hand from a known-timeline script (tests/truth.py; docs/analysis.md,
*The truth matrix*). One recorded run per path, shared by its figures' tests."""

from __future__ import annotations

import pytest
from truth import PATHS, POWER_W, Case, Cell, Timeline, client_figures, provider_figures, record

# The figures each path must give; a cell the case did not make fails naming itself.
RUN = [
    "window_s",
    "examples",
    "examples_per_s",
    "time_per_example_ns",
    "energy_j",
    "energy_per_example_nj",
]
"""A lone run's headline figures, whichever way it started."""
FIGURES = {
    "lone": [
        *RUN,
        "power_mean_w",
        "slowdown",
        "phase train time_s",
        "phase train energy_j",
        "phase eval time_s",
        "phase eval energy_j",
    ],
    **{path: RUN for path in ("manual", "autolog", "hf", "lightning")},
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
    *(f"provider {f}" for f in (*RUN, "time_per_example_norm", "energy_per_example_norm")),
]
for path in ("naive pair", "mps pair", "study", "shared loader", "slurm study"):
    FIGURES[path] = PAIR
FIGURES["2-node group"] = [
    *(f"job {f}" for f in RUN),
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


def test_the_hand_computation_is_the_docs_definitions():
    """The matrix's own arithmetic on a made-up timeline, by hand: counts 8, 16, 19 at 1, 2,
    3 s, epoch 0 marked at 3.5 s (after a tail), 27, 35, 38 at 4, 5, 6 s, epoch 1 at 6.5 s."""
    a = Timeline([(1.0, 8), (2.0, 16), (3.0, 19), (4.0, 27), (5.0, 35), (6.0, 38)],
                 [3.5, 6.5], None, [])  # fmt: skip
    assert a.counter(0.5) == 0.0 and a.counter(3.25) == 19 and a.counter(3.75) == 23
    mine = client_figures(a)  # window 3.5 -> 6 s (the last example, not the mark at 6.5 s)
    assert (mine["window_s"], mine["examples"], mine["examples_per_s"]) == (2.5, 19, 7.6)
    assert mine["energy_j"] == POWER_W * 2.5
    b = Timeline([(t + 1, c) for t, c in a.examples], [4.5, 7.5], None, [])
    both = provider_figures([a, b])  # overlap 4.5 -> 6 s: a 31 -> 38, b 19 -> 35
    assert (both["window_s"], both["per_client"], both["examples"]) == (1.5, [7, 16], 23)
    assert provider_figures([a, b], gpus=2)["energy_j"] == 2 * POWER_W * 1.5
    assert Cell(100.0, 101.5, 2.0).ok and not Cell(100.0, 101.5, 1.0).ok
