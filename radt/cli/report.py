"""``radt report -e EXPERIMENT``: a study's findings as one page (:mod:`radt.analysis.report`
computes it); prints the first findings and what to run next."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from radt.analysis.report import FORMATS, Objective, report
from radt.errors import UsageError


def report_parser() -> argparse.ArgumentParser:
    """The ``radt report`` options."""
    parser = argparse.ArgumentParser(
        prog="radt report",
        description="A study's findings, computed from its runs, as one page to share "
        "(HTML that opens offline, or Markdown with its charts beside it).",
    )
    parser.add_argument(
        "-e",
        "--experiment",
        action="append",
        required=True,
        metavar="EXPERIMENT",
        help="an experiment of the study (name or id); repeat for several",
    )
    parser.add_argument("-o", "--output", help="the page to write (default report.html / .md)")
    parser.add_argument(
        "--format", choices=FORMATS, help="html or md (default: from -o, else html)"
    )
    parser.add_argument(
        "--objective",
        default="throughput",
        help="throughput (default), energy or slowdown:BOUND (e.g. slowdown:1.2): what ranks "
        "the findings first; a bound adds the best configuration whose every job stays within it",
    )
    parser.add_argument(
        "--ui",
        metavar="URL",
        help="a radt ui serving this store (e.g. http://127.0.0.1:8050): run ids link to their "
        "time series there, each finding's runs to their overlay",
    )
    parser.add_argument(
        "--mlflow-ui",
        metavar="URL",
        help="an MLflow UI serving this store: without --ui, run ids link to their MLflow pages",
    )
    parser.add_argument(
        "--tracking-uri", help="overrides MLFLOW_TRACKING_URI (default ./mlflow.db)"
    )
    return parser


def run_report(argv: list[str]) -> int:
    """``radt report -e EXPERIMENT [-o FILE] [--format html|md] [--objective …]``."""
    args = report_parser().parse_args(argv)
    objective = Objective.parse(args.objective)
    fmt = args.format
    if args.output is None:
        fmt = fmt or "html"
        output = Path(f"report.{fmt}")
    else:
        output = Path(args.output)
    if not output.parent.is_dir():
        raise UsageError(f"folder {output.parent} does not exist: make it, or write elsewhere (-o)")
    made = report(
        args.experiment,
        objective=objective,
        tracking_uri=args.tracking_uri,
        ui=args.ui,
        mlflow_ui=args.mlflow_ui,
    )
    written = made.write(output, fmt)
    for _, row in made.findings.head(5).iterrows():
        print(f"{int(row['rank'])}. {row['sentence']}")
    for _, row in made.what_to_run.iterrows():
        print(f"- {row['sentence']}")
    print(f"wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return 0
