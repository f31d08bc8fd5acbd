"""The quantities the analysis reads, and which recorded keys provide each, best first.

A listener declares what it provides as data on its class (:attr:`Listener.provides`): a
tuple of ``(quantity, key pattern, priority)``, e.g. ``("gpu_power", "nvml/gpu*/power_w",
10)``; a lower priority is preferred. The analysis asks for a quantity, never for a
listener: :func:`keys_for` gives the keys of a run that provide it, :func:`sources` the
``(listener, series)`` pairs of a per-GPU quantity in the order to try them. The
listeners are radT's own and every plug-in registered under the entry-point group
``radt.listeners`` (the same that ``radt.launch.registry`` runs).

A per-GPU quantity's key is ``LISTENER/gpu*/SERIES`` with the series name of
:data:`QUANTITIES` (``power_w`` for ``gpu_power``): the analysis reads those names only.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points

log = logging.getLogger(__name__)

GROUP = "radt.listeners"
"""The entry-point group of listeners."""
GPU_ENTITY = "gpu*"
"""The middle part of a per-GPU key's pattern (``gpu0``, ``gpu1`` …)."""


@dataclass(frozen=True)
class Quantity:
    """One thing the analysis measures, and the name of its series in a key."""

    name: str
    series: str
    """The key's last part: the quantity with its unit (``power_w``)."""
    per_gpu: bool
    """Whether its keys are ``LISTENER/gpu{i}/SERIES``."""
    meaning: str


GPU_POWER = "gpu_power"
GPU_POWER_AVERAGED = "gpu_power_averaged"
GPU_ENERGY = "gpu_energy"
GPU_UTILISATION = "gpu_utilisation"
GPU_SM_ACTIVITY = "gpu_sm_activity"
GPU_MEMORY = "gpu_memory"
HOST_ENERGY = "host_energy"
HOST_CPU = "host_cpu"

QUANTITIES = {
    q.name: q
    for q in (
        Quantity(GPU_POWER, "power_w", True, "a GPU's power draw (instantaneous where it can)"),
        Quantity(GPU_POWER_AVERAGED, "power_avg_w", True, "a GPU's power averaged over ~1 s"),
        Quantity(GPU_ENERGY, "energy_j", True, "a GPU's energy counter, J since the start"),
        Quantity(GPU_UTILISATION, "util_pct", True, "the share of time a kernel ran, %"),
        Quantity(GPU_SM_ACTIVITY, "smact_ratio", True, "the SMs' active share, 0-1"),
        Quantity(GPU_MEMORY, "mem_used_mib", True, "a GPU's memory in use, MiB"),
        Quantity(HOST_ENERGY, "energy_j", False, "a CPU socket's or DRAM's energy, J"),
        Quantity(HOST_CPU, "cpu_pct", False, "CPU use, % of one core"),
    )
}
"""Every quantity, by name."""

Provides = tuple[str, str, int]
"""What a listener declares it provides: (quantity, key pattern, priority; lower first)."""


def per_gpu(listener: str, priorities: dict[str, int]) -> tuple[Provides, ...]:
    """The declarations of per-GPU quantities recorded as ``LISTENER/gpu{i}/SERIES``: one
    ``(quantity, "LISTENER/gpu*/SERIES", priority)`` for each ``{quantity: priority}``."""
    return tuple(
        (name, f"{listener}/{GPU_ENTITY}/{QUANTITIES[name].series}", priority)
        for name, priority in priorities.items()
    )


@functools.cache
def registered() -> tuple[Provides, ...]:
    """The declarations of every listener registered under :data:`GROUP`, loaded once.

    A listener that fails to load is left out (radT's registry says why when it runs).
    """
    found: list[Provides] = []
    names: set[str] = set()
    for point in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if point.name in names:
            continue
        names.add(point.name)
        try:
            kind = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the analysis
            log.debug("listener %s not loaded: %s", point.name, exc)
            continue
        found.extend(declared(kind))
    return tuple(found)


def declared(kind: type) -> list[Provides]:
    """The well-formed declarations of the listener class ``kind``; others are logged."""
    good = []
    for entry in getattr(kind, "provides", ()):
        problem = _problem(entry)
        if problem:
            log.warning("listener %s: provides %r: %s", kind.__name__, entry, problem)
        else:
            good.append((str(entry[0]), str(entry[1]), int(entry[2])))
    return good


def _problem(entry: object) -> str | None:
    if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[2], int)):
        return "not a (quantity, key pattern, priority) tuple"
    quantity = QUANTITIES.get(entry[0])
    if quantity is None:
        return f"unknown quantity; known: {', '.join(QUANTITIES)}"
    parts = str(entry[1]).split("/")
    if any(c in parts[0] for c in "*?["):
        return "the key pattern's first part is the listener's name, without wildcards"
    if len(parts) != 3 or parts[2] != quantity.series:
        return f"the key pattern must be LISTENER/ENTITY/{quantity.series}"
    if quantity.per_gpu and parts[1] != GPU_ENTITY:
        return f"a per-GPU key pattern must be LISTENER/{GPU_ENTITY}/{quantity.series}"
    return None


def ranked(quantity: str, providers: Iterable[Provides] | None = None) -> list[Provides]:
    """The declarations of ``quantity``, the preferred first (ties: by key pattern)."""
    if quantity not in QUANTITIES:
        raise KeyError(f"unknown quantity {quantity!r}; known: {', '.join(QUANTITIES)}")
    every = registered() if providers is None else providers
    return sorted((p for p in every if p[0] == quantity), key=lambda p: (p[2], p[1]))


def keys_for(
    quantity: str, keys: Iterable[str], providers: Iterable[Provides] | None = None
) -> list[str]:
    """The keys among ``keys`` that provide ``quantity``, the preferred source first."""
    keys = list(dict.fromkeys(keys))
    chosen: dict[str, None] = {}
    for _, pattern, _ in ranked(quantity, providers):
        chosen.update((key, None) for key in sorted(fnmatch.filter(keys, pattern)))
    return list(chosen)


def sources(quantity: str, providers: Iterable[Provides] | None = None) -> list[tuple[str, str]]:
    """``(listener, series)`` of each declared source of a per-GPU ``quantity``, best first:
    the first and last parts of its keys ``LISTENER/gpu{i}/SERIES``."""
    pairs = [(p.split("/")[0], p.split("/")[2]) for _, p, _ in ranked(quantity, providers)]
    return list(dict.fromkeys(pairs))


@functools.cache
def providers_of(quantity: str) -> tuple[str, ...]:
    """The registered listeners that provide the per-GPU ``quantity``, best first."""
    return tuple(dict.fromkeys(name for name, _ in sources(quantity)))


def listener_prefixes(quantities: Sequence[str]) -> tuple[str, ...]:
    """``LISTENER/`` of every registered source of ``quantities``: the keys' beginnings."""
    return tuple(dict.fromkeys(f"{name}/" for q in quantities for name in providers_of(q)))


_GPU_PART = re.compile(r"^gpu\d+$")
_MIG_PART = re.compile(r"^(mig\d+|gi\d+|ci\d+)$")


def gpu_devices(keys: Iterable[str], providers: Iterable[Provides] | None = None) -> list[str]:
    """The GPUs that a run's recorded ``keys`` show, sorted: one per physical GPU (``gpu0``),
    or, where a GPU listener recorded MIG devices under it, one per MIG device (``gpu0/mig1``;
    DCGM's ``gpu0/gi1/ci0``).

    Only keys of a declared per-GPU quantity count (``nvml/gpu0/power_w``, ``smi/gpu0/util_pct``
    …), so two listeners reading one GPU show it once, and ``top/proc/…`` (the process tree) or
    ``nvml/gpu0/proc…`` never make a GPU. The listeners number GPUs alike (NVML's and
    nvidia-smi's index, by PCI bus). Empty: no GPU listener recorded.
    """
    declared = list(registered() if providers is None else providers)
    series = {
        (pattern.split("/")[0], QUANTITIES[quantity].series)
        for quantity, pattern, _ in declared
        if QUANTITIES[quantity].per_gpu
    }
    listeners = {name for name, _ in series}
    gpus: set[str] = set()
    migs: dict[tuple[str, str], set[str]] = {}  # (GPU, listener) → its MIG devices
    for key in dict.fromkeys(keys):
        parts = str(key).split("/")
        if len(parts) < 3 or parts[0] not in listeners or not _GPU_PART.match(parts[1]):
            continue
        if len(parts) == 3 and (parts[0], parts[2]) in series:
            gpus.add(parts[1])
        elif len(parts) > 3 and all(_MIG_PART.match(p) for p in parts[2:-1]):
            mig = parts[2:-1]
            if mig[0].startswith("gi") and len(mig) == 1:
                continue  # a DCGM GPU instance: its compute instances are the devices
            migs.setdefault((parts[1], parts[0]), set()).add("/".join([parts[1], *mig]))
    found: set[str] = set()
    for gpu in gpus | {gpu for gpu, _ in migs}:
        seen = [devices for (g, _), devices in migs.items() if g == gpu]
        found |= max(seen, key=len) if seen else {gpu}
    return sorted(found, key=_device_order)


def _device_order(device: str) -> tuple:
    return tuple(int(re.sub(r"\D", "", part) or 0) for part in device.split("/"))
