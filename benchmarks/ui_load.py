"""Page load of the time-series chart for a run of 1,000,000 samples, in headless Chromium.

    python benchmarks/ui_load.py                     # 5 rounds per condition, ~3 min on 2 cores
    python benchmarks/ui_load.py --rounds 3 --samples 2000000

One run (a lone radT run, FINISHED) holds ``--samples`` samples of one key,
``nvml/gpu0/power_w`` at 1 kHz, in its ``radt/samples.parquet`` artifact,
written through ``radt.record.compact.write_samples`` exactly as radT leaves it, plus the
decimated MLflow stream (one point a second) and the summary metrics. Conditions:

- ``radt ui (first load)``: the first page load after ``radt ui`` started: the
  server downloads the artifact into its cache, reads the key, downsamples;
- ``radt ui``: later loads, each in a fresh browser context (the server holds
  the samples in memory; it still downsamples on every request);
- ``all points, SVG`` / ``all points, WebGL``: a plain Dash page whose figure holds
  every sample as ``go.Scatter`` / ``go.Scattergl`` (built once when that server
  starts, so its load is not counted: the most favourable case for it).

Measured in the page: from navigation start to the first ``plotly_afterplot``
of a figure that holds data (``performance.now()``), and the bytes of the
response that carried the figure (the callback's for radT's UI, ``_dash-layout``
for the plain pages). Chromium is Debian's ``/usr/bin/chromium`` started as the
browser tests start it (tests/chromium.py: same flags); WebGL runs on SwiftShader
(no GPU here). radT's UI loads
plotly.js's basic bundle (1.2 MB, ``frontend/assets``); the plain pages load
the full one that Dash ships (4.8 MB), as any Dash app does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from _common import (
    Priority,
    arguments,
    base_env,
    median,
    results,
    scratch,
    spread,
    sqlite_store,
    wait_quiet,
)
from chromium import CHROMIUM, INSTALL, launch
from servers import HttpServer, free_port

KEY = "nvml/gpu0/power_w"
HOOK = """
window.__bench = {drawn: null};
(function poll() {
  document.querySelectorAll('.js-plotly-plot').forEach(gd => {
    if (gd.__benchHooked || !gd.on) return;
    gd.__benchHooked = true;
    gd.on('plotly_afterplot', () => {
      const full = (gd._fullData || []).some(t => (t._length || 0) > 0);
      if (full && window.__bench.drawn === null) window.__bench.drawn = performance.now();
    });
  });
  if (window.__bench.drawn === null) requestAnimationFrame(poll);
})();
"""
BYTES = """(pattern) => Math.max(0, ...performance.getEntriesByType('resource')
    .filter(e => e.name.includes(pattern)).map(e => e.decodedBodySize))"""


# --------------------------------------------------------------------------- the run


def make_run(uri: str, folder: Path, samples: int) -> str:
    """A FINISHED lone run with ``samples`` samples of KEY at 1 kHz; returns its id."""
    import numpy as np
    import pyarrow as pa
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from radt.record.compact import write_samples
    from radt.record.spool import SCHEMA

    client = MlflowClient(uri)
    start_s = 1_780_000_000.0
    exp = client.create_experiment("ui-bench")
    run = client.create_run(
        exp,
        start_time=round(start_s * 1000),
        run_name="million",
        tags={"radt.collocation": "none", "radt.listeners": "nvml"},
    )
    run_id = run.info.run_id
    rng = np.random.default_rng(7)
    micros = round(start_s * 1e6) + np.arange(samples, dtype=np.int64) * 1000
    t = np.arange(samples) / 1000.0
    watts = 180 + 120 * (np.sin(t / 40) > -0.3) + 25 * np.sin(t * 3) + rng.normal(0, 8, samples)
    watts[rng.integers(0, samples, 50)] = 420.0  # a few spikes that downsampling must keep
    table_ = pa.table(
        {"timestamp": pa.array(micros), "key": pa.array([KEY] * samples), "value": watts}
    ).cast(SCHEMA)
    local = folder / "artifact"
    local.mkdir()
    write_samples(table_, local / "samples.parquet")
    client.log_artifact(run_id, str(local / "samples.parquet"), "radt")
    step = 1000  # the decimated stream: one mean point a second
    metrics = [
        Metric(f"system/{KEY}", float(watts[i : i + step].mean()), int(micros[i] // 1000), i)
        for i in range(0, samples, step)
    ]
    for first in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[first : first + 1000])
    client.log_metric(run_id, f"summary/{KEY}/mean", float(watts.mean()))
    end_ms = int(micros[-1] // 1000) + 1
    client.set_terminated(run_id, "FINISHED", end_time=end_ms)
    return run_id


# --------------------------------------------------------------------------- servers


def serve_full(mode: str, port: int, run_id: str) -> None:
    """A plain Dash page drawing every sample of the run (``--serve-full``)."""
    import plotly.graph_objects as go
    from dash import Dash, dcc, html

    from radt.analysis.load import load

    frame = load(runs=[run_id], keys=[KEY])
    x = (frame["timestamp"] - frame["timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    trace = go.Scattergl if mode == "webgl" else go.Scatter
    fig = go.Figure(trace(x=x, y=frame["value"].to_numpy(), mode="lines", name=KEY))
    fig.update_layout(height=480, template="plotly_white")
    app = Dash(__name__, title="all points")
    app.layout = html.Div([dcc.Graph(id="ts-graph", figure=fig)])
    print(f"serving http://127.0.0.1:{port}/", flush=True)
    app.run(host="127.0.0.1", port=port, debug=False)


def server(argv: list[str], port: int, ready_path: str, env: dict, folder: Path) -> HttpServer:
    """A page server on ``port`` with its log in ``folder``, ready when ``ready_path`` answers."""
    log = folder / f"server-{port}.log"
    return HttpServer(argv, folder=folder, log_path=log, port=port, env=env, ready_path=ready_path)


# --------------------------------------------------------------------------- measuring


def load_page(browser, url: str, init: str, pattern: str, args) -> tuple[float, int]:
    """Seconds from navigation start to the chart drawn with data, and the figure's bytes."""
    if args.quiet:
        wait_quiet(args.max_other, max_wait_s=args.max_wait)
    timeout_s = args.timeout
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        context.add_init_script(init + HOOK)
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("window.__bench.drawn !== null", timeout=timeout_s * 1000)
        drawn_ms = page.evaluate("window.__bench.drawn")
        size = int(page.evaluate(BYTES, pattern))
        return drawn_ms / 1000, size
    finally:
        context.close()


def ui_versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in ("dash", "dash-ag-grid", "plotly", "tsdownsample", "playwright"):
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{name} {version(name)}")
    return ", ".join(found)


def selection_script(run_id: str) -> str:
    """Session storage as the Runs page leaves it: the run ticked, KEY picked."""
    now = int(time.time() * 1000)
    values = {
        "selection": {"experiment": None, "runs": [{"run_id": run_id, "run_name": "million"}]},
        "keys": [KEY],
    }
    lines = []
    for name, data in values.items():
        lines.append(f"sessionStorage.setItem({json.dumps(name)}, {json.dumps(json.dumps(data))});")
        lines.append(f"sessionStorage.setItem('{name}-timestamp', '{now}');")
    return "\n".join(lines)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="loads per condition (default 5)")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--timeout", type=float, default=180, help="seconds per page load")
    parser.add_argument("--skip-webgl", action="store_true", help="WebGL on SwiftShader is slow")
    parser.add_argument("--serve-full", choices=("svg", "webgl"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--run-id", help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    if args.serve_full:
        serve_full(args.serve_full, args.port, args.run_id)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # servers stop in `finally`
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: {INSTALL}")
    with scratch("uiload", args.keep) as folder:
        found, chromium, how, loads = measure(args, folder)
    base = median(found["radt ui"][0])
    rows = []
    for name, (times, sizes) in found.items():
        rows.append(
            [
                name,
                f"{median(times):.2f}",
                spread(times, ".2f"),
                f"{median(sizes) / 1e6:.3f}",
                f"{median(times) / base:.1f}×",
            ]
        )
    notes = f"- UI: {ui_versions()}, Chromium {chromium}"
    columns = ["condition", "seconds (median)", "min–max", "figure MB", "vs radt ui"]
    print()
    print(results("Time-series page load, 1M samples (headless Chromium)", notes, columns, rows))
    print(
        f"\n{args.rounds} loads per condition ({how}); load average "
        f"{loads[0]:.1f} before, {loads[1]:.1f} after (2 cores shared with others)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2))
    return 0


def measure(args: argparse.Namespace, folder: Path):
    """Every condition's page loads: (seconds, bytes) by condition, Chromium's version, the
    priority the loads ran at, the load average before and after."""
    from playwright.sync_api import sync_playwright

    uri = sqlite_store(folder)
    env = base_env(folder, uri)
    os.environ.update(MLFLOW_TRACKING_URI=uri, RADT_HOME=env["RADT_HOME"])
    began = time.perf_counter()
    run_id = make_run(uri, folder, args.samples)
    print(f"made the run: {args.samples:,} samples in {time.perf_counter() - began:.1f} s")
    select = selection_script(run_id)
    conditions = [("radt ui", None), ("all points, SVG", "svg")]
    if not args.skip_webgl:
        conditions.append(("all points, WebGL", "webgl"))
    found: dict[str, tuple[list[float], list[int]]] = {}
    load_before = os.getloadavg()
    with Priority(args.nice) as priority, sync_playwright() as playwright:
        browser = launch(playwright)
        for name, mode in conditions:
            port = free_port()
            if mode is None:
                argv = [sys.executable, "-m", "radt", "ui", "--port", str(port)]
                path, init, pattern = "/timeseries", select, "_dash-update"
            else:
                argv = [sys.executable, __file__, "--serve-full", mode, "--port", str(port)]
                argv += ["--run-id", run_id]
                path, init, pattern = "/", "", "_dash-layout"
            page_server = server(argv, port, path, env, folder)
            try:
                page_server.start(timeout_s=300)
            except RuntimeError as exc:
                raise SystemExit(str(exc)) from None
            url = page_server.url + path
            try:
                if mode is None:  # the first load after the start pays for the artifact
                    seconds, size = load_page(browser, url, init, pattern, args)
                    found["radt ui (first load)"] = ([seconds], [size])
                    print(f"radt ui (first load): {seconds:.2f} s, {size:,} bytes", flush=True)
                times, sizes = [], []
                for _ in range(args.rounds):
                    seconds, size = load_page(browser, url, init, pattern, args)
                    times.append(seconds)
                    sizes.append(size)
                    print(f"{name}: {seconds:.2f} s, {size:,} bytes", flush=True)
                found[name] = (times, sizes)
            finally:
                page_server.stop()
        chromium = browser.version
        browser.close()
    return found, chromium, priority.how, (load_before[0], os.getloadavg()[0])


if __name__ == "__main__":
    sys.exit(main())
