"""Turn what benchmarks/gpu_check.sh brought back into test fixtures.

    python benchmarks/gpu_check_fixtures.py OUT [--dest tests/fixtures] [--samples]

OUT is the folder the check wrote (its ``gpu_check.tar.gz``, or an unpacked ``gpu_check/``
folder). The files land in ``DEST/<gpu>/<driver>/``: ``<gpu>`` is the GPU's name as
nvidia-smi gives it, lower case, without "NVIDIA", words joined by ``-`` (``NVIDIA H100 80GB
HBM3`` → ``h100-80gb-hbm3``), ``<driver>`` the driver version (``580.159.04``), both read
from the check's ``driver.csv``; a ``SOURCES.md`` there says where and when they were
captured (the check's ``system.txt``) and with which tools (``versions.txt``). The text
outputs are copied as they are (nvidia-smi ``-q``/``-L``/``--version``, the driver's and
the supported clocks' queries, ``radt listeners``, the doctor JSONs, the plan with its
statuses, ``radt runs``, the summary CSV, the manifest); ``--samples`` adds the Parquet
exports. An existing folder is refused (``--force`` replaces it).
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

TEXT_FILES = (
    "manifest.tsv",
    "system.txt",
    "versions.txt",
    "nvidia_smi_q.txt",
    "nvidia_smi_L.txt",
    "nvidia_smi_version.txt",
    "driver.csv",
    "supported_clocks.csv",
    "listeners.txt",
    "doctor.json",
    "doctor_measure.json",
    "plan.csv",
    "runs.txt",
    "runs_doctor.txt",
    "summary.csv",
)
"""The check's outputs that become fixtures, when the check wrote them."""
SAMPLE_FILES = ("samples.parquet", "doctor_samples.parquet")


class FixtureError(Exception):
    """What went wrong, in one line that says what to do."""


def gpu_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``h100-80gb-hbm3``: the fixture folder of a GPU model."""
    words = [w for w in re.split(r"[^0-9a-z]+", name.lower()) if w and w != "nvidia"]
    if not words:
        raise FixtureError(f"the GPU name {name!r} gives no folder name")
    return "-".join(words)


def read_driver_csv(path: Path) -> tuple[str, str]:
    """The first GPU's name and the driver version, from the check's ``driver.csv``
    (``nvidia-smi --query-gpu=...,name,...,driver_version,... --format=csv``)."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    if len(rows) < 2:
        raise FixtureError(f"{path} holds no GPU row: look at its logs/driver.err")
    header = [h.strip() for h in rows[0]]
    first = dict(zip(header, (v.strip() for v in rows[1]), strict=False))
    try:
        return first["name"], first["driver_version"]
    except KeyError as missing:
        raise FixtureError(f"{path} has no column {missing}: is it the check's?") from None


def unpacked(out: Path, scratch: Path) -> Path:
    """The check's ``gpu_check/`` folder: in ``out`` itself, or unpacked from its tar."""
    if (out / "gpu_check" / "driver.csv").exists():
        return out / "gpu_check"
    tar = out / "gpu_check.tar.gz"
    if not tar.exists():
        raise FixtureError(f"{out} holds neither gpu_check.tar.gz nor gpu_check/driver.csv")
    with tarfile.open(tar) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.10/3.11 security releases
            archive.extractall(scratch, filter="data")
        else:
            archive.extractall(scratch)
    if not (scratch / "gpu_check").is_dir():
        raise FixtureError(f"{tar} holds no gpu_check/ folder")
    return scratch / "gpu_check"


def sources_text(folder: Path, gpu: str, driver: str, copied: list[str]) -> str:
    """The SOURCES.md of a fixture folder: what was captured, where and with what."""
    system = (
        (folder / "system.txt").read_text().splitlines() if (folder / "system.txt").exists() else []
    )
    when = system[0] if system else "unknown (no system.txt)"
    host = system[1] if len(system) > 1 else "unknown"
    versions = (folder / "versions.txt").read_text() if (folder / "versions.txt").exists() else ""
    lines = [
        f"# {gpu}, driver {driver}",
        "",
        f"Captured by `benchmarks/gpu_check.sh` on {when}, on `{host}`;",
        "turned into fixtures by `benchmarks/gpu_check_fixtures.py`.",
        "Files, as the check wrote them:",
        "",
        *[f"- `{name}`" for name in copied],
        "",
        "Versions (the check's versions.txt):",
        "",
        "```",
        versions.rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def make_fixtures(out: Path, dest: Path, samples: bool = False, force: bool = False) -> Path:
    """Copy the check's outputs into ``dest/<gpu>/<driver>/``; return that folder."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = unpacked(out, Path(scratch))
        if not (folder / "driver.csv").exists():
            raise FixtureError(f"{folder} has no driver.csv: the check could not read the GPU")
        gpu, driver = read_driver_csv(folder / "driver.csv")
        target = dest / gpu_slug(gpu) / driver
        if target.exists():
            if not force:
                raise FixtureError(f"{target} exists already: --force replaces it")
            shutil.rmtree(target)
        target.mkdir(parents=True)
        names = TEXT_FILES + (SAMPLE_FILES if samples else ())
        copied = [name for name in names if (folder / name).exists()]
        for name in copied:
            shutil.copy2(folder / name, target / name)
        (target / "SOURCES.md").write_text(sources_text(folder, gpu, driver, copied))
    return target


def main(argv: list[str] | None = None) -> int:
    """The command line: print the fixture folder, or one line saying what to do."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder gpu_check.sh wrote ($OUT)")
    parser.add_argument("--dest", type=Path, default=Path("tests/fixtures"))
    parser.add_argument("--samples", action="store_true", help="copy the Parquet exports too")
    parser.add_argument("--force", action="store_true", help="replace an existing folder")
    args = parser.parse_args(argv)
    try:
        target = make_fixtures(args.out, args.dest, args.samples, args.force)
    except FixtureError as error:
        print(f"gpu_check_fixtures: error: {error}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
