"""radT's callback for the Hugging Face ``transformers.Trainer``: examples, epochs and phases.

``Trainer(..., callbacks=[RadtCallback()])`` (``radt --autolog`` adds it by itself). Each
process counts ``per_device_train_batch_size × gradient_accumulation_steps`` examples per
optimizer step (the effective batch of its share; the run sums its processes), marks each
epoch, and times the phases the Trainer shows: ``forward_backward`` (from the step's start to
the optimizer) and ``optimizer``. The run's window starts at the first optimizer step, where the
first examples are counted. Its counts replace ``--autolog``'s; the script's own
``radt.log_examples`` calls replace its.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from radt import run_api
from radt.integrations import PhaseSteps

CALLBACK = run_api.SOURCES.index("callback")


class RadtCallback(PhaseSteps, TrainerCallback):
    """Reports the Trainer's examples, epochs and phases to radT (nothing without radT)."""

    def __init__(self) -> None:
        self.examples_per_step = 0
        self._phase: run_api.phase | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Claim this process's example count; read the effective batch of its share."""
        self.examples_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
        run_api.claim_examples(CALLBACK)

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
        """One optimizer step: its effective batch counts."""
        self._leave()
        run_api.count_examples(self.examples_per_step, CALLBACK)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Mark the epoch just finished (0-based)."""
        run_api.mark_epoch(max(round(state.epoch or 0) - 1, 0))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Send what is counted now."""
        self._leave()
        run_api.flush()
