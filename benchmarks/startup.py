"""Start-up latency: from invoking the launcher to the command's first line on stdout.

    python benchmarks/startup.py                 # defaults: 5 rounds, ~3 min on 2 cores
    python benchmarks/startup.py --repeats 10

The command prints one line (``print('first', flush=True)``) and exits. For
each condition the benchmark starts the process, reads its stdout until that
line arrives (time to first line: what a user waits before training starts),
then waits for the process to exit (total wall time: includes, for radT, the
end-of-run work: environment capture joined, spool compacted, samples and logs
uploaded, final status set). Conditions run interleaved round-robin, each into
a SQLite store of its own that is created before timing starts.

Conditions:
- ``plain``: ``python -c "print('first', flush=True)"``;
- ``radt-none``: ``radt -l none -- python -c ...`` (launcher, no listeners), cold
  (``RADT_WARM=0``: what the first run pays, and every run with the warm launcher off);
- ``radt``: ``radt -- python -c ...`` (every available listener, default interval), cold;
- ``radt-base``: ``python -m radt -l none -- python -c ...`` from another copy of radT's code
  (``--base DIR`` holding ``radt/``, e.g. today's main: ``git archive main radt listeners
  frontend | tar -x -C DIR`` and ``radt/listeners``, ``radt/frontend`` linked to them) on
  ``PYTHONPATH``: the code before a change, side by side;
- ``radt-warm``: ``radt -l none -- python -c ...`` through the warm launcher (radt/warm.py, on
  by default) started and ready before the rounds, as for every run after a first; its CPU
  column counts the caller only (the run itself is a fork of the warm launcher, which
  the kernel reaps: its CPU is not the benchmark's child's);
- ``radt-0.2.30-none`` / ``radt-0.2.30``: the original radT 0.2.30 in
  ``benchmarks/.venv-radt0230``, which only runs ``.py`` files: ``radt -l none
  hello.py`` and ``radt -l top+iostat+free hello.py`` with ``hello.py`` holding the
  same one line;
- ``radt-server`` / ``radt-server-mlflow``: ``radt -l none -- python -c ...``, cold, into an
  ``mlflow server`` (SQLite behind it; one for both, started before the rounds): through
  radT's light path (``radt.restclient``: the run made over REST, MLflow imported once the
  command runs) and through MLflow's client (``RADT_LIGHT=0``), side by side;
- reference floors (``--references``): ``python -c "import mlflow"``,
  ``python -c "import radt.launch.launcher"`` and opening the SQLite store with an
  ``MlflowClient``, each followed by the same print.

Beside wall time, each row has the CPU seconds (user + system) of the measured process and
the children it waited for (``RUSAGE_CHILDREN``), the figure that a loaded machine changes
least, the ratio to the plain command, and the load average (1 min) when it started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    OLD_VENV,
    Disturbance,
    Priority,
    arguments,
    base_env,
    become_subreaper,
    chosen,
    init_store,
    median,
    old_radt_bin,
    python_bin,
    radt_bin,
    reap_orphans,
    results,
    rotated,
    scratch,
    spread,
    undisturbed,
)

LINE = "print('first', flush=True)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ALL = (
    "plain",
    "radt-none",
    "radt",
    "radt-base",
    "radt-warm",
    "radt-server",
    "radt-server-mlflow",
    "radt-0.2.30-none",
    "radt-0.2.30",
    "import-mlflow",
    "import-radt",
    "mlflow-client",
)
DEFAULT = "plain,radt-none,radt,radt-warm,radt-0.2.30-none,radt-0.2.30"
REFERENCES = "import-mlflow,import-radt,mlflow-client"


@dataclass
class Timing:
    first_s: float
    total_s: float
    other_cores: float
    cpu_s: float
    """User + system CPU of the measured process and the children it waited for."""
    load: float
    """The 1-minute load average as it started."""


@dataclass
class Condition:
    name: str
    label: str
    argv: list[str]
    env: dict
    cwd: Path
    timings: list[Timing] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    server: subprocess.Popen | None = None
    """radt-warm: the warm launcher, started before the rounds, ended after them."""


def is_first(line: str) -> bool:
    """The command's line, also when 0.2.30 prefixes it with ``[RUN 0]:`` and colours."""
    words = ANSI.sub("", line).split()
    return bool(words) and words[-1] == "first"


def build(
    name: str, root: Path, venv: Path, base: Path | None = None, server_uri: str | None = None
) -> Condition:
    folder = root / name
    folder.mkdir()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = base_env(folder, uri)
    if name.startswith("radt-server"):
        env["MLFLOW_TRACKING_URI"] = server_uri
    py = python_bin()
    code = {
        "import-mlflow": f"import mlflow; {LINE}",
        "import-radt": f"import radt.launch.launcher; {LINE}",
        "mlflow-client": (
            "from mlflow.tracking import MlflowClient; "
            f"MlflowClient({uri!r}).search_experiments(max_results=1); {LINE}"
        ),
    }
    if name == "plain":
        argv, label = [py, "-c", LINE], "plain `python -c`"
    elif name == "radt-none":
        argv, label = [radt_bin(), "-l", "none", "--", py, "-c", LINE], "radT `-l none`, cold"
        env["RADT_WARM"] = "0"
    elif name == "radt":
        argv, label = [radt_bin(), "--", py, "-c", LINE], "radT, default listeners, cold"
        env["RADT_WARM"] = "0"
    elif name == "radt-base":
        if base is None or not (base / "radt" / "__init__.py").exists():
            raise FileNotFoundError(f"{base}/radt missing: give --base DIR")
        argv = [py, "-m", "radt", "-l", "none", "--", py, "-c", LINE]
        label = f"radT `-l none`, code in {base}"
        env["PYTHONPATH"] = str(base)
        env["RADT_WARM"] = "0"  # code without the warm launcher ignores it; code with it: cold
    elif name == "radt-warm":
        argv, label = [radt_bin(), "-l", "none", "--", py, "-c", LINE], "radT `-l none`, warm"
        runtime = folder / "rt"
        runtime.mkdir(mode=0o700)
        env.update(RADT_WARM="1", RADT_WARM_IDLE_S="3600", XDG_RUNTIME_DIR=str(runtime))
    elif name.startswith("radt-server"):
        light = name == "radt-server"
        argv = [radt_bin(), "-l", "none", "--", py, "-c", LINE]
        label = f"radT `-l none`, cold, mlflow server, {'light path' if light else 'RADT_LIGHT=0'}"
        env.update(RADT_WARM="0", RADT_LIGHT="1" if light else "0")
    elif name in ("radt-0.2.30-none", "radt-0.2.30"):
        old = old_radt_bin(venv)
        if old is None:
            raise FileNotFoundError(f"{venv}/bin/radt missing: bash benchmarks/setup_radt0230.sh")
        (folder / "hello.py").write_text(LINE + "\n")
        env["PATH"] = f"{old.parent}:{env.get('PATH', '')}"
        listeners = "none" if name.endswith("none") else "top+iostat+free"
        argv, label = [str(old), "-l", listeners, "hello.py"], f"radT 0.2.30 `-l {listeners}`"
    elif name in code:
        argv = [py, "-c", code[name]]
        label = {
            "import-mlflow": "ref: `python -c 'import mlflow'`",
            "import-radt": "ref: `python -c 'import radt.launch.launcher'`",
            "mlflow-client": "ref: import + open SQLite store",
        }[name]
    else:
        raise ValueError(name)
    init_store(uri)
    cond = Condition(name, label, argv, env, folder)
    if name == "radt-warm":
        cond.server = start_warm(env)
    return cond


def start_warm(env: dict[str, str], timeout_s: float = 300) -> subprocess.Popen:
    """The warm launcher for ``env``, as the benchmark's own child, once it listens."""
    code = "from radt import warm; print(warm.socket_path())"
    path = Path(subprocess.check_output([python_bin(), "-c", code], env=env, text=True).strip())
    server = subprocess.Popen(
        [python_bin(), "-m", "radt.warm", str(path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise OSError(f"the warm launcher did not listen at {path}")
        time.sleep(0.1)
    return server


def kept() -> frozenset[int]:
    """The warm launchers and the mlflow server, which the reaping between runs leaves alone."""
    return frozenset(c.server.pid for c in CONDITIONS if c.server is not None) | SERVERS


CONDITIONS: list[Condition] = []
SERVERS: set[int] = set()
"""The pid of the mlflow server of the radt-server conditions."""


def measure(cond: Condition, timeout_s: float) -> Timing:
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Disturbance() as dist:
        began = time.perf_counter()
        proc = subprocess.Popen(
            cond.argv,
            cwd=cond.cwd,
            env=cond.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        first = None
        assert proc.stdout is not None
        for line in proc.stdout:
            if first is None and is_first(line):
                first = time.perf_counter() - began
        code = proc.wait(timeout=timeout_s)
        total = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        reap_orphans(keep=kept())
    if first is None or code != 0:
        raise RuntimeError(f"exit code {code}, first line {'seen' if first else 'not seen'}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(first, total, dist.other_cores(), cpu, load)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--conditions", default=DEFAULT, help=f"from {', '.join(ALL)}")
    parser.add_argument(
        "--references", action="store_true", help=f"also measure the floors {REFERENCES}"
    )
    parser.add_argument("--venv", default=str(OLD_VENV))
    parser.add_argument("--base", type=Path, help="radt-base: the folder holding the radt/ to run")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    text = args.conditions + (f",{REFERENCES}" if args.references else "")
    names = list(dict.fromkeys(chosen(parser, text, ALL, first="plain")))

    become_subreaper()
    with contextlib.ExitStack() as stack:
        priority = stack.enter_context(Priority(args.nice))
        root = stack.enter_context(scratch("startup", args.keep))
        print(f"workspace: {root}; {priority.how}", file=sys.stderr)
        server_uri = None
        if any(name.startswith("radt-server") for name in names):
            from mlflow_server import MlflowServer

            server = stack.enter_context(MlflowServer(root / "mlflow-server"))
            SERVERS.add(server.process.pid)
            server_uri = server.uri
        conditions = CONDITIONS
        for name in names:
            try:
                conditions.append(build(name, root, Path(args.venv), args.base, server_uri))
            except (FileNotFoundError, OSError) as exc:
                print(f"skipping {name}: {exc}", file=sys.stderr)
        try:
            for round_no, cond in rotated(conditions, args.repeats):
                measure_one(args, round_no, cond)
        finally:
            for cond in conditions:
                if cond.server is not None:
                    cond.server.terminate()
                    cond.server.wait()
    print()
    print(report(args, conditions, priority.how))
    return 0


def measure_one(args: argparse.Namespace, round_no: int, cond: Condition) -> None:
    """One run of ``cond`` (again while disturbed, with --quiet), said on stderr."""

    def said(timing: Timing, again: bool) -> None:
        print(
            f"round {round_no + 1}/{args.repeats} {cond.name:18s} first line "
            f"{timing.first_s:6.2f} s  total {timing.total_s:6.2f} s  cpu {timing.cpu_s:5.2f} s  "
            f"load {timing.load:.1f}  others {timing.other_cores:.2f} cores"
            + ("  (disturbed, again)" * again),
            file=sys.stderr,
            flush=True,
        )

    try:
        cond.timings.append(undisturbed(args, lambda: measure(cond, args.timeout), said))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        cond.failures.append(str(exc))
        print(f"{cond.name}: FAILED {exc}", file=sys.stderr)


def report(args: argparse.Namespace, conditions: list[Condition], how: str) -> str:
    """The results table and the notes above it."""
    plain = conditions[0]
    base_first = median([t.first_s for t in plain.timings])
    base_total = median([t.total_s for t in plain.timings])
    rows = []
    for cond in conditions:
        if not cond.timings:
            rows.append([cond.label, "failed", *["–"] * 9])
            continue
        firsts = [t.first_s for t in cond.timings]
        totals = [t.total_s for t in cond.timings]
        rows.append(
            [
                cond.label,
                f"{median(firsts):.2f}",
                spread(firsts, ".2f"),
                f"+{median(firsts) - base_first:.2f}" if cond is not plain else "–",
                f"{median(firsts) / base_first:.1f}×" if cond is not plain else "–",
                f"{median(totals):.2f}",
                f"+{median(totals) - base_total:.2f}" if cond is not plain else "–",
                f"{median(totals) - median(firsts):.2f}",
                f"{median([t.cpu_s for t in cond.timings]):.2f}",
                spread([t.load for t in cond.timings], ".1f"),
                f"{max(t.other_cores for t in cond.timings):.2f}",
            ]
        )
    notes = (
        f"Median of {args.repeats} interleaved runs; seconds. "
        "'after first line' = total − first line: the end-of-run work. 'CPU s': user + "
        "system of the process and its waited-for children (warm: the caller only). "
        f"Priority: {how}; 'load': the 1-min load average at each start (min–max); "
        "'others' = cores used by other processes meanwhile (max)."
    )
    columns = [
        "condition",
        "first line s",
        "min–max",
        "vs plain",
        "ratio",
        "total wall s",
        "vs plain",
        "after first line s",
        "CPU s",
        "load",
        "others (max cores)",
    ]
    return results("Start-up latency", notes, columns, rows)


if __name__ == "__main__":
    sys.exit(main())
