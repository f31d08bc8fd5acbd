"""Cost of ``radt.log_examples`` in the training process: nanoseconds per call.

    python benchmarks/run_api.py                  # ~1 min on 2 busy cores
    python benchmarks/run_api.py --calls 200000 --rounds 3   # a smoke run

Each condition runs in a fresh Python process (the run API keeps per-process state) that times
``--calls`` consecutive calls with ``time.perf_counter`` after a warm-up of 1000 calls, so the
first-call send is not in the figure but every once-a-second send is. Conditions run
interleaved, round after round; figures are medians over rounds.

- *empty function*: ``f(1)`` for a Python function that does nothing: the floor of any call;
- *no radT*: ``radt.log_examples(1)`` without ``RADT_EVENTS`` (a no-op after the notice);
- *radT, drained*: with ``RADT_EVENTS`` naming a real :class:`radt.record.events.EventReceiver`
  in another process, which counts the records it gets (at most one a second, plus the first);
- *radT, never drained*: ``RADT_EVENTS`` names a socket whose queue is full: every send is
  refused (``EAGAIN``) and the record kept; the call must still not block.
"""

from __future__ import annotations

import socket
import sys
import uuid

from _common import (
    arguments,
    clean_env,
    median,
    python_json,
    results,
    rotated,
    with_receiver,
)

MEASURE = r"""
import json, sys, time
calls = int(sys.argv[1])
mode = sys.argv[2]
if mode == "empty":
    def f(n):
        pass
else:
    import radt
    f = radt.log_examples
for _ in range(1000):
    f(1)
began = time.perf_counter()
for _ in range(calls):
    f(1)
took = time.perf_counter() - began
print(json.dumps({"ns_per_call": took / calls * 1e9, "seconds": took}))
"""

RECEIVER = r"""
import json, sys
from radt.record.events import EventReceiver
got = []
receiver = EventReceiver(sys.argv[1], got.extend, print)
print(receiver.variable, flush=True)
sys.stdin.read()
receiver.close()
print(json.dumps({"records": receiver.records}), flush=True)
"""


def measure(calls: int, mode: str, env: dict[str, str]) -> dict:
    return python_json(MEASURE, str(calls), mode, env=env)


def drained(calls: int) -> dict:
    result, received = with_receiver(RECEIVER, lambda env: measure(calls, "radt", env))
    return {**result, "records": received["records"]}


def never_drained(calls: int) -> dict:
    name = f"radt-bench-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as full:
        full.bind("\0" + name)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK) as filler:
            while True:
                try:
                    filler.sendto(b"filler", "\0" + name)
                except BlockingIOError:
                    break
        return measure(calls, "radt", {**clean_env(), "RADT_EVENTS": "@" + name})


NOTES = """Medians over the rounds; *over the empty call* subtracts the median of *empty
function*. *records radT got*: what the receiver counted for the whole run (first call, once a
second, exit)."""


def main() -> None:
    """Run every condition ``--rounds`` times, interleaved, and print the table."""
    parser = arguments(__doc__, machine=False, keep=False)
    parser.add_argument("--calls", type=int, default=2_000_000, help="timed calls per run")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    conditions = {
        "empty function": lambda: measure(args.calls, "empty", clean_env()),
        "no radT": lambda: measure(args.calls, "radt", clean_env()),
        "radT, drained": lambda: drained(args.calls),
        "radT, never drained": lambda: never_drained(args.calls),
    }
    runs: dict[str, list[dict]] = {name: [] for name in conditions}
    for round_no, name in rotated(list(conditions), args.rounds):
        runs[name].append(conditions[name]())
        print(f"round {round_no + 1}: {name} done", file=sys.stderr, flush=True)
    floor = median([r["ns_per_call"] for r in runs["empty function"]])
    rows = []
    for name, done in runs.items():
        ns = [r["ns_per_call"] for r in done]
        records = [r["records"] for r in done if "records" in r]
        rows.append(
            [
                name,
                f"{median(ns):,.0f}",
                f"{min(ns):,.0f}–{max(ns):,.0f}",
                f"{median(ns) - floor:,.0f}",
                f"{median([r['seconds'] for r in done]):.2f}",
                f"{median(records):.0f}" if records else "–",
            ]
        )
    columns = [
        "condition",
        "ns/call (median)",
        "min–max",
        "ns/call over the empty call",
        "timed s",
        "records radT got",
    ]
    print(results("radt.log_examples: cost per call", NOTES, columns, rows))


if __name__ == "__main__":
    main()
