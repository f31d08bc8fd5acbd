"""radT's callback for the Hugging Face ``transformers.Trainer``: examples, epochs and phases.

``Trainer(..., callbacks=[RadtCallback()])`` (``radt --autolog`` adds it by itself). Each
process counts the examples actually in the batches it trains on, sent once per optimizer step
(the run sums its processes), marks each epoch, and times the phases the Trainer shows:
``forward_backward`` (from the step's start to the optimizer) and ``optimizer``. The run's
window starts at the first optimizer step, where the first examples are counted. Its counts
replace ``--autolog``'s; the script's own ``radt.log_examples`` calls replace its.

**Counting the real batch.** The Trainer's hooks never see a batch (``on_step_end`` gets the
arguments and the state only), and ``per_device_train_batch_size × gradient_accumulation_steps``
per step over-counts an epoch's last, smaller batch and its shorter last accumulation (500
examples in batches of 8 are 63 batches, the last of 4). So when training begins the callback
puts a forward pre-hook on the model the Trainer hands its callbacks: each forward of the model
in training mode with gradients on (one per micro-batch; not evaluation, which runs in eval mode
under ``no_grad``) adds the first dimension of the first tensor of its inputs (``input_ids``
…, as ``--autolog`` reads a batch), and ``on_step_end`` sends what the step's micro-batches
added. This counts what the model trained on, whatever the data loader (a resumed epoch's
skipped batches are not counted; accelerate's ``even_batches`` padding of the last batch is,
as the model trains on it). A ``compute_loss`` that calls the model more than once per batch
with gradients counts each call; the callback cannot tell those apart. The hook is removed when
training ends.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from radt import run_api
from radt.autologging.callbacks import BatchSizes, PhaseSteps, _say

CALLBACK = run_api.SOURCES.index("callback")


class RadtCallback(PhaseSteps, BatchSizes, TrainerCallback):
    """Reports the Trainer's examples, epochs and phases to radT (nothing without radT)."""

    def __init__(self) -> None:
        self.counted = 0
        """The examples this process counted (sent at each optimizer step)."""
        self._pending = 0
        self._hook: Any = None
        self._phase: run_api.phase | None = None

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any
    ) -> None:
        """Claim this process's example count; watch the model's training forwards."""
        run_api.claim_examples(CALLBACK)
        self._unhook()
        self._pending = 0
        if model is None or not hasattr(model, "register_forward_pre_hook"):
            _say("the Trainer gave its callbacks no model: its examples are not counted")
            return
        self._hook = model.register_forward_pre_hook(self._forward, with_kwargs=True)

    def _forward(self, module: Any, args: tuple, kwargs: dict) -> None:
        """A forward of the model: in training with gradients, its batch counts."""
        import torch

        if not module.training or not torch.is_grad_enabled():
            return
        size = self._size_of((args, kwargs), f"the inputs of {type(module).__name__}")
        if size is None:
            return
        self._pending += size

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The step's forward and backward passes begin."""
        if self._phase is None:
            self._enter("forward_backward")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Forward and backward are done; the optimizer runs."""
        self._enter("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer is done."""
        self._leave()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One optimizer step: the examples of its micro-batches count."""
        self._leave()
        if self._pending:
            run_api.count_examples(self._pending, CALLBACK)
            self.counted += self._pending
            self._pending = 0

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Mark the epoch just finished (0-based)."""
        run_api.mark_epoch(max(round(state.epoch or 0) - 1, 0))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Send what is counted now; stop watching the model."""
        self._leave()
        self._unhook()
        run_api.flush()

    def _unhook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
