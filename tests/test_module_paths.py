"""Where radT's modules are (docs/architecture.md): the callbacks' public paths import without
a warning, the old shared names with a DeprecationWarning; ``radt.autolog`` stays the function
whatever was imported first; ``radt --help`` and ``--version`` import nothing heavy; the
installed packages and their data are those in the tree."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from conftest import REPO

HEAVY = ("mlflow", "numpy", "pandas", "radt.analysis", "radt.doctor", "radt.frontend")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_the_callbacks_public_path_imports_the_callback_without_a_warning(framework, monkeypatch):
    new = pytest.importorskip(f"radt.autologging.{framework}")
    monkeypatch.delitem(sys.modules, f"radt.integrations.{framework}", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if framework == "transformers":
            from radt.integrations.transformers import RadtCallback
        else:
            from radt.integrations.lightning import RadtCallback
    assert RadtCallback is new.RadtCallback


def test_the_old_packages_shared_names_warn_and_are_the_new_ones():
    import radt.integrations
    from radt.autologging import callbacks

    with pytest.warns(DeprecationWarning, match="radt.autologging.callbacks.batch_size"):
        assert radt.integrations.batch_size is callbacks.batch_size
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        radt.integrations.nothing  # noqa: B018


def test_radt_autolog_is_the_function_whatever_was_imported_first():
    """The bootstrap imports radt.autologging before the script's ``radt.autolog()``."""
    code = (
        "import radt.autologging.callbacks\n"
        "import radt.autologging\n"
        "import radt\n"
        "print(radt.autolog.__module__, radt.autolog.__name__, callable(radt.autolog))"
    )
    done = _python(code)
    assert done.stdout.split() == ["radt.autologging", "autolog", "True"], done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_radt_help_and_version_import_no_heavy_module(argv):
    code = (
        "import contextlib, io, sys\n"
        "from radt.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        f"        code = main({argv!r})\n"
        "    except SystemExit as exc:\n"
        "        code = exc.code\n"
        f"heavy = {HEAVY!r}\n"
        "print(code, bool(out.getvalue()), sorted(m for m in heavy if m in sys.modules))"
    )
    done = _python(code)
    assert done.stdout.strip() == "0 True []", done.stderr


def test_every_package_and_the_bootstrap_are_installed():
    """pyproject.toml lists every package folder of radt/ and ships the bootstrap, which is
    where the launcher puts it on PYTHONPATH."""
    from radt.launch.launcher import AUTOLOG_BOOT

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join(("radt", *init.parent.relative_to(REPO / "radt").parts))
        for init in (REPO / "radt").rglob("__init__.py")
    }
    assert folders <= set(setuptools["packages"])
    shipped = [
        REPO / package.replace(".", "/") / pattern
        for package, patterns in setuptools["package-data"].items()
        if package.startswith("radt.") and not package.startswith("radt.frontend")
        for pattern in patterns
    ]
    assert (REPO / "radt/autologging/boot/sitecustomize.py") in shipped
    assert all(path.is_file() for path in shipped)
    assert (REPO / "radt/autologging/boot/sitecustomize.py").samefile(
        f"{AUTOLOG_BOOT}/sitecustomize.py"
    )
