"""The documentation: README.md and every page under docs/.

Every shell and Python block a user would copy either runs here (the slow test runs each
page's blocks in order, in a fresh workspace) or says before it why it cannot, with an HTML
comment on the line before its fence:

- ``<!-- needs: WHAT -->``: WHAT is one of ``NEEDS`` (a GPU, root, Slurm, a server that keeps
  running, a long run, or it is a part of your own code, not a whole program);
- ``<!-- tested-by: tests/FILE.py::TEST -->``: that test runs the block as written.

Output samples are ``text`` blocks, and data files (``csv``, ``yaml``, ``toml``, ``ini``) are
not commands: neither is checked. The site itself builds with ``mkdocs build --strict``, which
fails on a broken link or anchor between the pages, a docstring mkdocstrings cannot render, or a
command whose ``--help`` the command-line page cannot render.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import FAKES, REPO, default_signals, new_workspace

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
COPIED = {"bash", "sh", "shell", "console", "python"}
NEEDS = {
    "gpu": "an NVIDIA GPU (MIG, power caps, a study's GPU runs)",
    "root": "root on the machine (sudo)",
    "slurm": "a Slurm cluster",
    "server": "a server that runs until stopped (radt ui, mlflow server) or a team's server",
    "long": "minutes to hours (make test, a whole study)",
    "your-code": "your own training script or listener: a part of a program, not a whole one",
}
MARKER = re.compile(r"<!-- (needs|tested-by): (\S+) -->")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```[ \t]*$", re.S | re.M)
# what a block needs a marker for: it serves, needs root, Slurm or a GPU's own dials
UNRUNNABLE = re.compile(
    r"\bradt ui\b|mlflow server|\bsudo\b|\bsrun\b|\bsbatch\b|--slurm|--measure|--modes mig"
)


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    kind: str | None  # "needs", "tested-by" or None (runs here)
    value: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of one page, each with the marker on the line before its fence."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(before.strip())
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                lang=match[1],
                text=match[2],
                kind=marker[1] if marker else None,
                value=marker[2] if marker else None,
            )
        )
    return found


def copied_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.lang in COPIED]


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in COPIED and b.kind is None]


def test_every_copied_block_runs_here_or_says_what_it_needs():
    problems = []
    for block in copied_blocks():
        if block.kind == "needs" and block.value not in NEEDS:
            problems.append(f"{block.where}: needs {block.value!r}: say one of {sorted(NEEDS)}")
        elif block.kind == "tested-by":
            file, _, name = block.value.partition("::")
            test = REPO / file
            if not (test.is_file() and f"def {name}(" in test.read_text()):
                problems.append(f"{block.where}: tested-by {block.value}: no such test")
        elif block.kind is None and UNRUNNABLE.search(block.text):
            problems.append(f"{block.where}: cannot run in a test: mark it <!-- needs: ... -->")
    assert problems == []
    # the slow test below has something to run, on README's tour among others
    assert len([b for page in PAGES for b in runnable(page)]) >= 4
    assert runnable(REPO / "README.md")


def test_a_marker_stands_right_before_a_fence():
    """A marker that lost its block (a blank paragraph between them) would mark nothing."""
    orphans = []
    for page in PAGES:
        text = page.read_text()
        marked = {b.line for b in blocks(page) if b.kind}
        for match in re.finditer(rf"^{MARKER.pattern}$", text, re.M):  # a line of its own
            line = text.count("\n", 0, match.start()) + 1
            if not any(0 < fence - line <= 1 for fence in marked):
                orphans.append(f"{page.relative_to(REPO)}:{line}")
    assert orphans == []


def test_the_guides_plan_walk_through_is_readmes_which_a_test_runs():
    """docs/guide/plans.md repeats README's walk-through; the test it names reads README's."""
    (readme,) = [b for b in blocks(REPO / "README.md") if "cp examples/collocation.csv" in b.text]
    (guide,) = [
        b for b in blocks(REPO / "docs" / "guide" / "plans.md") if "examples/collocation" in b.text
    ]
    assert guide.text == readme.text and guide.value == readme.value


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", [p for p in PAGES if runnable(p)], ids=lambda p: str(p.relative_to(REPO))
)
def test_a_pages_runnable_blocks_run_in_a_fresh_workspace(page, tmp_path, template_db):
    """Each unmarked block of the page, in order, as a user would paste them: from a folder with
    the examples, a fresh store, radT and python on PATH, and the fake NVIDIA tools."""
    workspace = new_workspace(tmp_path, template_db, plugins=False)
    shutil.copytree(REPO / "examples", workspace.root / "examples")
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, argv in (("radt", f"{sys.executable} -m radt"), ("python", sys.executable)):
        (shims / name).write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        (shims / name).chmod(0o755)
    env = dict(workspace.env, PATH=os.pathsep.join([str(shims), str(FAKES), os.environ["PATH"]]))
    for block in runnable(page):
        if block.lang == "python":
            argv = [sys.executable, "-c", block.text]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        done = subprocess.run(
            argv,
            cwd=workspace.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=default_signals,
        )
        assert done.returncode == 0, f"{block.where}\n{block.text}\n{done.stderr[-3000:]}"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict` (what `make docs` runs), its output in the failure."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.fail("mkdocs is missing: make install-test installs it (the docs extra)")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=REPO,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-5000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("radt", "radt listeners", "radt doctor", "radt report", "radt ui"):
        assert f"usage: {command} " in cli, command
    api = (site / "reference" / "api" / "run_api" / "index.html").read_text()
    assert "log_examples" in api and "start_window" in api


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (mkdocs.yml makes the site's the same)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readmes_links_reach_the_docs_files_and_their_headings():
    """README lives outside docs/, where mkdocs --strict does not look: its relative links
    (into docs/, as GitHub shows them) each reach a file, and a heading where they name one."""
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if not re.match(r"\w+://", link)]
    assert len(local) >= 10 and any(link.startswith("docs/guide/") for link in local)
    broken = []
    for link in local:
        path, _, anchor = link.partition("#")
        target = REPO / path
        if not target.is_file():
            broken.append(link)
        elif anchor and target.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            if anchor not in {github_anchor(h) for h in headings}:
                broken.append(link)
    assert broken == []
