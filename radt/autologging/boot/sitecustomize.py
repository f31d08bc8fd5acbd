"""radT's bootstrap for ``radt --autolog``: start :func:`radt.autologging.autolog` in every Python
process of the command, then the ``sitecustomize`` this one hides, if any.

radT puts this folder first on the command's ``PYTHONPATH`` and sets ``RADT_AUTOLOG=1``; the
processes a command starts (``torchrun``'s workers, DataLoader workers) inherit both.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    if os.environ.get("RADT_AUTOLOG") != "1":
        return
    try:
        from radt.autologging import autolog

        autolog()
    except Exception as exc:  # the command runs on, uncounted
        print(f"radt: --autolog is off in this process: {exc}", file=sys.stderr, flush=True)


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path (the one this file stands in front of)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_start()
_chain()
