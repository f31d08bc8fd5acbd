#!/usr/bin/env python3
"""Fake Linux powercap sysfs tree (the RAPL zones under /sys/class/powercap), stdlib only.

Built from ``powercap-info`` output (tests/fixtures/powercap_info_*.txt, sources in
tests/fixtures/SOURCES.md) into the layout the kernel exposes::

    ROOT/devices/virtual/powercap/intel-rapl/enabled              the control type
    ROOT/devices/virtual/powercap/intel-rapl/intel-rapl:0/        zone 0: name, enabled,
                                                                  energy_uj, max_energy_range_uj
    ROOT/devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0/   sub-zone 0:0
    ROOT/class/powercap/intel-rapl     -> ../../devices/virtual/powercap/intel-rapl
    ROOT/class/powercap/intel-rapl:0   -> ../../devices/virtual/powercap/intel-rapl/intel-rapl:0
    ROOT/class/powercap/intel-rapl:0:0 -> ...intel-rapl/intel-rapl:0/intel-rapl:0:0

:func:`build` returns ``ROOT/class/powercap``, what radT reads as ``/sys/class/powercap``
(``-o rapl.root=...``). Files hold ``<value>\\n`` as sysfs prints them. ``powercap-info``
leaves out what it cannot read: a zone whose capture has no ``energy_uj`` line gets
``energy_uj`` 0 with mode 0600 (only its owner reads it, as root alone does since
CVE-2020-8694); one with the line gets mode 0644. Both stay writable by their owner so that
:func:`set_energy` (and :func:`advance`, a counter rising at a known power) can move them in
place: radT keeps the files open, as it does the real ones.

    python tests/fakes/powercap.py build tests/fixtures/powercap_info_i5_13500.txt /tmp/pc
    python tests/fakes/powercap.py set /tmp/pc/class/powercap 0:1 123456
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROL = "intel-rapl"
DEVICES = Path("devices/virtual/powercap")
CLASS = Path("class/powercap")
_ZONE = re.compile(r"^\s*Zone (\d+(?::\d+)*)\s*$")
_CONSTRAINT = re.compile(r"^\s*Constraint \d+\s*$")
_ATTRIBUTE = re.compile(r"^\s*([a-z_]+): (.*?)\s*$")


@dataclass
class Zone:
    """One zone of a capture: ``0`` or ``0:1``, and its attributes as printed."""

    id: str
    attributes: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """Its folder under the control type: ``intel-rapl:0/intel-rapl:0:1``."""
        parts = self.id.split(":")
        return Path(*(f"{CONTROL}:{':'.join(parts[: i + 1])}" for i in range(len(parts))))


def parse(text: str) -> list[Zone]:
    """The zones of ``powercap-info`` output (constraints are left out)."""
    zones: list[Zone] = []
    in_constraint = False
    for line in text.splitlines():
        if match := _ZONE.match(line):
            zones.append(Zone(match[1]))
            in_constraint = False
        elif _CONSTRAINT.match(line):
            in_constraint = True
        elif zones and not in_constraint and (match := _ATTRIBUTE.match(line)):
            zones[-1].attributes[match[1]] = match[2]
    return zones


def build(capture: str | Path, root: str | Path) -> Path:
    """Write the tree of ``capture`` (a fixture's path, or its text) under ``root``."""
    text = capture.read_text() if isinstance(capture, Path) else capture
    root = Path(root)
    control = root / DEVICES / CONTROL
    control.mkdir(parents=True, exist_ok=True)
    _write(control / "enabled", "1", 0o644)
    classes = root / CLASS
    classes.mkdir(parents=True, exist_ok=True)
    _link(classes / CONTROL, control)
    for zone in parse(text):
        folder = control / zone.folder
        folder.mkdir(parents=True, exist_ok=True)
        attrs = zone.attributes
        _write(folder / "name", attrs["name"], 0o444)
        _write(folder / "enabled", attrs.get("enabled", "0"), 0o644)
        _write(folder / "max_energy_range_uj", attrs["max_energy_range_uj"], 0o444)
        readable = "energy_uj" in attrs
        _write(folder / "energy_uj", attrs.get("energy_uj", "0"), 0o644 if readable else 0o600)
        _link(classes / folder.name, folder)
    return classes


def zone_folder(classes: str | Path, zone: str) -> Path:
    """The folder of zone ``0:1`` under a tree's ``class/powercap``."""
    return Path(classes) / f"{CONTROL}:{zone}"


def set_energy(classes: str | Path, zone: str, energy_uj: int) -> None:
    """Set zone ``zone``'s counter in place (the same file, as the kernel's)."""
    path = zone_folder(classes, zone) / "energy_uj"
    fd = os.open(path, os.O_WRONLY)
    try:
        data = f"{int(energy_uj)}\n".encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def energy(classes: str | Path, zone: str) -> int:
    """Zone ``zone``'s counter now."""
    return int((zone_folder(classes, zone) / "energy_uj").read_text())


def max_range(classes: str | Path, zone: str) -> int:
    """Zone ``zone``'s ``max_energy_range_uj``."""
    return int((zone_folder(classes, zone) / "max_energy_range_uj").read_text())


def advance(
    classes: str | Path, watts: dict[str, float], seconds: float, step_s: float = 0.005
) -> dict[str, int]:
    """Raise each zone's counter at its power for ``seconds``, wrapping at its range.

    The counter follows this process's monotonic clock, in whole steps of ``step_s``
    (as a real counter moves in whole energy units): however late this process is
    scheduled, it writes what the counter would read at that instant. At the end each
    counter has risen by exactly ``watts * seconds`` (in µJ, modulo its range); the
    returned dict gives each zone's total rise in µJ.
    """
    start = {zone: energy(classes, zone) for zone in watts}
    ranges = {zone: max_range(classes, zone) for zone in watts}
    steps = round(seconds / step_s)
    began = time.monotonic()
    done = 0
    while done < steps:
        done = min(steps, int((time.monotonic() - began) / step_s))
        for zone, power in watts.items():
            rise = round(power * 1e6 * step_s) * done
            set_energy(classes, zone, (start[zone] + rise) % ranges[zone])
        time.sleep(step_s)
    return {zone: round(power * 1e6 * step_s) * steps for zone, power in watts.items()}


def _write(path: Path, value: str, mode: int) -> None:
    path.write_text(f"{value}\n")
    path.chmod(mode)


def _link(link: Path, target: Path) -> None:
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(target, link.parent))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "build":
        print(build(Path(argv[1]), argv[2]))
        return 0
    if len(argv) == 4 and argv[0] == "set":
        set_energy(argv[1], argv[2], int(argv[3]))
        return 0
    print("usage: powercap.py build CAPTURE ROOT | set CLASS_DIR ZONE ENERGY_UJ", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
