"""``rapl``: CPU package, core, uncore and DRAM energy and power per socket (Linux powercap).

The kernel exposes the RAPL energy counters of Intel CPUs, and of AMD Zen, under
``/sys/class/powercap``: a zone ``intel-rapl:N`` per package (a socket, or a die of a
multi-die socket; its ``name`` file says ``package-N`` or ``package-N-die-D``) or for the
platform (``psys``), and sub-zones ``intel-rapl:N:M`` for the package's ``core``, ``uncore``
(the integrated GPU) and ``dram``. Each zone's ``energy_uj`` counts µJ and wraps to 0 after
``max_energy_range_uj``. Package energy includes core and uncore but not DRAM.

Keys ``rapl/package0/energy_j`` (J since the listener started, across wraps) and
``rapl/package0/power_w`` (the energy between two readings over the time between them), the
same for ``core0``, ``uncore0``, ``dram0`` (socket 0), ``package1`` …, ``psys``; the tag
``radt.rapl.zones`` lists the zones recorded. The counters stay open and are re-read with
one ``pread`` each. Since CVE-2020-8694 (Linux 5.10, and stable kernels from late 2020)
``energy_uj`` is readable by root only: ``available()`` says so, with the fix.
``-o rapl.root=PATH`` reads another tree than ``/sys/class/powercap``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from radt.listener import (
    HOST_ENERGY,
    DeviceListener,
    Option,
    PolledListener,
    RunContext,
    Sample,
    samples_from,
)
from radt.tags import RADT_RAPL_ZONES

DEFAULT_ROOT = Path("/sys/class/powercap")
ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
"""``intel-rapl:N`` or ``intel-rapl:N:M``; ``intel-rapl-mmio:N`` repeats a package's energy
through another interface and is left out, as is any deeper level."""
MIN_INTERVAL_S = 0.02
MAX_INTERVAL_S = 30.0
"""Read at least this often: two wraps between readings cannot be told from one. The
smallest range known, AMD Zen's 65,532 J, lasts 65 s at 1 kW."""
ROOT_ONLY = (
    "RAPL energy counters are readable by root only (since CVE-2020-8694); "
    "let users read them: sudo chmod o+r {root}/intel-rapl:*/energy_uj "
    "(until reboot; docs/guide/listeners.md: rapl)"
)


@dataclass
class _Zone:
    """One counter: where it is, its key's entity, and where it stood at the last reading."""

    path: Path
    entity: str
    range_uj: int
    fd: int
    last_uj: int
    last_s: float
    total_uj: int = 0


def find_zones(root: Path) -> list[tuple[Path, str]]:
    """``(folder, entity)`` of every RAPL zone under ``root``, packages first, then sub-zones.

    The entity is what the key carries: ``package0`` (``package-0``), ``package0die1``
    (``package-0-die-1``), ``psys``; a sub-zone gets its name and its package's number:
    ``core0``, ``uncore0``, ``dram1``, ``dram0die1``.
    """
    try:
        entries = [(m, root / e) for e in os.listdir(root) if (m := ZONE.match(e))]
    except OSError:
        return []
    entries.sort(key=lambda item: (int(item[0][1]), -1 if item[0][2] is None else int(item[0][2])))
    packages: dict[str, str] = {}
    found: list[tuple[Path, str]] = []
    taken: set[str] = set()
    for match, path in entries:
        name = _clean(_text(path / "name") or "")
        if match[2] is None:
            entity = name or f"zone{match[1]}"
            packages[match[1]] = (
                entity.removeprefix("package") if entity.startswith("package") else entity
            )
        else:
            entity = (name or "zone") + packages.get(match[1], match[1])
        if entity in taken:  # two zones of the same name: keep both, apart
            entity = f"{entity}zone{match[1]}{'' if match[2] is None else '_' + match[2]}"
        taken.add(entity)
        found.append((path, entity))
    return found


def read_uj(fd: int) -> int:
    """The counter behind an open ``energy_uj``, read afresh from its start."""
    return int(os.pread(fd, 32, 0).split()[0])


class RaplListener(DeviceListener, PolledListener):
    """Samples ``rapl/<zone>/energy_j`` and ``rapl/<zone>/power_w`` for every readable zone."""

    name = "rapl"
    provides = ((HOST_ENERGY, "rapl/*/energy_j", 10),)
    records = "CPU package, core, uncore and DRAM energy and power from the RAPL counters"
    declared_options = (
        Option("root", str, str(DEFAULT_ROOT), "the powercap folder to read the zones from"),
    )
    default_interval_s = 0.1

    def __init__(self) -> None:
        super().__init__()
        self.root = DEFAULT_ROOT
        self._zones: list[_Zone] = []
        self._clock = time.monotonic

    def configure(self, options: dict[str, str]) -> None:
        """``-o rapl.root=PATH``: read the powercap tree at PATH."""
        if options.get("root"):
            self.root = Path(options["root"])

    def available(self) -> str | None:
        """None when at least one zone's counter can be read; else why not, and the fix."""
        zones = find_zones(self.root)
        if not zones:
            return f"no RAPL zones in {self.root} (no powercap RAPL driver here)"
        denied, failed = False, ""
        for path, _ in zones:
            try:
                fd = os.open(path / "energy_uj", os.O_RDONLY)
                try:
                    read_uj(fd)
                finally:
                    os.close(fd)
                return None
            except PermissionError:
                denied = True
            except (OSError, ValueError, IndexError) as exc:
                failed = failed or f"{path.name}: {exc}"
        if denied:
            return ROOT_ONLY.format(root=self.root)
        return f"RAPL energy counters unreadable ({failed})"

    def interval(self, run: RunContext) -> float:
        """The asked-for interval, within 0.02 s and 30 s (see ``MAX_INTERVAL_S``)."""
        return min(max(super().interval(run), MIN_INTERVAL_S), MAX_INTERVAL_S)

    def open(self, run: RunContext) -> None:
        """Open every readable counter and take its first reading."""
        self.configure(run.options)
        denied: list[str] = []
        for path, entity in find_zones(self.root):
            try:
                fd = os.open(path / "energy_uj", os.O_RDONLY)
            except PermissionError:
                denied.append(entity)
                continue
            try:
                range_uj = int((path / "max_energy_range_uj").read_text())
                first = read_uj(fd)
            except (OSError, ValueError, IndexError) as exc:
                os.close(fd)
                run.warn(f"rapl: {entity} left out: cannot read {path}: {exc}")
                continue
            self._zones.append(_Zone(path, entity, range_uj, fd, first, self._clock()))
        if not self._zones:
            self.close()
            raise RuntimeError(self.available() or f"no readable RAPL zone in {self.root}")
        if denied:
            run.warn(f"rapl: {', '.join(denied)} left out: {ROOT_ONLY.format(root=self.root)}")
        run.set_tag(RADT_RAPL_ZONES, ",".join(zone.entity for zone in self._zones))

    def close(self) -> None:
        """Close every counter."""
        zones, self._zones = self._zones, []
        for zone in zones:
            with contextlib.suppress(OSError):
                os.close(zone.fd)

    def poll(self) -> list[Sample]:
        """Energy since the start and power since the last reading, per zone."""
        now, mono = time.time(), self._clock()
        samples: list[Sample] = []
        for zone in self._zones:
            try:
                raw = read_uj(zone.fd)
            except (OSError, ValueError, IndexError):
                continue  # this instant is missing; the next reading covers the gap
            rise = raw - zone.last_uj
            if rise < 0:  # the counter wrapped past max_energy_range_uj
                rise += zone.range_uj
            seconds = mono - zone.last_s
            zone.total_uj += rise
            zone.last_uj, zone.last_s = raw, mono
            values = {
                "energy_j": zone.total_uj / 1e6,
                "power_w": rise / 1e6 / seconds if seconds > 0 else None,
            }
            samples += samples_from(now, f"rapl/{zone.entity}", values)
        return samples


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _clean(name: str) -> str:
    """``package-0-die-1`` -> ``package0die1``: lower-case letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", name.lower())
