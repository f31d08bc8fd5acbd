"""``radt [options] COMMAND...``: a command, a plan (``radt PLAN.csv``) or a study
(``radt STUDY.yaml``) under radT."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING

from radt.errors import UsageError
from radt.launch.command import add_listener_option, parse_listener_options, parse_pairs
from radt.tags import MODES, Mode

if TYPE_CHECKING:
    from radt.launch.job import JobInputs

MIN_WINDOW_S = 0.001
PLAN_SUFFIXES = (".csv", ".yaml", ".yml")
ORIGINAL_ONLY = ((("-w", "--workload"), "N"), (("-c", "--collocation"), "METHOD"))
"""The original radT's flags for a single script's plan row: radT takes them from a plan."""
NO_COLLOCATION = ("-", Mode.NONE, "")
DEVICE_PREFIXES = ("gpu-", "mig-")


def launcher_parser() -> argparse.ArgumentParser:
    """Options of ``radt [options] COMMAND...``."""
    parser = argparse.ArgumentParser(
        prog="radt",
        usage="radt [options] COMMAND [ARGS...] | radt [options] PLAN.csv "
        "| radt [options] STUDY.yaml [--dry-run] "
        "| radt sync [FOLDER] | radt listeners [NAME] | radt export -e EXPERIMENT ... "
        "| radt runs [-e EXPERIMENT] | radt ui [--port 8050]",
        description="Run a training command as an MLflow run, with hardware listeners. "
        "A .py file runs with this Python; anything after -- runs as given.",
    )
    parser.add_argument("-e", "--experiment", help="experiment name or id (created if missing)")
    parser.add_argument("-n", "--run-name", "--name", help="name of the MLflow run")
    parser.add_argument(
        "-t", "--tag", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    parser.add_argument(
        "-l",
        "--listeners",
        metavar="NAMES",
        help="listeners joined by + (e.g. top+iostat), or none; default: every available one",
    )
    add_listener_option(parser, "top.per_core=1")
    parser.add_argument(
        "--interval",
        "--poll_interval",
        type=float,
        metavar="SECONDS",
        help="sampling interval of every listener",
    )
    parser.add_argument(
        "-d", "--devices", metavar="IDS", help="GPU indices or UUIDs, joined by , or + (1+2)"
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
        "--autolog",
        action="store_true",
        help="count examples, steps and epochs of an unmodified PyTorch, Hugging Face Trainer "
        "or Lightning script (no radt.log_examples needed)",
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
        "--group",
        metavar="NAME",
        help="one node of a distributed training: its job run (default: RADT_GROUP, the Slurm "
        "step, torchrun's --rdzv-id) holds a run per node",
    )
    parser.add_argument(
        "-r",
        "--rerun",
        action="store_true",
        help="plans: run FAILED workloads again (FINISHED never)",
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
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="plans and studies: every workload a Slurm job (one job array); waits, showing "
        "progress, and writes the statuses back",
    )
    parser.add_argument(
        "--slurm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --slurm: overrides the study's slurm: block, e.g. partition=gpu, "
        "time=02:00:00, max_parallel=4; repeatable",
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="with --slurm: submit and return; the same command again shows where they stand",
    )
    # On the node: the workload of this array task (written by the submitting radT).
    parser.add_argument("--slurm-task", metavar="FILE", help=argparse.SUPPRESS)
    # The closing job: record the ended jobs of this plan and close the runs.
    parser.add_argument("--slurm-close", metavar="PLAN", help=argparse.SUPPRESS)
    parser.add_argument(
        "--manual",
        action="store_true",
        help="the steady-state window starts when the script opens radt.run.RADTBenchmark()",
    )
    parser.add_argument(
        "--buffered",
        action="store_true",
        help="leave the command's output buffered (radT sets PYTHONUNBUFFERED=1 otherwise)",
    )
    for flags, metavar in ORIGINAL_ONLY:
        parser.add_argument(*flags, metavar=metavar, help=argparse.SUPPRESS)
    parser.add_argument("--conda", action="store_true", help=argparse.SUPPRESS)
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


SIMILAR = 0.85
"""How alike (difflib's ratio) a misspelt option and one of radT's must be to be suggested:
``--experimnt`` → ``--experiment``, while a script's ``--epochs`` is not ``--max-epochs``."""


def refuse_unknown(
    parser: argparse.ArgumentParser, own: list[str], unknown: list[str], command: list[str]
) -> None:
    """A UsageError for the first option among ``unknown`` (radT's options ``own`` that its
    ``parser`` does not know): the option of radT's it misspells, or else that a script's flags
    go after the script (``radt [options] script.py --epochs 2``). Returns when ``unknown``
    holds no option (a stray operand after a plan, which argparse reports)."""
    import difflib

    flag = next((arg for arg in unknown if arg.startswith("-") and arg != "-"), None)
    if flag is None:
        return
    name = flag.split("=", 1)[0]
    options = [  # radT's shown options, long against long, short against short
        option
        for action in parser._actions
        if action.help is not argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--") == name.startswith("--")
    ]
    close = difflib.get_close_matches(name, options, n=1, cutoff=SIMILAR)
    if close:
        raise UsageError(f"unknown option {name}; did you mean {close[0]}?")
    if not command or command[0].lower().endswith(PLAN_SUFFIXES):
        raise UsageError(f"unknown option {name}; radt --help lists radT's options")
    values: list[str] = []
    if own[-1] == flag and "=" not in flag:
        # the tokens between the flag and the command are its values: radt --epochs 2 train.py
        start = next((i for i, arg in enumerate(command) if _is_command(arg)), 0)
        values = command[:start]
    moved = [*command[len(values) :], flag, *values]
    raise UsageError(
        f"unknown option {name}; flags for your script go after it: "
        f"radt [options] {shlex.join(moved)}"
    )


def _is_command(arg: str) -> bool:
    """Whether ``arg`` reads as the command rather than an option's value: a script, a file
    or a program on the PATH."""
    import shutil

    return arg.endswith((".py", ".sh")) or os.path.exists(arg) or shutil.which(arg) is not None


def parse_devices(text: str | None) -> list[str]:
    """``0,1``, ``1+2`` (the original radT's form) or UUIDs → ids; UsageError for anything else."""
    if text is None:
        return []
    devices = [part.strip() for part in text.replace("+", ",").split(",") if part.strip()]
    wrong = [d for d in devices if not (d.isdigit() or d.lower().startswith(DEVICE_PREFIXES))]
    if wrong or not devices:
        raise UsageError(
            f"-d {text}: {', '.join(wrong) or 'nothing'} is not a GPU index or UUID; "
            "give indices or UUIDs joined by , or + (e.g. -d 0 or -d 1+2; "
            "`nvidia-smi -L` lists them)"
        )
    return devices


def refuse_original_only(args: argparse.Namespace) -> None:
    """Answer the original radT's single-script flags that radT takes from a plan, in one line."""
    if args.workload is not None:
        raise UsageError(
            f"-w/--workload {args.workload}: radT groups runs into workloads in a plan's "
            "Workload column (radt plan.csv); a single command is a workload of its own"
        )
    if args.collocation is not None and args.collocation.strip().lower() not in NO_COLLOCATION:
        raise UsageError(
            f"-c/--collocation {args.collocation}: radT sets collocation in a plan's Collocation "
            "column (radt plan.csv); a single command runs on its GPUs as they are"
        )
    if args.conda:
        raise UsageError(
            "--conda: radT runs the command in the environment radT runs in; "
            "activate the conda environment first (conda activate ENV), then run radt"
        )


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
    """``--job``, ``--job-ignore``, ``--warmup-epochs``, ``--warmup-s``, checked, and
    ``--manual`` (or ``RADT_MANUAL=1`` inherited: the script's window starts the same way)."""
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
    from radt.run import MANUAL_VARIABLE

    return JobInputs(
        values["--job"],
        tuple(flags),
        values["--warmup-epochs"],
        values["--warmup-s"],
        manual=bool(args.manual) or os.environ.get(MANUAL_VARIABLE) == "1",
    )


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


SUBMIT_ONLY = {"--slurm": 0, "--detach": 0, "--rerun": 0, "--rerun-all": 0, "--dry-run": 0}
AGAIN_LEFT_OUT = ("--detach", "--rerun", "--rerun-all", "--dry-run")
"""Options the command that goes on after a submission leaves out."""
SUBMIT_ONLY.update({"--slurm-option": 1, "--modes": 1, "--plan": 1})


def node_args(own: list[str]) -> list[str]:
    """radT's options for the radT on a Slurm node: those of the submitting command, less the
    ones that only concern submitting (``--slurm``, ``--detach``, ``--rerun``, …)."""
    kept, skip = [], 0
    for arg in own:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in SUBMIT_ONLY:
            skip = SUBMIT_ONLY[name] if "=" not in arg else 0
            continue
        kept.append(arg)
    return kept


def slurm_request(args: argparse.Namespace, own: list[str]):
    """What ``--slurm`` and its options ask for, or None without ``--slurm``."""
    if not args.slurm:
        if args.slurm_option or args.detach:
            raise UsageError("--slurm-option and --detach go with --slurm: radt STUDY.yaml --slurm")
        return None
    from radt.slurm.dispatch import SlurmRequest

    parse_pairs(args.slurm_option, "--slurm-option")  # a malformed pair: one line
    overrides: dict[str, str] = {}
    for pair in args.slurm_option:  # extra= and setup= add up (each a ;-separated list)
        key, _, value = pair.partition("=")
        key = key.strip()
        if key in ("extra", "setup") and overrides.get(key):
            value = f"{overrides[key]}; {value}"
        overrides[key] = value
    return SlurmRequest(
        overrides=overrides,
        detach=args.detach,
        dry_run=args.dry_run,
        node_args=node_args(own),
    )


def again_command(target: str, own: list[str]) -> str:
    """``radt TARGET --slurm …``: the submitting command less its one-off options, to go on."""
    kept = [arg for arg in own if arg.split("=", 1)[0] not in AGAIN_LEFT_OUT]
    return shlex.join(["radt", target, *kept])


def run_launcher(argv: list[str]) -> int:
    """``radt [options] COMMAND...``."""
    parser = launcher_parser()
    own, command = split_argv(argv, parser)
    if command and command[0].lower().endswith(PLAN_SUFFIXES):
        # a plan or study takes radT's options after it too: radt study.yaml --dry-run
        own, command = own + command[1:], command[:1]
    own = _join_flag_values(own, ("--job-ignore",))
    args, unknown = parser.parse_known_args(own)
    if unknown:
        refuse_unknown(parser, own, unknown, command)
        args = parser.parse_args(own)  # not an option: argparse's own message, as ever
    if args.version:
        from radt import __version__

        print(f"radt {__version__}")
        return 0
    if not command:
        parser.print_usage(sys.stderr)
        raise UsageError("no command given; try `radt examples/train.py --epochs 1`")
    from radt import warm

    if warm.enabled():
        code = warm.run(argv)  # MLflow already imported there; None: run it here
        if code is not None:
            return code
    check_launcher_args(args)
    refuse_original_only(args)
    devices = parse_devices(args.devices)
    if args.manual:
        os.environ["RADT_MANUAL"] = "1"  # the command inherits it; radt.run reads it
    if args.buffered:
        os.environ["PYTHONUNBUFFERED"] = ""  # empty is unset for Python; radT keeps a set value
    modes = parse_modes(args.modes)
    inputs = job_inputs(args)
    from radt.launch.launcher import LaunchOptions, launch

    study = command[0].lower().endswith((".yaml", ".yml")) and len(command) == 1
    plan = command[0].endswith(".csv") and len(command) == 1
    slurm = slurm_request(args, own)
    if slurm is not None:
        slurm.again = again_command(command[0], own)
    if slurm is not None and not (plan or study):
        raise UsageError("--slurm runs plans and studies; inside a job: srun radt COMMAND")
    if not study and (args.plan or (args.dry_run and slurm is None)):
        raise UsageError("--dry-run and --plan are for studies: radt STUDY.yaml --dry-run")
    if plan or study:
        if inputs.job is not None:
            raise UsageError(
                "--job names a single command's Job; in a plan, use the Job column"
                + ("; in a study, job:" if study else "")
            )
        from pathlib import Path

        from radt.console import leave
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
            autolog=args.autolog,
            modes=modes,
            job=inputs,
            workdir=check_mode(args.workdir),
            loader_timeout_s=args.loader_timeout,
            slurm=slurm,
        )
        if args.slurm_task:
            from radt.slurm.node import run_task

            code = run_task(Path(args.slurm_task), options)
        elif args.slurm_close:
            from radt.plans.studyrun import close_plan

            code = close_plan(Path(command[0]), Path(args.slurm_close), options, study=study)
        elif study:
            from radt.plans.studyrun import StudyOptions, run_study

            code = run_study(
                StudyOptions(
                    Path(command[0]),
                    options,
                    plan_path=Path(args.plan) if args.plan else None,
                    dry_run=args.dry_run,
                )
            )
        else:
            code = run_plan(options)
        return leave(code)  # its runs are complete: no interpreter teardown
    options = LaunchOptions(
        command=command,
        experiment=args.experiment,
        run_name=args.run_name,
        tags=parse_pairs(args.tag, "--tag"),
        listeners=args.listeners,
        listener_options=parse_listener_options(args.listener_option),
        interval_s=args.interval,
        devices=devices,
        max_time_min=args.max_time,
        max_epochs=args.max_epochs,
        autolog=args.autolog,
        grace_s=args.grace,
        window_s=args.window,
        tracking_uri=args.tracking_uri,
        job=inputs,
        group=args.group,
    )
    from radt.console import leave

    return leave(launch(options))  # the run is complete: no interpreter teardown after it
