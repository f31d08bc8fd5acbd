"""The data side of examples/train.py and examples/loader.py.

``synthetic_cifar`` makes CIFAR-shaped images with learnable classes;
``AugmentedCifar`` is a dataset whose every example goes through ``augment``
(random crop, flip, repeated blur, colour jitter, standardisation): a CPU cost
per example of the same order as a small CNN's training step on a CPU, so that
loading matters. ``loader_ports`` says where a shared loader listens, and
``import_tensorsocket`` imports TensorSocket without its logging side effect.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from types import ModuleType

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

TENSORSOCKET_PORTS = (5555, 5556, (4444, 4445))
"""tensorsocket's own defaults: data, ack, (heartbeat PUB, heartbeat SUB)."""


def synthetic_cifar(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``n`` 3x32x32 images with 10 learnable classes (class-dependent means)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=generator)
    centres = torch.randn(10, 3, 1, 1, generator=generator)
    images = torch.randn(n, 3, 32, 32, generator=generator) * 0.5 + centres[labels]
    return images, labels


_BLUR = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
_BLUR = (_BLUR[:, None] * _BLUR[None, :] / 256.0).expand(3, 1, 5, 5).contiguous()


def augment(image: torch.Tensor, generator: torch.Generator, passes: int) -> torch.Tensor:
    """One image through crop, flip, ``passes`` 5x5 blurs, jitter and standardisation."""
    x = F.pad(image, (4, 4, 4, 4), mode="reflect")
    top, left = torch.randint(0, 9, (2,), generator=generator).tolist()
    x = x[:, top : top + 32, left : left + 32]
    if torch.rand(1, generator=generator).item() < 0.5:
        x = x.flip(-1)
    for _ in range(passes):
        x = F.conv2d(x.unsqueeze(0), _BLUR, padding=2, groups=3).squeeze(0)
    brightness, contrast = (torch.rand(2, generator=generator) * 0.4 + 0.8).tolist()
    mean = x.mean()
    x = (x - mean) * contrast + mean * brightness
    return (x - x.mean(dim=(1, 2), keepdim=True)) / (x.std(dim=(1, 2), keepdim=True) + 1e-5)


class AugmentedCifar(Dataset):
    """``synthetic_cifar`` examples, each augmented when it is read."""

    def __init__(self, examples: int, seed: int, passes: int) -> None:
        self.images, self.labels = synthetic_cifar(examples, seed)
        self.passes = passes
        self.generator = torch.Generator().manual_seed(seed + 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return augment(self.images[index], self.generator, self.passes), self.labels[index]


def augmented_loader(
    examples: int, batch_size: int, seed: int, passes: int, drop_last: bool = False
) -> DataLoader:
    """A shuffling DataLoader over ``AugmentedCifar`` in this process (no workers)."""
    return DataLoader(
        AugmentedCifar(examples, seed, passes),
        batch_size=batch_size,
        shuffle=True,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed),
    )


@dataclass(frozen=True)
class LoaderPorts:
    """Where a shared loader (a ``tensorsocket.TensorProducer``) listens."""

    port: int
    ack_port: int
    heart_ports: tuple[int, int]


def loader_ports(who: str) -> LoaderPorts:
    """The ports radT hands to a workload with a loader, else tensorsocket's defaults.

    radT sets ``RADT_LOADER_PORT``, ``RADT_LOADER_ACK_PORT`` and
    ``RADT_LOADER_HEART_PORTS`` (``PUB,SUB``) in every run of such a workload.
    """
    port = os.environ.get("RADT_LOADER_PORT")
    if not port:
        data, ack, heart = TENSORSOCKET_PORTS
        print(
            f"{who}: RADT_LOADER_PORT is not set (not in a radT workload with a loader row); "
            f"using tensorsocket's default ports {data}, {ack}, {heart[0]},{heart[1]}",
            file=sys.stderr,
            flush=True,
        )
        return LoaderPorts(data, ack, heart)
    pub, sub = (int(p) for p in os.environ["RADT_LOADER_HEART_PORTS"].split(","))
    return LoaderPorts(int(port), int(os.environ["RADT_LOADER_ACK_PORT"]), (pub, sub))


def import_tensorsocket() -> ModuleType:
    """``tensorsocket``, imported without what its import does to logging.

    tensorsocket 0.0.5 calls ``logging.basicConfig(level=DEBUG, stream=sys.stdout)``
    when imported: every library's debug messages (MLflow's, GitPython's, asyncio's)
    would then go to the script's output, at a CPU cost. The root logger's level
    and handlers are put back as they were.
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    import tensorsocket

    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)
    return tensorsocket
