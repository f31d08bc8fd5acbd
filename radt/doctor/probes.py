"""What this machine lets radT measure and control: one row per capability, found out
without changing anything.

Every check is a probe that returns rows (yes/no, why, and the fix); one rule covers
every failure: a probe that raises becomes a "no" row whose reason is the error in one
line, so a broken tool never hides the rest of the table. ``radt doctor`` prints the
table, ``--json`` the rows, ``--require`` exits 1 naming what is missing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from radt.collocation import nvsmi
from radt.collocation.mps import default_pipe
from radt.collocation.power import may_set_power_limit
from radt.collocation.teardown import one_line
from radt.errors import RadtError, UsageError
from radt.words import count as count_of

log = logging.getLogger(__name__)

ROOT_FIX = "run radT as root, or ask an admin to run the change for you (sudo)"
GPU_QUERY = (
    "index,name,driver_version,mig.mode.current,compute_mode,power.limit,"
    "power.min_limit,power.max_limit,clocks.sm,clocks.max.sm"
)
INSTANT_FIELD = 186  # NVML_FI_DEV_POWER_INSTANT in nvml.h
PROF_FIELD = "1002"  # DCGM_FI_PROF_SM_ACTIVE
RESTRICTED_APPLICATION_CLOCKS = 0  # NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS
TORCH_FIX = "install a CUDA build of PyTorch (pytorch.org/get-started gives the pip command)"
TORCH_PROBE = (
    "import torch\n"
    "from torch.profiler import ProfilerActivity, supported_activities\n"
    "cuda = torch.cuda.is_available()\n"
    "print(torch.__version__, cuda, torch.cuda.device_count() if cuda else 0,"
    " ProfilerActivity.CUDA in supported_activities())\n"
)


class Missing(RadtError):
    """``--require`` named a capability this machine lacks."""

    exit_code = 1


@dataclass
class Row:
    """One capability: whether radT has it here, why (or what was found), and the fix."""

    name: str
    what: str
    ok: bool
    why: str
    fix: str = ""


@dataclass
class Facts:
    """What the probes share: the GPUs as nvidia-smi reports them, and NVML."""

    gpus: list[dict[str, str]] = field(default_factory=list)
    smi_problem: str | None = "not asked yet"
    nvml: object | None = None
    nvml_problem: str | None = "not asked yet"
    listeners: dict[str, str | None] = field(default_factory=dict)
    """Each installed listener's answer to ``available()`` (None: it can run here)."""

    def listener(self, name: str) -> str | None:
        return self.listeners.get(name, f"the {name} listener is not installed")


def _tool_version(tool: str) -> str:
    """The first line ``TOOL --version`` prints that names a version."""
    result = nvsmi.run([tool, "--version"], timeout=60.0)
    if not result.ok:
        raise RadtError(f"`{tool} --version` failed: {result.summary()}")
    lines = [ln.strip() for ln in result.output.splitlines() if ln.strip()]
    named = [ln for ln in lines if "version" in ln.lower()]
    return (named or lines or ["no version printed"])[-1]


def _read_gpus(facts: Facts) -> None:
    if not nvsmi.available(nvsmi.SMI):
        facts.smi_problem = "nvidia-smi not found on PATH"
        return
    result = nvsmi.run([nvsmi.SMI, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    if not result.ok:
        facts.smi_problem = result.summary()
        return
    keys = GPU_QUERY.split(",")
    for line in result.output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == len(keys):
            facts.gpus.append(dict(zip(keys, parts, strict=True)))
    facts.smi_problem = None if facts.gpus else "nvidia-smi lists no GPU"


def _open_nvml(facts: Facts) -> None:
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        facts.nvml_problem = "nvidia-ml-py is not installed"
        return
    facts.nvml_problem = facts.listener("nvml")
    if facts.nvml_problem is None:
        nvml.nvmlInit()
        facts.nvml = nvml


def probe_driver(facts: Facts) -> list[Row]:
    """The driver through nvidia-smi, and one row per GPU."""
    if facts.smi_problem:
        return [
            Row(
                "driver",
                "NVIDIA driver (nvidia-smi)",
                False,
                facts.smi_problem,
                "install the NVIDIA driver and put nvidia-smi on PATH",
            )
        ]
    first = facts.gpus[0]
    rows = [
        Row(
            "driver",
            "NVIDIA driver (nvidia-smi)",
            True,
            f"driver {first['driver_version']}, {count_of(len(facts.gpus), 'GPU')}",
        )
    ]
    for gpu in facts.gpus:
        rows.append(
            Row(
                f"gpu{gpu['index']}",
                f"GPU {gpu['index']}",
                True,
                f"{gpu['name']}; MIG {gpu['mig.mode.current']}; compute mode "
                f"{gpu['compute_mode']}; power limit {gpu['power.limit']} W "
                f"({gpu['power.min_limit']}-{gpu['power.max_limit']} W); SM clock "
                f"{gpu['clocks.sm']} of {gpu['clocks.max.sm']} MHz",
            )
        )
    return rows


def probe_nvml(facts: Facts) -> list[Row]:
    """NVML itself, the instant power field and the energy counter on every GPU."""
    if facts.nvml is None:
        why = facts.nvml_problem or "NVML did not load"
        fix = "pip install nvidia-ml-py, with the NVIDIA driver loaded"
        return [
            Row("nvml", "NVML", False, why, fix),
            Row("power_instant", "instant power (NVML field)", False, f"no NVML: {why}", fix),
            Row("energy_counter", "energy counter (NVML)", False, f"no NVML: {why}", fix),
        ]
    nvml = facts.nvml
    count = nvml.nvmlDeviceGetCount()
    rows = [
        Row(
            "nvml",
            "NVML",
            True,
            f"driver {nvml.nvmlSystemGetDriverVersion()}, {count_of(count, 'GPU')}",
        )
    ]
    instant_off, energy_off = [], []
    for index in range(count):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        value = nvml.nvmlDeviceGetFieldValues(handle, [INSTANT_FIELD])[0]
        if value.nvmlReturn != nvml.NVML_SUCCESS:
            instant_off.append(f"GPU {index}: {nvml.nvmlErrorString(value.nvmlReturn)}")
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nvml.NVMLError as exc:
            energy_off.append(f"GPU {index}: {exc}")
    rows.append(
        Row(
            "power_instant",
            "instant power (NVML field)",
            not instant_off,
            "; ".join(instant_off) or f"supported on {count_of(count, 'GPU')}",
            "needs an A100/H100-class GPU and a recent driver; radT falls back to the "
            "1-s averaged power"
            if instant_off
            else "",
        )
    )
    rows.append(
        Row(
            "energy_counter",
            "energy counter (NVML)",
            not energy_off,
            "; ".join(energy_off) or f"supported on {count_of(count, 'GPU')}",
            "needs a Volta or newer GPU; radT falls back to integrated power" if energy_off else "",
        )
    )
    return rows


def probe_dcgm(facts: Facts) -> list[Row]:
    """dcgmi and its host engine, and whether profiling metrics may be watched."""
    reason = facts.listener("dcgm")
    fix = "install DCGM (datacenter-gpu-manager) and start nv-hostengine"
    if reason is not None:
        return [
            Row("dcgm", "DCGM (dcgmi, host engine)", False, reason, fix),
            Row("dcgm_prof", "DCGM profiling metrics", False, f"no DCGM: {reason}", fix),
        ]
    rows = [Row("dcgm", "DCGM (dcgmi, host engine)", True, "host engine reachable")]
    result = nvsmi.run(["dcgmi", "dmon", "-e", PROF_FIELD, "-c", "1"], timeout=60.0)
    refused = not result.ok or "Error setting watches" in result.output
    rows.append(
        Row(
            "dcgm_prof",
            "DCGM profiling metrics",
            not refused,
            result.summary() if refused else "allowed",
            "stop the other profiler (nsys, ncu, another dcgmi, the DCGM exporter) that holds "
            "the GPU's counters, or ask an admin to pause it (dcgmi profile --pause)"
            if refused
            else "",
        )
    )
    return rows


def probe_mps(facts: Facts) -> list[Row]:
    """The MPS control program, and whether a daemon answers on this pipe folder."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return [
            Row(
                "mps",
                "MPS control",
                False,
                "nvidia-cuda-mps-control not found on PATH",
                "install the NVIDIA driver's CUDA MPS tools",
            )
        ]
    pid_file = os.path.join(default_pipe(), "nvidia-cuda-mps-control.pid")
    state = "a daemon runs" if os.path.exists(pid_file) else "no daemon runs"
    return [Row("mps", "MPS control", True, f"{control} ({state} in {default_pipe()})")]


def probe_rights(facts: Facts) -> list[Row]:
    """May this user change power limits and MIG mode (nothing is changed)."""
    root = may_set_power_limit()
    who = "root" if root else f"user id {os.geteuid()}, not root"
    no_gpu = facts.smi_problem
    no_mig = [g["index"] for g in facts.gpus if g["mig.mode.current"].startswith("[")]
    rows = []
    for name, what in (("set_power", "set power limits"), ("set_mig", "set MIG mode")):
        if no_gpu:
            rows.append(Row(name, what, False, f"no GPU: {no_gpu}", "see the driver row"))
        elif name == "set_mig" and no_mig:
            why = f"GPU {', '.join(no_mig)} has no MIG mode"
            rows.append(Row(name, what, False, why, "MIG needs an A100/H100-class GPU"))
        else:
            rows.append(Row(name, what, root, who, "" if root else ROOT_FIX))
    return rows


def probe_clock_rights(facts: Facts) -> list[Row]:
    """May this user lock GPU clocks: root, and what NVML's API restriction says."""
    root = may_set_power_limit()
    who = "root" if root else f"user id {os.geteuid()}, not root"
    if facts.nvml is None:
        why = f"no NVML: {facts.nvml_problem}"
        return [Row("set_clocks", "set GPU clocks", False, why, "install NVML (nvidia-ml-py)")]
    nvml = facts.nvml
    restricted, unanswered = [], []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        try:
            state = nvml.nvmlDeviceGetAPIRestriction(handle, RESTRICTED_APPLICATION_CLOCKS)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                raise
            unanswered.append(str(index))
            continue
        if state:
            restricted.append(str(index))
    if unanswered:
        gpus = ", ".join(unanswered)
        why = (
            f"{who}; NVML does not say who may lock clocks on GPU {gpus} (Not Supported, as "
            "in a VM); root could lock them on such a GPU (an H200 in a VM, driver 580)"
        )
        fix = "" if root else f"{ROOT_FIX}; or use power limits (PowerLimit, power_limit) instead"
        return [Row("set_clocks", "set GPU clocks", root, why, fix)]
    api = (
        f"clock API restricted to root on GPU {', '.join(restricted)}"
        if restricted
        else "clock API open to every user"
    )
    return [Row("set_clocks", "set GPU clocks", root, f"{who}; {api}", "" if root else ROOT_FIX)]


def probe_listeners(facts: Facts) -> list[Row]:
    """RAPL zones, nsys and ncu with their versions."""
    reason = facts.listener("rapl")
    rows = [
        Row(
            "rapl",
            "RAPL zones (CPU energy)",
            reason is None,
            reason or "readable",
            "" if reason is None else "see the reason; -o rapl.root=PATH reads another tree",
        )
    ]
    for name, fix in (
        ("nsys", "install NVIDIA Nsight Systems and put nsys on PATH"),
        ("ncu", "install NVIDIA Nsight Compute and put ncu on PATH"),
    ):
        reason = facts.listener(name)
        if reason is None:
            try:
                rows.append(Row(name, name, True, _tool_version(name)))
            except RadtError as exc:
                rows.append(Row(name, name, False, str(exc), f"reinstall {name}"))
        else:
            rows.append(Row(name, name, False, reason, fix))
    return rows


def _torch_row() -> Row:
    """PyTorch's build from its ``version.py`` (no import); only a CUDA build is then
    imported, in a child process, to ask for CUDA and the profiler's CUDA activities."""
    what = "PyTorch with CUDA"
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return Row("torch_cuda", what, False, "not installed", TORCH_FIX)
    build: dict[str, object] = {}
    version_py = os.path.join(spec.submodule_search_locations[0], "version.py")
    with open(version_py) as source:
        exec(compile(source.read(), version_py, "exec"), build)  # noqa: S102 - torch's own file
    if not build.get("cuda"):
        return Row(
            "torch_cuda", what, False, f"torch {build.get('__version__')}: no CUDA build", TORCH_FIX
        )
    done = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 4:
        raise RadtError(f"importing torch failed: {done.stderr.strip().splitlines()[-1:]}")
    version, cuda, count, activities = words
    ok = cuda == "True" and activities == "True"
    gpus = count_of(int(count), "GPU")
    why = f"torch {version}; CUDA {'yes, ' + gpus if cuda == 'True' else 'no'}"
    why += f"; profiler CUDA activities {'yes' if activities == 'True' else 'no'}"
    return Row("torch_cuda", what, ok, why, "" if ok else TORCH_FIX)


def probe_python(facts: Facts) -> list[Row]:
    """PyTorch with CUDA and the profiler's CUDA activities, and tensorsocket."""
    rows = [_torch_row()]
    try:
        version = importlib.metadata.version("tensorsocket")
        rows.append(Row("tensorsocket", "tensorsocket (shared loader)", True, version))
    except importlib.metadata.PackageNotFoundError:
        rows.append(
            Row(
                "tensorsocket",
                "tensorsocket (shared loader)",
                False,
                "not installed",
                "pip install 'radt[shared-loader]'",
            )
        )
    return rows


def probe_places(facts: Facts) -> list[Row]:
    """The tracking store, RADT_HOME, and Slurm."""
    from radt.record.runfolder import radt_home
    from radt.tracking import connect, resolve_tracking_uri, sqlite_path, store_label

    uri, embedded = resolve_tracking_uri()
    try:
        if embedded and not sqlite_path(uri).exists():  # connecting would create it
            why = f"{store_label(uri)} (embedded; made at the first run)"
        else:
            connect(uri)
            why = store_label(uri)
        rows = [Row("tracking", "tracking store", True, why)]
    except RadtError as exc:
        rows = [Row("tracking", "tracking store", False, str(exc).split("; ")[0], str(exc))]
    home = radt_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home):
            pass
        free_gib = shutil.disk_usage(home).free / 2**30
        rows.append(
            Row("radt_home", "RADT_HOME writable", True, f"{home}, {free_gib:.1f} GiB free")
        )
    except OSError as exc:
        rows.append(
            Row(
                "radt_home",
                "RADT_HOME writable",
                False,
                f"{home}: {one_line(exc)}",
                "set RADT_HOME to a writable folder (default ~/.radt)",
            )
        )
    rows.append(slurm_row())
    from radt import warm

    serving, why = warm.describe()
    rows.append(Row("warm", "warm launcher", serving, why, "" if serving else warm.ADVICE))
    return rows


def slurm_row() -> Row:
    """Whether radT runs inside a Slurm job, as a plain sentence whether Slurm is installed
    here (``sbatch`` on PATH) or not."""
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        node = os.environ.get("SLURMD_NODENAME", "this node")
        return Row("slurm", "inside a Slurm job", True, f"job {job} on {node}")
    if shutil.which("sbatch"):
        why = "not inside a Slurm job, though Slurm is installed here"
        fix = "run radT inside salloc or sbatch to record the job's tags"
    else:
        why = "Slurm is not installed here (no sbatch on PATH)"
        fix = "on a Slurm cluster, run radT inside salloc or sbatch to record the job's tags"
    return Row("slurm", "inside a Slurm job", False, why, fix)


PROBES: list[tuple[tuple[str, ...], Callable[[Facts], list[Row]]]] = [
    (("driver",), probe_driver),
    (("nvml", "power_instant", "energy_counter"), probe_nvml),
    (("dcgm", "dcgm_prof"), probe_dcgm),
    (("mps",), probe_mps),
    (("set_power", "set_mig"), probe_rights),
    (("set_clocks",), probe_clock_rights),
    (("rapl", "nsys", "ncu"), probe_listeners),
    (("torch_cuda", "tensorsocket"), probe_python),
    (("tracking", "radt_home", "slurm", "warm"), probe_places),
]
"""Each probe with the rows it answers (``gpuN`` rows come from the driver's probe on top):
the names --require takes."""

NAMES = [name for names, _ in PROBES for name in names]


def _ask_listeners(facts: Facts, options: dict[str, dict[str, str]]) -> None:
    from radt.launch.registry import discover

    facts.listeners = {name: d.reason for name, d in discover(options).items()}


def rows(options: dict[str, dict[str, str]] | None = None) -> list[Row]:
    """Every capability of this machine, one row each; changes nothing. ``options`` are
    the listeners' ``-o`` options (``{"rapl": {"root": PATH}}``)."""
    facts = Facts()
    for gather in (_read_gpus, lambda f: _ask_listeners(f, options or {}), _open_nvml):
        try:
            gather(facts)
        except Exception as exc:
            log.debug("doctor: gathering facts failed", exc_info=True)
            problem = f"{type(exc).__name__}: {one_line(exc)}"
            if gather is _read_gpus:
                facts.smi_problem = problem
            elif gather is _open_nvml:
                facts.nvml_problem = problem
    found: list[Row] = []
    try:
        for names, probe in PROBES:
            try:
                found.extend(probe(facts))
            except Exception as exc:  # the one failure rule: "no" rows, never a traceback
                log.debug("doctor: %s failed", probe.__name__, exc_info=True)
                why = f"{type(exc).__name__}: {one_line(exc)}"
                found.extend(Row(name, name, False, why, "see the reason") for name in names)
    finally:
        if facts.nvml is not None:
            with contextlib.suppress(Exception):
                facts.nvml.nvmlShutdown()
    return found


def missing(found: list[Row], required: list[str]) -> list[Row]:
    """The rows named in ``required`` that say no; UsageError for a name doctor lacks."""
    by_name = {row.name: row for row in found}
    unknown = [name for name in required if name not in by_name]
    if unknown:
        raise UsageError(
            f"--require: unknown capability {', '.join(unknown)}; known: {', '.join(by_name)}"
        )
    return [by_name[name] for name in required if not by_name[name].ok]


def table(found: list[Row]) -> str:
    """The rows as a text table: capability, yes/no, why, fix."""
    width = max(len(row.name) for row in found)
    lines = [f"{'capability':<{width}}  ok   details"]
    for row in found:
        text = row.why + (f" -> {row.fix}" if row.fix else "")
        lines.append(f"{row.name:<{width}}  {'yes' if row.ok else 'no ':<3}  {text}")
    return "\n".join(lines)
