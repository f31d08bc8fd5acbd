"""The GPUs a GPU listener watches, and the NVIDIA tools' own words for why there are none.

Tools run by :func:`radt.tools.run`; the GPUs come from the one inventory,
:func:`radt.gpus.list_gpus`.
"""

from __future__ import annotations

from collections.abc import Sequence

from radt.gpus import list_gpus
from radt.tools import ToolError, found  # noqa: F401 - re-exported for the listeners

from ._gpus import Gpu, requested, resolve

TOOL_TIMEOUT_S = 15.0
"""How long a one-shot call (``nvidia-smi -L``, ``dcgmi discovery -c``) may take."""


def first_sentence(line: str) -> str:
    """``"NVIDIA-SMI has failed because .... Make sure ..."`` → the part before the first ``. ``."""
    head = line.strip().split(". ", 1)[0]
    return head.rstrip(".").strip()


def gpus_here() -> list[Gpu]:
    """The inventory's GPUs; raises ToolError saying why there are none, in nvidia-smi's first
    sentence ("no NVIDIA GPU" when it lists none)."""
    try:
        gpus = list_gpus()
    except ToolError as exc:
        result = exc.result
        if result is None or result.error is not None:
            raise
        line = result.first_line()
        if line and "no devices were found" not in line.lower():
            raise ToolError(first_sentence(line)[:200], result) from None
        gpus = []
    if not gpus:
        raise ToolError("no NVIDIA GPU")
    return gpus


def gpus_of_run(devices: Sequence[str]) -> list[Gpu]:
    """The run's physical GPUs: ``devices``, else ``CUDA_VISIBLE_DEVICES``, else all.

    Raises ToolError when ``nvidia-smi -L`` fails, ValueError for a device that
    matches no GPU.
    """
    return resolve(requested(devices), gpus_here())
