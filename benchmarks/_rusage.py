"""Run a Python script as a child and note the CPU time it used: ``_rusage.py SCRIPT ARGS``.

The benchmarks put it in front of a plan row's script to measure the CPU of
that process tree exactly (the kernel's accounting at its end), independent of
radT's own listeners. It writes ``{"script", "cpu_s", "began", "ended", "code"}``
to ``$RUSAGE_DIR/<pid>.json`` and exits with the script's status. SIGTERM and
SIGINT reach the script through its process group (radT signals the group); this
wrapper outlives them, to write its note.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time


def _default_signals() -> None:  # in the child, before exec
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def main() -> int:
    """Run the script, note its CPU, return its exit status."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    began = time.time()
    child = subprocess.Popen(
        [sys.executable, *sys.argv[1:]],
        preexec_fn=_default_signals,
    )
    code = child.wait()
    ended = time.time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    note = {
        "script": os.path.basename(sys.argv[1]),
        "argv": sys.argv[1:],
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "began": began,
        "ended": ended,
        "code": code,
    }
    folder = os.environ.get("RUSAGE_DIR", ".")
    with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as out:
        json.dump(note, out)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
