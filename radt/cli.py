"""The ``radt`` command line: ``radt [options] COMMAND...``, ``radt sync``, ``radt listeners``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from radt.console import guard_std_streams
from radt.errors import RadtError, UsageError
from radt.plans.model import MODES

if TYPE_CHECKING:
    from radt.launch.job import JobInputs

SUBCOMMANDS = ("sync", "listeners", "export", "runs", "ui")
MIN_WINDOW_S = 0.001
PLAN_SUFFIXES = (".csv", ".yaml", ".yml")


def launcher_parser() -> argparse.ArgumentParser:
    """Options of ``radt [options] COMMAND...``."""
    parser = argparse.ArgumentParser(
        prog="radt",
        usage="radt [options] COMMAND [ARGS...] | radt [options] PLAN.csv "
        "| radt [options] STUDY.yaml [--dry-run] "
        "| radt sync [FOLDER] | radt listeners | radt export -e EXPERIMENT ... "
        "| radt runs [-e EXPERIMENT] | radt ui [--port 8050]",
        description="Run a training command as an MLflow run, with hardware listeners. "
        "A .py file runs with this Python; anything after -- runs as given.",
    )
    parser.add_argument("-e", "--experiment", help="experiment name or id (created if missing)")
    parser.add_argument("-n", "--run-name", help="name of the MLflow run")
    parser.add_argument(
        "-t", "--tag", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument(
        "-l",
        "--listeners",
        metavar="NAMES",
        help="listeners joined by + (e.g. top+iostat), or none; default: every available one",
    )
    parser.add_argument(
        "-o",
        "--listener-option",
        action="append",
        default=[],
        metavar="LISTENER.KEY=VALUE",
        help="an option for one listener, e.g. top.per_core=1; repeatable",
    )
    parser.add_argument(
        "--interval", type=float, metavar="SECONDS", help="sampling interval of every listener"
    )
    parser.add_argument(
        "-d", "--devices", metavar="IDS", help="GPU indices or UUIDs, comma-separated"
    )
    parser.add_argument(
        "--max-time", type=float, metavar="MINUTES", help="stop the command after this long"
    )
    parser.add_argument(
        "--max-epochs",
        type=int,
        metavar="N",
        help="end the command cleanly after N epochs (scripts that call radt.log_epoch)",
    )
    parser.add_argument(
        "--warmup-epochs",
        metavar="N",
        help="the steady-state window starts after N epochs (default: the first epoch, "
        "or the first reported example; radt.start_window() overrides both)",
    )
    parser.add_argument(
        "--warmup-s",
        metavar="SECONDS",
        help="the steady-state window starts SECONDS after the command starts",
    )
    parser.add_argument(
        "--job",
        metavar="NAME",
        help="what is trained, to find the run's baseline (default: the command without "
        "seed flags); plans: the Job column",
    )
    parser.add_argument(
        "--job-ignore",
        action="append",
        default=[],
        metavar="FLAG",
        help="a flag that does not change the Job, like --seed (which is always ignored); "
        "repeatable",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (default 10)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="MLflow gets one mean point per metric per window (default 1); "
        "every sample stays in radt/samples.parquet",
    )
    parser.add_argument("--tracking-uri", help="overrides MLFLOW_TRACKING_URI")
    parser.add_argument(
        "--rerun", action="store_true", help="plans: run FAILED workloads again (FINISHED never)"
    )
    parser.add_argument(
        "--rerun-all",
        action="store_true",
        help="plans: run every workload again, FINISHED ones too (new runs)",
    )
    parser.add_argument(
        "--modes",
        metavar="MODES",
        help="plans: run only workloads whose collocation is among these, e.g. none+naive+mps",
    )
    parser.add_argument(
        "--workdir",
        default="script",
        metavar="script|here",
        help="plans: run each row in its script's folder (script, the default, as the original "
        "radT does) or in the current folder (here)",
    )
    parser.add_argument(
        "--power-limit",
        type=float,
        metavar="WATTS",
        help="plans: cap the power of the workloads' GPUs (restored afterwards)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="studies: check the study, print its workloads and write its plan; run nothing",
    )
    parser.add_argument(
        "--plan",
        metavar="FILE",
        help="studies: the plan CSV the study is recorded in (default: STUDY.plan.csv beside it)",
    )
    parser.add_argument(
        "--loader-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="plans: how long a workload's shared loader may take to listen (default 300)",
    )
    parser.add_argument("--version", action="store_true", help="print radT's version")
    return parser


def split_argv(argv: list[str], parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """Split ``argv`` into radT's options and the command (from ``--`` or the first operand)."""
    takes_value = {
        option
        for action in parser._actions
        if action.nargs != 0
        for option in action.option_strings
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[:i], argv[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            return argv[:i], argv[i:]
        if arg in takes_value:
            i += 1
        i += 1
    return argv, []


def parse_pairs(pairs: list[str], what: str) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings; raise UsageError for a malformed one."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"malformed {what} {pair!r}: expected KEY=VALUE, e.g. team=vision")
        parsed[key.strip()] = value
    return parsed


def parse_listener_options(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``top.per_core=1`` → ``{"top": {"per_core": "1"}}``."""
    options: dict[str, dict[str, str]] = {}
    for key, value in parse_pairs(pairs, "listener option").items():
        listener, dot, name = key.partition(".")
        if not dot or not name:
            raise UsageError(
                f"malformed listener option {key!r}: "
                "expected LISTENER.KEY=VALUE, e.g. top.per_core=1"
            )
        options.setdefault(listener, {})[name] = value
    return options


def _join_flag_values(own: list[str], options: tuple[str, ...]) -> list[str]:
    """``--job-ignore --seed`` as ``--job-ignore=--seed``: its value is itself a flag."""
    joined: list[str] = []
    args = iter(own)
    for arg in args:
        if arg in options:
            value = next(args, None)
            joined.append(arg if value is None else f"{arg}={value}")
        else:
            joined.append(arg)
    return joined


def job_inputs(args: argparse.Namespace) -> JobInputs:
    """``--job``, ``--job-ignore``, ``--warmup-epochs``, ``--warmup-s``, checked."""
    from radt.launch.job import (
        JobInputs,
        parse_job,
        parse_job_flag,
        parse_warmup_epochs,
        parse_warmup_s,
    )

    parsers = (
        ("--job", args.job, parse_job),
        ("--warmup-epochs", args.warmup_epochs, parse_warmup_epochs),
        ("--warmup-s", args.warmup_s, parse_warmup_s),
    )
    values = {}
    for option, given, parse in parsers:
        try:
            values[option] = None if given is None else parse(given)
        except ValueError as exc:
            raise UsageError(f"{option} {exc}") from None
    flags = []
    for flag in args.job_ignore:
        try:
            flags.append(parse_job_flag(flag))
        except ValueError as exc:
            raise UsageError(f"--job-ignore {exc}") from None
    if values["--warmup-epochs"] is not None and values["--warmup-s"] is not None:
        raise UsageError("give --warmup-epochs or --warmup-s, not both")
    return JobInputs(values["--job"], tuple(flags), values["--warmup-epochs"], values["--warmup-s"])


def check_launcher_args(args: argparse.Namespace) -> None:
    """Refuse values that cannot work, naming the option and the value."""
    for name, value in (
        ("--interval", args.interval),
        ("--max-time", args.max_time),
        ("--power-limit", args.power_limit),
        ("--max-epochs", args.max_epochs),
        ("--loader-timeout", args.loader_timeout),
    ):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive, got {value:g}")
    if args.grace < 0:
        raise UsageError(f"--grace must be 0 or more, got {args.grace:g} (seconds before SIGKILL)")
    if not args.window >= MIN_WINDOW_S:
        raise UsageError(
            f"--window must be at least {MIN_WINDOW_S:g} s, got {args.window:g} "
            "(MLflow keeps whole milliseconds)"
        )
    if args.experiment is not None and not args.experiment.strip():
        raise UsageError("-e/--experiment needs a name or an id; leave it out for Default")


def parse_modes(text: str | None) -> set[str] | None:
    """``none+naive`` (``,`` works too) → ``{"none", "naive"}``; UsageError for a typo."""
    if text is None:
        return None
    modes = {mode.strip().lower() for mode in text.replace(",", "+").split("+") if mode.strip()}
    unknown = sorted(modes - set(MODES))
    if unknown or not modes:
        raise UsageError(
            f"unknown mode {', '.join(map(repr, unknown)) or repr(text)} in --modes; "
            f"choose from {', '.join(MODES)} (joined by +)"
        )
    return modes


def run_launcher(argv: list[str]) -> int:
    """``radt [options] COMMAND...``."""
    parser = launcher_parser()
    own, command = split_argv(argv, parser)
    if command and command[0].lower().endswith(PLAN_SUFFIXES):
        # a plan or study takes radT's options after it too: radt study.yaml --dry-run
        own, command = own + command[1:], command[:1]
    args = parser.parse_args(_join_flag_values(own, ("--job-ignore",)))
    if args.version:
        from radt import __version__

        print(f"radt {__version__}")
        return 0
    if not command:
        parser.print_usage(sys.stderr)
        raise UsageError("no command given; try `radt examples/train.py --epochs 1`")
    check_launcher_args(args)
    modes = parse_modes(args.modes)
    inputs = job_inputs(args)
    from radt.launch.launcher import LaunchOptions, launch

    study = command[0].lower().endswith((".yaml", ".yml")) and len(command) == 1
    if not study and (args.dry_run or args.plan):
        raise UsageError("--dry-run and --plan are for studies: radt STUDY.yaml --dry-run")
    if (command[0].endswith(".csv") and len(command) == 1) or study:
        if inputs.job is not None:
            raise UsageError(
                "--job names a single command's Job; in a plan, use the Job column"
                + ("; in a study, job:" if study else "")
            )
        from pathlib import Path

        from radt.plans.runner import PlanOptions, run_plan
        from radt.plans.workdir import check_mode

        if study and args.power_limit is not None:
            raise UsageError("a study sets its power limits with power_limit: in its file")
        options = PlanOptions(
            path=Path(command[0]),
            rerun=args.rerun,
            rerun_all=args.rerun_all,
            listeners=args.listeners,
            listener_options=parse_listener_options(args.listener_option),
            interval_s=args.interval,
            max_time_min=args.max_time,
            grace_s=args.grace,
            window_s=args.window,
            tracking_uri=args.tracking_uri,
            power_limit_w=args.power_limit,
            max_epochs=args.max_epochs,
            modes=modes,
            job=inputs,
            workdir=check_mode(args.workdir),
            loader_timeout_s=args.loader_timeout,
        )
        if study:
            from radt.plans.studyrun import StudyOptions, run_study

            return run_study(
                StudyOptions(
                    Path(command[0]),
                    options,
                    plan_path=Path(args.plan) if args.plan else None,
                    dry_run=args.dry_run,
                )
            )
        return run_plan(options)
    options = LaunchOptions(
        command=command,
        experiment=args.experiment,
        run_name=args.run_name,
        tags=parse_pairs(args.tag, "--tag"),
        listeners=args.listeners,
        listener_options=parse_listener_options(args.listener_option),
        interval_s=args.interval,
        devices=[d.strip() for d in args.devices.split(",")] if args.devices else [],
        max_time_min=args.max_time,
        max_epochs=args.max_epochs,
        grace_s=args.grace,
        window_s=args.window,
        tracking_uri=args.tracking_uri,
        job=inputs,
    )
    return launch(options)


def run_listeners(argv: list[str]) -> int:
    """``radt listeners``: every discovered listener and whether it can run here."""
    parser = argparse.ArgumentParser(prog="radt listeners", description=run_listeners.__doc__)
    parser.add_argument(
        "-o",
        "--listener-option",
        action="append",
        default=[],
        metavar="LISTENER.KEY=VALUE",
        help="an option for one listener, e.g. rapl.root=PATH; repeatable",
    )
    args = parser.parse_args(argv)
    from radt.launch.registry import discover

    found = discover(parse_listener_options(args.listener_option))
    width = max([len(name) for name in found] + [8])
    print(f"{'listener':<{width}}  {'available':<9}  details")
    for name, item in found.items():
        status = "yes" if item.reason is None else "no"
        print(f"{name:<{width}}  {status:<9}  {item.reason or item.target}")
    return 0


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
    return sync(root)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``radt`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    guard_std_streams()
    try:
        if argv and argv[0] == "sync":
            return run_sync(argv[1:])
        if argv and argv[0] == "listeners":
            return run_listeners(argv[1:])
        if argv and argv[0] == "export":
            from radt.analysis.export import run_export

            return run_export(argv[1:])
        if argv and argv[0] == "runs":
            from radt.analysis.export import run_runs

            return run_runs(argv[1:])
        if argv and argv[0] == "ui":
            from radt.frontend.serve import run_ui

            return run_ui(argv[1:])
        return run_launcher(argv)
    except RadtError as exc:
        print(f"radt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("radt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
