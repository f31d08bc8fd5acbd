"""radT's callback for Lightning's ``Trainer``: examples, epochs and phases.

``Trainer(..., callbacks=[RadtCallback()])`` (``radt --autolog`` adds it by itself). Each
process counts every training batch it finishes (its size: the first dimension of its first
tensor, as ``--autolog`` reads it; so an epoch's last, smaller batch counts what it holds, and
with ``accumulate_grad_batches`` every accumulated batch counts), marks each training epoch,
and times the phases ``forward`` (batch start to backward), ``backward`` and ``optimizer``
(the optimizer step to the batch's end). Its counts replace ``--autolog``'s; the script's own
``radt.log_examples`` calls replace its.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback

from radt import run_api
from radt.autologging.callbacks import BatchSizes, PhaseSteps

CALLBACK = run_api.SOURCES.index("callback")


class RadtCallback(PhaseSteps, BatchSizes, Callback):
    """Reports the Trainer's examples, epochs and phases to radT (nothing without radT)."""

    def __init__(self) -> None:
        self.counted = 0
        """The examples this process counted."""
        self._phase: run_api.phase | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Claim this process's example count."""
        run_api.claim_examples(CALLBACK)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """The batch's forward pass begins."""
        self._enter("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        """The backward pass begins."""
        self._enter("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        """The backward pass is done."""
        self._leave()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The optimizer step begins."""
        self._enter("optimizer")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """The batch is done: its examples count."""
        self._leave()
        size = self._size_of(batch, f"a {type(batch).__name__} batch")
        if size is None:
            return
        run_api.count_examples(size, CALLBACK)
        self.counted += size

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """Mark the training epoch just finished."""
        run_api.mark_epoch(trainer.current_epoch)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Send what is counted now."""
        self._leave()
        run_api.flush()
