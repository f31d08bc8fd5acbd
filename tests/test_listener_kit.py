"""The listener kit: the docs' three listener kinds run under radT as a plug-in would, and
listeners, the run API and recording import only what the layering allows."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "guide" / "listeners.md"
SECTION = "## Write your own listener"
EXAMPLES = {"loadavg": "LoadAverage", "vmstat": "Vmstat", "maxrss": "MaxRss"}
WORK = """
import time
block = bytearray(200 * 1024 * 1024)  # touched: resident
for i in range(0, len(block), 4096):
    block[i] = 1
time.sleep(2.5)
"""


def readme_examples() -> dict[str, str]:
    """The Python blocks of docs/guide/listeners.md's "Write your own listener" (README's
    once), by the class each defines."""
    text = GUIDE.read_text()
    section = text[text.index(SECTION) :]
    section = re.split(r"\n## ", section[len(SECTION) :])[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    found = {}
    for block in blocks:
        match = re.search(r"^class (\w+)\(", block, re.M)
        if match and match[1] in EXAMPLES.values():
            found[match[1]] = block
    return found


def install(folder: Path, module: str, source: str, entries: dict[str, str]) -> None:
    """``source`` as the module of an installed package registering ``entries``."""
    info = folder / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (folder / f"{module}.py").write_text(source)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {module}:{target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text("[radt.listeners]\n" + lines)


def test_readme_shows_a_listener_of_each_kind():
    examples = readme_examples()
    assert set(examples) == set(EXAMPLES.values())
    bases = {re.search(r"^class \w+\((\w+)\)", b, re.M)[1] for b in examples.values()}
    assert bases == {"PolledListener", "StreamedListener", "WrappingListener"}


@pytest.mark.slow
@pytest.mark.skipif(
    not all(os.path.exists(p) for p in ("/usr/bin/time", "/usr/bin/vmstat", "/proc/loadavg")),
    reason="the docs' examples read /proc/loadavg and run vmstat and GNU time",
)
def test_readmes_listeners_record_under_radt(workspace):
    source = "\n\n".join(readme_examples()[target] for target in EXAMPLES.values())
    install(workspace.root / "plugins", "readme_listeners", source, EXAMPLES)
    plugins = workspace.root / "plugins"
    workspace.env["PYTHONPATH"] = f"{plugins}{os.pathsep}{workspace.env['PYTHONPATH']}"
    workspace.script("work.py", WORK)
    done = workspace.run(["-l", "loadavg+vmstat+maxrss", "work.py"])
    assert done.returncode == 0, done.stderr
    assert "radt: listener" not in done.stderr, done.stderr
    run = workspace.only_run()
    metrics = run.data.metrics
    assert metrics["system/loadavg/host/load_1m"] >= 0.0
    assert 0.0 <= metrics["system/vmstat/host/cpu_idle_pct"] <= 100.0
    # the script's 200 MiB, plus the interpreter, under a little more than that
    assert 200.0 <= metrics["system/maxrss/proc/rss_peak_mib"] < 400.0


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports, anywhere in it (relative imports left out)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def importers(files: list[Path], prefix: str) -> list[str]:
    return [
        f"{path.relative_to(REPO)}: {name}"
        for path in files
        for name in sorted(imported(path))
        if name == prefix or name.startswith(prefix + ".")
    ]


def test_listeners_import_the_kit_and_not_the_recorder():
    files = sorted((REPO / "listeners").glob("*.py"))
    for inner in ("radt.record", "radt.launch", "radt.analysis"):
        assert importers(files, inner) == []
    assert any("radt.listener" in imported(path) for path in files)


def test_the_run_api_imports_no_listener_and_recording_no_analysis():
    assert importers([REPO / "radt" / "run_api.py"], "radt.listeners") == []
    assert importers(sorted((REPO / "radt" / "record").glob("*.py")), "radt.analysis") == []
