"""One backend per collocation mode, each with the same verbs, and the two calls the runner makes.

:func:`backend_for` picks a mode's :class:`Backend`; every backend reads the
rows that share one GPU and says what is wrong with them (``check``) or sets
the GPU up for them (``set_up``), registering the undo step of each change in
the workload's :class:`Teardown` right after the change. The per-GPU settings
(power limit, locked clock) are :class:`GpuSetting` objects with the same two
verbs. :func:`check` and :func:`setup` run them for a workload; nothing else
branches on the mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
Where = Callable[[list[int]], str]


@dataclass
class Checking:
    """What a backend's ``check`` is given besides its rows: where the plan lines are, and the
    MPS control daemons that already run (read once, when a backend first asks)."""

    at: Where
    gpus: Gpus
    _daemons: list[mps.Daemon] | None = None

    def daemons(self) -> list[mps.Daemon]:
        """The MPS control daemons running here (``get_server_list`` of each pipe)."""
        if self._daemons is None:
            self._daemons = mps.running_daemons(self.gpus)
        return self._daemons


@dataclass
class SettingUp:
    """What a backend's ``set_up`` is given besides its rows."""

    at: Where
    workdir: Path
    teardown: Teardown
    warn: Callable[[str], None]


class Backend:
    """How runs of one collocation mode share a GPU.

    ``check(gpu, rows, checking)`` returns the problems of the rows of this mode on
    one GPU (one line each, starting with their plan lines) and changes nothing;
    ``set_up(gpu, rows, setting_up)`` prepares the GPU and returns one
    :class:`Slot` per row (same order) and the text of its artifact. ``gpu`` is
    None for rows that name no GPU radT located.
    """

    mode: Mode
    artifact: str | None = None
    """The file ``set_up``'s text goes to (``mps.txt``); None: it has none."""
    needs_tools: tuple[str, ...] = ()
    """The tools it needs on PATH; a mode that needs them runs on GPU 0 when a row names none."""
    shares: bool = True
    """Whether its runs share a GPU with the other runs of the workload on it."""
    exclusive: bool = False
    """Whether its runs cannot share a GPU with runs of another mode."""

    def on_gpu(self, r: SlotRequest) -> bool:
        """Whether the row runs on a GPU that radT locates: one it names, or GPU 0 for a mode
        that needs the NVIDIA tools."""
        return r.device is not None or bool(self.needs_tools)

    def row_problems(self, r: SlotRequest) -> list[str]:
        """What is wrong with one row of this mode by itself (no GPU read)."""
        return _thread_pct_outside_mps(r)

    def check(
        self, gpu: nvsmi.GpuListing, rows: list[SlotRequest], checking: Checking
    ) -> list[str]:
        """Problems of ``rows`` on ``gpu``; by default, an MPS daemon already running there."""
        return mps.check_gpu(gpu, rows, checking.daemons(), checking.at)

    def set_up(
        self, gpu: nvsmi.GpuListing | None, rows: list[SlotRequest], setting_up: SettingUp
    ) -> tuple[list[Slot], str]:
        """Each row's slot: the GPU it names by index (``CUDA_VISIBLE_DEVICES``), if any."""
        slots = []
        for r in rows:
            slot = Slot()
            if r.device is not None:
                device = str(gpu.index) if gpu is not None else str(r.device).strip()
                slot.env = {"CUDA_VISIBLE_DEVICES": device}
                slot.devices = [device]
            slots.append(slot)
        return slots, ""


class WholeGpuBackend(Backend):
    """A mode whose runs see the whole GPU, which a GPU in MIG mode cannot give them."""

    def check(
        self, gpu: nvsmi.GpuListing, rows: list[SlotRequest], checking: Checking
    ) -> list[str]:
        problems = []
        if (mode := mig_mode(gpu.index)) and mode[0] == "Enabled":
            problems.append(
                f"{checking.at([r.line for r in rows])}: GPU {gpu.index} ({gpu.name}) is in MIG "
                f"mode, so {self.mode} runs would get one MIG slice at most; give them MIG "
                f"profiles, or have someone with root turn MIG off "
                f"(`sudo nvidia-smi -i {gpu.index} -mig 0`)"
            )
        return problems + super().check(gpu, rows, checking)


class AloneBackend(Backend):
    """``none``: the run has its GPU to itself; nothing to set up."""

    mode = Mode.NONE
    shares = False


class NaiveBackend(WholeGpuBackend):
    """``naive``: the runs share the GPU by time slicing; nothing to set up."""

    mode = Mode.NAIVE


class MpsBackend(WholeGpuBackend):
    """``mps``: a private MPS control daemon per GPU (see ``mps.py``)."""

    mode = Mode.MPS
    artifact = "mps.txt"
    needs_tools = (nvsmi.SMI, nvsmi.MPS_CONTROL)
    exclusive = True

    def row_problems(self, r: SlotRequest) -> list[str]:
        if r.mps_thread_pct is not None and not 1 <= r.mps_thread_pct <= 100:
            return [f"MPS active thread percentage {r.mps_thread_pct} must be from 1 to 100"]
        return []

    def set_up(
        self, gpu: nvsmi.GpuListing | None, rows: list[SlotRequest], setting_up: SettingUp
    ) -> tuple[list[Slot], str]:
        assert gpu is not None
        env, text = mps.setup_gpu(gpu, rows, setting_up.workdir, setting_up.teardown, setting_up.at)
        slots = []
        for r in rows:
            slot = Slot(env=dict(env), devices=[str(gpu.index)])
            if r.mps_thread_pct is not None:
                slot.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(r.mps_thread_pct)
                slot.tags[RADT_MPS_THREAD_PCT] = str(r.mps_thread_pct)
            slots.append(slot)
        return slots, text


class MigBackend(Backend):
    """``mig``: one GPU instance (and its compute instance) per run (see ``mig.py``)."""

    mode = Mode.MIG
    artifact = "mig_placement.txt"
    needs_tools = (nvsmi.SMI,)
    exclusive = True

    def row_problems(self, r: SlotRequest) -> list[str]:
        missing = [] if (r.mig_profile or "").strip() else ["mig needs a MIG profile, e.g. 3g.20gb"]
        return missing + super().row_problems(r)

    def check(
        self, gpu: nvsmi.GpuListing, rows: list[SlotRequest], checking: Checking
    ) -> list[str]:
        return mig.check_gpu(gpu, rows, checking.at) + super().check(gpu, rows, checking)

    def set_up(
        self, gpu: nvsmi.GpuListing | None, rows: list[SlotRequest], setting_up: SettingUp
    ) -> tuple[list[Slot], str]:
        assert gpu is not None
        made, text = mig.setup_gpu(gpu, rows, setting_up.teardown, setting_up.warn, setting_up.at)
        slots = [
            Slot(
                env={"CUDA_VISIBLE_DEVICES": m.uuid},
                devices=[m.uuid],
                tags={
                    RADT_MIG_PROFILE: m.profile.name,
                    RADT_MIG_INSTANCE: (
                        f"GPU {gpu.index} GPU instance {m.gi} compute instance {m.ci} "
                        f"at {m.placement}"
                    ),
                },
            )
            for m in made
        ]
        return slots, text


BACKENDS: dict[Mode, Backend] = {
    b.mode: b for b in (AloneBackend(), NaiveBackend(), MigBackend(), MpsBackend())
}
"""The backends in the order ``setup`` runs them: MIG instances before MPS daemons."""


def backend_for(mode: Mode | str) -> Backend:
    """The backend of ``mode``; ValueError for a word that is not a mode."""
    return BACKENDS[Mode(mode)]


@dataclass
class GpuSetting:
    """A per-GPU setting of a workload (power limit, locked clock), with a backend's verbs:
    ``check(gpu, value, where)`` → problems, ``set_up(gpu, value, teardown, where)`` → a line of
    its artifact (the undo step registered in ``teardown``)."""

    what: str
    """How a message names it ("power limit")."""
    artifact: str
    tag: str
    check: Callable[[nvsmi.GpuListing, Any, str], list[str]]
    set_up: Callable[[nvsmi.GpuListing, Any, Teardown, str], str]
    spell: Callable[[Any], str]
    """The value with its unit, as a message writes it ("250 W")."""
    tag_value: Callable[[Any], str] = field(default=str)
    """The value as its tag writes it ("250")."""
    lists_gpus: bool = False
    """Whether "no such GPU" in ``check`` names the GPUs there are."""

    def missing(self, device: object, value: Any, gpus: Gpus) -> str:
        """``check``'s message for a GPU that does not exist."""
        message = f"{self.what} {self.spell(value)} for GPU {device}, which does not exist here"
        return message + (f"; {_lists(gpus)}" if self.lists_gpus else "")


POWER_LIMIT = GpuSetting(
    "power limit",
    "power_limits.txt",
    RADT_POWER_LIMIT_W,
    power.check_gpu,
    power.setup_gpu,
    spell=lambda limit_w: f"{watts(limit_w)} W",
    tag_value=watts,
    lists_gpus=True,
)
GPU_CLOCK = GpuSetting(
    "GPU clock",
    "gpu_clocks.txt",
    RADT_GPU_CLOCK_MHZ,
    clocks.check_gpu,
    clocks.setup_gpu,
    spell=lambda clock_mhz: f"{clock_mhz} MHz",
)


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
    settings = _settings(power_limits, gpu_clocks or {})
    tooled = [r for r in requests if (b := BACKENDS.get(r.mode)) and b.needs_tools]
    power_lines = [r.line for r in requests if any(_raw_index(r) in v for _s, v in settings)]
    smi_lines = [r.line for r in tooled] + power_lines
    needs_smi = bool(tooled or any(values for _s, values in settings))
    if needs_smi and not nvsmi.available(nvsmi.SMI):
        what = " and ".join(
            [m for m, b in BACKENDS.items() if b.needs_tools and any(r.mode == m for r in tooled)]
            + [f"a {s.what}" for s, values in settings if values]
        )
        add(f"{at(smi_lines)}: {what} needs nvidia-smi, which is not on PATH")
    for mode, backend in BACKENDS.items():
        rows = [r for r in requests if r.mode == mode]
        for tool in backend.needs_tools:
            if rows and tool != nvsmi.SMI and not nvsmi.available(tool):
                add(f"{at([r.line for r in rows])}: {mode} needs {tool}, which is not on PATH")
    named = [r for r in requests if _shares(r) and r.device is not None]
    gpus: Gpus | None = None
    if nvsmi.available(nvsmi.SMI) and (needs_smi or named):
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
        if not _shares(r):
            continue
        gpu = find_gpu(r.device, gpus)
        if gpu is None:
            add(f"{at([r.line])}: GPU {r.device} does not exist here; {_lists(gpus)}")
            continue
        by_gpu.setdefault(gpu.index, []).append(r)
    checking = Checking(at, gpus)
    for index, rows in sorted(by_gpu.items()):
        gpu = next(g for g in gpus if g.index == index)
        mixed = _mixing(rows, gpu)
        for lines, message in mixed:
            add(f"{at(lines)}: {message}")
        if mixed:
            continue
        for message in backend_for(rows[0].mode).check(gpu, rows, checking):
            add(message)
    for setting, values in settings:
        for device, value in values.items():
            gpu = find_gpu(device, gpus)
            if gpu is None:
                lines = [r.line for r in requests if _raw_index(r) == device]
                add(f"{at(lines)}: {setting.missing(device, value, gpus)}")
                continue
            lines = [r.line for r in requests if _index_on(r, gpus) == gpu.index]
            for message in setting.check(gpu, value, at(lines)):
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

    Order: power limits, locked clocks (``gpu_clocks``, MHz per GPU index), then each
    backend's ``set_up`` in the order of :data:`BACKENDS` (MIG instances, then MPS
    daemons). Each change registers its undo step in ``teardown`` as soon as it is made;
    the caller runs ``teardown`` whatever happens, also when this raises (RadtError with
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
    settings = _settings(power_limits, gpu_clocks or {})
    needs_smi = any(values for _s, values in settings) or any(
        backend_for(r.mode).needs_tools for r in requests
    )
    gpus: Gpus = list_gpus() if needs_smi else []
    located: dict[int, nvsmi.GpuListing] = {}  # position in requests -> GPU
    for pos, r in enumerate(requests):
        backend = backend_for(r.mode)
        gpu = find_gpu(r.device, gpus) if gpus else None
        if gpu is None and backend.needs_tools:
            raise RadtError(f"{at([r.line])}: GPU {r.device} does not exist here; {_lists(gpus)}")
        if gpu is not None and backend.on_gpu(r):
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

    applied: list[tuple[GpuSetting, dict[int, Any]]] = []
    for setting, values in settings:
        by_index: dict[int, Any] = {}
        notes = []
        for device, value in sorted(values.items(), key=lambda item: str(item[0])):
            gpu = find_gpu(device, gpus)
            lines = [requests[p].line for p, g in located.items() if gpu and g.index == gpu.index]
            if gpu is None:
                raise RadtError(f"{at(lines)}: {setting.what} for GPU {device}: no such GPU here")
            notes.append(setting.set_up(gpu, value, teardown, at(lines)))
            by_index[gpu.index] = value
        if notes:
            artifacts[setting.artifact] = "".join(notes)
        applied.append((setting, by_index))

    setting_up = SettingUp(at, workdir, teardown, warn)
    for mode, backend in BACKENDS.items():
        texts = []
        for gpu, positions in _groups(requests, located, mode):
            made, text = backend.set_up(gpu, [requests[p] for p in positions], setting_up)
            texts.append(text)
            for pos, slot in zip(positions, made, strict=True):
                slots[pos] = slot
        if texts and backend.artifact:
            artifacts[backend.artifact] = "\n".join(texts)

    for pos, r in enumerate(requests):
        slot = slots[pos]
        slot.tags[RADT_COLLOCATION] = r.mode
        if slot.devices:
            slot.tags[RADT_DEVICES] = ",".join(slot.devices)
        gpu = located.get(pos)
        for setting, by_index in applied:
            if gpu is not None and gpu.index in by_index:
                slot.tags[setting.tag] = setting.tag_value(by_index[gpu.index])
    return slots, artifacts


# --------------------------------------------------------------------------- helpers


def _settings(
    power_limits: dict[int, float], gpu_clocks: dict[int, int]
) -> list[tuple[GpuSetting, dict]]:
    """The per-GPU settings with their values by GPU, in the order they are set up."""
    return [(POWER_LIMIT, power_limits), (GPU_CLOCK, gpu_clocks)]


def _shares(r: SlotRequest) -> bool:
    """Whether the row shares a GPU that radT must find (a naive row naming one, mps, mig)."""
    backend = BACKENDS.get(r.mode)
    return backend is not None and backend.shares and backend.on_gpu(r)


def _request_problems(r: SlotRequest) -> list[str]:
    backend = BACKENDS.get(r.mode)
    if backend is None:
        unknown = f"unknown collocation mode {r.mode!r} (one of {', '.join(MODES)})"
        return [unknown, *_thread_pct_outside_mps(r)]
    return backend.row_problems(r)


def _thread_pct_outside_mps(r: SlotRequest) -> list[str]:
    """A row outside mps that sets an MPS active thread percentage."""
    if r.mps_thread_pct is not None:
        return ["an active thread percentage applies to mps rows only"]
    return []


def _mixing(rows: list[SlotRequest], gpu: nvsmi.GpuListing | None) -> list[tuple[list[int], str]]:
    """Rows that cannot share a GPU: an exclusive mode (mig, mps) next to any other mode."""
    groups: dict[str, list[SlotRequest]] = {}
    for r in rows:
        if (backend := BACKENDS.get(r.mode)) is not None and backend.shares:
            raw = r.device if r.device is not None else 0
            key = str(gpu.index) if gpu is not None else str(raw)
            groups.setdefault(key, []).append(r)
    found = []
    for key, members in groups.items():
        modes = {r.mode for r in members}
        exclusive = {m for m in modes if BACKENDS[m].exclusive}
        if len(modes) > 1 and exclusive:
            name = f"GPU {key}" + (f" ({gpu.name})" if gpu is not None else "")
            if len(exclusive) > 1:
                why = "radT does not mix MIG slices and MPS on one GPU"
            else:
                why = f"{' and '.join(sorted(modes))} rows cannot share one GPU"
            found.append(([r.line for r in members], f"{name}: {why}"))
    return found


def _groups(
    requests: list[SlotRequest], located: dict[int, nvsmi.GpuListing], mode: Mode
) -> list[tuple[nvsmi.GpuListing | None, list[int]]]:
    """The positions of the ``mode`` rows by GPU, in GPU order; a row on no located GPU alone."""
    by_gpu: dict[int, list[int]] = {}
    unplaced: list[tuple[nvsmi.GpuListing | None, list[int]]] = []
    for pos, r in enumerate(requests):
        if r.mode != mode:
            continue
        if pos in located:
            by_gpu.setdefault(located[pos].index, []).append(pos)
        else:
            unplaced.append((None, [pos]))
    return [(located[ps[0]], ps) for _index, ps in sorted(by_gpu.items())] + unplaced


def _raw_index(r: SlotRequest) -> int | None:
    text = "0" if r.device is None else str(r.device).strip()
    return int(text) if text.isdigit() else None


def _index_on(r: SlotRequest, gpus: Gpus) -> int | None:
    gpu = find_gpu(r.device, gpus)
    return gpu.index if gpu is not None else None


def _lists(gpus: Gpus) -> str:
    return f"nvidia-smi -L lists {describe_gpus(gpus)}"
