"""The Lightning and Hugging Face callbacks' hooks called in the order their Trainers call
them, outside radT (the fast tier's test of radt/autologging; test_autolog.py trains with both
Trainers under radT): one phase open at a time, the examples each real Trainer trained on
counted (an epoch's last, smaller batch, and accumulated batches, included), and a batch
without a tensor said once."""

from __future__ import annotations

import logging

import pytest
import torch


@pytest.fixture
def radt_lines(caplog):
    """The training process's radT lines (their logger does not propagate to the root)."""
    logger = logging.getLogger("radt.autologging.callbacks")
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)


def test_lightnings_hooks_open_one_phase_at_a_time_and_say_an_unreadable_batch_once(
    radt_lines,
):
    from radt.autologging.lightning import RadtCallback

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


def test_hugging_faces_hooks_open_one_phase_at_a_time(tmp_path):
    import transformers

    from radt.autologging.transformers import RadtCallback

    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        report_to=[],
    )
    state, control = transformers.TrainerState(), transformers.TrainerControl()
    callback = RadtCallback()
    model = torch.nn.Linear(3, 1)
    callback.on_train_begin(args, state, control, model=model)
    callback.on_step_begin(args, state, control)
    assert callback._phase.name == "forward_backward"
    model(torch.zeros(5, 3))
    callback.on_step_begin(args, state, control)  # a step of several accumulated batches
    assert callback._phase.name == "forward_backward"
    model(torch.zeros(2, 3))
    with torch.no_grad():
        model(torch.zeros(7, 3))  # not training: not counted
    callback.on_pre_optimizer_step(args, state, control)
    assert callback._phase.name == "optimizer"
    callback.on_optimizer_step(args, state, control)
    assert callback._phase is None
    callback.on_step_end(args, state, control)
    assert callback.counted == 5 + 2  # the batches the model saw, not 8 x 4
    state.epoch = 1.0
    callback.on_epoch_end(args, state, control)
    callback.on_train_end(args, state, control)
    assert callback._phase is None
    model(torch.zeros(4, 3))  # after training: the hook is gone
    assert callback.counted == 7


SAMPLES = 500
"""Issue 29: 500 examples in batches of 8 are 63 batches an epoch, the last of 4."""


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 4])
def test_hugging_faces_trainer_counts_the_examples_it_trained_on(tmp_path, accumulation):
    """A real ``Trainer`` on a tiny BERT built from its config: 500 examples x 2 epochs count
    1,000, with the last batch of 4 and, with 4 accumulated batches, the last step of 3
    batches (8 + 8 + 4 examples); the evaluation after each epoch counts nothing.
    Per-step nominal counting said 2 x 16 x 8 x 4 = 1,024."""
    import transformers
    from torch.utils.data import Dataset

    from radt.autologging.transformers import RadtCallback

    class Tokens(Dataset):
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            ids = torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": i % 2}

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=accumulation,
        num_train_epochs=2,
        eval_strategy="epoch",
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
    )
    callback = RadtCallback()
    trainer = transformers.Trainer(
        model=transformers.BertForSequenceClassification(config),
        args=args,
        train_dataset=Tokens(SAMPLES),
        eval_dataset=Tokens(24),
        callbacks=[callback],
    )
    trainer.train()
    assert trainer.state.global_step == 2 * (63 if accumulation == 1 else 16)
    assert callback.counted == 2 * SAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("accumulation", [1, 4])
def test_lightnings_trainer_counts_the_examples_it_trained_on(accumulation):
    """A real Lightning ``Trainer``: 500 examples x 2 epochs in batches of 8 (the last of 4),
    with and without accumulating 4 batches per optimizer step, count 1,000."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from radt.autologging.lightning import RadtCallback

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(SAMPLES, 4), torch.randn(SAMPLES, 1)), batch_size=8)
    callback = RadtCallback()
    trainer = L.Trainer(
        max_epochs=2,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=accumulation,
        callbacks=[callback],
    )
    trainer.fit(Tiny(), data)
    assert callback.counted == 2 * SAMPLES
