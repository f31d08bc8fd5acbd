"""check() and setup(): the two calls the workload runner makes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from radt.collocation import clocks, mig, mps, nvsmi, power
from radt.collocation.common import (
    Slot,
    SlotRequest,
    describe_gpus,
    find_gpu,
    list_gpus,
    mig_mode,
    watts,
    where,
)
from radt.collocation.teardown import Teardown
from radt.errors import RadtError
from radt.tags import (
    MODES,
    RADT_COLLOCATION,
    RADT_DEVICES,
    RADT_GPU_CLOCK_MHZ,
    RADT_MIG_INSTANCE,
    RADT_MIG_PROFILE,
    RADT_MPS_THREAD_PCT,
    RADT_POWER_LIMIT_W,
    Mode,
)

Gpus = list[nvsmi.GpuListing]


def check(
    requests: list[SlotRequest],
    power_limits: dict[int, float],
    plan_name: str = "plan",
    *,
    gpu_clocks: dict[int, int] | None = None,
) -> list[str]:
    """Every problem with setting up ``requests``, ``power_limits`` and ``gpu_clocks``
    (MHz per GPU index), one line each.

    Reads the GPU (``nvidia-smi -L``, MIG mode, ``mig -lgip``/``-lgi``, ``-q -d
    POWER``, supported clocks, MPS daemons) and changes nothing. Each message starts with
    ``<plan_name> line N`` (or ``lines N, M``).
    """
    problems: list[str] = []

    def add(message: str) -> None:
        if message not in problems:
            problems.append(message)

    def at(lines: list[int]) -> str:
        return where(plan_name, lines)

    for r in requests:
        for message in _request_problems(r):
            add(f"{at([r.line])}: {message}")
    gpu_rows = [r for r in requests if r.mode in (Mode.MPS, Mode.MIG)]
    mps_rows = [r for r in requests if r.mode == Mode.MPS]
    gpu_clocks = gpu_clocks or {}
    power_lines = [
        r.line for r in requests if _raw_index(r) in power_limits or _raw_index(r) in gpu_clocks
    ]
    smi_lines = [r.line for r in gpu_rows] + power_lines
    needs_smi = bool(gpu_rows or power_limits or gpu_clocks)
    if needs_smi and not nvsmi.available(nvsmi.SMI):
        what = " and ".join(
            [m for m in (Mode.MIG, Mode.MPS) if any(r.mode == m for r in gpu_rows)]
            + (["a power limit"] if power_limits else [])
            + (["a GPU clock"] if gpu_clocks else [])
        )
        add(f"{at(smi_lines)}: {what} needs nvidia-smi, which is not on PATH")
    if mps_rows and not nvsmi.available(nvsmi.MPS_CONTROL):
        add(
            f"{at([r.line for r in mps_rows])}: mps needs nvidia-cuda-mps-control, "
            "which is not on PATH"
        )
    naive_rows = [r for r in requests if r.mode == Mode.NAIVE and r.device is not None]
    gpus: Gpus | None = None
    if nvsmi.available(nvsmi.SMI) and (needs_smi or naive_rows):
        try:
            gpus = list_gpus()
        except RadtError as exc:
            if needs_smi:
                add(f"{at(smi_lines)}: {exc}")
    if gpus is None:
        for lines, message in _mixing(requests, None):
            add(f"{at(lines)}: {message}")
        return problems

    by_gpu: dict[int, list[SlotRequest]] = {}
    for r in requests:
        if r.mode not in (Mode.NAIVE, Mode.MPS, Mode.MIG) or (
            r.mode == Mode.NAIVE and r.device is None
        ):
            continue
        gpu = find_gpu(r.device, gpus)
        if gpu is None:
            add(f"{at([r.line])}: GPU {r.device} does not exist here; {_lists(gpus)}")
            continue
        by_gpu.setdefault(gpu.index, []).append(r)
    daemons: list[mps.Daemon] | None = None
    for index, rows in sorted(by_gpu.items()):
        gpu = next(g for g in gpus if g.index == index)
        mixed = _mixing(rows, gpu)
        for lines, message in mixed:
            add(f"{at(lines)}: {message}")
        if mixed:
            continue
        mig_rows = [r for r in rows if r.mode == Mode.MIG]
        if mig_rows:
            for message in mig.check_gpu(gpu, mig_rows, at):
                add(message)
        whole = [r for r in rows if r.mode in (Mode.NAIVE, Mode.MPS)]
        if whole and (mode := mig_mode(index)) and mode[0] == "Enabled":
            kind = "/".join(sorted({r.mode for r in whole}))
            add(
                f"{at([r.line for r in whole])}: GPU {index} ({gpu.name}) is in MIG mode, so "
                f"{kind} runs would get one MIG slice at most; give them MIG profiles, or have "
                f"someone with root turn MIG off (`sudo nvidia-smi -i {index} -mig 0`)"
            )
        if daemons is None:
            daemons = mps.running_daemons(gpus)
        for message in mps.check_gpu(gpu, rows, daemons, at):
            add(message)
    for device, limit in power_limits.items():
        gpu = find_gpu(device, gpus)
        lines = [r.line for r in requests if _index_on(r, gpus) == (gpu.index if gpu else None)]
        if gpu is None:
            lines = [r.line for r in requests if _raw_index(r) == device]
            add(
                f"{at(lines)}: power limit {watts(limit)} W for GPU {device}, which does not "
                f"exist here; {_lists(gpus)}"
            )
            continue
        for message in power.check_gpu(gpu, limit, at(lines)):
            add(message)
    for device, mhz in gpu_clocks.items():
        gpu = find_gpu(device, gpus)
        lines = [r.line for r in requests if _index_on(r, gpus) == (gpu.index if gpu else None)]
        if gpu is None:
            lines = [r.line for r in requests if _raw_index(r) == device]
            add(f"{at(lines)}: GPU clock {mhz} MHz for GPU {device}, which does not exist here")
            continue
        for message in clocks.check_gpu(gpu, mhz, at(lines)):
            add(message)
    return problems


def setup(
    requests: list[SlotRequest],
    power_limits: dict[int, float],
    workdir: Path,
    teardown: Teardown,
    warn: Callable[[str], None],
    *,
    plan_name: str = "plan",
    gpu_clocks: dict[int, int] | None = None,
) -> tuple[list[Slot], dict[str, str]]:
    """Set the devices up; return one Slot per request (same order) and artifacts.

    Order: power limits, locked clocks (``gpu_clocks``, MHz per GPU index), then MIG
    instances, then MPS daemons. Each change
    registers its undo step in ``teardown`` as soon as it is made; the caller
    runs ``teardown`` whatever happens, also when this raises (RadtError with
    a one-line message naming the plan line, or an interruption).
    Artifacts: ``power_limits.txt``, ``gpu_clocks.txt``, ``mig_placement.txt``, ``mps.txt``.
    """

    def at(lines: list[int]) -> str:
        return where(plan_name, lines)

    workdir = Path(workdir)
    for r in requests:
        problems = _request_problems(r)
        if problems:
            raise RadtError(f"{at([r.line])}: {problems[0]}")
    gpu_clocks = gpu_clocks or {}
    needs_smi = bool(power_limits or gpu_clocks) or any(
        r.mode in (Mode.MPS, Mode.MIG) for r in requests
    )
    gpus: Gpus = list_gpus() if needs_smi else []
    located: dict[int, nvsmi.GpuListing] = {}  # position in requests -> GPU
    for pos, r in enumerate(requests):
        gpu = find_gpu(r.device, gpus) if gpus else None
        if gpu is None and r.mode in (Mode.MPS, Mode.MIG):
            raise RadtError(f"{at([r.line])}: GPU {r.device} does not exist here; {_lists(gpus)}")
        if gpu is not None and not (r.mode in (Mode.NONE, Mode.NAIVE) and r.device is None):
            located[pos] = gpu
    on_gpu: dict[int, tuple[nvsmi.GpuListing, list[SlotRequest]]] = {}
    for pos, gpu in located.items():
        on_gpu.setdefault(gpu.index, (gpu, []))[1].append(requests[pos])
    for gpu, rows in on_gpu.values():
        mixed = _mixing(rows, gpu)
        if mixed:
            raise RadtError(f"{at(mixed[0][0])}: {mixed[0][1]}")
    slots = [Slot() for _ in requests]
    artifacts: dict[str, str] = {}

    def per_gpu(settings: dict, what: str, setup_gpu: Callable) -> tuple[dict[int, Any], str]:
        """Apply one per-GPU setting (``setup_gpu(gpu, value, teardown, where)``) to each
        GPU named in ``settings``; the values by GPU index and the notes for the artifact."""
        by_index: dict[int, Any] = {}
        notes = []
        for device, value in sorted(settings.items(), key=lambda item: str(item[0])):
            gpu = find_gpu(device, gpus)
            lines = [requests[p].line for p, g in located.items() if gpu and g.index == gpu.index]
            if gpu is None:
                raise RadtError(f"{at(lines)}: {what} for GPU {device}: no such GPU here")
            notes.append(setup_gpu(gpu, value, teardown, at(lines)))
            by_index[gpu.index] = value
        return by_index, "".join(notes)

    limits_by_index, notes = per_gpu(power_limits, "power limit", power.setup_gpu)
    if notes:
        artifacts["power_limits.txt"] = notes
    clocks_by_index, notes = per_gpu(gpu_clocks, "GPU clock", clocks.setup_gpu)
    if notes:
        artifacts["gpu_clocks.txt"] = notes

    texts = []
    for index, positions in _groups(requests, located, Mode.MIG).items():
        made, text = mig.setup_gpu(
            located[positions[0]], [requests[p] for p in positions], teardown, warn, at
        )
        texts.append(text)
        for pos, m in zip(positions, made, strict=True):
            slots[pos].env = {"CUDA_VISIBLE_DEVICES": m.uuid}
            slots[pos].devices = [m.uuid]
            slots[pos].tags = {
                RADT_MIG_PROFILE: m.profile.name,
                RADT_MIG_INSTANCE: (
                    f"GPU {index} GPU instance {m.gi} compute instance {m.ci} at {m.placement}"
                ),
            }
    if texts:
        artifacts["mig_placement.txt"] = "\n".join(texts)

    texts = []
    for index, positions in _groups(requests, located, Mode.MPS).items():
        env, text = mps.setup_gpu(
            located[positions[0]], [requests[p] for p in positions], workdir, teardown, at
        )
        texts.append(text)
        for pos in positions:
            r = requests[pos]
            slots[pos].env = dict(env)
            slots[pos].devices = [str(index)]
            if r.mps_thread_pct is not None:
                slots[pos].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(r.mps_thread_pct)
                slots[pos].tags[RADT_MPS_THREAD_PCT] = str(r.mps_thread_pct)
    if texts:
        artifacts["mps.txt"] = "\n".join(texts)

    for pos, r in enumerate(requests):
        slot = slots[pos]
        if r.mode in (Mode.NONE, Mode.NAIVE) and r.device is not None:
            device = str(located[pos].index) if pos in located else str(r.device).strip()
            slot.env = {"CUDA_VISIBLE_DEVICES": device}
            slot.devices = [device]
        slot.tags[RADT_COLLOCATION] = r.mode
        if slot.devices:
            slot.tags[RADT_DEVICES] = ",".join(slot.devices)
        gpu = located.get(pos)
        if gpu is not None and gpu.index in limits_by_index:
            slot.tags[RADT_POWER_LIMIT_W] = watts(limits_by_index[gpu.index])
        if gpu is not None and gpu.index in clocks_by_index:
            slot.tags[RADT_GPU_CLOCK_MHZ] = str(clocks_by_index[gpu.index])
    return slots, artifacts


# --------------------------------------------------------------------------- helpers


def _request_problems(r: SlotRequest) -> list[str]:
    problems = []
    if r.mode not in MODES:
        problems.append(f"unknown collocation mode {r.mode!r} (one of {', '.join(MODES)})")
    elif r.mode == Mode.MIG and not (r.mig_profile or "").strip():
        problems.append("mig needs a MIG profile, e.g. 3g.20gb")
    if r.mps_thread_pct is not None:
        if r.mode != Mode.MPS:
            problems.append("an active thread percentage applies to mps rows only")
        elif not 1 <= r.mps_thread_pct <= 100:
            problems.append(
                f"MPS active thread percentage {r.mps_thread_pct} must be from 1 to 100"
            )
    return problems


def _mixing(rows: list[SlotRequest], gpu: nvsmi.GpuListing | None) -> list[tuple[list[int], str]]:
    """Rows that cannot share a GPU: mig or mps next to any other mode."""
    groups: dict[str, list[SlotRequest]] = {}
    for r in rows:
        if r.mode in (Mode.NAIVE, Mode.MPS, Mode.MIG):
            raw = r.device if r.device is not None else 0
            key = str(gpu.index) if gpu is not None else str(raw)
            groups.setdefault(key, []).append(r)
    found = []
    for key, members in groups.items():
        modes = {r.mode for r in members}
        if len(modes) > 1 and modes & {Mode.MPS, Mode.MIG}:
            name = f"GPU {key}" + (f" ({gpu.name})" if gpu is not None else "")
            if modes >= {Mode.MPS, Mode.MIG}:
                why = "radT does not mix MIG slices and MPS on one GPU"
            else:
                why = f"{' and '.join(sorted(modes))} rows cannot share one GPU"
            found.append(([r.line for r in members], f"{name}: {why}"))
    return found


def _groups(
    requests: list[SlotRequest], located: dict[int, nvsmi.GpuListing], mode: Mode
) -> dict[int, list[int]]:
    """Positions of the ``mode`` rows, by GPU index."""
    groups: dict[int, list[int]] = {}
    for pos, r in enumerate(requests):
        if r.mode == mode:
            groups.setdefault(located[pos].index, []).append(pos)
    return dict(sorted(groups.items()))


def _raw_index(r: SlotRequest) -> int | None:
    text = "0" if r.device is None else str(r.device).strip()
    return int(text) if text.isdigit() else None


def _index_on(r: SlotRequest, gpus: Gpus) -> int | None:
    gpu = find_gpu(r.device, gpus)
    return gpu.index if gpu is not None else None


def _lists(gpus: Gpus) -> str:
    return f"nvidia-smi -L lists {describe_gpus(gpus)}"
