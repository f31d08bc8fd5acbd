"""The ``radt`` command line: :func:`main` picks the subcommand's module and runs it.

One module per subcommand: :mod:`radt.cli.run` (``radt [options] COMMAND``, plans and
studies), :mod:`radt.cli.runs`, :mod:`radt.cli.export`, :mod:`radt.cli.report`,
:mod:`radt.cli.sync`, :mod:`radt.cli.listeners`, :mod:`radt.cli.doctor` and :mod:`radt.cli.ui`.
Only these modules print; the library they call computes and returns. Each is imported when
its subcommand runs, so ``radt --help`` imports neither MLflow nor the analysis.
"""

from __future__ import annotations

import sys

from radt.console import guard_std_streams, install_lines
from radt.errors import RadtError


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``radt`` console script."""
    argv = sys.argv[1:] if argv is None else argv
    guard_std_streams()
    install_lines()
    try:
        return _command(argv)
    except RadtError as exc:
        print(f"radt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("radt: interrupted", file=sys.stderr)
        return 130


WARM_LOOKS = ("runs", "export", "report", "sync", "doctor")
"""The subcommands that, like a run, go through the warm launcher (:mod:`radt.warm`): each
imports MLflow (and pandas, or the listeners' modules), seconds of a short command."""


def _command(argv: list[str]) -> int:
    """``radt NAME ...`` runs the subcommand NAME's module (imported only then); anything
    else is ``radt [options] COMMAND``."""
    name, rest = (argv[0], argv[1:]) if argv else ("", [])
    if name in WARM_LOOKS and not {"-h", "--help"} & set(rest):
        from radt import warm

        if warm.enabled():
            code = warm.run(argv)  # None: none to ask (one starts for next time), run it here
            if code is not None:
                return code
    if name == "sync":
        from radt.cli.sync import run_sync

        return run_sync(rest)
    if name == "listeners":
        from radt.cli.listeners import run_listeners

        return run_listeners(rest)
    if name == "doctor":
        from radt.cli.doctor import run_doctor

        return run_doctor(rest)
    if name == "export":
        from radt.cli.export import run_export

        return run_export(rest)
    if name == "runs":
        from radt.cli.runs import run_runs

        return run_runs(rest)
    if name == "report":  # radt report: a study's findings as one page
        from radt.cli.report import run_report

        return run_report(rest)
    if name == "ui":
        from radt.cli.ui import run_ui

        return run_ui(rest)
    from radt.cli.run import run_launcher

    return run_launcher(argv)


if __name__ == "__main__":
    sys.exit(main())
