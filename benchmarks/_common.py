"""Shared helpers of the benchmarks: arguments, machine facts, temp workspaces, measuring
rounds, result tables, statistics.

Nothing here measures anything; each benchmark script is self-contained apart
from these helpers and runs with ``python benchmarks/<name>.py``. The tests'
helper modules (``tests/servers.py``, ``mlflow_server.py``, ``postgres.py``,
``chromium.py``) are importable once this module is: the benchmarks start the
same real servers and browser as the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from radt.launch.environment import cpu_model

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
OLD_VENV = BENCH / ".venv-radt0230"
TESTS = REPO / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(1, str(TESTS))  # after the script's own folder
T = TypeVar("T")


def python_bin() -> str:
    """The real interpreter (not a pyenv shim, which adds ~0.3 s to every start)."""
    return sys.executable


def clean_env() -> dict[str, str]:
    """This process's environment without radT's and MLflow's variables (no run to report to)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RADT_", "MLFLOW_"))}


def python_json(script: str, *args: str, env: dict[str, str]) -> dict:
    """Run ``python -c script args`` and return the JSON object on its last line of output."""
    done = subprocess.run(
        [python_bin(), "-c", script, *args], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def with_receiver(receiver: str, measure: Callable[[dict[str, str]], dict]) -> tuple[dict, dict]:
    """Run ``measure(env)`` while the script ``receiver`` takes radT's events.

    ``receiver`` (run as ``python -c receiver NAME``) opens radT's event socket under
    ``NAME``, prints its ``RADT_EVENTS`` value, reads standard input to its end, then prints
    a JSON object. ``env`` is :func:`clean_env` with that ``RADT_EVENTS``. Returns
    ``measure``'s result and the receiver's JSON.
    """
    process = subprocess.Popen(
        [python_bin(), "-c", receiver, f"bench-{uuid.uuid4().hex}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    variable = process.stdout.readline().strip()
    try:
        result = measure({**clean_env(), "RADT_EVENTS": variable})
    finally:
        out, _ = process.communicate("")
    return result, json.loads(out.strip().splitlines()[-1])


def radt_bin() -> str:
    """The ``radt`` console script beside this interpreter (again, not a shim)."""
    beside = Path(sys.executable).parent / "radt"
    if beside.exists():
        return str(beside)
    found = shutil.which("radt")
    if not found:
        raise SystemExit("radt is not installed; run `pip install -e .` first")
    return found


def old_radt_bin(venv: Path = OLD_VENV) -> Path | None:
    """The ``radt`` 0.2.30 console script in its own virtualenv, if it is set up."""
    script = venv / "bin" / "radt"
    return script if script.exists() else None


def versions(extra: Sequence[str] = ()) -> dict[str, str]:
    """Versions of what the benchmark depends on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("radt", "mlflow", "torch", "pyarrow", "psutil", *extra):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def old_radt_versions(venv: Path = OLD_VENV) -> str | None:
    """``radt==…, mlflow==…, torch==…, pandas==…`` inside the 0.2.30 virtualenv."""
    py = venv / "bin" / "python"
    if not py.exists():
        return None
    code = (
        "from importlib.metadata import version as v\n"
        "print(', '.join(f'{n} {v(n)}' for n in ('radt','mlflow','torch','pandas')))"
    )
    done = subprocess.run([str(py), "-I", "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or None


def header(title: str, command: str | None = None) -> str:
    """The lines every benchmark prints first: date, machine, versions, command
    (default: this process's own command line)."""
    command = command_line() if command is None else command
    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    vers = ", ".join(f"{k} {v}" for k, v in versions().items())
    lines = [
        f"## {title}",
        "",
        f"- date: {now}",
        f"- machine: {cpu_model()}, {os.cpu_count()} logical cores, {platform.platform()}",
        f"- versions: {vers}",
    ]
    try:
        git = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        git = ""
    if git:
        lines.append(f"- radT source: git {git}")
    old = old_radt_versions()
    if old:
        lines.append(f"- radT 0.2.30 virtualenv: {old}")
    lines += [f"- command: `{command}`", ""]
    return "\n".join(lines)


def command_line() -> str:
    """How this benchmark was started, as ``python benchmarks/<name>.py ...``."""
    return "python " + " ".join(
        [os.path.relpath(sys.argv[0], Path.cwd()) if sys.argv else "?", *sys.argv[1:]]
    )


def workspace(prefix: str, parent: Path | None = None) -> Path:
    """A fresh temporary folder (MLflow stores, RADT_HOME and copies live there)."""
    return Path(tempfile.mkdtemp(prefix=f"radt-bench-{prefix}-", dir=parent))


@contextlib.contextmanager
def scratch(prefix: str, keep: bool = False, parent: Path | None = None) -> Iterator[Path]:
    """A fresh :func:`workspace`, removed at the end unless ``keep`` (then named on stderr)."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = workspace(prefix, parent)
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def base_env(folder: Path, uri: str) -> dict[str, str]:
    """Environment for a measured process: its own tracking store, RADT_HOME, no telemetry."""
    env = dict(os.environ)
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "RADT_RUN_ID"):
        env.pop(name, None)
    env.update(
        MLFLOW_TRACKING_URI=uri,
        RADT_HOME=str(folder / "radt-home"),
        MLFLOW_DISABLE_TELEMETRY="true",
        DO_NOT_TRACK="true",
        PYTHONUNBUFFERED="1",
    )
    return env


def init_store(uri: str) -> None:
    """Create the tables of a SQLite store now, so no measured run pays for it.

    MLflow gives the store's Default experiment the artifact location
    ``./mlruns`` of the process that creates the tables: the store is created
    from its own folder, so that runs' artifacts stay beside it (in the temp
    folder) and never land in the current folder (the repository).
    """
    from mlflow.tracking import MlflowClient

    folder = Path(uri[len("sqlite:///") :]).parent if uri.startswith("sqlite:///") else None
    before = os.getcwd()
    try:
        if folder is not None:
            os.chdir(folder)
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    finally:
        os.chdir(before)


def sqlite_store(folder: Path) -> str:
    """A SQLite MLflow store ``folder/mlflow.db`` with its tables made (:func:`init_store`);
    returns its URI."""
    folder.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    init_store(uri)
    return uri


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float], fmt: str = ",.0f") -> str:
    """``min–max`` of the values, each formatted with ``fmt``, for the table."""
    if not values:
        return "–"
    return f"{min(values):{fmt}}–{max(values):{fmt}}"


def table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table; numbers right-aligned."""

    def cell(value: object) -> str:
        return str(value)

    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in text_rows)) for i, c in enumerate(columns)]
    numeric = [
        all(r[i][:1].isdigit() or r[i][:1] in "-–+." for r in text_rows) and i > 0
        for i in range(len(columns))
    ]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)) + " |"]
    out.append(
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if num else ("-" * (w + 2))
            for w, num in zip(widths, numeric, strict=True)
        )
        + "|"
    )
    for r in text_rows:
        out.append(
            "| "
            + " | ".join(
                (v.rjust(w) if num else v.ljust(w))
                for v, w, num in zip(r, widths, numeric, strict=True)
            )
            + " |"
        )
    return "\n".join(out)


def results(
    title: str, notes: str, columns: Sequence[str], rows: Sequence[Sequence[object]]
) -> str:
    """What a benchmark prints at the end: :func:`header`, the notes that say how to read
    the figures, and the table."""
    return "\n".join([header(title), notes, "", table(columns, rows)])


# --- Arguments and rounds -----------------------------------------------------


def arguments(
    doc: str | None, *, machine: bool = True, keep: bool = True
) -> argparse.ArgumentParser:
    """The parser every benchmark starts from: described by the first paragraph of its
    docstring, with the options for a shared machine (:func:`add_machine_options`) and
    ``--keep`` (keep the temporary folder)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().split("\n\n")[0])
    if machine:
        add_machine_options(parser)
    if keep:
        parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    return parser


def chosen(
    parser: argparse.ArgumentParser, text: str, known: Sequence[str], first: str | None = None
) -> list[str]:
    """The names of a comma-separated option, checked against ``known`` (a usage error
    names the unknown ones); ``first`` is put in front when missing (the baseline)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)} (choose from {', '.join(known)})")
    if first is not None and first not in names:
        names.insert(0, first)
    return names


def rotated(items: Sequence[T], rounds: int) -> Iterator[tuple[int, T]]:
    """``(round, item)`` for every item in every round, the order rotated by one each round,
    so that a drift of the machine hits every condition alike."""
    for round_no in range(rounds):
        shift = round_no % len(items) if items else 0
        for item in [*items[shift:], *items[:shift]]:
            yield round_no, item


def undisturbed(
    args: argparse.Namespace,
    measure: Callable[[], T],
    said: Callable[[T, bool], None] | None = None,
) -> T:
    """One measurement, taken again while other processes disturbed it (with ``--quiet``).

    With ``--quiet``: before each try the machine must be quiet (:func:`wait_quiet`), and
    a try during which other processes used more than ``--max-other`` cores (the
    result's ``other_cores``) is taken again, up to ``--retries`` times; the last try
    counts. ``said(result, again)`` reports each try. A failure propagates.
    """
    tries = args.retries + 1 if args.quiet else 1
    for attempt in range(tries):
        if args.quiet:
            wait_quiet(args.max_other, max_wait_s=args.max_wait)
        result = measure()
        again = args.quiet and result.other_cores > args.max_other and attempt + 1 < tries
        if said is not None:
            said(result, again)
        if not again:
            break
    return result


# --- Other work on the machine ------------------------------------------------
# The benchmarks share a 2-core machine with whatever else runs (test suites of
# other sessions, for one). Before each measured run they wait until the machine
# is quiet, and they measure how much CPU other processes used during the run
# (all busy CPU time from /proc/stat minus the run's own process tree), so that a
# disturbed run can be repeated instead of silently skewing the medians.

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    idle = fields[3] + fields[4]
    return (sum(fields) - idle) / CLOCK_TICKS


def wait_quiet(
    max_busy_cores: float = 0.15, quiet_s: float = 2.0, max_wait_s: float = 300.0
) -> float:
    """Wait until the machine used under ``max_busy_cores`` for ``quiet_s`` in a row.

    Returns the seconds waited; gives up (and says so on stderr) after ``max_wait_s``.
    """
    began = time.monotonic()
    quiet_since = None
    last_busy, last_t = busy_cpu_s(), time.monotonic()
    while True:
        time.sleep(0.5)
        now_busy, now_t = busy_cpu_s(), time.monotonic()
        load = (now_busy - last_busy) / max(now_t - last_t, 1e-6)
        last_busy, last_t = now_busy, now_t
        if load <= max_busy_cores:
            quiet_since = quiet_since or now_t
            if now_t - quiet_since >= quiet_s:
                return now_t - began
        else:
            quiet_since = None
        if now_t - began > max_wait_s:
            print(
                f"machine still busy ({load:.2f} cores) after {max_wait_s:.0f} s; going on",
                file=sys.stderr,
            )
            return now_t - began


class Disturbance:
    """Measures the CPU that processes other than ours used during a block.

    Ours: this process (all its threads) and every descendant reaped in the block.
    """

    def __enter__(self) -> Disturbance:
        self._busy = busy_cpu_s()
        self._t = time.monotonic()
        self._own = _own_cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.monotonic() - self._t
        self.busy_s = busy_cpu_s() - self._busy
        self.own_s = _own_cpu() - self._own

    def other_cores(self) -> float:
        """Average cores used by other processes during the block."""
        return max(self.busy_s - self.own_s, 0.0) / max(self.wall_s, 1e-6)


def _own_cpu() -> float:
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


# --- Orphans ------------------------------------------------------------------
# radT 0.2.30's listener tools (top, iostat, free) outlive the processes that
# started them. As a child subreaper the benchmark inherits such orphans, reaps
# them, and so counts their CPU time in RUSAGE_CHILDREN like everyone else's.

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux); True if it worked."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            pids += [int(p) for p in (task / "children").read_text().split()]
    return pids


def reap_orphans(wait_s: float = 3.0, keep: frozenset[int] = frozenset()) -> int:
    """Reap descendants left behind by a finished run; end any still alive after ``wait_s``
    but those in ``keep`` (a warm launcher the benchmark started on purpose).

    Only processes that the benchmark's own runs started can be children here.
    Returns how many were ended with SIGTERM.
    """
    import signal

    deadline = time.monotonic() + wait_s
    ended = 0
    while True:
        if keep:  # each child but those kept, one at a time
            for pid in _children():
                if pid not in keep:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)
        else:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] != 0:
                    pass
            except ChildProcessError:
                return ended
        left = [pid for pid in _children() if pid not in keep]
        if not left:
            return ended
        if time.monotonic() >= deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGTERM)
                    ended += 1
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait_s
        time.sleep(0.05)


AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def _autogroups_on() -> bool:
    try:
        return AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False


def _set_autogroup_nice(pid: int | str, niceness: int) -> bool:
    path = Path(f"/proc/{pid}/autogroup")
    try:
        current = path.read_text().split()
        if current[-1] != str(niceness):
            path.write_text(str(niceness))
        return True
    except (OSError, IndexError):
        return False


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (from /proc/*/task/*/children)."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


class Priority:
    """Gives the benchmark and everything it starts a larger share of a shared machine.

    The Linux scheduler here groups processes by session ("autogroups",
    ``/proc/sys/kernel/sched_autogroup_enabled``): a process's niceness counts
    only against processes of its own session, and every session gets an equal
    share of the CPU. Other sessions' test suites on the same two cores would so
    take about half the machine from the measured runs, and radT itself starts
    the command in a session of its own (``setsid``). So the benchmark raises
    the niceness of its own autogroup and, from a watcher thread every 100 ms, of
    every new autogroup among its descendants: each condition gets the same
    weight, while inside a group (training against monitor) the scheduler
    behaves as it does by default. Other work is slowed, never starved. Without
    autogroups, the benchmark's own niceness is set instead (children inherit it).
    """

    def __init__(self, niceness: int) -> None:
        self.niceness = niceness
        self.how = "default priority"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Priority:
        import atexit

        atexit.register(self.__exit__)
        if self.niceness == 0:
            return self
        if _autogroups_on() and _set_autogroup_nice("self", self.niceness):
            self.how = f"autogroup niceness {self.niceness} for every session it starts"
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
            return self
        try:
            os.setpriority(os.PRIO_PROCESS, 0, self.niceness)
            self.how = f"niceness {self.niceness}"
        except OSError as exc:
            print(f"cannot raise priority ({exc}); measuring at the default", file=sys.stderr)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.how.startswith("autogroup"):
            _set_autogroup_nice("self", 0)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.1):
            for pid in descendants(me):
                _set_autogroup_nice(pid, self.niceness)


def add_machine_options(parser) -> None:
    """Options shared by the benchmarks for a machine that others use too."""
    parser.add_argument(
        "--nice",
        type=int,
        default=-15 if os.geteuid() == 0 else 0,
        help="scheduling niceness of the measured processes' sessions "
        "(default -15 as root, else 0; see Priority in _common.py)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="before each run wait until other processes use under --max-other cores, "
        "and repeat a run during which they used more (up to --retries times)",
    )
    parser.add_argument("--max-other", type=float, default=0.15, help="cores (default 0.15)")
    parser.add_argument("--retries", type=int, default=3, help="with --quiet (default 3)")
    parser.add_argument(
        "--max-wait", type=float, default=300, help="with --quiet: seconds to wait at most"
    )
