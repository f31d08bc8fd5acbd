"""Writing a study's progress (``parent:`` and ``status:``) back into its YAML file.

The original radT re-dumps the whole file (losing comments and order). radT keeps every other
line as written: it removes the old top-level ``parent:`` and ``status:`` blocks and appends
new ones, then checks that the result reads back as the same study with the new progress; a
file laid out so that this does not hold (flow style, anchors) is dumped whole instead, with a
warning. The file is rewritten atomically under the same lock as plans.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from radt.plans.writeback import _atomic_write, _locked, lock_path

_TOP_KEY = re.compile(r"^(?P<key>[^\s#'\"-][^:#]*?)\s*:(\s|$)")
PROGRESS_KEYS = ("parent", "status")


def _blocks_removed(text: str, keys: tuple[str, ...]) -> str:
    """``text`` without the top-level blocks of ``keys`` (a key line and its indented lines)."""
    kept: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        top = line[:1] not in (" ", "\t", "\n", "\r", "#", "") or line.startswith(("---", "..."))
        if top:
            match = _TOP_KEY.match(line)
            dropping = bool(match) and match["key"].strip() in keys
        elif dropping and line.strip().startswith("#") and not line.startswith((" ", "\t")):
            dropping = False
        if not dropping:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "".join(kept)


def progress_text(parent: str | None, status: dict[int, str]) -> str:
    """The ``parent:`` and ``status:`` blocks as YAML."""
    import yaml

    data: dict = {}
    if parent:
        data["parent"] = parent
    if status:
        data["status"] = dict(sorted(status.items()))
    if not data:
        return ""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=4096)


def write_progress(
    path: Path, parent: str | None, status: dict[int, str], warn: Callable[[str], None]
) -> None:
    """Set ``parent`` and ``status`` in the study file at ``path``, keeping everything else."""
    import yaml

    path = Path(path)
    with _locked(lock_path(path)):
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
        wanted = {k: v for k, v in data.items() if k not in PROGRESS_KEYS}
        if parent:
            wanted["parent"] = parent
        if status:
            wanted["status"] = dict(status)
        body = _blocks_removed(text, PROGRESS_KEYS)
        block = progress_text(parent, status)
        body = body.rstrip("\n")
        new = (body + "\n\n" if body else "") + block if block else body + "\n"
        try:
            same = yaml.safe_load(new) == wanted
        except yaml.YAMLError:
            same = False
        if not same:
            warn(
                f"{path}: its layout cannot take the progress in place; writing the whole file "
                "again (comments are lost)"
            )
            new = yaml.safe_dump(wanted, sort_keys=False, default_flow_style=False, width=4096)
        _atomic_write(path, new.encode("utf-8"))
