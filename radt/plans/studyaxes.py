"""The values of a study's axes, one item each: a ``collocation`` configuration (``none``,
``naive x3``, ``mps:50 x2``, ``4g.40gb+3g.40gb``), a ``power_limit`` (watts or ``default``), a
``gpu_clock`` (MHz or ``default``) and a ``loader`` (``own`` or ``shared``), parsed from the
study's YAML and written back as text. Each parser raises ValueError with the user's message;
:mod:`radt.plans.study` puts it on the key's line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from radt.plans.model import MAX_COMPUTE_SLICES, Collocation
from radt.plans.read import parse_collocation, parse_gpu_clock
from radt.tags import Mode

LOADERS = ("own", "shared")
"""``loader:`` values: each training loads its own data, or one shared loader feeds them."""
MAX_SHARING = 48  # MPS serves at most 48 clients per GPU (Volta and later)


@dataclass(frozen=True)
class Configuration:
    """How one workload shares the GPU: its label and one collocation per run."""

    label: str  # "none", "naive x2", "mps:50 x2", "4g.40gb+3g.40gb"
    runs: tuple[Collocation, ...]

    @property
    def mode(self) -> Mode:
        return self.runs[0].mode

    @property
    def slug(self) -> str:
        """The label in a workload name: ``naive-x2``, ``mps50-x2``, ``4g+3g``."""
        if self.mode == Mode.MIG:
            return "+".join(r.label.split(".")[0] for r in self.runs)
        return self.label.replace(":", "").replace(" ", "-")


def _value_text(value) -> str:
    """A YAML value as the original radT writes it into the command (``str()``)."""
    return str(value).strip()


def parse_watts(value) -> float | None:
    """A ``power_limit`` item: watts (``250``, ``250 W``) or ``default`` (None)."""
    if value is None or str(value).strip().lower() in ("default", "-", ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a number of watts or default")
    text = re.sub(r"\s*[wW]$", "", str(value).strip())
    try:
        watts = float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of watts or default") from None
    if not watts > 0 or watts == float("inf"):
        raise ValueError(f"{value!r} is not a positive number of watts")
    return watts


def _parse_clock(item) -> int | None:
    """A ``gpu_clock`` item: MHz (``1410``, ``1410 MHz``) or ``default`` (None)."""
    text = str(item).strip()
    if text.lower() == "default":
        return None
    try:
        return parse_gpu_clock(text)
    except ValueError as err:
        raise ValueError(f"{err}, or default") from None


def _clock_text(mhz: int | None) -> str:
    return "default" if mhz is None else f"{mhz} MHz"


def _parse_loader(item) -> str:
    """A ``loader`` item: ``own`` or ``shared``."""
    value = _value_text(item).lower()
    if value not in LOADERS:
        raise ValueError(
            f"{_value_text(item)!r} is not own or shared (own: each training loads its "
            "own data; shared: one loader_file feeds them)"
        )
    return value


def _cap_text(watts: float | None) -> str:
    return "default" if watts is None else f"{watts:g} W"


_COUNT = re.compile(r"^(.*?)\s*\bx\s*(\d+)$")


def parse_configuration(text: str) -> Configuration:
    """A ``collocation`` item: ``none``, ``naive x3``, ``mps:50 x2``, ``4g.40gb+3g.40gb``.

    A single word of the original radT (``-``, ``naive``, ``mps``, ``3g.40gb``) is one run.
    Raises ValueError with the message for the user.
    """
    value = text.strip()
    match = _COUNT.match(value.lower())
    base, count = (match[1].strip(), int(match[2])) if match else (value, None)
    if count is not None and count < 1:
        raise ValueError(f"{value!r}: the number of runs must be at least 1")
    parts = re.split(r"\+(?=\d)", base)
    if len(parts) > 1:
        collocations = [parse_collocation(part) for part in parts]
        if any(c.mode != Mode.MIG for c in collocations):
            raise ValueError(
                f"{value!r}: + joins MIG profiles (4g.40gb+3g.40gb); share a whole GPU with "
                "naive xN or mps xN"
            )
    else:
        collocations = [parse_collocation(base)]
    first = collocations[0]
    if first.mode == Mode.NONE:
        if count not in (None, 1):
            raise ValueError(
                f"{value!r}: none is the job alone on its GPU; share it with naive x{count} "
                f"or mps x{count}"
            )
        return Configuration(Mode.NONE.value, (first,))
    if first.mode in (Mode.NAIVE, Mode.MPS):
        n = count or 1
        if n > MAX_SHARING:
            raise ValueError(f"{value!r}: at most {MAX_SHARING} runs can share one GPU")
        return Configuration(f"{first.label} x{n}", (first,) * n)
    runs = [c for c in collocations for _ in range(count or 1)]
    runs.sort(key=lambda c: (-c.compute_slices, -_memory_gb(c.mig_profile or "")))
    slices = sum(c.compute_slices for c in runs)
    label = "+".join(c.label for c in runs)
    if slices > MAX_COMPUTE_SLICES:
        raise ValueError(
            f"{value!r} needs {slices} compute slices; a GPU has at most {MAX_COMPUTE_SLICES}"
        )
    return Configuration(label, tuple(runs))


def _memory_gb(profile: str) -> int:
    match = re.search(r"\.(\d+)gb", profile)
    return int(match[1]) if match else 0
