"""What a GPU model can hold: its MIG profiles, for checking a study before its GPU is ready.

A study runs in two passes (MIG mode on for the MIG workloads, off for the others), so it is
checked against the GPU *model*, not the GPU's current MIG state. The profiles come from
``nvidia-smi mig -lgip`` when the GPU is in MIG mode; otherwise from the table below, picked by
the name ``nvidia-smi -L`` prints; without a GPU, from the known models whose profiles include
every profile the study names (the 80 GB A100 and H100 share theirs, and their geometry).

The table: NVIDIA MIG User Guide, "Supported MIG Profiles". Every model with seven compute
slices has the same geometry: 1g at 1 of 8 memory slices (7 at most), its ``+me`` variant
(1), the 1g with twice the memory (4), 2g (3), 3g (2), 4g (1) and 7g (1); the A30 has four
compute and four memory slices. Memory sizes are the nominal ones in the profile names, which is
all the placement check needs (their ratios give the memory slices, as in ``mig.layout_of``).
The profile ids only key the placement table (they are nvidia-smi's where known; a GPU in MIG
mode is read from ``-lgip`` instead, with its own).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from radt.collocation import mig, nvsmi


@dataclass(frozen=True)
class MigModel:
    """A GPU model that supports MIG and the GPU-instance profiles it offers."""

    name: str  # "H100 80GB"
    pattern: str  # regular expression matched against the `nvidia-smi -L` name
    profiles: tuple[tuple[int, str, int], ...]  # (profile id, name, max instances)

    def matches(self, gpu_name: str) -> bool:
        """Whether ``gpu_name`` (as ``nvidia-smi -L`` prints it) is this model."""
        return re.search(self.pattern, gpu_name, re.IGNORECASE) is not None

    def state(self, gpu: int = 0) -> mig.GpuMig:
        """The model as an empty GPU in MIG mode: every profile free, no instance."""
        return mig.GpuMig(
            [
                nvsmi.GiProfile(gpu, name, pid, total, total, _nominal_gib(name))
                for pid, name, total in self.profiles
            ],
            [],
        )

    @property
    def profile_names(self) -> list[str]:
        return [name for _pid, name, _total in self.profiles]


def _seven(small: int, double: int, half: int, whole: int) -> tuple[tuple[int, str, int], ...]:
    """The profiles of a seven-slice model from its memory sizes (GB in the names)."""
    return (
        (19, f"1g.{small}gb", 7),
        (20, f"1g.{small}gb+me", 1),
        (15, f"1g.{double}gb", 4),
        (14, f"2g.{double}gb", 3),
        (9, f"3g.{half}gb", 2),
        (5, f"4g.{half}gb", 1),
        (0, f"7g.{whole}gb", 1),
    )


MODELS = (
    MigModel("A100 40GB", r"A100.*40\s*GB", _seven(5, 10, 20, 40)),
    MigModel("A100 80GB", r"A100.*80\s*GB", _seven(10, 20, 40, 80)),
    MigModel("H100 NVL 94GB", r"H100.*(NVL|94\s*GB)", _seven(12, 24, 47, 94)),
    MigModel("H100 80GB", r"H100", _seven(10, 20, 40, 80)),
    MigModel("H200 141GB", r"H200", _seven(18, 35, 71, 141)),
    MigModel(
        "A30 24GB",
        r"\bA30\b",
        (
            (14, "1g.6gb", 4),
            (21, "1g.6gb+me", 1),
            (5, "2g.12gb", 2),
            (6, "2g.12gb+me", 1),
            (0, "4g.24gb", 1),
        ),
    ),
)
"""Known models, most specific pattern first (H100 NVL before H100)."""


def _nominal_gib(profile: str) -> float:
    match = re.search(r"\.(\d+)gb", profile)
    return float(match[1]) if match else 0.0


def model_of(gpu_name: str) -> MigModel | None:
    """The known model that ``gpu_name`` names, or None."""
    return next((model for model in MODELS if model.matches(gpu_name)), None)


def models_offering(profiles: set[str]) -> list[MigModel]:
    """Known models that offer every profile in ``profiles``."""
    wanted = {p.lower() for p in profiles}
    return [m for m in MODELS if wanted <= {n.lower() for n in m.profile_names}]


def known_names() -> str:
    """The known models, for messages."""
    return ", ".join(model.name for model in MODELS)
