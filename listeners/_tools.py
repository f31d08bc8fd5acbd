"""Running NVIDIA command-line tools once, and reading their values; shared by ``smi`` and ``dcgm``.

Both tools print a placeholder where a value is missing (``[N/A]``,
``[Not Supported]``, ``N/A``, …): :func:`radt.placeholders.number`
turns those into None (missing, never zero) and refuses anything else that is
not a number, so that a garbled line is skipped and counted instead of being
recorded wrong.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from ._gpus import Gpu, parse_nvidia_smi_l, requested, resolve

TOOL_TIMEOUT_S = 15.0
"""How long a one-shot call (``nvidia-smi -L``, ``dcgmi discovery -c``) may take."""


class ToolError(RuntimeError):
    """A tool could not answer; the message is the reason in a few words."""


@dataclass
class ToolOutput:
    """What a one-shot tool call printed (stdout then stderr) and its exit status."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return "\n".join(part for part in (self.stdout, self.stderr) if part)

    def first_line(self) -> str:
        """The first non-blank line of stdout and stderr together ("" if none)."""
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


def run_tool(argv: Sequence[str], timeout_s: float = TOOL_TIMEOUT_S) -> ToolOutput:
    """Run ``argv`` once and return its output; raises ToolError when it cannot run or hangs."""
    name = argv[0]
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
        )
    except FileNotFoundError:
        raise ToolError(f"{name} not found") from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"{' '.join(argv)} did not answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise ToolError(f"{name} cannot run ({exc.strerror or exc})") from None
    return ToolOutput(done.returncode, done.stdout, done.stderr)


def found(name: str) -> bool:
    """Whether ``name`` is an executable on PATH."""
    return shutil.which(name) is not None


def first_sentence(line: str) -> str:
    """``"NVIDIA-SMI has failed because .... Make sure ..."`` → the part before the first ``. ``."""
    head = line.strip().split(". ", 1)[0]
    return head.rstrip(".").strip()


def list_gpus() -> list[Gpu]:
    """The GPUs ``nvidia-smi -L`` lists; raises ToolError with the reason when there are none."""
    done = run_tool(["nvidia-smi", "-L"])
    gpus = parse_nvidia_smi_l(done.stdout)
    if gpus:
        return gpus
    line = done.first_line()
    if done.returncode == 0 or not line or "no devices were found" in line.lower():
        raise ToolError("no NVIDIA GPU")
    raise ToolError(first_sentence(line)[:200])


def gpus_of_run(devices: Sequence[str]) -> list[Gpu]:
    """The run's physical GPUs: ``devices``, else ``CUDA_VISIBLE_DEVICES``, else all.

    Raises ToolError when ``nvidia-smi -L`` fails, ValueError for a device that
    matches no GPU.
    """
    return resolve(requested(devices), list_gpus())
