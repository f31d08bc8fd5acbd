"""The truth matrix's cases: known-timeline trainings run through every way a run starts, and
the figures they must give, computed by hand from each script's own clock readings.

Shared by ``tests/test_truth.py`` (one test per path × figure) and
``benchmarks/truth_matrix.py`` (the same cases, printed as a table). Every GPU is the fake
``pynvml`` (tests/fakes/pynvml) drawing a constant :data:`POWER_W` watts, its energy counter the
exact integral of that draw, so the GPU energy over any interval is ``POWER_W`` × its length.

A timeline script times each batch with ``sleep`` (a slower first epoch, a smaller last batch
per epoch, a tail after each epoch's last batch, an evaluation loop before the epoch mark) and
writes its own clock readings to a JSON file: when each count reached radT and what the count
then was, each epoch mark, a ``start_window()``, each phase interval. The expected figures are
docs/analysis.md's definitions applied to those readings:

- client window: from the first epoch's mark (``--manual``: from ``start_window()``) to the
  last counted example; examples: the counter's growth over it, the counter linear between
  the script's readings;
- provider window: the overlap of its clients' windows, the examples each client counted in it;
- energy: ``POWER_W`` × the window (or the phase's time);
- slowdown and normalised figures: against the plan's or study's lone baseline run.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from conftest import FAKES, FIXTURES, Workspace, new_workspace

POWER_W = 200.0
"""The stand-in GPU's constant draw."""

ONE = 1.0
"""Tolerance (%) of a figure of one process's timeline."""
TWO = 2.0
"""Tolerance (%) where two processes' start jitter enters (provider windows, baselines)."""

TIMELINE = r'''
"""A training whose batches take known times (sleep); its clock readings: truth-<run id>.json"""
import argparse, json, os, time
import radt

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batches", type=int, default=8)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--last", type=int, default=3)
p.add_argument("--step", type=float, default=0.08)
p.add_argument("--first", type=float, default=0.16)
p.add_argument("--tail", type=float, default=0.2)
p.add_argument("--evals", type=int, default=2)
p.add_argument("--manual-at", type=int, default=-1)
a = p.parse_args()
out = {"start": time.time(), "examples": [], "epochs": [], "start_window": None, "phases": []}
count = 0
time.sleep(0.3)  # start-up
for e in range(a.epochs):
    for b in range(a.batches):
        n = a.last if b == a.batches - 1 else a.batch  # the last batch is smaller
        with radt.phase("train"):
            t0 = time.time()
            time.sleep(a.first if e == 0 else a.step)  # the first epoch is slow
            radt.log_examples(n)
            t1 = time.time()
        out["phases"].append(["train", t0, t1])
        count += n
        out["examples"].append([t1, count])
        if e * a.batches + b == a.manual_at:
            radt.run.RADTBenchmark().__enter__()  # --manual: the window starts here
            out["start_window"] = time.time()
    time.sleep(a.tail)  # a tail after the epoch's last batch: no examples
    with radt.phase("eval"):
        t0 = time.time()
        for _ in range(a.evals):
            time.sleep(a.step)
        t1 = time.time()
    out["phases"].append(["eval", t0, t1])
    radt.log_epoch(e)
    out["epochs"].append(time.time())
time.sleep(0.2)
with open("truth-%s.json" % os.environ.get("MLFLOW_RUN_ID", "none"), "w") as f:
    json.dump(out, f)
'''

AUTOLOG = r'''
"""An unmodified torch loop (radt --autolog counts it): known batch times, its readings to
truth-<run id>.json: each optimizer step (where autolog counts) and each training loader's end."""
import json, os, time
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(59, 4), torch.randn(59, 1)), batch_size=8)
valid = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
out = {"start": time.time(), "examples": [], "epochs": [], "start_window": None, "phases": []}
count = 0
time.sleep(0.3)
for epoch in range(3):
    for x, y in train:  # 7 batches of 8, the last of 3
        time.sleep(0.16 if epoch == 0 else 0.08)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        count += len(x)
        out["examples"].append([time.time(), count])
        opt.zero_grad()
    out["epochs"].append(time.time())  # the loader ran out: autolog's epoch mark
    time.sleep(0.2)  # a tail
    with torch.no_grad():
        for x, y in valid:  # evaluation: no gradients, not counted
            time.sleep(0.08)
            model(x)
time.sleep(0.2)
with open("truth-%s.json" % os.environ.get("MLFLOW_RUN_ID", "none"), "w") as f:
    json.dump(out, f)
'''

HF = r'''
"""A Hugging Face Trainer (a tiny BERT from its config, nothing downloaded) whose forward
sleeps: 44 examples a epoch in batches of 8 (the last of 4); its readings to truth-<run id>.json."""
import json, os, time
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)
from radt.autologging.transformers import RadtCallback

torch.manual_seed(0)


class Tokens(Dataset):
    def __len__(self):
        return 44

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (8,), generator=g), "labels": i % 2}


class Slow(BertForSequenceClassification):
    def forward(self, *args, **kwargs):
        if self.training:
            time.sleep(0.16 if state["epoch"] == 0 else 0.08)
        return super().forward(*args, **kwargs)


out = {"start": time.time(), "examples": [], "epochs": [], "start_window": None, "phases": []}
state = {"epoch": 0, "count": 0}


class Readings(TrainerCallback):
    def on_step_end(self, args, st, control, **kw):
        state["count"] += state.pop("batch", 0)
        out["examples"].append([time.time(), state["count"]])

    def on_epoch_end(self, args, st, control, **kw):
        time.sleep(0.2)  # a tail after the epoch's last batch, before radT's callback marks it
        out["epochs"].append(time.time())  # radT's callback, next, marks the epoch
        state["epoch"] += 1


class Batches(Trainer):
    def training_step(self, model, inputs, *args, **kwargs):
        state["batch"] = len(inputs["input_ids"])
        return super().training_step(model, inputs, *args, **kwargs)


config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16)
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, num_train_epochs=3,
                         report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                         dataloader_num_workers=0, eval_strategy="epoch",
                         remove_unused_columns=False, per_device_eval_batch_size=8)
trainer = Batches(model=Slow(config), args=args, train_dataset=Tokens(), eval_dataset=Tokens(),
                  callbacks=[Readings(), RadtCallback()])
time.sleep(0.3)
trainer.train()
time.sleep(0.2)
with open("truth-%s.json" % os.environ.get("MLFLOW_RUN_ID", "none"), "w") as f:
    json.dump(out, f)
'''

LIGHTNING = r'''
"""A Lightning Trainer whose training step sleeps: 44 examples a epoch in batches of 8 (the last
of 4), a validation loop each epoch; its readings to truth-<run id>.json."""
import json, os, time
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from radt.autologging.lightning import RadtCallback

out = {"start": time.time(), "examples": [], "epochs": [], "start_window": None, "phases": []}


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.count = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.16 if self.current_epoch == 0 else 0.08)
        self.count += len(x)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        out["examples"].append([time.time(), self.count])

    def validation_step(self, batch, batch_idx):
        time.sleep(0.08)

    def on_train_epoch_end(self):
        out["epochs"].append(time.time())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(44, 4), torch.randn(44, 1)), batch_size=8)
valid = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=8)
trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0, callbacks=[RadtCallback()])
time.sleep(0.3)
trainer.fit(Tiny(), train, valid)
time.sleep(0.2)
with open("truth-%s.json" % os.environ.get("MLFLOW_RUN_ID", "none"), "w") as f:
    json.dump(out, f)
'''


# --------------------------------------------------------------------------- the timeline


@dataclass
class Timeline:
    """One process's own readings: ``examples`` [(t, count)], ``epochs`` [t], ``start_window``."""

    examples: list[tuple[float, int]]
    epochs: list[float]
    start_window: float | None
    phases: list[tuple[str, float, float]]

    @classmethod
    def of(cls, ws: Workspace, run_id: str) -> Timeline:
        """The readings of the script that ran as ``run_id`` (its ``MLFLOW_RUN_ID``)."""
        return cls.read(ws.root / f"truth-{run_id}.json")

    @classmethod
    def read(cls, path: Path) -> Timeline:
        data = json.loads(path.read_text())
        return cls(
            [tuple(p) for p in data["examples"]],
            data["epochs"],
            data["start_window"],
            [tuple(p) for p in data["phases"]],
        )

    def counter(self, t: float) -> float:
        """The count at ``t``: linear between the script's readings (counts and marks)."""
        points = sorted(
            self.examples
            + [(e, self.count_by(e)) for e in self.epochs]
            + ([(self.start_window, self.count_by(self.start_window))] if self.start_window else [])
        )
        times = [p[0] for p in points]
        i = bisect.bisect_right(times, t)
        if i == 0:
            return 0.0
        if i == len(points):
            return float(points[-1][1])
        (t0, c0), (t1, c1) = points[i - 1], points[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else float(c1)

    def count_by(self, t: float) -> int:
        """The count the script had reached at ``t``."""
        done = [c for when, c in self.examples if when <= t]
        return done[-1] if done else 0

    @property
    def total(self) -> int:
        return self.examples[-1][1]

    def window(self, warmup: str = "first_epoch") -> tuple[float, float]:
        """The client window: its start by ``warmup``, its end at the last counted example."""
        start = self.start_window if warmup == "start_window" else self.epochs[0]
        return start, self.examples[-1][0]

    def phase_time_s(self, name: str) -> float:
        return sum(end - start for phase, start, end in self.phases if phase == name)


def client_figures(timeline: Timeline, warmup: str = "first_epoch", energy: bool = True) -> dict:
    """A client's (or lone run's) figures from its timeline, by docs/analysis.md."""
    start, end = timeline.window(warmup)
    window_s = end - start
    examples = timeline.total - timeline.counter(start)
    got = {
        "window_s": window_s,
        "examples": examples,
        "examples_per_s": examples / window_s,
        "time_per_example_ns": 1e9 * window_s / examples,
    }
    if energy:
        got["energy_j"] = POWER_W * window_s
        got["energy_per_example_nj"] = 1e9 * POWER_W * window_s / examples
        got["power_mean_w"] = POWER_W
    return got


def provider_figures(timelines: list[Timeline], gpus: int = 1) -> dict:
    """A workload's (a job's) figures: over the overlap of its clients' (nodes') windows;
    ``gpus`` stand-in GPUs in all."""
    windows = [t.window() for t in timelines]
    start, end = max(w[0] for w in windows), min(w[1] for w in windows)
    window_s = end - start
    examples = sum(t.counter(end) - t.counter(start) for t in timelines)
    return {
        "window_s": window_s,
        "examples": examples,
        "examples_per_s": examples / window_s,
        "time_per_example_ns": 1e9 * window_s / examples,
        "energy_j": gpus * POWER_W * window_s,
        "energy_per_example_nj": 1e9 * gpus * POWER_W * window_s / examples,
        "per_client": [t.counter(end) - t.counter(start) for t in timelines],
    }


# --------------------------------------------------------------------------- a recorded case


@dataclass
class Cell:
    """One figure of one path: what it must be, what radT gave, within what tolerance (%)."""

    expected: float
    measured: float
    tolerance_pct: float
    note: str = ""
    """The row's ``window_note``: why radT left a figure out, if it did."""

    @property
    def error_pct(self) -> float:
        if self.expected == 0:
            return 0.0 if self.measured == 0 else float("inf")
        return 100.0 * (self.measured - self.expected) / self.expected

    @property
    def ok(self) -> bool:
        return abs(self.error_pct) <= self.tolerance_pct


@dataclass
class Case:
    """One path's recorded run(s) and its cells by figure; ``failure`` says why none were made."""

    path: str
    cells: dict[str, Cell] = field(default_factory=dict)
    failure: str | None = None
    skipped: str | None = None

    def add(
        self, figure: str, expected: float, measured, tolerance_pct: float = ONE, row=None
    ) -> None:
        note = "" if row is None else str(row.get("window_note") or "")
        self.cells[figure] = Cell(float(expected), float(measured), tolerance_pct, note)

    def add_figures(
        self, prefix: str, expected: dict, row, tolerance_pct: float = ONE, names=None
    ) -> None:
        """A cell per figure of ``expected`` against the summary ``row``'s column."""
        for name in names or [n for n in expected if n != "per_client"]:
            self.add(f"{prefix}{name}", expected[name], row[name], tolerance_pct, row)


def workspace(base: Path, template_db: Path) -> Workspace:
    """A store and radT home in ``base``, the stand-in GPU (fake pynvml at :data:`POWER_W`,
    one GPU) and the fake NVIDIA tools first on PATH."""
    ws = new_workspace(base, template_db, drop=("MLFLOW_", "RADT_", "FAKE_", "CUDA_"))
    data = json.loads((FIXTURES / "nvml_h100.json").read_text())
    gpu = data["gpus"][0]
    # no start file: the GPU "idles" at POWER_W for ever, its counter the exact integral
    gpu["power_trace"] = {"start_file": str(base / "never"), "idle_w": POWER_W, "segments": []}
    data["gpus"] = [gpu]
    (base / "scenario.json").write_text(json.dumps(data))
    ws.env.update(
        PATH=f"{FAKES}{os.pathsep}{ws.env['PATH']}",
        PYTHONPATH=os.pathsep.join([str(FAKES / "pynvml"), ws.env.get("PYTHONPATH", "")]),
        FAKE_PYNVML_SCENARIO=str(base / "scenario.json"),
        FAKE_PYNVML_GPUS="1",
        FAKE_NVIDIA_SMI_STATE=str(base / "smi-state.json"),
        CUDA_MPS_PIPE_DIRECTORY=str(base / "default-mps"),
    )
    ws.script("timeline.py", TIMELINE)
    return ws


def ran(ws: Workspace, args: list[str], timeout: float = 600, env: dict | None = None) -> None:
    done = ws.run(args, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError(f"radt {' '.join(args)} failed: {done.stderr[-2000:]}")


def summary_rows(ws: Workspace, experiment: str = "Default"):
    import radt

    return radt.summary(experiment, tracking_uri=ws.uri, cache_dir=ws.home / "cache")


def run_row(table, **where):
    rows = table
    for column, value in where.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, f"{len(rows)} rows with {where}"
    return rows.iloc[0]


def phase_cells(case: Case, ws: Workspace, run_id: str, timeline: Timeline) -> None:
    """Each phase's time and energy (``radt.phases``) against the script's own intervals."""
    import radt

    table = radt.phases(runs=[run_id], tracking_uri=ws.uri, cache_dir=ws.home / "cache")
    for name in ("train", "eval"):
        row = run_row(table, phase=name)
        time_s = timeline.phase_time_s(name)
        case.add(f"phase {name} time_s", time_s, row["time_s"])
        case.add(f"phase {name} energy_j", POWER_W * time_s, row["energy_j"])


# --------------------------------------------------------------------------- the paths


def lone(base: Path, template_db: Path) -> Case:
    """``radt -l nvml timeline.py``: a lone run, its own provider and client."""
    ws = workspace(base, template_db)
    ran(ws, ["-l", "nvml", "timeline.py"])
    row = run_row(summary_rows(ws), level="run")
    timeline = Timeline.of(ws, row["run_id"])
    case = Case("lone")
    case.add_figures("", client_figures(timeline), row)
    case.add("slowdown", 1.0, row["slowdown"], row=row)  # its own baseline
    phase_cells(case, ws, row["run_id"], timeline)
    return case


def manual(base: Path, template_db: Path) -> Case:
    """``radt --manual``: the window starts where the script opens ``RADTBenchmark``."""
    ws = workspace(base, template_db)
    ran(ws, ["--manual", "-l", "nvml", "timeline.py", "--manual-at", "4"])
    row = run_row(summary_rows(ws), level="run")
    timeline = Timeline.of(ws, row["run_id"])
    case = Case("manual")
    case.add_figures("", client_figures(timeline, "start_window"), row)
    return case


def _script_case(name: str, script: str, args: list[str], base, template_db) -> Case:
    ws = workspace(base, template_db)
    ws.script("train.py", script)
    ran(ws, [*args, "-l", "nvml", "train.py"])
    row = run_row(summary_rows(ws), level="run")
    timeline = Timeline.of(ws, row["run_id"])
    case = Case(name)
    case.add_figures("", client_figures(timeline), row)
    return case


def autolog(base: Path, template_db: Path) -> Case:
    """``radt --autolog`` on an unmodified torch loop."""
    return _script_case("autolog", AUTOLOG, ["--autolog"], base, template_db)


def hugging_face(base: Path, template_db: Path) -> Case:
    """The Hugging Face ``Trainer`` with radT's callback."""
    return _script_case("hf", HF, [], base, template_db)


def lightning(base: Path, template_db: Path) -> Case:
    """Lightning's ``Trainer`` with radT's callback."""
    return _script_case("lightning", LIGHTNING, [], base, template_db)


def pair_cells(case: Case, ws: Workspace, table, configuration: str) -> None:
    """A collocated pair against its lone baseline: client, provider, slowdown, normalised."""
    baseline = run_row(table, level="client", configuration="none")
    alone = client_figures(Timeline.of(ws, baseline["run_id"]))
    provider_row = run_row(table, level="provider", configuration=configuration)
    clients = table[(table["level"] == "client") & (table["workload"] == provider_row["workload"])]
    timelines = []
    for _, row in clients.sort_values("letter").iterrows():
        timeline = Timeline.of(ws, row["run_id"])
        timelines.append(timeline)
        mine = client_figures(timeline, energy=False)
        letter = row["letter"]
        case.add_figures(f"client {letter} ", mine, row)
        slowdown = mine["time_per_example_ns"] / alone["time_per_example_ns"]
        case.add(f"client {letter} slowdown", slowdown, row["slowdown"], TWO, row)
        case.add(
            f"client {letter} time_per_example_norm",
            slowdown,
            row["time_per_example_norm"],
            TWO,
            row,
        )
    provider = provider_figures(timelines)
    case.add_figures("provider ", provider, provider_row, TWO)
    need_s = provider["examples"] * alone["time_per_example_ns"] / 1e9
    need_j = provider["examples"] * alone["energy_per_example_nj"] / 1e9
    case.add(
        "provider time_per_example_norm",
        provider["window_s"] / need_s,
        provider_row["time_per_example_norm"],
        TWO,
        provider_row,
    )
    case.add(
        "provider energy_per_example_norm",
        provider["energy_j"] / need_j,
        provider_row["energy_per_example_norm"],
        TWO,
        provider_row,
    )


LONGER = "--epochs 5"
"""Where two processes must overlap: five epochs, a window of about 4 s."""

PLAN = (
    "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"
    "truth, alone, , , 0, none, timeline.py, nvml, {args}\n"
    "truth, pair, , , 0, {mode}, timeline.py, nvml, {args}\n"
    "truth, pair, , , 0, {mode}, timeline.py, nvml, {args}\n"
)


def plan_pair(mode: str) -> Callable[[Path, Path], Case]:
    def record(base: Path, template_db: Path) -> Case:
        ws = workspace(base, template_db)
        (ws.root / "plan.csv").write_text(PLAN.format(mode=mode, args=LONGER))
        ran(ws, ["plan.csv"])
        case = Case(f"{mode} pair")
        pair_cells(case, ws, summary_rows(ws, "truth"), f"{mode} x2")
        return case

    record.__doc__ = f"A {mode} pair and its lone baseline from a plan CSV."
    return record


STUDY = """\
experiment: truth
file: timeline.py --epochs 5
listeners: nvml
devices: 0
collocation: [none, naive x2]
"""


def study(base: Path, template_db: Path) -> Case:
    """A YAML study: a lone baseline and a naive pair."""
    ws = workspace(base, template_db)
    ws.script("study.yaml", STUDY)
    ran(ws, ["study.yaml"])
    case = Case("study")
    pair_cells(case, ws, summary_rows(ws, "truth"), "naive x2")
    return case


LOADER = r'''
"""A stand-in shared loader: listens on the ports radT hands it until it is ended."""
import os, socket, time
ports = [int(os.environ["RADT_LOADER_PORT"]), int(os.environ["RADT_LOADER_ACK_PORT"])]
ports += [int(p) for p in os.environ["RADT_LOADER_HEART_PORTS"].split(",")]
socks = []
for port in ports:
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    socks.append(s)
while True:
    time.sleep(0.1)
'''

LOADER_PLAN = (
    "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Role, Params\n"
    "truth, alone, , , 0, none, timeline.py, nvml, , {args}\n"
    "truth, shared, , , 0, naive, loader.py, nvml, loader,\n"
    "truth, shared, , , 0, naive, timeline.py, nvml, , {args}\n"
    "truth, shared, , , 0, naive, timeline.py, nvml, , {args}\n"
)


def shared_loader(base: Path, template_db: Path) -> Case:
    """A naive pair fed by one shared loader (a stand-in that listens on its ports)."""
    ws = workspace(base, template_db)
    ws.script("loader.py", LOADER)
    (ws.root / "plan.csv").write_text(LOADER_PLAN.format(args=LONGER))
    ran(ws, ["plan.csv"])
    case = Case("shared loader")
    pair_cells(case, ws, summary_rows(ws, "truth"), "naive x2 + shared loader")
    return case


def slurm_study(base: Path, template_db: Path) -> Case:
    """The YAML study of :func:`study` as a Slurm job array on the tests' Slurm (one GPU)."""
    from slurmcluster import SlurmCluster, missing_reason

    reason = missing_reason()
    if reason:
        return Case("slurm study", skipped=reason)
    ws = workspace(base, template_db)
    ws.script("study.yaml", STUDY)
    with SlurmCluster(gpus=1) as cluster:
        ws.env.update(cluster.client_env())
        for name in [n for n in ws.env if n.startswith("SLURM_") and n != "SLURM_CONF"]:
            del ws.env[name]
        try:
            ran(ws, ["study.yaml", "--slurm"])
        finally:
            cluster.cancel_all()
    case = Case("slurm study")
    pair_cells(case, ws, summary_rows(ws, "truth"), "naive x2")
    return case


def group(base: Path, template_db: Path) -> Case:
    """Two nodes of one group (``--group``) on this host, and a lone run of the same Job."""
    import subprocess
    import uuid

    ws = workspace(base, template_db)
    ran(ws, ["-e", "truth", "-l", "nvml", "timeline.py", *LONGER.split()])
    name = f"truth-{uuid.uuid4().hex[:8]}"
    nodes = []
    for rank, node in enumerate("ab"):
        env = {
            **ws.env,
            "RADT_NODE": node,
            "RADT_NODE_RANK": str(rank),
            "RADT_NODES": "2",
        }
        args = ["-e", "truth", "-l", "nvml", "--group", name, "timeline.py", *LONGER.split()]
        nodes.append(
            subprocess.Popen(
                ws.argv(args),
                cwd=ws.root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in nodes:
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"a node failed: {err[-2000:]}")
    table = summary_rows(ws, "truth")
    one = Timeline.of(ws, run_row(table, level="run")["run_id"])
    a, b = (Timeline.of(ws, run_id) for run_id in table[table["level"] == "node"]["run_id"])
    case = Case("2-node group")
    job = provider_figures([a, b], gpus=2)
    row = run_row(table, level="job")
    case.add_figures("job ", job, row, TWO)
    per_gpu = job["examples_per_s"] / 2
    case.add("job gpus", 2, row["gpus"], 0.0, row)
    case.add("job examples_per_s_per_gpu", per_gpu, row["examples_per_s_per_gpu"], TWO, row)
    lone_rate = client_figures(one)["examples_per_s"]
    case.add("job scaling_efficiency", per_gpu / lone_rate, row["scaling_efficiency"], TWO, row)
    return case


PATHS: dict[str, tuple[Callable[[Path, Path], Case], tuple[str, ...]]] = {
    "lone": (lone, ()),
    "autolog": (autolog, ()),
    "manual": (manual, ("slow",)),
    "hf": (hugging_face, ("slow",)),
    "lightning": (lightning, ("slow",)),
    "naive pair": (plan_pair("naive"), ("slow",)),
    "mps pair": (plan_pair("mps:50"), ("slow",)),
    "study": (study, ("slow",)),
    "shared loader": (shared_loader, ("slow",)),
    "2-node group": (group, ("slow",)),
    "slurm study": (slurm_study, ("slow", "slurm")),
}
"""Each path: how it is recorded, and its markers."""


def record(path: str, base: Path, template_db: Path) -> Case:
    """Record ``path``'s case in ``base``; a failure to record is the case's ``failure``."""
    try:
        return PATHS[path][0](base, template_db)
    except Exception as error:  # a broken path must name itself, not hide the others
        lines = [line for line in str(error).splitlines() if line.strip()]
        return Case(path, failure=f"{type(error).__name__}: {' | '.join(lines[-3:])}"[:400])


def fresh_template(folder: Path) -> Path:
    """An empty MLflow SQLite store (as conftest's ``template_db``), for the benchmark."""
    from mlflow.tracking import MlflowClient

    path = folder / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path
