"""The Lightning and Hugging Face callbacks' hooks called in the order their Trainers call
them, outside radT (the fast tier's test of radt/integrations; test_autolog.py trains with both
Trainers under radT): one phase open at a time, the effective batch read from the real
arguments, and a batch without a tensor said once."""

from __future__ import annotations

import logging

import pytest
import torch


@pytest.fixture
def radt_lines(caplog):
    """The training process's radT lines (their logger does not propagate to the root)."""
    logger = logging.getLogger("radt.autologging")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def test_lightnings_hooks_open_one_phase_at_a_time_and_say_an_unreadable_batch_once(
    radt_lines,
):
    from radt.integrations.lightning import RadtCallback

    callback = RadtCallback()
    callback.on_train_start(None, None)
    opened = []
    for index, batch in enumerate([(torch.zeros(4, 3),), {"text": ["a", "b"]}, ["c"]]):
        callback.on_train_batch_start(None, None, batch, index)
        opened.append(callback._phase.name)
        callback.on_before_backward(None, None, None)
        opened.append(callback._phase.name)
        callback.on_after_backward(None, None)
        assert callback._phase is None
        callback.on_before_optimizer_step(None, None, None)
        opened.append(callback._phase.name)
        callback.on_train_batch_end(None, None, None, batch, index)
        assert callback._phase is None
    callback.on_train_end(None, None)
    assert opened == ["forward", "backward", "optimizer"] * 3
    said = [
        r.getMessage() for r in radt_lines.records if "cannot read a batch size" in r.getMessage()
    ]
    assert said == [
        "cannot read a batch size from a dict batch (no tensor in it); such batches are not counted"
    ]


def test_hugging_faces_callback_counts_the_effective_batch_of_the_real_arguments(tmp_path):
    import transformers

    from radt.integrations.transformers import RadtCallback

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        report_to=[],
    )
    state, control = transformers.TrainerState(), transformers.TrainerControl()
    callback = RadtCallback()
    callback.on_train_begin(args, state, control)
    assert callback.examples_per_step == 32
    callback.on_step_begin(args, state, control)
    assert callback._phase.name == "forward_backward"
    callback.on_step_begin(args, state, control)  # a step of several accumulated batches
    assert callback._phase.name == "forward_backward"
    callback.on_pre_optimizer_step(args, state, control)
    assert callback._phase.name == "optimizer"
    callback.on_optimizer_step(args, state, control)
    assert callback._phase is None
    callback.on_step_end(args, state, control)
    state.epoch = 1.0
    callback.on_epoch_end(args, state, control)
    callback.on_train_end(args, state, control)
    assert callback._phase is None
