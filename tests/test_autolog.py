"""``radt --autolog`` and the framework callbacks, end to end: unmodified training scripts
(plain DataLoader loops, the Hugging Face Trainer on a tiny BERT made from a config, a tiny
Lightning module, DDP under torchrun) under a real radT process on a real SQLite store, each
run's examples and epochs against the count the script prints itself."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from radt.autologging import batch_size

# Every script prints "counted <its own count of training examples>" at its end.
COUNTED = re.compile(r"^counted (\d+)$", re.MULTILINE)

LOOP = """
import sys, torch
from torch.utils.data import DataLoader, Dataset, TensorDataset
import radt
torch.manual_seed(0)
HOW = sys.argv[1]
x, y = torch.randn(100, 4), torch.randn(100, 1)


class Dicts(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        return {"meta": "row", "inputs": {"x": x[i]}, "target": y[i]}


dataset = Dicts() if HOW == "dict" else TensorDataset(x, y)
train = DataLoader(dataset, batch_size=16)  # 6 batches of 16 and one of 4
val = DataLoader(TensorDataset(x[:30], y[:30]), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ACCUMULATE = 3 if HOW == "dict" else 1
seen = 0
for epoch in range(2):
    model.train()
    for i, batch in enumerate(train):
        xb, yb = (batch["inputs"]["x"], batch["target"]) if HOW == "dict" else batch
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        if (i + 1) % ACCUMULATE == 0:  # 7 batches: the last one is never stepped on
            opt.step()
            opt.zero_grad()
        seen += len(xb)
        if HOW in ("own", "count"):  # "count": its own examples, its epochs left to --autolog
            radt.log_examples(len(xb))
    if HOW == "own":
        radt.log_epoch(epoch)
    with torch.no_grad():  # evaluation, twice: under no_grad, and only under eval()
        for xb, yb in val:
            model(xb)
    model.eval()
    for xb, yb in val:
        model(xb)
print(f"counted {seen}", flush=True)
"""


def counted(output: str) -> int:
    (value,) = COUNTED.findall(output)
    return int(value)


def test_batch_size_is_the_first_dimension_of_the_first_tensor():
    import torch
    from transformers import BatchEncoding

    x = torch.zeros(5, 3)
    assert batch_size(x) == 5
    assert batch_size((torch.tensor(1.0), [x, torch.zeros(7)])) == 5
    assert batch_size({"ids": None, "nested": {"a": torch.zeros(2, 9)}, "b": x}) == 2
    assert batch_size(BatchEncoding({"input_ids": torch.zeros(3, 8, dtype=torch.long)})) == 3
    assert batch_size(["text", 1, {"no": "tensor"}]) is None


def run_autolog(workspace, script: str, *args: str, autolog: bool = True):
    done = workspace.run(
        ["-l", "none", *(["--autolog"] if autolog else []), script, *args],
        timeout=280,
        env={**workspace.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done, workspace.only_run()


def epochs(workspace, run) -> list[float]:
    history = workspace.client().get_metric_history(run.info.run_id, "epoch")
    return sorted(m.value for m in history)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tuple", "dict"])
def test_an_unmodified_dataloader_loop_is_counted(workspace, how):
    """Tuple batches stepped on every batch, dict batches with gradient accumulation (the last
    batches of an epoch, never stepped on, still count); no evaluation batch counts."""
    workspace.script("loop.py", LOOP)
    done, run = run_autolog(workspace, "loop.py", how)
    assert counted(done.stdout) == 200
    assert run.data.metrics["examples"] == 200
    assert run.data.tags["radt.examples_source"] == "autolog"
    assert epochs(workspace, run) == [0.0, 1.0]
    assert "--autolog" not in done.stderr  # nothing skipped, nothing said


@pytest.mark.slow
def test_the_scripts_own_count_and_autolog_agree_on_the_window(workspace):
    """The same training counted by its own calls (without --autolog), by --autolog, and by its
    own calls with its epochs marked by --autolog (it marks none itself): the same examples in
    all and in the window (from the first epoch's end to the last example)."""
    from radt.analysis.summary import summary

    workspace.script("loop.py", LOOP)
    runs = (("own", []), ("tuple", ["--autolog"]), ("count", ["--autolog"]))
    for how, flags in runs:
        done = workspace.run(["-l", "none", "-n", how, *flags, "loop.py", how], timeout=280)
        assert done.returncode == 0, done.stderr
    rows = summary("Default", tracking_uri=workspace.uri).set_index("run_name")
    names = [how for how, _ in runs]
    assert list(rows.loc[names, "examples_total"]) == [200, 200, 200]
    assert list(rows.loc[names, "warmup"]) == ["first_epoch"] * 3
    assert list(rows.loc[names, "examples"]) == [100, 100, 100]
    counting = next(r for r in workspace.runs() if r.info.run_name == "count")
    assert counting.data.tags["radt.examples_source"] == "script"
    assert epochs(workspace, counting) == [0.0, 1.0]  # autolog's marks: the loader ran out


OWN = """
import torch, radt
from torch.utils.data import DataLoader, TensorDataset
data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for xb, yb in data:
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
        radt.log_examples(len(xb) // 2)  # the script's own idea of an example: a pair
    radt.log_epoch(epoch)
print("counted 64", flush=True)
"""


@pytest.mark.slow
def test_the_scripts_own_count_wins_and_is_counted_once(workspace):
    workspace.script("own.py", OWN)
    done, run = run_autolog(workspace, "own.py")
    assert run.data.metrics["examples"] == counted(done.stdout)
    assert run.data.tags["radt.examples_source"] == "script"
    assert done.stderr.count("the script counts its own examples (radt.log_examples)") == 1
    assert epochs(workspace, run) == [0.0, 1.0]


UNREADABLE = """
import torch
from torch.utils.data import DataLoader
words = DataLoader(["a", "b", "c", "d"] * 4, batch_size=4)
model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for batch in words:
    model(torch.ones(len(batch), 1)).sum().backward()
    opt.step()
print("counted 16", flush=True)
"""


@pytest.mark.slow
def test_a_batch_it_cannot_read_is_skipped_in_one_line(workspace):
    workspace.script("words.py", UNREADABLE)
    done, run = run_autolog(workspace, "words.py")
    assert counted(done.stdout) == 16
    lines = [line for line in done.stderr.splitlines() if "cannot read a batch size" in line]
    assert lines == [
        "radt: --autolog cannot read a batch size from a list batch (no tensor in it); "
        "such batches are not counted"
    ]
    assert "Traceback" not in done.stderr
    assert "examples" not in run.data.metrics


BERT = """
import sys, torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

torch.manual_seed(0)


class Tokens(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": i % 2}


config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4,
                         gradient_accumulation_steps=2, num_train_epochs=2, report_to=[],
                         save_strategy="no", logging_strategy="no", use_cpu=True,
                         dataloader_num_workers=0)
callbacks = []
if sys.argv[1] == "callback":
    from radt.autologging.transformers import RadtCallback
    callbacks = [RadtCallback()]
trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens(),
                  callbacks=callbacks)
trainer.train()
print(f"counted {trainer.state.global_step * 4 * 2}", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["callback", "autolog"])
def test_a_hugging_face_trainer_is_counted_by_its_callback(workspace, how):
    workspace.script("bert.py", BERT)
    done, run = run_autolog(workspace, "bert.py", how, autolog=how == "autolog")
    assert counted(done.stdout) == 96  # 48 examples, 6 optimizer steps of 2 x 4, 2 epochs
    assert run.data.metrics["examples"] == 96
    assert run.data.tags["radt.examples_source"] == "callback"
    assert epochs(workspace, run) == [0.0, 1.0]
    assert "left out" not in done.stderr  # --autolog stood down before counting anything


LIGHTNING = """
import sys, torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.seen = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen += len(x)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
data = DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=8)
callbacks = []
if sys.argv[1] == "callback":
    from radt.autologging.lightning import RadtCallback
    callbacks = [RadtCallback()]
module = Tiny()
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accumulate_grad_batches=2, callbacks=callbacks)
trainer.fit(module, data)
print(f"counted {module.seen}", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["callback", "autolog"])
def test_a_lightning_trainer_is_counted_by_its_callback(workspace, how):
    workspace.script("tiny.py", LIGHTNING)
    done, run = run_autolog(workspace, "tiny.py", how, autolog=how == "autolog")
    assert counted(done.stdout) == 80
    assert run.data.metrics["examples"] == 80
    assert run.data.tags["radt.examples_source"] == "callback"
    assert epochs(workspace, run) == [0.0, 1.0]


DDP = """
import gc, os, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
size = 40 - 4 * rank  # 5 batches each, the last of rank 1 smaller: each counts its own
data = TensorDataset(torch.randn(size, 4), torch.randn(size, 1))
loader = DataLoader(data, batch_size=8)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
seen = torch.zeros(1)
for xb, yb in loader:
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    opt.step()
    opt.zero_grad()
    seen += len(xb)
dist.all_reduce(seen)
if rank == 0:
    print(f"counted {int(seen.item())}", flush=True)
del model, opt  # DDP's reducer freed before the group, not at finalization (examples/ddp_train.py)
gc.collect()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_ranks_each_count_their_own_and_the_run_sums_them(workspace):
    workspace.script("ddp.py", DDP)
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    done, run = run_autolog(
        workspace,
        "--",
        *torchrun,
        "--nproc-per-node=2",
        "--master-port=0",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=localhost:0",
        "ddp.py",
    )
    assert counted(done.stdout) == 40 + 36
    assert run.data.metrics["examples"] == 76
    assert run.data.tags["radt.examples_source"] == "autolog"


def test_the_bootstrap_runs_the_sitecustomize_it_hides(tmp_path):
    """``--autolog`` puts radT's sitecustomize first on PYTHONPATH: a user's own still runs."""
    from radt.launch.launcher import AUTOLOG_BOOT

    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    code = (
        "import os, sys, radt.autologging as a\n"
        "print(os.environ.get('OWN_SITE'), a._started, 'torch' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": f"{AUTOLOG_BOOT}:{own}", "RADT_AUTOLOG": "1", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout.split() == ["ran", "True", "False"]  # torch is not imported for it


PLAN = """\
Experiment, Workload, Name, File, Params, Listeners, Autolog
auto, 1, counted, loop.py, tuple, none, yes
auto, 2, plain, loop.py, tuple, none, -
"""


@pytest.mark.slow
def test_a_plan_rows_autolog_column_reaches_its_run(workspace):
    workspace.script("loop.py", LOOP)
    (workspace.root / "plan.csv").write_text(PLAN)
    done = workspace.run(["plan.csv"], timeout=280)
    assert done.returncode == 0, done.stderr
    runs = {run.info.run_name: run for run in workspace.runs("auto")}
    assert runs["counted"].data.metrics["examples"] == 200
    assert runs["counted"].data.tags["radt.examples_source"] == "autolog"
    assert "examples" not in runs["plain"].data.metrics
    assert "radt.examples_source" not in runs["plain"].data.tags


def test_autolog_cells_are_yes_or_no(tmp_path):
    from radt.plans.model import PlanError
    from radt.plans.read import read_plan

    (tmp_path / "loop.py").write_text("")
    plan = tmp_path / "plan.csv"
    plan.write_text("Experiment, Workload, File, Autolog\n1, 1, loop.py, Yes\n1, 2, loop.py, no\n")
    assert [row.autolog for row in read_plan(plan, cwd=tmp_path).rows] == [True, False]
    plan.write_text("Experiment, Workload, File, Autolog\n1, 1, loop.py, maybe\n")
    with pytest.raises(PlanError) as info:
        read_plan(plan, cwd=tmp_path)
    assert "line 2: Autolog 'maybe' is not yes or no" in str(info.value)


def test_a_study_with_autolog_true_writes_the_autolog_column(tmp_path):
    from radt.plans.read import read_plan
    from radt.plans.study import StudyError, read_study
    from radt.plans.studyexpand import expand
    from radt.plans.studyplan import plan_rows, plan_text

    (tmp_path / "job.py").write_text("")
    study_path = tmp_path / "study.yaml"
    study_path.write_text(
        "name: s\nfile: job.py\nautolog: true\nparameters:\n  lr:\n    values: [0.1, 0.2]\n"
    )
    study = read_study(study_path, cwd=tmp_path)
    plan = tmp_path / "plan.csv"
    plan.write_text(plan_text(study, plan_rows(study, expand(study), {}, {}, {}), searched=True))
    assert [row.autolog for row in read_plan(plan, cwd=tmp_path).rows] == [True, True]
    study_path.write_text("name: s\nfile: job.py\nautolog: sometimes\n")
    with pytest.raises(StudyError) as info:
        read_study(study_path, cwd=tmp_path)
    assert "autolog" in str(info.value) and "'sometimes' is not true or false" in str(info.value)


def test_a_new_source_replaces_the_count_of_the_one_before_it():
    """radT's side: a process's ``source`` record restarts its count; the run's source is the
    highest-ranked of the processes that counted; a bad source record is malformed."""
    import socket
    import uuid

    from radt.record.events import EXAMPLES_KEY, EventReceiver

    got: list = []
    receiver = EventReceiver(f"test-{uuid.uuid4().hex}", got.extend, lambda message: None)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as script:
        for records in (
            b"radt1 10 1.0 source 1\nradt1 10 1.0 examples 64\n",
            b"radt1 11 1.5 source 1\nradt1 11 1.5 examples 10\n",
            b"radt1 10 2.0 source 3\nradt1 10 2.0 examples 32\n",
            b"radt1 12 2.5 source 2\n",  # a process that never counted
            b"radt1 10 3.0 source 4\nradt1 10 3.0 source 1.5\n",
        ):
            script.sendto(records, "\0" + receiver.variable[1:])
    receiver.close()
    assert [(s.timestamp, s.value) for s in got if s.key == EXAMPLES_KEY] == [
        (1.0, 64.0),
        (1.5, 74.0),
        (2.0, 42.0),
    ]
    assert receiver.source == "script"
    assert receiver.malformed == 2
