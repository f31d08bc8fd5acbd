"""The product code's module graph: no import circles, and the layering of docs/architecture.md
("Layers"). Every import counts, one inside a function too (deferring it hides a circle, it does
not remove it); only an import under ``if TYPE_CHECKING:`` does not, nor one under ``if __name__
== "__main__":`` (the module run as a program is another module, ``__main__``, as radt/__main__.py
is: ``python -m radt.warm`` imports radt.cli, which imports radt.warm, no circle)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

# Each source folder and the package it is installed as (pyproject.toml's package-dir).
FOLDERS = {"radt": "radt", "listeners": "radt.listeners", "frontend": "radt.frontend"}


def module_names(root: Path = REPO, folders: dict[str, str] = FOLDERS) -> dict[str, Path]:
    """Every product module by its installed name; a package's ``__init__`` is the package."""
    found = {}
    for folder, package in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _not_imported(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``), or ``if __name__ == "__main__":``:
    a body that importing the module does not run."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _imports(tree: ast.AST):
    """Every Import and ImportFrom node, at any depth, except under ``if TYPE_CHECKING:`` or
    ``if __name__ == "__main__":``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _not_imported(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules that module ``name`` (the file ``path``) imports: for ``from X import
    y`` the module ``X.y`` where there is one, else ``X``; relative imports resolved."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            parts = name.split(".")
            keep = len(parts) - node.level + (1 if is_package else 0)
            base = ".".join([*parts[:keep], *([base] if base else [])])
        for alias in node.names:
            full = f"{base}.{alias.name}"
            targets.add(full if full in known else base)
    return {target for target in targets if target in known and target != name}


def module_graph(root: Path = REPO, folders: dict[str, str] = FOLDERS) -> dict[str, set[str]]:
    """Each product module → the product modules it imports."""
    modules = module_names(root, folders)
    known = set(modules)
    return {name: imported_modules(name, path, known) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself), each sorted: Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return sorted(found)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# docs/architecture.md, "Layers": (importer, imported, exceptions, why). A module inside the
# first package imports nothing inside the second, except the modules named.
RULES = [
    ("radt.record", "radt.launch", (), "recording is below launching"),
    ("radt.record", "radt.analysis", (), "recording never imports the analysis"),
    ("radt.record", "radt.plans", (), "recording is below the plans"),
    ("radt.launch", "radt.plans", (), "a plan runs commands through launch, not the reverse"),
    ("radt.launch", "radt.slurm", (), "Slurm dispatches plans, launch knows only its job"),
    ("radt.analysis", "radt.launch", (), "the analysis reads MLflow, never the launcher"),
    ("radt.analysis", "radt.record", (), "the analysis reads MLflow, never the recorder"),
    ("radt.analysis", "radt.plans", (), "the analysis reads MLflow, never the plans"),
    ("radt.analysis", "radt.frontend", (), "the UI is above the analysis"),
    ("radt.analysis", "radt.cli", (), "the command line is above the analysis"),
    ("radt.listeners", "radt", ("radt.listener", "radt.quantities"), "a listener's kit only"),
    ("radt.run_api", "radt", ("radt.listener",), "the run API imports no more of radT"),
    ("radt.frontend", "radt.launch", (), "the UI reads runs only"),
    ("radt.frontend", "radt.record", (), "the UI reads runs only"),
]
"""Lower layers first: recording, launching, the plans and Slurm above them; the analysis
beside them, reading MLflow only; the UI and the command line on top."""


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    """One line per arrow that a rule forbids: ``importer → imported (why)``."""
    broken = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        for source, target, allowed, why in RULES:
            if not _inside(importer, source) or not _inside(imported, target):
                continue
            if _inside(imported, source):
                continue  # within its own package (radt.listeners inside radt)
            if any(_inside(imported, ok) for ok in allowed):
                continue
            broken.append(f"{importer} → {imported} ({why})")
    return broken


def test_the_checker_finds_a_circle(tmp_path):
    """The test below could fail: a small package with a circle through a deferred import, a
    relative import and a package ``__init__``, and arrows that importing does not follow (under
    TYPE_CHECKING, and a program's ``__main__`` block)."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import f\n")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n    return b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("from .. import c\n")
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n"
    )
    (package / "e.py").write_text(
        "from pkg.d import x\nif __name__ == '__main__':\n    import pkg.f\nelse:\n    import pkg\n"
    )
    (package / "f.py").write_text("import pkg.e\n")
    graph = module_graph(tmp_path, {"pkg": "pkg"})
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.d"] == set()
    assert graph["pkg.e"] == {"pkg.d", "pkg"} and graph["pkg.f"] == {"pkg.e"}
    assert circles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    assert circles({"x": {"x"}, "y": set()}) == [["x"]]


def test_the_checker_finds_a_broken_rule():
    """The layering check could fail: an arrow from recording to launching is named."""
    graph = {"radt.record.sync": {"radt.launch.group", "radt.tags"}, "radt.listeners.x": set()}
    graph["radt.listeners.nvml"] = {"radt.listener", "radt.listeners._gpus", "radt.tracking"}
    assert broken_rules(graph) == [
        "radt.listeners.nvml → radt.tracking (a listener's kit only)",
        "radt.record.sync → radt.launch.group (recording is below launching)",
    ]


def test_the_graph_sees_the_product_code():
    """The graph is the real one: the modules of the three folders, and arrows known to exist."""
    graph = module_graph()
    assert {"radt", "radt.cli", "radt.listeners.nvml", "radt.frontend.pages.runs"} <= set(graph)
    assert "radt.listener" in graph["radt.listeners.nvml"]
    assert "radt.launch.launcher" in graph["radt.cli"]  # a function-level import in cli.py


def test_no_import_circles():
    """No module imports, however indirectly, a module that imports it."""
    found = circles(module_graph())
    assert not found, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_the_layers_hold():
    """Every rule of docs/architecture.md's "Layers" holds."""
    broken = broken_rules(module_graph())
    assert not broken, "arrows against the layers:\n" + "\n".join(broken)
