"""Reproducibility: what the run ran on, as tags and artifact files."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from radt.placeholders import value_or_none
from radt.tags import (
    RADT_CPU_CORES,
    RADT_CPU_MODEL,
    RADT_CPU_PHYSICAL_CORES,
    RADT_CUDA_VERSION,
    RADT_GPU_DRIVER,
    RADT_GPU_MEMORY_MIB,
    RADT_GPUS,
    RADT_HOST,
    RADT_LIBRARIES,
    RADT_PLATFORM,
    RADT_PYTHON,
    RADT_RAM_GIB,
)
from radt.tracking import redact

SECRET_NAME = re.compile(
    r"(PASSWORD|PASSWD|TOKEN|SECRET|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_KEY|AUTH|SESSION)",
    re.IGNORECASE,
)
ENV_FOLDER = "radt/environment"
PIP_FREEZE = "pip-freeze.txt"
SMI_Q = "nvidia-smi-q.txt"
STUDY_LIBRARIES = (
    "torch",
    "mlflow",
    "transformers",
    "lightning",
    "pytorch-lightning",
    "tensorsocket",
)
"""The libraries whose versions a study's report states (tag :data:`RADT_LIBRARIES`)."""


def filtered_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with secrets masked: names that look secret, and URI passwords."""
    environ = dict(os.environ if environ is None else environ)
    return {
        name: "***" if SECRET_NAME.search(name) else redact(value)
        for name, value in sorted(environ.items())
    }


def cpu_model() -> str:
    """The host CPU's model name, from /proc/cpuinfo or the platform."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(argv: list[str], timeout_s: float = 60) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_PACKAGES: tuple[tuple, str] | None = None
"""The last :func:`installed_packages` answer and the state of ``sys.path`` it was read from."""


def _path_state() -> tuple:
    """Each ``sys.path`` folder with its modification time: installing, upgrading or removing
    a distribution adds or removes an entry (its ``.dist-info``) in one of them."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, None))
    return tuple(state)


def installed_packages() -> str:
    """``name==version`` of every installed distribution, like ``pip freeze --all``.

    Read in-process from the package metadata: a ``pip`` subprocess costs
    about a second of CPU next to a training that has just started. Reading the metadata
    still takes about 0.25 s of CPU at the end of a short run, so the answer is kept while
    no ``sys.path`` folder has changed (the warm launcher reads it once for all its runs).
    """
    global _PACKAGES
    from importlib.metadata import distributions

    state = _path_state()
    if _PACKAGES is not None and _PACKAGES[0] == state:
        return _PACKAGES[1]
    pins = {
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in distributions()
        if dist.metadata["Name"]
    }
    text = "\n".join(sorted(pins, key=str.lower)) + "\n"
    _PACKAGES = (state, text)
    return text


def library_versions(pins: str) -> str:
    """The :data:`RADT_LIBRARIES` value from ``pip freeze`` text: ``name==version`` of each of
    :data:`STUDY_LIBRARIES` installed, in that order, space-separated; ``none`` if none is."""
    found: dict[str, str] = {}
    for line in pins.splitlines():
        name, sep, version = line.strip().partition("==")
        name = re.sub(r"[-_.]+", "-", name).lower()
        if sep and name in STUDY_LIBRARIES:
            found[name] = version.strip()
    listed = [f"{name}=={found[name]}" for name in STUDY_LIBRARIES if name in found]
    return " ".join(listed) or "none"


def gpu_facts(smi_q: str) -> dict[str, str]:
    """Driver, CUDA version, GPU names and their total memory from ``nvidia-smi -q`` text.

    A placeholder (``CUDA Version : Not Found`` on a vGPU host, ``N/A``) gives no tag.
    """
    facts: dict[str, str] = {}
    names: list[str] = []
    memory_mib: list[str] = []
    section = ""
    for line in smi_q.splitlines():
        label, colon, text = line.partition(":")
        label, value = label.strip(), value_or_none(text)
        if not colon:
            section = label
        if value is None:
            continue
        if section == "FB Memory Usage" and label == "Total":
            total = re.match(r"(\d+)\s*MiB$", value)
            if total:
                memory_mib.append(total.group(1))
        if label == "Driver Version":
            facts[RADT_GPU_DRIVER] = value
        elif label == "CUDA Version":
            facts[RADT_CUDA_VERSION] = value
        elif label == "Product Name":
            names.append(value)
    if names:
        facts[RADT_GPUS] = ", ".join(names)
    if memory_mib:
        facts[RADT_GPU_MEMORY_MIB] = ", ".join(memory_mib)
    return facts


def capture(target: Path) -> dict[str, str]:
    """Write environment files under ``target/radt/environment``; return tags for the run.

    A missing ``nvidia-smi`` is not an error: the file and GPU tags are left out.
    """
    folder = target / ENV_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    memory = psutil.virtual_memory()
    tags = {
        RADT_HOST: socket.gethostname(),
        RADT_PYTHON: platform.python_version(),
        RADT_PLATFORM: platform.platform(),
        RADT_CPU_MODEL: cpu_model(),
        RADT_CPU_CORES: str(psutil.cpu_count(logical=True)),
        RADT_CPU_PHYSICAL_CORES: str(psutil.cpu_count(logical=False)),
        RADT_RAM_GIB: f"{memory.total / 2**30:.1f}",
    }
    pins = installed_packages()
    (folder / PIP_FREEZE).write_text(pins)
    tags[RADT_LIBRARIES] = library_versions(pins)
    smi = shutil.which("nvidia-smi")
    if smi:
        smi_q = _run([smi, "-q"])
        if smi_q:
            (folder / SMI_Q).write_text(smi_q)
            tags.update(gpu_facts(smi_q))
    details = {
        "tags": tags,
        "python_executable": sys.executable,
        "argv": [redact(arg) for arg in sys.argv],
        "cwd": os.getcwd(),
        "environ": filtered_environ(),
    }
    (folder / "environment.json").write_text(json.dumps(details, indent=1))
    return tags
