"""``radt sync [FOLDER]``: upload what an outage or a crash left in local run folders."""

from __future__ import annotations

import argparse


def run_sync(argv: list[str]) -> int:
    """``radt sync [FOLDER]``: upload what an outage or a crash left behind;
    ``--list`` says what waits, ``--forget RUN_ID`` drops a run's folder."""
    from radt.record.runfolder import runs_root
    from radt.record.sync import forget, sync, waiting

    parser = argparse.ArgumentParser(
        prog="radt sync",
        description="Upload runs left in local spool folders (after an outage or a crash).",
    )
    parser.add_argument("folder", nargs="?", help="a run folder or a folder of them")
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--list", action="store_true", help="list the runs waiting, and where they go; send nothing"
    )
    action.add_argument(
        "--forget",
        metavar="RUN_ID",
        help="delete the folder of RUN_ID without sending what is left in it",
    )
    args = parser.parse_args(argv)
    from pathlib import Path

    root = Path(args.folder) if args.folder else runs_root()
    if args.forget is not None:
        return forget(root, args.forget)
    if args.list:
        lines = waiting(root)
        print("\n".join(lines) if lines else f"nothing waiting in {root}")
        return 0
    from radt.analysis.closing import summarize
    from radt.launch.group import end_job_run

    return sync(root, summarize, end_job_run)
