"""``radt export`` (samples or summary to CSV/Parquet) and ``radt runs`` (a table of runs)."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from radt.errors import UsageError
from radt.words import count

if TYPE_CHECKING:
    import pandas as pd

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
            '`with radt.phase("forward"):` (README, the run API)',
            file=sys.stderr,
        )
    return 0


# --------------------------------------------------------------------------- radt runs


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


def _duration(seconds: float, exact: bool = False) -> str:
    """``3725.2`` → ``1:02:05``; ``42.4`` → ``0:42``; ``exact``: under a minute ``42.4s``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if exact and seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _si(value: float, unit: str) -> str:
    """``0.0123, "J"`` → ``12.3 mJ``."""
    if value is None or not math.isfinite(value):
        return "-"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "µ")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value / 1e-9:.3g} n{unit}"


def _number(value: float, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


def runs_table(frame: pd.DataFrame) -> str:
    """The text table of ``radt runs`` for a :func:`radt.summary` frame.

    Figures are over each row's window; ``basis`` says which (docs/analysis.md). The figure
    columns are those of :data:`radt.analysis.catalog.CATALOG` with a ``runs`` header, an
    optional one only when a row has it; before them, the params that differ between the runs
    (:func:`swept_params`).
    """
    import pandas as pd

    from radt.analysis.distributed import one_line_per_job

    frame = one_line_per_job(frame)

    from radt.analysis.catalog import CATALOG

    shown = [
        figure
        for figure in CATALOG
        if figure.runs
        and (
            not figure.runs_optional
            or (
                figure.name in frame
                and pd.to_numeric(frame[figure.name], errors="coerce").notna().any()
            )
        )
    ]
    swept, values = swept_params(frame)
    header = [
        "name",
        "status",
        "configuration",
        "workload",
        *swept,
        *(figure.runs for figure in shown),
        "basis",
        "run id",
    ]
    rows = []
    for row, params in zip(frame.itertuples(index=False), values, strict=True):
        name = str(row.run_name or "-")
        if row.level in ("client", "loader"):
            name = f"  {row.letter or '-'}: {name}"
        rows.append(
            [
                name,
                str(row.status or "-"),
                _text(row.configuration),
                _text(row.workload),
                *(params.get(key, "" if row.level == "provider" else "-") for key in swept),
                *(_runs_cell(row, figure.name, figure.runs_show) for figure in shown),
                str(row.basis or "-"),
                str(row.run_id),
            ]
        )
    right = set(range(4 + len(swept), 4 + len(swept) + len(shown)))
    if frame["slurm_job_id"].notna().any():  # runs of Slurm jobs: their job, last
        header.append("slurm job")
        for row, job in zip(rows, frame["slurm_job_id"], strict=True):
            row.append(str(job) if pd.notna(job) else "-")
    return _table(header, rows, right)


def _param_pairs(text) -> dict[str, str]:
    """``batch-size=8 lr=0.1`` (a summary's ``params``) → ``{"batch-size": "8", "lr": "0.1"}``;
    a word without ``=`` belongs to the value before it (a value with a space)."""
    from radt.analysis.runtree import _present

    pairs: dict[str, str] = {}
    key = None
    for word in str(text).split(" ") if _present(text) else []:
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            pairs[key] = value
        elif key is not None:
            pairs[key] += f" {word}"
    return pairs


def swept_params(frame: pd.DataFrame) -> tuple[list[str], list[dict[str, str]]]:
    """The params whose value differs between the runs of ``frame`` (a study's swept ones,
    sorted by name) and each row's params; a workload's row has what its runs share.

    Runs without params (a shared loader) do not count; a param some runs lack differs."""
    runs = [_param_pairs(text) for text in frame["params"]]
    with_params = [pairs for pairs in runs if pairs]
    keys = sorted({key for pairs in with_params for key in pairs})
    swept = [key for key in keys if len({pairs.get(key) for pairs in with_params}) > 1]
    by_parent: dict[str, list[dict[str, str]]] = {}
    for pairs, parent in zip(runs, frame["parent_run_id"], strict=True):
        if pairs and isinstance(parent, str):
            by_parent.setdefault(parent, []).append(pairs)
    values = []
    for pairs, level, run_id in zip(runs, frame["level"], frame["run_id"], strict=True):
        if level == "provider":
            kids = by_parent.get(run_id, [])
            shared = kids[0] if kids else {}
            pairs = {
                key: shared[key]
                for key in swept
                if key in shared and all(kid.get(key) == shared[key] for kid in kids)
            }
        values.append(pairs)
    return swept, values


def _runs_cell(row, name: str, show: str) -> str:
    """One figure's cell in ``radt runs``, written as its ``runs_show`` says."""
    if show == "slowdown":
        return _slowdown_cell(row)
    import pandas as pd

    value = float(pd.to_numeric(getattr(row, name), errors="coerce"))
    if show in ("duration", "exact"):
        return _duration(value, exact=show == "exact")
    if show == "ms":
        return _number(value * 1e-6, 3)
    if show == "joules":
        return _si(value * 1e-9, "J")
    if show == "estimate":
        if not math.isfinite(value):
            return "-"
        return f"{_si(value * 1e-9, 'J')} ({row.energy_est_method})"
    return _number(value)


def notes(frame: pd.DataFrame) -> list[str]:
    """``names: why a figure is missing``, one line per note of a summary frame's rows, in the
    order first met: the rows that share a note are named together (``every row`` when all
    do)."""
    found: dict[str, list[str]] = {}
    for row in frame.itertuples(index=False):
        if isinstance(row.window_note, str) and row.window_note:
            for note in dict.fromkeys(row.window_note.split("; ")):
                found.setdefault(note, []).append(str(row.run_name or row.run_id))
    return [
        f"{'every row' if len(names) == len(frame) > 1 else ', '.join(names)}: {note}"
        for note, names in found.items()
    ]


def _text(value) -> str:
    """A text cell: ``-`` for a missing value (None or NaN; never ``nan``)."""
    from radt.analysis.runtree import _present

    return str(value) if _present(value) else "-"


def _slowdown_cell(row) -> str:
    """``1.71`` or, against a baseline whose repeats spread over the limit, ``1.71 *``; blank
    for a workload or a shared loader, which have none (``-`` is a figure missing)."""
    from radt.analysis.baselines import baseline_spread_flagged

    if row.level in ("provider", "loader"):
        return ""
    text = _number(row.slowdown, 2)
    return f"{text} *" if baseline_spread_flagged(getattr(row, "baseline_cv_pct", None)) else text


def spread_notes(frame: pd.DataFrame) -> list[str]:
    """``name: slowdown 1.71 against 2 baseline repeats that spread 20.2 %`` for each row whose
    baseline's repeats spread over the limit (coefficient of variation, docs/analysis.md)."""
    from radt.analysis.baselines import baseline_spread_flagged

    found = []
    for row in frame.itertuples(index=False):
        pct = getattr(row, "baseline_cv_pct", None)
        if baseline_spread_flagged(pct) and math.isfinite(row.slowdown):
            repeats = len(str(row.baseline_run_id or "").split())
            found.append(
                f"{row.run_name or row.run_id}: slowdown {row.slowdown:.2f} against "
                f"{repeats} baseline repeats that spread {pct:.1f} %"
            )
    return found


def crosscheck_notes(frame: pd.DataFrame) -> list[str]:
    """``name: the integral of power is 7.2 % above the energy counter`` for each row whose
    energy cross-check is over the limit (docs/analysis.md)."""
    from radt.analysis.attribution import crosscheck_flagged

    found = []
    for row in frame.itertuples(index=False):
        pct = getattr(row, "energy_crosscheck_pct", None)
        if crosscheck_flagged(pct):
            side = "above" if pct > 0 else "below"
            found.append(
                f"{row.run_name or row.run_id}: the integral of power is {abs(pct):.1f} % "
                f"{side} the energy counter"
            )
    return found


def run_runs(argv: list[str]) -> int:
    """``radt runs``: the experiments, or the runs of one with their summary figures."""
    from radt.analysis.load import open_client
    from radt.analysis.summary import summary

    args = runs_parser().parse_args(argv)
    if args.experiment is None:
        client = open_client(args.tracking_uri)
        experiments = []
        token = None
        while True:
            page = client.search_experiments(max_results=1000, page_token=token)
            experiments.extend(page)
            token = page.token
            if not token:
                break
        rows = [
            [
                str(exp.experiment_id),
                exp.name,
                str(_stamp(exp.last_update_time or exp.creation_time)),
            ]
            for exp in experiments
        ]
        print(_table(["id", "experiment", "last update (UTC)"], rows, right={0}))
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


def _stamp(millis: int | None) -> str:
    import pandas as pd

    if not millis:
        return "-"
    return pd.Timestamp(millis, unit="ms", tz="UTC").strftime("%Y-%m-%d %H:%M")
