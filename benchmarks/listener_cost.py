"""CPU cost of one sample per listener, side by side with MLflow's GPU monitor and radT 0.2.30.

    python benchmarks/listener_cost.py            # ~2-3 min on 2 busy cores (20 s: the store)
    python benchmarks/listener_cost.py --http     # + a real `mlflow server`: ~1 min more
    python benchmarks/listener_cost.py --quick --rounds 1   # a smoke run, ~1 min

No GPU is needed, nor used: NVML is the fake ``pynvml`` (tests/fakes/pynvml,
scenario derived from tests/fixtures/nvml_h100.json: GPU 0 only, its
``$CHILDREN`` process and utilisation entries replaced by the pid of a ``sleep``
child of this process, so that the fake does not scan /proc at every call, which
no real NVML does), ``nvidia-smi``/``dcgmi`` are the fakes in tests/fakes, and
RAPL is a fake powercap tree (tests/fakes/powercap.py) of a two-socket server
(tests/fixtures/powercap_info_xeon_2s.txt: package and DRAM per socket, 4 zones). Every figure
is CPU time of this process (``time.process_time``; no other thread of it is
busy while a figure is taken), the median of ``--rounds`` rounds.

A *sample* is what one source gives at one instant for one GPU (or the host):
one ``poll()`` of ``nvml`` (22 keys with the per-process GPU memory and the run's
per-process utilisation), one ``poll()`` of ``rapl`` (8 keys: 4 zones), one CSV
line of ``nvidia-smi`` (10 keys), one row of ``dcgmi dmon`` (14 keys), one
``poll()`` of ``top`` or ``iostat``, one ``collect_metrics()`` of MLflow's
``GPUMonitor`` (5 keys), one line of radT 0.2.30's ``nvidia-smi -l 1`` (6 keys).

Pipelines:

- radT (``nvml``, ``smi``, ``dcgm``, ``top``, ``iostat``): *source* is
  ``poll()`` (polled) or ``parse(line)`` on lines captured from the fake tool
  (streamed; the tool's own CPU is the tool's). *Record* is radT's whole
  hand-off in its own process, run in this thread on what the source loop
  produced, re-stamped at a simulated rate so that windows close as they
  would: ``Recorder.emit``; every ``flush_s`` (1 s) ``Recorder._flush`` (spool
  append of one Arrow batch to a chunk file in a temp folder, decimator,
  queueing of the closed windows' points); then ``BatchWriter._send`` of those
  points (``MlflowClient.log_batch`` into a temp SQLite store). Simulated at
  1 Hz and 100 Hz: emit + flush grow with the samples (their line through the
  two rates gives the marginal cost per sample, its intercept a fixed cost per
  flush), and ``log_batch`` sends one point per key per window at any rate, so
  it is a fixed cost per second. Per-sample table: source + marginal record;
  all-in table: ``fixed + rate * per-sample``. The fixed cost is the run's,
  shared by all its listeners (one recorder, one writer).
- MLflow 3.17 system metrics: source is ``GPUMonitor.collect_metrics()`` +
  ``aggregate_metrics()``; record is the rest of the body of
  ``SystemMetricsMonitor.monitor`` for one sample: the
  ``MlflowClient(uri).get_run(run_id)`` status check after every sample,
  ``publish_metrics`` and the ``BatchMetricsLogger`` flush (``log_batch``),
  which at the 10 s default happens after every sample. Once with
  ``monitors = [GPUMonitor()]`` and once with its default monitors (cpu,
  disk, network, gpu).
- radT 0.2.30 (``run/listeners/smi_listener.py``, found in
  benchmarks/.venv-radt0230, /tmp/radt0230/x/radt or ``--radt0230``): its
  ``SMIThread.run`` on the fake's lines of its own query, with
  ``subprocess.Popen`` and ``mlflow.start_run`` stubbed. Parse: the buffer's
  ``put`` is a list append. As shipped: its listeners get a
  ``multiprocessing.Queue`` that the ``_MLFlowLogger`` process drains every
  5 s into ``store.log_batch``; here the same queue is drained in this process
  the same way every 5 simulated seconds (listener and logger CPU summed), at
  1 Hz and 100 Hz for the fit. No buffer: its fallback,
  ``mlflow.log_metrics`` per line into the SQLite store. Its rate is 1 Hz.

``--http`` also starts ``mlflow server`` (tests/mlflow_server.py, SQLite
behind it) and times ``log_batch`` there, in the client (what radT's process
pays) and in the server's process group, and MLflow's monitor loop against it.

Left out of every figure: the tools' own CPU (``nvidia-smi``, ``dcgmi``; the
fakes' CPU per line is printed for scale only: they are Python scripts), the
thread wake-ups and pipe reads (see the end-to-end check), the Python start-up
of any process, and the driver time of real NVML calls (the fake pynvml
answers from a dict; a real call goes into the kernel driver), and the kernel's time
behind a real ``energy_uj`` read (the fake tree is regular files; a real read makes
the RAPL driver read an MSR, on a CPU of the zone's socket).

End-to-end check (``--no-e2e`` skips it): each radT listener run for a few
seconds by its real driver (``Sampler`` thread, or ``StreamedListener``
reading the fake tool through a pipe) into a counting sink; the CPU of this
process per sample between the first and the last sample, against the source
loop: the difference is the thread wake-up (and the pipe read and line
decoding of the streamed ones).
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FAKES = REPO / "tests" / "fakes"
FIXTURES = REPO / "tests" / "fixtures"
FAKE_PYNVML = FAKES / "pynvml"
# The fake pynvml must shadow nvidia-ml-py before anything imports ``pynvml``.
sys.path.insert(0, str(FAKE_PYNVML))
sys.modules.pop("pynvml", None)
os.environ["PATH"] = f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
for _name in ("FAKE_PYNVML_MISSING", "FAKE_PYNVML_INIT_ERROR", "CUDA_VISIBLE_DEVICES"):
    os.environ.pop(_name, None)
os.environ["FAKE_NVIDIA_SMI_GPUS"] = "1"
os.environ["FAKE_DCGMI_GPUS"] = "1"

from _common import arguments, header, init_store, median, table  # noqa: E402

ONE_PCT_CORE = 0.01
"""CPU seconds per second that make 1 % of one core."""
LO_HZ, HI_HZ = 1.0, 100.0
"""The two simulated rates the recorder cost is fitted on."""
FLUSH_S = 1.0
WINDOW_S = 1.0
OLD_FLUSH_S = 5.0
"""radT 0.2.30's ``_MLFlowLogger`` flush interval."""
OLD_QUERY = "power.draw,timestamp,utilization.gpu,utilization.memory,memory.used,pstate"


def cpu() -> float:
    return time.process_time()


def per_call(fn: Callable[[], Any], n: int, rounds: int, pause_s: float = 0.0) -> float:
    """Median over rounds of CPU seconds per call of ``fn`` (sleeps between calls not counted)."""
    results = []
    for _ in range(rounds):
        spent = 0.0
        for _ in range(n):
            if pause_s:
                time.sleep(pause_s)
            began = cpu()
            fn()
            spent += cpu() - began
        results.append(spent / n)
    return median(results)


_STARTED = time.monotonic()


def progress(message: str) -> None:
    print(f"[{time.monotonic() - _STARTED:5.1f} s] {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------- setup


@dataclass
class Env:
    folder: Path
    uri: str
    experiment_id: str
    child: subprocess.Popen
    client: Any = None
    runs: int = 0
    rapl_root: Path | None = None

    def new_run(self, name: str) -> str:
        self.runs += 1
        run = self.client.create_run(self.experiment_id, run_name=f"{name}-{self.runs}")
        return run.info.run_id


def setup(folder: Path) -> Env:
    """A SQLite store, the fake NVML scenario, and a child process for the run's tree."""
    from mlflow.tracking import MlflowClient

    child = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
    scenario = json.loads((FIXTURES / "nvml_h100.json").read_text())
    gpu = scenario["gpus"][0]
    for proc in gpu.get("processes", []) + [
        entry for batch in gpu.get("process_utilization", []) for entry in batch
    ]:
        if proc.get("pid") == "$CHILDREN":
            proc["pid"] = child.pid
    scenario["gpus"] = [gpu]
    path = folder / "nvml_scenario.json"
    path.write_text(json.dumps(scenario))
    os.environ["FAKE_PYNVML_SCENARIO"] = str(path)
    os.environ.pop("FAKE_PYNVML_GPUS", None)
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    sys.path.insert(0, str(FAKES))
    import powercap

    env_rapl = powercap.build(FIXTURES / "powercap_info_xeon_2s.txt", folder / "powercap")
    init_store(uri)
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("listener-cost")
    return Env(folder, uri, experiment_id, child, client, rapl_root=env_rapl)


def run_context(
    env: Env, emit: Callable, interval_s: float | None = None, options: dict | None = None
):
    from radt.listener import RunContext

    workdir = env.folder / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    return RunContext(
        run_id="bench",
        pid=os.getpid(),
        workdir=workdir,
        emit=emit,
        interval_s=interval_s,
        warn=warn,
        options=options or {},
    )


# ----------------------------------------------------------------------------- sources


@dataclass
class Source:
    """What a source loop measured: CPU per sample, and the samples it produced."""

    name: str
    cost_s: float
    outputs: list[list[Any]]
    notes: dict[str, float] = field(default_factory=dict)

    @property
    def keys(self) -> float:
        counted = [len(o) for o in self.outputs if o]
        return sum(counted) / len(counted) if counted else 0.0


class _CachedNvml(types.ModuleType):
    """The fake pynvml with every device call answered from a cache: radT's own Python only."""

    def __init__(self, real: Any) -> None:
        super().__init__("pynvml_cached")
        self._real = real
        self._cache: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (callable(value) and name.startswith("nvmlDevice")):
            return value
        cache = self._cache

        def cached(*args: Any, **kwargs: Any) -> Any:
            key = (name, tuple(map(id, args)), tuple(sorted(kwargs.items())))
            if key not in cache:
                cache[key] = value(*args, **kwargs)
            return cache[key]

        object.__setattr__(self, name, cached)
        return cached


def measure_nvml(env: Env, n: int, rounds: int) -> Source:
    import pynvml
    from radt.listeners.nvml import NvmlListener

    assert Path(pynvml.__file__).parent == FAKE_PYNVML, pynvml.__file__
    listener = NvmlListener()
    listener.start(run_context(env, lambda samples: None))
    try:
        outputs = [listener.poll() for _ in range(n)]
        calls = sum(pynvml.FAKE_CALLS.values())
        cost = per_call(listener.poll, n, rounds)
        per_poll_calls = (sum(pynvml.FAKE_CALLS.values()) - calls) / (n * rounds)
        # The process attribution alone: the membership test of one listed pid
        # (radT walks up from NVML's pids; the answer is cached per pid).
        pid = listener._root.pid if listener._root is not None else os.getpid()
        tree = per_call(lambda: listener._in_run(pid), n, rounds)
        # The poll without that walk (no process samples then: no run tree for memory, no
        # run for utilisation), and the same with every NVML answer cached: what is left
        # is radT's own Python.
        root, listener._root = listener._root, None
        assert listener.run is not None
        run_pid, listener.run.pid = listener.run.pid, 0
        no_tree_keys = len(listener.poll())
        no_tree = per_call(listener.poll, n, rounds)
        reader = listener._reader
        assert reader is not None
        reader.nvml = _CachedNvml(pynvml)
        own = per_call(listener.poll, n, rounds)
        listener._root, listener.run.pid = root, run_pid
        # The fake's own cost per call, for scale.
        handle = listener._watched[0].device.handle
        fake_call = per_call(lambda: pynvml.nvmlDeviceGetPowerUsage(handle), n * 5, rounds)
    finally:
        listener.stop()
    notes = {
        "nvml_calls": per_poll_calls,
        "tree": tree,
        "no_tree": no_tree,
        "no_tree_keys": no_tree_keys,
        "own": own,
        "fake_call": fake_call,
    }
    return Source("nvml", cost, outputs, notes)


def capture_lines(
    argv: list[str], want: int, max_s: float = 20.0
) -> tuple[list[str], float | None]:
    """Lines of a (fake) tool, and its CPU seconds per line between the 20th and the last."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    marks: list[tuple[int, float]] = []
    began = time.monotonic()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if len(lines) in (20, want):
                marks.append((len(lines), _proc_cpu(process.pid)))
            if len(lines) >= want or time.monotonic() - began > max_s:
                break
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    per_line = None
    if len(marks) == 2 and marks[1][0] > marks[0][0]:
        per_line = (marks[1][1] - marks[0][1]) / (marks[1][0] - marks[0][0])
    return lines, per_line


def _proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_smi(env: Env, n: int, rounds: int, capture: int) -> tuple[Source, float | None]:
    from radt.listeners._tools import gpus_of_run
    from radt.listeners.smi import SmiListener

    listener = SmiListener()
    listener.gpus = gpus_of_run(())
    argv = listener.command(run_context(env, lambda samples: None, interval_s=0.05))
    argv[argv.index("-lms") + 1] = "1"
    lines, tool_cpu = capture_lines(argv, capture)
    lines = [line for line in lines if line.strip()]
    outputs = [listener.parse(line) for line in lines]
    feed = _cycle(lines)
    cost = per_call(lambda: listener.parse(next(feed)), n, rounds)
    return Source("smi", cost, outputs), tool_cpu


def measure_dcgm(env: Env, n: int, rounds: int, capture: int) -> tuple[Source, float | None]:
    from radt.listeners.dcgm import ALL_FIELDS, DcgmListener, Hierarchy

    listener = DcgmListener()
    listener.fields = ALL_FIELDS
    listener.hierarchy = Hierarchy()
    listener.entities = "0"
    argv = listener.command(run_context(env, lambda samples: None, interval_s=0.1))
    argv[argv.index("-d") + 1] = "1"
    lines, tool_cpu = capture_lines(argv, capture)
    listener._reset_parser()
    outputs = [listener.parse(line) for line in lines]
    rows = sum(1 for o in outputs if o) or 1
    # Time whole passes over the captured output (headers included), per row.
    results = []
    passes = max(1, n // len(lines))
    for _ in range(rounds):
        listener._reset_parser()
        began = cpu()
        for _ in range(passes):
            for line in lines:
                listener.parse(line)
        results.append((cpu() - began) / (passes * rows))
    return Source("dcgm", median(results), outputs), tool_cpu


def measure_polled(
    env: Env, listener: Any, n: int, rounds: int, pause_s: float, options: dict | None = None
) -> Source:
    listener.start(run_context(env, lambda samples: None, interval_s=pause_s, options=options))
    try:
        time.sleep(pause_s)
        outputs = []
        for _ in range(min(n, 20)):
            time.sleep(pause_s)
            outputs.append(listener.poll())
        cost = per_call(listener.poll, n, rounds, pause_s=pause_s)
    finally:
        listener.stop()
    return Source(listener.name, cost, [o for o in outputs if o])


def _cycle(items: Sequence[Any]):
    while True:
        yield from items


# ----------------------------------------------------------------------------- radT's recorder


@dataclass
class RecordCost:
    """CPU seconds per simulated second of radT's hand-off, by part."""

    emit: float
    flush: float
    send: float

    @property
    def total(self) -> float:
        return self.emit + self.flush + self.send


def simulate_record(
    env: Env, outputs: list[list[Any]], rate_hz: float, seconds: float
) -> RecordCost:
    """Run radT's recorder path on ``outputs`` re-stamped at ``rate_hz`` for ``seconds``."""
    from radt.listener import Sample
    from radt.record.decimate import Decimator
    from radt.record.recorder import Recorder
    from radt.record.spool import SpoolWriter
    from radt.record.writer import MAX_BATCH, BatchWriter

    count = max(1, round(rate_hz * seconds))
    origin = float(int(time.time()))
    stamped = [
        [Sample(origin + i / rate_hz, s.key, s.value) for s in outputs[i % len(outputs)]]
        for i in range(count)
    ]
    run_id = env.new_run("radt-record")
    spool = SpoolWriter(Path(tempfile.mkdtemp(dir=env.folder, prefix="spool-")))
    writer = BatchWriter(env.client, run_id, warn)
    recorder = Recorder(spool, writer, Decimator(WINDOW_S, origin), warn, flush_s=FLUSH_S)
    per_flush = max(1, round(rate_hz * FLUSH_S))
    emit = flush = send = 0.0

    def send_all() -> None:
        while writer._pending:
            batch = writer._pending[:MAX_BATCH]
            if not writer._send(batch):
                raise RuntimeError("log_batch into the SQLite store failed")
            del writer._pending[: len(batch)]

    for i, samples in enumerate(stamped):
        a = cpu()
        recorder.emit(samples)
        b = cpu()
        emit += b - a
        if (i + 1) % per_flush and i + 1 < count:
            continue
        recorder._flush()
        if i + 1 == count:  # the last window closes at the end, as in Recorder.close
            writer.put(recorder.decimator.flush())
        c = cpu()
        flush += c - b
        send_all()
        send += cpu() - c
    spool.close()
    simulated = count / rate_hz
    return RecordCost(emit / simulated, flush / simulated, send / simulated)


def record_costs(
    env: Env, outputs: list[list[Any]], rates: Sequence[float], rounds: int
) -> dict[float, RecordCost]:
    found = {}
    for rate in rates:
        seconds = 20.0 if rate <= 2 else (10.0 if rate <= 20 else 5.0)
        runs = [simulate_record(env, outputs, rate, seconds) for _ in range(rounds)]
        found[rate] = RecordCost(
            median([r.emit for r in runs]),
            median([r.flush for r in runs]),
            median([r.send for r in runs]),
        )
    return found


def _group_cpu(pgid: int) -> float:
    """CPU seconds of the live processes of process group ``pgid``."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure_http(
    folder: Path, sizes: Sequence[int], calls: int, rounds: int
) -> tuple[dict[int, tuple[float, float]], float]:
    """``log_batch`` through a real ``mlflow server`` (tests/mlflow_server.py): CPU per call of
    this process (the client, as radT's writer) and of the server's process group; and the
    CPU per sample of MLflow's monitor loop (GPU only) in this process against that server."""
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient
    from mlflow_server import MlflowServer

    found: dict[int, tuple[float, float]] = {}
    with MlflowServer(folder / "server") as server:
        assert server.process is not None
        pgid = server.process.pid
        client = MlflowClient(server.uri)
        experiment = client.create_experiment("listener-cost-http")
        for size in sizes:
            run_id = client.create_run(experiment).info.run_id
            clients, servers = [], []
            for r in range(rounds + 1):  # the first round warms the server up
                spent, server_before = 0.0, _group_cpu(pgid)
                for k in range(calls):
                    step = r * calls + k
                    points = [
                        Metric(
                            f"system/bench/gpu0/key{j}", float(j), 1_700_000_000_000 + step, step
                        )
                        for j in range(size)
                    ]
                    began = cpu()
                    client.log_batch(run_id, metrics=points, synchronous=True)
                    spent += cpu() - began
                if r:
                    clients.append(spent / calls)
                    servers.append((_group_cpu(pgid) - server_before) / calls)
            found[size] = (median(clients), median(servers))
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor

        loop, _ = mlflow_loop_cost(client, server.uri, experiment, [GPUMonitor()], 10, rounds)
    return found, loop


# ----------------------------------------------------------------------------- MLflow


def mlflow_loop_cost(
    client: Any, uri: str, experiment_id: str, monitors: list[Any] | None, n: int, rounds: int
) -> tuple[float, int]:
    """CPU per sample of ``SystemMetricsMonitor.monitor``'s loop body (the wait left out)."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    from mlflow.tracking import MlflowClient

    run_id = client.create_run(experiment_id).info.run_id
    monitor = SystemMetricsMonitor(run_id, tracking_uri=uri)
    if monitors is not None:
        monitor.monitors = monitors
    for m in monitor.monitors:
        m.clear_metrics()
    monitor.collect_metrics()
    count = len(monitor.aggregate_metrics())
    for m in monitor.monitors:
        m.clear_metrics()

    def one_sample() -> None:
        monitor.collect_metrics()
        run = MlflowClient(monitor._tracking_uri).get_run(monitor._run_id)
        assert run.info.status == "RUNNING"
        monitor.publish_metrics(monitor.aggregate_metrics())
        # At the 10 s default the BatchMetricsLogger flushes after every sample
        # (10 s of "training" >= 10 x its log_batch time).
        monitor.mlflow_logger.flush()

    return per_call(one_sample, n, rounds, pause_s=0.01), count


def measure_mlflow(env: Env, n_collect: int, n_loop: int, rounds: int) -> dict[str, Any]:
    import pynvml
    from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    assert Path(pynvml.__file__).parent == FAKE_PYNVML, pynvml.__file__
    gpu = GPUMonitor()
    gpu.collect_metrics()
    keys = len(gpu.aggregate_metrics())
    gpu.clear_metrics()

    def collect_aggregate() -> None:
        gpu.collect_metrics()
        gpu.aggregate_metrics()
        gpu.clear_metrics()

    collect = per_call(collect_aggregate, n_collect, rounds)
    where = (env.client, env.uri, env.experiment_id)
    gpu_loop, _ = mlflow_loop_cost(*where, [GPUMonitor()], n_loop, rounds)
    full_loop, full_keys = mlflow_loop_cost(*where, None, n_loop, rounds)

    # The default monitors' collect + aggregate alone (no get_run, no log_batch).
    full = SystemMetricsMonitor(env.new_run("mlflow-sysmetrics"), tracking_uri=env.uri)

    def full_collect_aggregate() -> None:
        full.collect_metrics()
        full.aggregate_metrics()
        for m in full.monitors:
            m.clear_metrics()

    full_collect = per_call(full_collect_aggregate, max(20, n_collect // 20), rounds)
    return {
        "keys": keys,
        "collect": collect,
        "gpu_loop": gpu_loop,
        "full_collect": full_collect,
        "full_loop": full_loop,
        "full_keys": full_keys,
    }


def measure_log_batch(env: Env, sizes: Sequence[int], calls: int, rounds: int) -> dict[int, float]:
    """CPU seconds of one ``MlflowClient.log_batch`` of N points into the SQLite store.

    The same N keys every call with a new step, as radT's writer sends one window.
    """
    from mlflow.entities import Metric

    found = {}
    for size in sizes:
        run_id = env.new_run(f"log-batch-{size}")
        step = iter(range(10**9))

        def send(size: int = size, run_id: str = run_id, step: Any = step) -> None:
            k = next(step)
            points = [
                Metric(f"system/bench/gpu0/key{j}", float(j), 1_700_000_000_000 + k, k)
                for j in range(size)
            ]
            env.client.log_batch(run_id, metrics=points, synchronous=True)

        found[size] = per_call(send, calls, rounds)
    return found


# ----------------------------------------------------------------------------- radT 0.2.30


def find_radt0230(explicit: str | None) -> Path | None:
    candidates = [Path(explicit)] if explicit else []
    venv = REPO / "benchmarks" / ".venv-radt0230"
    candidates += sorted(venv.glob("lib/python*/site-packages/radt"))
    candidates.append(Path("/tmp/radt0230/x/radt"))
    for folder in candidates:
        if (folder / "run" / "listeners" / "smi_listener.py").exists():
            return folder
    return None


def load_old_smi(folder: Path) -> Any:
    """radT 0.2.30's smi_listener module, loaded alone (its package would patch mlflow)."""
    import importlib.util

    path = folder / "run" / "listeners" / "smi_listener.py"
    spec = importlib.util.spec_from_file_location("radt0230_smi_listener", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Collect:
    """A buffer whose ``put`` only keeps the entry (parse-only timing)."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self.put = self.entries.append


class _LoggerSim:
    """0.2.30's path: a ``multiprocessing.Queue``, drained as ``_MLFlowLogger._flush_once`` does.

    Every ``per_flush`` entries (5 s of samples) the queue is drained and sent with
    ``store.log_batch`` in chunks of 1000, as the logger process does every 5 s.
    """

    def __init__(self, store: Any, run_id: str, per_flush: int) -> None:
        self.queue: multiprocessing.Queue = multiprocessing.Queue()
        self.store = store
        self.run_id = run_id
        self.per_flush = per_flush
        self.pending = 0
        self.log_batch_s = 0.0

    def put(self, entry: dict) -> None:
        self.queue.put(entry)
        self.pending += 1
        if self.pending >= self.per_flush:
            self.flush()

    def flush(self) -> None:
        from mlflow.entities import Metric

        drained = []
        while len(drained) < self.pending:
            drained.append(self.queue.get(timeout=10))
        self.pending = 0
        dicts = [
            {
                "key": m.get("key") or m.get("name"),
                "value": float(m.get("value")),
                "timestamp": int(m.get("timestamp")),
                "step": int(m.get("step", 0)),
            }
            for m in drained
        ]
        for i in range(0, len(dicts), 1000):
            batch = [
                Metric(d["key"], d["value"], d["timestamp"], d["step"]) for d in dicts[i : i + 1000]
            ]
            began = time.thread_time()
            self.store.log_batch(run_id=self.run_id, metrics=batch, params=[], tags=[])
            self.log_batch_s += time.thread_time() - began

    def close(self) -> None:
        self.queue.close()
        self.queue.join_thread()


def run_old_smi(module: Any, lines: list[str], buffer: Any) -> float:
    """CPU seconds of ``SMIThread.run`` over ``lines`` (nvidia-smi and start_run stubbed)."""
    data = ("\n".join(lines) + "\n").encode()

    class _Popen:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.stdout = io.BytesIO(data)

    module.subprocess = types.SimpleNamespace(Popen=_Popen, PIPE=subprocess.PIPE)
    real_mlflow = module.mlflow
    module.mlflow = types.SimpleNamespace(
        start_run=lambda **kwargs: contextlib.nullcontext(),
        log_metrics=real_mlflow.log_metrics,
    )
    thread = module.SMIThread("bench", mlflow_buffer=buffer)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            began = cpu()
            thread.run()
            spent = cpu() - began
    finally:
        module.mlflow = real_mlflow
    return spent


def measure_old(env: Env, folder: Path, n: int, rounds: int, capture: int) -> dict[str, Any]:
    import mlflow

    module = load_old_smi(folder)
    argv = [
        "nvidia-smi",
        "-i",
        "0",
        "-lms",
        "1",
        f"--query-gpu={OLD_QUERY}",
        "--format=csv,nounits,noheader",
    ]
    captured, _ = capture_lines(argv, capture)
    captured = [line for line in captured if line.strip()]
    lines = [captured[i % len(captured)] for i in range(n)]

    parse_runs = []
    collect = _Collect()
    for _ in range(rounds):
        collect = _Collect()
        parse_runs.append(run_old_smi(module, lines, collect) / n)
    keys = len(collect.entries) / n
    parse = median(parse_runs)

    store = env.client._tracking_client.store

    def shipped(rate_hz: float) -> tuple[float, float]:
        """CPU per simulated second at ``rate_hz``: everything, and log_batch alone."""
        count = max(n, round(rate_hz * OLD_FLUSH_S * 4))
        feed = [captured[i % len(captured)] for i in range(count)]
        totals, batches = [], []
        for _ in range(rounds):
            sim = _LoggerSim(store, env.new_run("radt-0.2.30"), round(rate_hz * OLD_FLUSH_S * keys))
            spent = run_old_smi(module, feed, sim)
            began = cpu()
            if sim.pending:
                sim.flush()
            spent += cpu() - began
            sim.close()
            totals.append(spent / (count / rate_hz))
            batches.append(sim.log_batch_s / (count / rate_hz))
        return median(totals), median(batches)

    lo_total, lo_batch = shipped(LO_HZ)
    hi_total, _ = shipped(HI_HZ)

    # Fallback without a buffer: mlflow.log_metrics per line, into the SQLite store.
    metrics = []
    for i in range(0, len(collect.entries), int(keys)):
        metrics.append({e["key"]: e["value"] for e in collect.entries[i : i + int(keys)]})
    run_id = env.new_run("radt-0.2.30-log-metrics")
    feed_metrics = _cycle(metrics)
    with mlflow.start_run(run_id=run_id):
        log_metrics = per_call(
            lambda: mlflow.log_metrics(next(feed_metrics)), max(50, n // 40), rounds
        )
    return {
        "keys": keys,
        "parse": parse,
        "lo_total": lo_total,
        "lo_batch": lo_batch,
        "hi_total": hi_total,
        "log_metrics": log_metrics,
    }


# ----------------------------------------------------------------------------- end to end


def end_to_end(env: Env, name: str, seconds: float) -> tuple[float, int, float | None] | None:
    """Run one radT listener by its real driver into a counting sink.

    Returns CPU seconds of this process per sample between the first and the last
    sample, the number of samples, and the tool's CPU per sample (streamed only).
    """
    from radt.listeners.dcgm import DcgmListener
    from radt.listeners.iostat import IostatListener
    from radt.listeners.nvml import NvmlListener
    from radt.listeners.rapl import RaplListener
    from radt.listeners.smi import SmiListener
    from radt.listeners.top import TopListener

    from radt.record.sampler import Sampler

    made = {
        "nvml": (NvmlListener, 0.02),
        "rapl": (RaplListener, 0.02),
        "smi": (SmiListener, 0.05),
        "dcgm": (DcgmListener, 0.1),
        "top": (TopListener, 0.1),
        "iostat": (IostatListener, 0.1),
    }
    cls, interval = made[name]
    listener = cls()
    marks: list[float] = []

    def sink(samples: Any) -> None:
        marks.append(cpu())

    def tool_cpu() -> float | None:
        process = getattr(listener, "process", None)
        if process is None:
            return None
        try:
            return _proc_cpu(process.pid)
        except OSError:
            return None

    options = {"root": str(env.rapl_root)} if name == "rapl" else None
    run = run_context(env, sink, interval_s=interval, options=options)
    sampler = Sampler(listener, run) if hasattr(listener, "poll") else None
    if sampler is not None:
        sampler.start()
    else:
        listener.start(run)
    try:
        deadline = time.monotonic() + 15.0
        while len(marks) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        first_count, first_tool = len(marks), tool_cpu()
        time.sleep(seconds)
        last_count, last_tool = len(marks), tool_cpu()
    finally:
        if sampler is not None:
            sampler.stop()
        else:
            listener.stop()
    if len(marks) < 3:
        return None
    tool = None
    if first_tool is not None and last_tool is not None and last_count > first_count:
        tool = (last_tool - first_tool) / (last_count - first_count)
    return (marks[-1] - marks[1]) / (len(marks) - 2), len(marks), tool


# ----------------------------------------------------------------------------- report


@dataclass
class Row:
    name: str
    what: str
    keys: float
    source_s: float
    """Poll or parse, per sample."""
    record_s: float
    """Hand-off per sample: everything that grows with the number of samples."""
    fixed_s: float
    """CPU seconds per second whatever the rate (radT: spool flush and one log_batch per window)."""
    default_hz: float

    @property
    def per_sample(self) -> float:
        return self.source_s + self.record_s

    def max_hz(self, fixed: bool) -> float:
        spare = ONE_PCT_CORE - (self.fixed_s if fixed else 0.0)
        return spare / self.per_sample if spare > 0 and self.per_sample > 0 else 0.0

    def core_pct(self, rate_hz: float) -> float:
        return (self.fixed_s + rate_hz * self.per_sample) * 100.0


def fit(record: dict[float, RecordCost]) -> tuple[float, float]:
    """(fixed CPU s per s, marginal CPU s per sample) of the record path.

    ``log_batch`` sends one point per key per window at any rate, so its cost per
    second is fixed (the median of both rates). Emit and flush grow with the
    samples: their line through LO_HZ and HI_HZ gives the marginal cost per
    sample, and its intercept (one spool append per flush) joins the fixed part.
    """
    lo, hi = record[LO_HZ], record[HI_HZ]
    grows_lo, grows_hi = lo.emit + lo.flush, hi.emit + hi.flush
    marginal = max((grows_hi - grows_lo) / (HI_HZ - LO_HZ), 0.0)
    send = median([lo.send, hi.send])
    return send + max(grows_lo - LO_HZ * marginal, 0.0), marginal


def us(seconds: float) -> str:
    if seconds != seconds:
        return "–"
    value = seconds * 1e6
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value >= 100:
        return f"{sign}{value:,.0f}"
    return f"{sign}{value:.1f}" if value >= 10 else f"{sign}{value:.2f}"


def hz(value: float) -> str:
    if value <= 0:
        return "none"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def rate_label(value: float) -> str:
    return f"{value:g} Hz" if value >= 1 else f"{1 / value:g} s"


def interpolate(points: dict[int, float], x: float) -> float:
    """Piecewise-linear value at ``x`` (extended beyond the ends by the nearest segment)."""
    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]]
    for left, right in zip(xs, xs[1:], strict=False):
        if x <= right or right == xs[-1]:
            slope = (points[right] - points[left]) / (right - left)
            return points[left] + slope * (x - left)
    return points[xs[-1]]


DEFAULT_HZ = {"nvml": 10.0, "rapl": 10.0, "smi": 2.0, "dcgm": 2.0, "top": 2.0, "iostat": 2.0}
WHAT = {
    "nvml": "poll (fake pynvml, 1 GPU) + recorder",
    "rapl": "poll (powercap, 2 sockets, 4 zones) + recorder",
    "smi": "parse of one CSV line + recorder",
    "dcgm": "parse of one dmon row + recorder",
    "top": "poll (psutil, run tree + host) + recorder",
    "iostat": "poll (psutil, disks + NICs) + recorder",
}


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (default 3)")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end cross-check")
    parser.add_argument("--e2e-s", type=float, default=3.0, help="seconds per end-to-end run")
    parser.add_argument("--radt0230", help="radT 0.2.30's package folder (default: searched)")
    parser.add_argument(
        "--http",
        action="store_true",
        help="also time log_batch through a real `mlflow server` (adds 20-60 s of start-up)",
    )
    args = parser.parse_args()

    scale = 0.3 if args.quick else 1.0
    rounds = args.rounds
    # Not under _common.workspace's radt-bench-* names: other sessions may sweep those.
    folder = Path(tempfile.mkdtemp(prefix="radt-listener-cost-"))
    progress(f"workspace: {folder}")
    env = setup(folder)
    load = os.getloadavg()[0]
    began = time.monotonic()
    try:
        progress("sources: nvml")
        nvml = measure_nvml(env, int(150 * scale), rounds)
        progress("sources: rapl")
        from radt.listeners.rapl import RaplListener

        rapl = measure_polled(
            env,
            RaplListener(),
            int(2000 * scale),
            rounds,
            pause_s=0.0,
            options={"root": str(env.rapl_root)},
        )
        progress("sources: smi")
        smi, smi_tool = measure_smi(env, int(5000 * scale), rounds, capture=800)
        progress("sources: dcgm")
        dcgm, dcgm_tool = measure_dcgm(env, int(5000 * scale), rounds, capture=800)
        progress("sources: top, iostat")
        from radt.listeners.iostat import IostatListener
        from radt.listeners.top import TopListener

        n_slow = max(10, int(25 * scale))
        top = measure_polled(env, TopListener(), n_slow, rounds, pause_s=0.055)
        iostat = measure_polled(env, IostatListener(), n_slow, rounds, pause_s=0.055)
        sources = [nvml, rapl, smi, dcgm, top, iostat]

        progress("radT's recorder, simulated at 1 Hz and 100 Hz")
        record = {s.name: record_costs(env, s.outputs, (LO_HZ, HI_HZ), rounds) for s in sources}
        progress("log_batch into SQLite by size")
        batches = measure_log_batch(env, (1, 20, 100), max(5, int(10 * scale)), rounds)

        progress("MLflow's system metrics")
        ml = measure_mlflow(env, int(3000 * scale), max(10, int(20 * scale)), rounds)

        old_folder = find_radt0230(args.radt0230)
        old = None
        if old_folder is not None:
            progress(f"radT 0.2.30 ({old_folder})")
            old = measure_old(env, old_folder, max(200, int(400 * scale)), rounds, capture=400)
        else:
            progress("radT 0.2.30 not found: its rows are left out (see --radt0230)")

        http: dict[int, tuple[float, float]] = {}
        http_loop = float("nan")
        if args.http:
            progress("log_batch through an HTTP tracking server")
            try:
                http, http_loop = measure_http(
                    folder, (1, 20, 100), max(10, int(20 * scale)), rounds
                )
            except (ImportError, RuntimeError) as exc:
                progress(f"no HTTP figures: {exc}")

        e2e: dict[str, Any] = {}
        if not args.no_e2e:
            for name in DEFAULT_HZ:
                progress(f"end to end: {name}")
                e2e[name] = end_to_end(env, name, args.e2e_s)
    finally:
        env.child.terminate()
        env.child.wait()
    elapsed = time.monotonic() - began

    rows: list[Row] = []
    sends: dict[str, float] = {}
    for source in sources:
        fixed, marginal = fit(record[source.name])
        sends[source.name] = median([c.send for c in record[source.name].values()])
        rows.append(
            Row(
                f"radT `{source.name}`",
                WHAT[source.name],
                source.keys,
                source.cost_s,
                marginal,
                fixed,
                DEFAULT_HZ[source.name],
            )
        )
    no_tree = nvml.notes["no_tree"]
    rows.insert(
        1,
        Row(
            "radT `nvml` without per-process series",
            "poll minus per-process memory and utilisation + recorder",
            nvml.notes["no_tree_keys"],
            no_tree,
            rows[0].record_s,
            rows[0].fixed_s,
            DEFAULT_HZ["nvml"],
        ),
    )
    rows.append(
        Row(
            "MLflow system metrics, `GPUMonitor` only",
            "collect+aggregate; get_run + log_batch per sample",
            ml["keys"],
            ml["collect"],
            ml["gpu_loop"] - ml["collect"],
            0.0,
            0.1,
        )
    )
    rows.append(
        Row(
            "MLflow system metrics, default monitors",
            "cpu+disk+net+gpu, same loop",
            ml["full_keys"],
            ml["full_collect"],
            ml["full_loop"] - ml["full_collect"],
            0.0,
            0.1,
        )
    )
    if old is not None:
        old_marginal = max((old["hi_total"] - old["lo_total"]) / (HI_HZ - LO_HZ), 0.0)
        old_fixed = max(old["lo_total"] - LO_HZ * old_marginal, 0.0)
        rows.append(
            Row(
                "radT 0.2.30 `smi` as shipped",
                "parse + mp.Queue; logger: log_batch every 5 s",
                old["keys"],
                old["parse"],
                max(old_marginal - old["parse"], 0.0),
                old_fixed,
                1.0,
            )
        )
        rows.append(
            Row(
                "radT 0.2.30 `smi`, no buffer",
                "parse + mlflow.log_metrics per line",
                old["keys"],
                old["parse"],
                old["log_metrics"],
                0.0,
                1.0,
            )
        )

    # With an HTTP tracking server: radT's per-window log_batch costs its client side only.
    def over_http(row: Row) -> Row | None:
        if not http:
            return None
        name = next((k for k in sends if row.name.startswith(f"radT `{k}`")), None)
        if name is not None:
            client = interpolate({n: c for n, (c, _server) in http.items()}, row.keys)
            return Row(
                row.name,
                row.what,
                row.keys,
                row.source_s,
                row.record_s,
                row.fixed_s - sends[name] + client,
                row.default_hz,
            )
        if row.name.endswith("`GPUMonitor` only") and http_loop == http_loop:
            return Row(
                row.name,
                row.what,
                row.keys,
                row.source_s,
                http_loop - row.source_s,
                0.0,
                row.default_hz,
            )
        return None

    base = rows[0].per_sample
    out = [header("Listener cost: CPU per sample")]
    out.append(
        f"- load average at start: {load:.2f} on {os.cpu_count()} cores; processes on the "
        f"machine: {sum(1 for p in os.listdir('/proc') if p.isdigit())}; rounds: {rounds}; "
        f"measuring took {elapsed:.0f} s"
    )
    out.append(
        "- no GPU: fake pynvml (scenario from tests/fixtures/nvml_h100.json, GPU 0), fake "
        "nvidia-smi / dcgmi output; MLflow writes go to a local SQLite store"
    )
    out.append("")
    out.append(
        "Per sample (source = poll or parse; record = what grows with the number of samples: "
        "radT's emit + spool + decimator, MLflow's get_run + log_batch, 0.2.30's queue or "
        "log_metrics):"
    )
    out.append("")
    body = []
    for row in rows:
        body.append(
            [
                row.name,
                row.what,
                f"{row.keys:.1f}",
                us(row.source_s),
                us(row.record_s),
                us(row.per_sample),
                us(row.per_sample / row.keys) if row.keys else "–",
                hz(row.max_hz(fixed=False)),
                f"{row.per_sample / base:.2f}",
            ]
        )
    out.append(
        table(
            [
                "pipeline",
                "one sample",
                "keys",
                "source µs",
                "+ record µs",
                "= µs/sample",
                "µs/key",
                "max Hz ≤1 % core",
                "× radT nvml",
            ],
            body,
        )
    )
    out.append("")
    out.append(
        "All in, as configured by default (per-second = CPU spent every second whatever the "
        "rate: radT's spool flush and one log_batch per 1 s window; 0.2.30's log_batch every "
        "5 s). SQLite: local store, the DB work in this process; HTTP: `mlflow server`, the "
        "client side only:"
    )
    out.append("")
    body = []
    for row in rows:
        web = over_http(row)
        body.append(
            [
                row.name,
                rate_label(row.default_hz),
                us(row.fixed_s) if row.fixed_s else "0",
                f"{row.core_pct(row.default_hz):.2f}",
                hz(row.max_hz(fixed=True)),
                "–" if web is None else (us(web.fixed_s) if web.fixed_s else "0"),
                "–" if web is None else f"{web.core_pct(web.default_hz):.2f}",
                "–" if web is None else hz(web.max_hz(fixed=True)),
            ]
        )
    out.append(
        table(
            [
                "pipeline",
                "default rate",
                "per-second µs/s (SQLite)",
                "% core @default (SQLite)",
                "max Hz ≤1 % (SQLite)",
                "per-second µs/s (HTTP)",
                "% core @default (HTTP)",
                "max Hz ≤1 % (HTTP)",
            ],
            body,
        )
    )
    out.append("")
    out.append(
        "radT's record path, CPU µs per simulated second by part (fixed and marginal fitted "
        "on the two rates; log_batch sends one point per key per window at any rate):"
    )
    out.append("")
    parts = []
    for source in sources:
        fixed, marginal = fit(record[source.name])
        for rate, cost in record[source.name].items():
            parts.append(
                [
                    f"radT `{source.name}`",
                    rate_label(rate),
                    us(cost.emit),
                    us(cost.flush),
                    us(cost.send),
                    us(fixed),
                    us(marginal),
                ]
            )
    out.append(
        table(
            [
                "listener",
                "rate",
                "emit µs/s",
                "flush (spool + decimate) µs/s",
                "log_batch µs/s",
                "fixed µs/s",
                "marginal µs/sample",
            ],
            parts,
        )
    )
    out.append("")
    out.append(
        "- one `MlflowClient.log_batch` into the SQLite store, CPU per call: "
        + ", ".join(f"{size} points {us(cost)} µs" for size, cost in batches.items())
        + "."
    )
    if http:
        out.append(
            "- through an HTTP tracking server (`mlflow server`, SQLite behind it), CPU per "
            "`log_batch`: "
            + "; ".join(
                f"{size} points {us(client)} µs in the client, {us(server)} µs in the server"
                for size, (client, server) in http.items()
            )
            + f" (server: 10 ms ticks). MLflow's monitor loop (GPU only) against it: "
            f"{us(http_loop)} µs per sample in the client."
        )
    notes = nvml.notes
    out.append(
        f"- `nvml`: {notes['nvml_calls']:.0f} NVML calls per poll. Of the {us(nvml.cost_s)} µs, "
        f"the psutil walk of the run's process tree (`children(recursive=True)`, done at every "
        f"poll where NVML lists GPU processes) is {us(notes['tree'])} µs; the poll without it "
        f"{us(notes['no_tree'])} µs, of which radT's own Python (every NVML answer cached) "
        f"{us(notes['own'])} µs; one fake pynvml call (`nvmlDeviceGetPowerUsage`) "
        f"{us(notes['fake_call'])} µs. A real NVML call goes into the driver: not measured."
    )
    out.append(
        f"- MLflow: `GPUMonitor` reads {ml['keys']} keys per GPU with 4 NVML calls; its loop "
        "calls `MlflowClient(uri).get_run()` after every sample and `log_batch` once per sample "
        "(`samples_before_logging=1`; the flush rule holds at 10 s); default interval 10 s."
    )
    if old is not None:
        out.append(
            f"- radT 0.2.30 (fixed at 1 Hz, `nvidia-smi -l 1`): parse {us(old['parse'])} µs per "
            f"line; as shipped {us(old['lo_total'])} µs per second in all (listener and logger "
            f"process), of which `store.log_batch` {us(old['lo_batch'])} µs (one call every "
            f"5 s); without a buffer `mlflow.log_metrics` adds {us(old['log_metrics'])} µs "
            "per line."
        )
    out.append(
        "- the tools' own CPU is in no figure above. The fakes are Python scripts and say "
        f"nothing of the real tools: fake nvidia-smi {us(smi_tool) if smi_tool else '?'} µs "
        f"per line, fake dcgmi {us(dcgm_tool) if dcgm_tool else '?'} µs per row (10 ms ticks)."
    )
    if e2e:
        out.append("")
        out.append(
            "End to end (the real driver thread into a counting sink, no recorder): CPU of this "
            "process per sample between the first and the last sample, against the source loop:"
        )
        out.append("")
        cross = []
        by_name = {s.name: s for s in sources}
        for name, found in e2e.items():
            if found is None:
                cross.append([f"radT `{name}`", "–", "–", us(by_name[name].cost_s), "–"])
                continue
            per, count, _tool = found
            cross.append(
                [
                    f"radT `{name}`",
                    str(count),
                    us(per),
                    us(by_name[name].cost_s),
                    us(per - by_name[name].cost_s),
                ]
            )
        out.append(
            table(
                [
                    "listener",
                    "samples",
                    "µs/sample end to end",
                    "µs/sample source loop",
                    "difference (wake-up, pipe read)",
                ],
                cross,
            )
        )
    print("\n".join(out))
    if not args.keep:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
