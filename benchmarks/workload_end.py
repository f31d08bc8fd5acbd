"""A plan workload's end: from its command's end to radT's exit, on a tracking server near and
across an emulated network, for radT here and, side by side, another radT's code.

    python benchmarks/workload_end.py                          # ~1 min on 2 cores
    python benchmarks/workload_end.py --rtt 0,30,80 --repeats 9
    python benchmarks/workload_end.py --other /tmp/before-src  # another checkout's radt/

Each round a cold radT (``RADT_WARM=0``, as in a Slurm job) runs a plan of one workload, one
training of ``sleeper.py --seconds S`` on an ``mlflow server`` (SQLite behind it, one worker),
through radT's light path. The figure is the time from the command's end (the run's
``radt.command_end_s``) to radT's exit: the training run and its workload run completed in
MLflow (the metric stream, the samples, the summary and the figures, the attachments, the
status). For each ``--rtt`` (milliseconds) radT reaches the server through a TCP proxy of this
script's own that holds every chunk for half the round-trip time each way, as a server across a
network would (0: the proxy alone). With ``--other DIR``, each round also runs radT from
``DIR`` (a folder holding another version's ``radt`` package, put first on ``PYTHONPATH``),
the order alternating, and the table gives the ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from _common import arguments, base_env, median, python_bin, results, rotated, scratch, spread

COLUMNS = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
SLEEPER = "import sys, time\ntime.sleep(float(sys.argv[-1]))\n"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold_s: float):
    """Copy ``reader`` to ``writer``, each chunk ``hold_s`` after it came, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def take() -> None:
        while True:
            data = await reader.read(65536)
            await queue.put((loop.time() + hold_s, data))
            if not data:
                return

    async def give() -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    await asyncio.gather(take(), give(), return_exceptions=True)


def proxy(listen_port: int, target_port: int, rtt_s: float) -> None:
    """Serve a delaying TCP proxy on 127.0.0.1:``listen_port`` to ``target_port`` (forever)."""

    async def handle(client_r, client_w) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(
            _pipe(client_r, server_w, rtt_s / 2),
            _pipe(server_r, client_w, rtt_s / 2),
            return_exceptions=True,
        )

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload_end_s(folder: Path, env: dict[str, str], client, name: str, seconds: float) -> float:
    """Run one workload ``name`` under radT; seconds from its command's end to radT's exit."""
    (folder / "one.csv").write_text(
        COLUMNS + f"bench, {name}, , , 0, none, sleeper.py, none, --seconds {seconds:g}\n"
    )
    done = subprocess.run(
        [python_bin(), "-m", "radt", "one.csv"], cwd=folder, env=env, capture_output=True, text=True
    )
    exited = time.time()
    if done.returncode != 0:
        raise SystemExit(f"radT failed:\n{done.stderr[-3000:]}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(experiments, filter_string=f"attributes.run_name = '{name}-A'")
    return exited - float(run.data.tags["radt.command_end_s"])


def main() -> int:
    if sys.argv[1:2] == ["--proxy"]:
        proxy(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
        return 0
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--repeats", type=int, default=5, help="rounds per condition (5)")
    parser.add_argument("--rtt", default="0,30", help="round-trip times in ms (0,30)")
    parser.add_argument("--seconds", type=float, default=3.0, help="the command's sleep (3 s)")
    parser.add_argument("--other", type=Path, help="a folder with another radT's radt/ package")
    args = parser.parse_args()
    rtts = [float(v) for v in args.rtt.split(",") if v.strip()]
    codes = {"this radT": None}
    if args.other is not None:
        if not (args.other / "radt" / "__init__.py").is_file():
            parser.error(f"--other {args.other}: no radt/__init__.py there")
        codes = {f"radT from {args.other}": args.other, **codes}
    from mlflow.tracking import MlflowClient
    from mlflow_server import MlflowServer

    ends: dict[tuple[float, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(scratch("workload-end", args.keep))
        server = stack.enter_context(MlflowServer(folder / "server"))
        client = MlflowClient(server.uri)
        (folder / "sleeper.py").write_text(SLEEPER)
        target = int(server.uri.rsplit(":", 1)[1])
        runs = 0
        for rtt in rtts:
            port = free_port()
            relay = subprocess.Popen(
                [python_bin(), __file__, "--proxy", str(port), str(target), str(rtt / 1000)],
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(relay.kill)
            assert relay.stdout is not None and relay.stdout.readline().strip() == "ready"
            env = {**base_env(folder, f"http://127.0.0.1:{port}"), "RADT_WARM": "0"}
            env["RADT_LIGHT"] = "1"
            for _, (label, code) in rotated(list(codes.items()), args.repeats):
                runs += 1
                run_env = dict(env)
                if code is not None:
                    run_env["PYTHONPATH"] = os.pathsep.join(
                        [str(code), *filter(None, [env.get("PYTHONPATH")])]
                    )
                end = workload_end_s(folder, run_env, client, f"w{runs}", args.seconds)
                ends.setdefault((rtt, label), []).append(end)
            relay.kill()
    rows = []
    for rtt in rtts:
        base = None
        for label in codes:
            values = ends[(rtt, label)]
            base = base or median(values)
            rows.append(
                [
                    f"{rtt:g}",
                    label,
                    f"{median(values):.2f}",
                    spread(values, ".2f"),
                    f"{base / median(values):.2f}×",
                ]
            )
    notes = (
        f"Median of {args.repeats} rounds a condition, seconds from the command's end to radT's "
        "exit (a training run and its workload run completed); ratio: the first row of each "
        "round-trip time over this one (above 1: this one ends sooner)."
    )
    columns = ["round trip (ms)", "code", "end (s)", "min–max", "ratio"]
    print(results("A plan workload's end", notes, columns, rows))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    sys.exit(main())
