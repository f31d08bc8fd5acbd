"""Cost of holding the stop signals around each SQLite transaction on the main thread.

    python benchmarks/interrupt_hold.py                     # ~1 min on 2 cores
    python benchmarks/interrupt_hold.py --writes 200 --rounds 3

``radt.interrupts.hold_during_transactions`` (applied by ``radt.tracking.connect``) makes every
transaction of a database-backed store save and restore the Python handlers of SIGINT, SIGTERM
and SIGHUP around it (six ``signal.signal`` calls), so that Ctrl-C cannot leave SQLite's write
lock held. This times ``MlflowClient.set_tag`` (one transaction each) on the main thread, with
Python handlers installed for the three signals as radT's supervisor has them, on two SQLite
stores made alike: one as MLflow opens it, one held. Conditions interleave, round after round
(the order rotated each round); figures are medians over rounds of the milliseconds per write.
"""

from __future__ import annotations

import signal
import sys
import time

from _common import arguments, median, results, rotated, scratch, spread, sqlite_store

CONDITIONS = ("MLflow's store", "held (radT)")


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--writes", type=int, default=500, help="set_tag calls per round (500)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    args = parser.parse_args()

    from mlflow.tracking import MlflowClient

    from radt.interrupts import hold_during_transactions
    from radt.tracking import client_store

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, _frame: None)  # Python handlers, as radT has
    per_write_ms: dict[str, list[float]] = {name: [] for name in CONDITIONS}
    with scratch("interrupt-hold", keep=args.keep) as folder:
        clients, runs = {}, {}
        for i, name in enumerate(CONDITIONS):
            client = MlflowClient(sqlite_store(folder / f"store{i}"))
            if name == "held (radT)":
                hold_during_transactions(client_store(client))
            clients[name] = client
            runs[name] = client.create_run("0").info.run_id
        for round_no, name in rotated(CONDITIONS, args.rounds):
            client, run_id = clients[name], runs[name]
            started = time.perf_counter()
            for i in range(args.writes):
                client.set_tag(run_id, "step", f"{round_no}-{i}")
            per_write_ms[name].append((time.perf_counter() - started) / args.writes * 1e3)
    base = median(per_write_ms[CONDITIONS[0]])
    rows = [
        [name, f"{median(ms):.3f}", spread(ms, ".3f"), f"{median(ms) / base:.3f}"]
        for name, ms in per_write_ms.items()
    ]
    notes = (
        f"{args.writes} `set_tag` writes per round, {args.rounds} rounds interleaved; "
        "milliseconds per write (median, min–max) and the ratio to MLflow's own store."
    )
    columns = ["store", "ms per write", "min–max", "ratio"]
    print(results("Signals held around SQLite transactions", notes, columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
