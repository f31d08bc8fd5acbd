"""``radt --autolog``: count the examples, steps and epochs of an unmodified PyTorch training.

:func:`autolog` (started in every Python process of the command by radT's bootstrap,
``radt/autologging/boot/sitecustomize.py``, when ``RADT_AUTOLOG=1``; or called by a script)
reports through the run API (:mod:`radt.run_api`), so nothing changes downstream:

- a batch handed out by a ``torch.utils.data.DataLoader`` iterator while gradients are on is
  held, with its size (the first dimension of the first tensor in it, through tuples, lists
  and mappings), until an optimizer step (``torch.optim.Optimizer.step``, through torch's own
  global step hook) counts every batch held since the last one: gradient accumulation counts
  each batch once, and an evaluation loader (under ``torch.no_grad()``, or with no step while
  it runs) counts nothing;
- a DataLoader iterator that ran out after a step in its life ends an epoch (its last held
  batches are counted, then the epoch is marked), unless the script marks its own epochs
  (``radt.log_epoch``) or a framework callback marks them: also when the script counts its
  examples itself (``radt.log_examples``), so that its warm-up can end at the first epoch;
- a Hugging Face ``transformers.Trainer`` or a Lightning ``Trainer`` made in the process gets
  radT's callback (:mod:`radt.autologging.transformers`, :mod:`radt.autologging.lightning`),
  which then counts instead.

The script's own ``radt.log_examples`` calls win over all of this (said in one line). A batch
whose size cannot be read is skipped, said once; nothing here raises into the training.
Without torch in the process nothing is installed until torch is imported.
"""

from __future__ import annotations

import importlib.abc
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from radt import run_api
from radt.autologging.callbacks import _say, batch_size

logger = logging.getLogger(__name__)

AUTOLOG = run_api.SOURCES.index("autolog")
CALLBACK = run_api.SOURCES.index("callback")
_lock = threading.Lock()
_started = False


def autolog() -> None:
    """Count this process's examples, steps and epochs from torch itself (safe to call twice).

    Hooks into torch at once when it is loaded, otherwise when it is imported; a Hugging Face
    or Lightning ``Trainer`` made afterwards gets radT's callback.
    """
    global _started
    with _lock:
        if _started:
            return
        _started = True
    hooks: dict[str, Callable[[ModuleType], None]] = {
        "torch": lambda _: _install_torch(),
        "transformers.trainer": _patch_transformers,
        "lightning.pytorch.trainer.trainer": _patch_lightning,
        "pytorch_lightning.trainer.trainer": _patch_lightning,
    }
    for name, hook in list(hooks.items()):
        module = sys.modules.get(name)
        if module is not None:
            del hooks[name]
            _guarded(hook, module)
    if hooks:
        sys.meta_path.insert(0, _AfterImport(hooks))


def _guarded(hook: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as exc:  # the training goes on, uncounted
        _say(f"--autolog cannot hook into {module.__name__}: {exc}")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a hook right after one of the named modules is first imported."""

    def __init__(self, hooks: dict[str, Callable[[ModuleType], None]]) -> None:
        self.hooks = hooks

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        """The module's ordinary spec, its loader made to run the hook afterwards."""
        if name not in self.hooks:
            return None
        hook = self.hooks.pop(name)
        if not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        execute = getattr(loader, "exec_module", None)
        if execute is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _guarded(hook, module)

        loader.exec_module = exec_module  # type: ignore[union-attr]  # this module's loader only
        return spec


# --------------------------------------------------------------------------- torch


class _Held:
    """Batches handed out and not counted yet, by DataLoader iterator (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[Any, int] = {}
        self.trained: set[int] = set()
        """Iterators (their ids) that saw an optimizer step while handing out batches."""
        self.epochs = 0
        self.unreadable_said = False

    def reset(self) -> None:
        """In a forked child: nothing held from the parent."""
        self.lock = threading.Lock()
        self.batches = {}
        self.trained = set()
        self.epochs = 0


_held = _Held()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_held.reset)


def _install_torch() -> None:
    """Wrap the DataLoader iterators' ``__next__`` and add a global optimizer step hook."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    if getattr(_BaseDataLoaderIter.__next__, "_radt", False):
        return
    original = _BaseDataLoaderIter.__next__
    grad_enabled = torch.is_grad_enabled

    def __next__(self: Any) -> Any:  # noqa: N807 - the method it replaces
        try:
            batch = original(self)
        except StopIteration:
            _ran_out(self)
            raise
        if grad_enabled():
            _handed_out(self, batch)
        return batch

    __next__._radt = True  # type: ignore[attr-defined]
    _BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]
    register_optimizer_step_post_hook(_stepped)


def _handed_out(iterator: Any, batch: Any) -> None:
    try:
        size = batch_size(batch)
    except Exception:  # an odd batch type: skipped like any unreadable one
        size = None
    held = _held
    if size is None:
        if not held.unreadable_said:
            held.unreadable_said = True
            _say(
                f"--autolog cannot read a batch size from a {type(batch).__name__} batch "
                "(no tensor in it); such batches are not counted"
            )
        return
    with held.lock:
        held.batches[iterator] = held.batches.get(iterator, 0) + size


def _stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
    """An optimizer step: every batch held since the last one counts."""
    held = _held
    if not held.batches:
        return
    with held.lock:
        examples = sum(held.batches.values())
        held.trained.update(id(iterator) for iterator in held.batches)
        held.batches.clear()
    _count(examples)


def _ran_out(iterator: Any) -> None:
    """A DataLoader iterator ran out: the end of an epoch when it trained."""
    held = _held
    with held.lock:
        examples = held.batches.pop(iterator, 0)
        if id(iterator) not in held.trained:
            return
        held.trained.discard(id(iterator))
        epoch = held.epochs
        held.epochs += 1
    if examples:
        _count(examples)
    if not run_api._channel.script_epochs and run_api._channel.source != CALLBACK:
        run_api.mark_epoch(epoch)  # whoever counts, unless the script or a callback marks them


def _count(examples: int) -> None:
    try:
        run_api.count_examples(examples, AUTOLOG)
    except SystemExit:  # a batch-size probe's end (RADT_MAX_STEPS)
        raise
    except Exception as exc:
        logger.debug("autolog count failed: %s", exc)


# --------------------------------------------------------------------------- frameworks


def _patch_transformers(module: ModuleType) -> None:
    """Every ``transformers.Trainer`` made from now on gets radT's callback."""
    _patch_init(module.Trainer, "transformers")


def _patch_lightning(module: ModuleType) -> None:
    """Every Lightning ``Trainer`` made from now on gets radT's callback."""
    _patch_init(module.Trainer, "lightning" if module.__name__.startswith("lightning") else "pl")


def _patch_init(trainer: type, framework: str) -> None:
    original = trainer.__init__
    if getattr(original, "_radt", False):
        return
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the Trainer says what is wrong with its arguments itself
            original(self, *args, **kwargs)
            return
        try:
            callbacks = _with_callback(framework, bound.arguments.get("callbacks"))
        except Exception as exc:  # the Trainer is made without radT's callback
            _say(f"--autolog cannot add radT's callback to the {framework} Trainer: {exc}")
        else:
            bound.arguments["callbacks"] = callbacks
        original(*bound.args, **bound.kwargs)

    __init__._radt = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    trainer.__init__ = __init__  # type: ignore[method-assign]


def _with_callback(framework: str, callbacks: Any) -> list[Any]:
    """The Trainer's callbacks plus radT's (unless the script added one already)."""
    if framework == "transformers":
        from radt.autologging.transformers import RadtCallback
    else:
        from radt.autologging.lightning import RadtCallback
    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    callbacks = list(callbacks)
    if not any(
        callback is RadtCallback or isinstance(callback, RadtCallback) for callback in callbacks
    ):
        callbacks.append(RadtCallback())
    return callbacks
