"""The truth matrix: every way a run starts × every headline figure, each against the value
computed by hand from a known-timeline script, as a table (path × figure → expected, measured,
error %).

    python benchmarks/truth_matrix.py                      # every path, ~10 min on 2 busy cores
    python benchmarks/truth_matrix.py --paths lone,autolog # the fast ones

The cases are tests/truth.py's, the same that tests/test_truth.py checks one cell at a time:
known-timeline trainings (sleep-timed batches, a slow first epoch, a smaller last batch, a tail
and an evaluation loop per epoch) on a stand-in GPU drawing a constant 200 W (fake pynvml).
A cell is `ok` within its tolerance: 1 %, 2 % where two processes' start jitter enters.
"""

from __future__ import annotations

from _common import arguments, chosen, results, scratch
from truth import PATHS, fresh_template, record  # tests/ is importable once _common is


def main() -> None:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated paths")
    args = parser.parse_args()
    paths = chosen(parser, args.paths, list(PATHS))
    rows = []
    with scratch("truth", keep=args.keep) as folder:
        template = fresh_template((folder / "template").resolve())
        for path in paths:
            base = folder / path.replace(" ", "-")
            template.parent.mkdir(parents=True, exist_ok=True)
            base.mkdir()
            case = record(path, base, template)
            if case.failure:
                rows.append([path, "(recording)", "-", "-", "-", f"FAILED: {case.failure}"])
            for figure, cell in case.cells.items():
                verdict = "ok" if cell.ok else f"WRONG (over {cell.tolerance_pct:g} %)"
                if not cell.ok and cell.note:
                    verdict += f": {cell.note}"
                rows.append(
                    [
                        path,
                        figure,
                        f"{cell.expected:.6g}",
                        f"{cell.measured:.6g}",
                        f"{cell.error_pct:+.2f}",
                        verdict,
                    ]
                )
    print(
        results(
            "The truth matrix",
            "Expected: by hand from each script's own clock readings (docs/analysis.md).",
            ["path", "figure", "expected", "measured", "error %", "verdict"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
