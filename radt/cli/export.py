"""``radt export``: samples, wide samples, the summary, repeats, the frontier, phase intervals
or the phase summary of runs, to CSV or Parquet (the analysis computes each table)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from radt.errors import UsageError
from radt.words import count

FORMATS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def export_parser() -> argparse.ArgumentParser:
    """Options of ``radt export``."""
    parser = argparse.ArgumentParser(
        prog="radt export",
        usage="radt export -e EXPERIMENT [--runs ID ...] [--keys KEY ...] "
        "[--summary | --repeats | --frontier | --phases | --phase-summary | --wide FREQ] "
        "--format csv|parquet -o FILE",
        description="Write the samples of runs (one row per sample, as radt.load returns "
        "them), their summary (one row per run and per workload, as radt.summary), "
        "their repeats (one row per job × configuration × power limit, as "
        "radt.repeats_summary(...)), the time–energy frontier of each job (as "
        "radt.frontier), their phase intervals (one row per radt.phase block) or their "
        "phase summary (one row per run and phase, as radt.phases) to a CSV or Parquet file.",
    )
    parser.add_argument("-e", "--experiment", help="experiment name or id")
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="ID",
        help="run ids (with their workload; a job run with its node runs)",
    )
    parser.add_argument(
        "--keys",
        nargs="+",
        metavar="KEY",
        help="keys or patterns, e.g. nvml/gpu0/power_w 'top/*' (default: all)",
    )
    parser.add_argument(
        "--start", metavar="TIME", help="ISO time (UTC unless it says), or seconds from run start"
    )
    parser.add_argument("--end", metavar="TIME", help="as --start")
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--summary", action="store_true", help="one row per run and per workload instead"
    )
    what.add_argument(
        "--repeats",
        action="store_true",
        help="mean, std, min, max and count of the summary's figures per job × "
        "configuration × power limit, for workloads and for runs",
    )
    what.add_argument(
        "--frontier",
        action="store_true",
        help="per job, every configuration × power limit with its time and energy per "
        "example, on_frontier and energy_bloat_pct (as radt.frontier)",
    )
    what.add_argument(
        "--phases",
        action="store_true",
        help="the runs' phase intervals (radt.phase): run_id, run_name, process, phase, "
        "start, end, duration_s",
    )
    what.add_argument(
        "--phase-summary",
        action="store_true",
        help="per run and phase: count, time share, GPU and CPU energy share (radt.phases; "
        "docs/analysis.md, Phases)",
    )
    what.add_argument(
        "--wide",
        metavar="FREQ",
        help="one column per key, averaged over bins of FREQ (e.g. 1s) from each run's start",
    )
    parser.add_argument("--format", choices=("csv", "parquet"), help="default: from -o's suffix")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="- for stdout (csv)")
    parser.add_argument(
        "--tracking-uri", help="overrides MLFLOW_TRACKING_URI (default ./mlflow.db)"
    )
    return parser


def _time(text: str | None) -> float | str | None:
    """A number is seconds from each run's start; anything else a time string."""
    import pandas as pd

    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        try:
            pd.Timestamp(text)
        except ValueError as exc:
            raise UsageError(
                f"cannot read {text!r} as a time: give seconds from the run's start (60) "
                "or an ISO time (2024-05-01T12:00:00Z)"
            ) from exc
        return text


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    if args.output == "-":
        return "csv"
    found = FORMATS.get(Path(args.output).suffix.lower())
    if found is None:
        raise UsageError(
            f"cannot tell the format of {args.output!r}; add --format csv or --format parquet"
        )
    return found


def _check_output(target: Path, fmt: str) -> None:
    """Refuse, before any loading, an output that cannot be written."""
    if target.is_dir():
        raise UsageError(f"{target} is a folder; name a file in it, e.g. {target / ('out.' + fmt)}")
    folder = target.parent
    if not folder.exists():
        raise UsageError(f"folder {folder} does not exist; create it or choose another -o")
    if not os.access(folder, os.W_OK | os.X_OK) or (
        target.exists() and not os.access(target, os.W_OK)
    ):
        raise UsageError(
            f"cannot write {target} (folder {folder} is read-only for you); choose another -o"
        )


def run_export(argv: list[str]) -> int:
    """``radt export``: samples, wide samples, the summary, repeats, phase intervals or the
    phase summary of runs, to CSV or Parquet."""
    import pandas as pd

    from radt.analysis.load import load, load_wide
    from radt.analysis.summary import repeats_summary, summary

    args = export_parser().parse_args(argv)
    fmt = _format(args)
    if args.output == "-" and fmt != "csv":
        raise UsageError("only csv can go to stdout (-o -); name a file for parquet")
    flags = {
        "--summary": args.summary,
        "--repeats": args.repeats,
        "--frontier": args.frontier,
        "--phases": args.phases,
        "--phase-summary": args.phase_summary,
    }
    table = next((flag for flag, given in flags.items() if given), None)
    if table and (args.keys or args.start or args.end):
        raise UsageError(f"{table} takes no --keys, --start or --end (it uses every sample)")
    if args.output != "-":
        _check_output(Path(args.output), fmt)
    selection = {
        "experiment": args.experiment,
        "runs": args.runs,
        "tracking_uri": args.tracking_uri,
    }
    if args.summary:
        frame = summary(**selection)
        what = "summary row"
    elif args.repeats:
        frame = repeats_summary(**selection)
        what = "repeat group"
    elif args.frontier:
        from radt.analysis.frontier import frontier

        frame = frontier(**selection)
        what = "frontier point"
    elif args.phases:
        from radt.analysis.phases import intervals

        frame = intervals(**selection)
        what = "phase interval"
    elif args.phase_summary:
        from radt.analysis.phases import phases

        frame = phases(**selection)
        what = "phase row"
    else:
        bounds = {"keys": args.keys, "start": _time(args.start), "end": _time(args.end)}
        if args.wide:
            try:
                pd.Timedelta(args.wide)
            except ValueError as exc:
                raise UsageError(
                    f"--wide takes a duration such as 1s or 500ms, not {args.wide!r}"
                ) from exc
            frame = load_wide(**selection, **bounds, freq=args.wide).reset_index()
            what = "row"
        else:
            frame = load(**selection, **bounds)
            what = "sample"
    if "run_id" in frame:
        runs = frame["run_id"].nunique()
    else:
        runs = len({r for ids in frame.get("run_ids", []) for r in str(ids).split()})
    if args.output == "-":
        frame.to_csv(sys.stdout, index=False)
    else:
        target = Path(args.output)
        try:
            if fmt == "csv":
                frame.to_csv(target, index=False)
            else:
                frame.to_parquet(target, index=False)
        except OSError as exc:
            raise UsageError(
                f"cannot write {target} ({exc.strerror or exc}); choose another -o"
            ) from exc
    print(
        f"radt: wrote {count(len(frame), what)} of {count(runs, 'run')} to {args.output}",
        file=sys.stderr,
    )
    if (args.phases or args.phase_summary) and not len(frame):
        print(
            "radt: none of these runs marked phases: wrap parts of the training step in "
            '`with radt.phase("forward"):` (docs/guide/runs.md, the run API)',
            file=sys.stderr,
        )
    return 0
