"""``radt runs``: the experiments of a store, or the runs of one with their summary figures
(the tables: :mod:`radt.analysis.export`)."""

from __future__ import annotations

import argparse
import sys


def runs_parser() -> argparse.ArgumentParser:
    """Options of ``radt runs``."""
    parser = argparse.ArgumentParser(
        prog="radt runs",
        description="Without -e: list the experiments. With -e: a table of its workloads and "
        "runs with their configuration, the params that differ between the runs (a study's "
        "swept ones), window, examples/s, time and energy per example, "
        "slowdown and the basis of those figures (docs/analysis.md).",
    )
    parser.add_argument("-e", "--experiment", help="experiment name or id")
    parser.add_argument(
        "--tracking-uri", help="overrides MLFLOW_TRACKING_URI (default ./mlflow.db)"
    )
    return parser


def run_runs(argv: list[str]) -> int:
    """``radt runs``: the experiments, or the runs of one with their summary figures."""
    from radt.analysis.export import (
        crosscheck_notes,
        experiments_table,
        notes,
        runs_table,
        spread_notes,
    )
    from radt.analysis.summary import summary

    args = runs_parser().parse_args(argv)
    if args.experiment is None:
        print(experiments_table(args.tracking_uri))
        print("\n`radt runs -e NAME` shows the runs of one.", file=sys.stderr)
        return 0
    frame = summary(args.experiment, tracking_uri=args.tracking_uri)
    if frame.empty:
        print(f"experiment {args.experiment!r} has no runs", file=sys.stderr)
        return 0
    print(runs_table(frame))
    found = notes(frame)
    if found:
        print("\nmissing figures:\n  " + "\n  ".join(found), file=sys.stderr)
    spread = spread_notes(frame)
    if spread:
        from radt.analysis.baselines import BASELINE_SPREAD_LIMIT_PCT

        print(
            f"\n* baseline repeats spread over {BASELINE_SPREAD_LIMIT_PCT:g} % (coefficient of "
            "variation): the slowdown is uncertain; run the baseline again"
            "\n  " + "\n  ".join(spread),
            file=sys.stderr,
        )
    checked = crosscheck_notes(frame)
    if checked:
        from radt.analysis.attribution import CROSSCHECK_LIMIT_PCT

        print(
            f"\nenergy cross-check (counter vs integrated power, over {CROSSCHECK_LIMIT_PCT:g} %):"
            "\n  " + "\n  ".join(checked),
            file=sys.stderr,
        )
    if frame["examples"].isna().all():
        print(
            "\nno run reports examples: call radt.log_examples(n) in the training script "
            "(or log a metric named `examples`) for per-example figures",
            file=sys.stderr,
        )
    return 0
