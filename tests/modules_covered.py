"""Which product modules a test run exercised: reads the coverage data that `make
coverage-fast` leaves (the fast tier under coverage, radT's own child processes included)
and prints one line per module of radt/, listeners/ and frontend/; exits 1 naming those
that no test exercised.

A module counts as exercised when a line inside one of its functions ran (importing it
runs only its top level); a module without functions counts when it was imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import coverage

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("radt", "listeners", "frontend")
# Run only where coverage cannot follow: a child started with an environment of its own.
UNFOLLOWED = {
    "radt/autologging/boot/sitecustomize.py": "test_autolog.py::"
    "test_the_bootstrap_runs_the_sitecustomize_it_hides",
}


def body_lines(path: Path) -> set[int]:
    """The line numbers of the statements inside the file's functions and methods."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or 0) + 1))
    return lines


def main() -> int:
    data = coverage.Coverage(data_file=str(REPO / ".coverage")).get_data()
    data.read()
    measured = {Path(name).resolve(): set(data.lines(name) or ()) for name in data.measured_files()}
    missing = []
    for path in sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py")):
        ran = measured.get(path.resolve())
        inside = body_lines(path)
        name = str(path.relative_to(REPO))
        if name in UNFOLLOWED:
            state = f"run by {UNFOLLOWED[name]} (outside coverage's reach)"
        elif ran is None:
            state = "not imported"
        elif inside and not ran & inside:
            state = "imported only"
        elif not inside:
            state = "imported (no functions)"
        else:
            state = f"{len(ran & inside)} lines in functions ran"
        if state in ("not imported", "imported only"):
            missing.append(name)
        print(f"{name}  {state}")
    if missing:
        print(f"not exercised by these tests: {', '.join(missing)}", file=sys.stderr)
        return 1
    print("every product module was exercised")
    return 0


if __name__ == "__main__":
    sys.exit(main())
