"""``radt doctor``: what this machine lets radT measure and control (the probes:
:mod:`radt.doctor.probes`); ``--measure``: how far this GPU's readings are from each other
(:mod:`radt.doctor.measure`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from radt.doctor.probes import NAMES, Missing, missing, rows, table
from radt.errors import UsageError


def run_doctor(argv: list[str]) -> int:
    """``radt doctor``: what this machine lets radT measure and control."""
    parser = argparse.ArgumentParser(prog="radt doctor", description=run_doctor.__doc__)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    from radt.launch.command import add_listener_option, parse_listener_options

    add_listener_option(parser, "rapl.root=PATH")
    parser.add_argument(
        "--require",
        metavar="A,B",
        help=f"exit 1 naming what is missing among these (of: {', '.join(NAMES)}, gpuN)",
    )
    parser.add_argument(
        "--measure",
        action="store_true",
        help="record the built-in load as a run and report how the GPU's readings compare",
    )
    parser.add_argument("-d", "--device", type=int, default=0, help="GPU index (--measure)")
    parser.add_argument(
        "--seconds", type=float, default=30.0, help="length of the load (--measure; at least 5)"
    )
    args = parser.parse_args(argv)
    from radt.tracking import prepare_process_env

    if args.measure:
        from radt.doctor.measure import MIN_SECONDS, listeners_here, measure, report

        if args.seconds < MIN_SECONDS:
            raise UsageError(
                f"--seconds {args.seconds:g} is too short; give at least {MIN_SECONDS}"
            )
        values = measure(args.device, args.seconds, listeners_here())
        print(json.dumps(values, indent=1) if args.json else report(values))
        return 0
    prepare_process_env()
    found = rows(parse_listener_options(args.listener_option))
    if args.require is not None:
        wanted = [name.strip() for name in args.require.split(",") if name.strip()]
        lacking = missing(found, wanted)
        if lacking:
            raise Missing(
                "missing: " + "; ".join(f"{row.name} ({row.why}; {row.fix})" for row in lacking)
            )
    if args.json:
        print(json.dumps([asdict(row) for row in found], indent=1))
    elif args.require is None:
        print(table(found))
    return 0
