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


def _inside(module: str, packages: str | tuple[str, ...]) -> bool:
    """``module`` is one of ``packages`` or inside one."""
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == p or module.startswith(p + ".") for p in packages)


HELPERS = (
    "radt.errors",
    "radt.tags",
    "radt.tools",
    "radt.placeholders",
    "radt.words",
    "radt.gpus",
    "radt.console",
    "radt.tracking",
    "radt.restclient",
    "radt.switches",
    "radt.interrupts",
    "radt.quantities",
)
"""The helpers at the bottom: each imports only other helpers."""
KIT = "radt.listener"
UI_AND_CLI = ("radt.frontend", "radt.cli", "radt.doctor", "radt.warm")

# docs/architecture.md, "Layers": (importers, only, never, why). A module inside one of the
# importers imports, outside its own package, only modules inside ``only`` (when given) and no
# module inside ``never``.
RULES = [
    (HELPERS, HELPERS, (), "a helper imports only helpers"),
    ((KIT,), HELPERS, (), "the listener kit imports only helpers"),
    (("radt.run_api",), (*HELPERS, KIT), (), "the run API imports only helpers and the kit"),
    (
        ("radt.autologging", "radt.integrations"),
        (*HELPERS, "radt.run_api", "radt.autologging"),
        (),
        "autologging and the callbacks run in the training process: helpers and the run API",
    ),
    (
        ("radt.listeners",),
        (*HELPERS, KIT, "radt.slurm.jobenv"),
        (),
        "a listener imports only the kit, helpers and its Slurm job's GPUs",
    ),
    (("radt.collocation",), HELPERS, (), "collocation imports only helpers"),
    (
        ("radt.record",),
        (*HELPERS, KIT, "radt.run_api"),
        (),
        "recording imports only helpers, the kit and the run API (never launch or analysis)",
    ),
    (
        ("radt.launch",),
        None,
        ("radt.plans", "radt.collocation", *UI_AND_CLI),
        "launching is below the plans, collocation, the UI and the command line",
    ),
    (
        ("radt.analysis",),
        None,
        ("radt.collocation", "radt.slurm", *UI_AND_CLI),
        "the analysis is below the UI and the command line, beside collocation and Slurm",
    ),
    (("radt.plans", "radt.slurm"), None, UI_AND_CLI, "plans are below the UI and command line"),
    (
        ("radt.frontend",),
        None,
        ("radt.launch", "radt.record", "radt.plans", "radt.slurm", "radt.collocation"),
        "the UI reads runs through the analysis only",
    ),
]
"""Lower layers first."""
IMPORTED_ONLY_BY = [
    ("radt.cli", ("radt.__main__",), "the command line is the top"),
    ("radt.frontend", ("radt.cli.ui",), "the UI is started by `radt ui` only"),
    ("radt.doctor", ("radt.cli.doctor",), "the probes are run by `radt doctor` only"),
    (
        "radt.autologging",
        ("radt.integrations",),
        "autologging and the callbacks are started by scripts and the bootstrap",
    ),
    ("radt.integrations", (), "the callbacks' old, deprecated paths are for scripts only"),
]
"""(module or package, the only modules outside it that import it, why)."""


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    """One line per arrow that a rule forbids: ``importer → imported (why)``."""
    broken = []
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        for importers, only, never, why in RULES:
            own = [p for p in importers if _inside(importer, p)]
            if not own or _inside(imported, own[0]):
                continue  # not this rule's, or within its own package
            if (only is not None and not _inside(imported, only)) or _inside(imported, never):
                broken.append(f"{importer} → {imported} ({why})")
        for target, by, why in IMPORTED_ONLY_BY:
            if _inside(imported, target) and not _inside(importer, (target, *by)):
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
    """The layering check could fail: an arrow from recording to launching is named, and so is
    a listener's beyond its kit, and an import of the command line."""
    graph = {
        "radt.record.sync": {"radt.launch.group", "radt.tags", "radt.record.spool"},
        "radt.listeners.nvml": {KIT, "radt.listeners._gpus", "radt.record.spool"},
        "radt.launch.launcher": {"radt.record.sync", "radt.cli"},
        "radt.__main__": {"radt.cli"},
    }
    assert broken_rules(graph) == [
        "radt.launch.launcher → radt.cli (launching is below the plans, collocation, the UI and "
        "the command line)",
        "radt.launch.launcher → radt.cli (the command line is the top)",
        "radt.listeners.nvml → radt.record.spool (a listener imports only the kit, helpers and "
        "its Slurm job's GPUs)",
        "radt.record.sync → radt.launch.group (recording imports only helpers, the kit and the "
        "run API (never launch or analysis))",
    ]


def test_the_graph_sees_the_product_code():
    """The graph is the real one: the modules of the three folders, and arrows known to exist."""
    graph = module_graph()
    assert {"radt", "radt.cli.run", "radt.listeners.nvml", "radt.frontend.pages.runs"} <= set(graph)
    assert "radt.listener" in graph["radt.listeners.nvml"]
    assert "radt.launch.launcher" in graph["radt.cli.run"]  # a function-level import in run.py
    assert "radt.cli.ui" in graph["radt.cli"]  # radt/cli/__init__.py, the subcommands' modules


def test_no_import_circles():
    """No module imports, however indirectly, a module that imports it."""
    found = circles(module_graph())
    assert not found, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_the_layers_hold():
    """Every rule of docs/architecture.md's "Layers" holds."""
    broken = broken_rules(module_graph())
    assert not broken, "arrows against the layers:\n" + "\n".join(broken)
