"""Steady-state windows: the pure window arithmetic, then real recorded runs with known timelines.

The recorded runs are made the way radT makes them (``RecordedRun`` on a real
SQLite store, samples emitted through its recorder with chosen timestamps,
closed so that ``radt/samples.parquet`` and the closing figures are written),
with a constant-power GPU stand-in: ``nvml/gpu0/power_w`` constant P and an
``nvml/gpu0/energy_j`` counter from an arbitrary offset growing at P J/s. Every
expected figure below is computed by hand in the comments.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import sqlite_store

from radt.analysis.summary import (
    COLUMNS,
    NO_GPU_NOTE,
    configuration_label,
    job_of,
    loader_comparison,
    repeats,
    strip_flags,
    summary,
)
from radt.analysis.windows import (
    Timeline,
    Window,
    client_window,
    counter_energy_between,
    cpu_between,
    cpu_counter,
    energy_between,
    last_example_s,
    min_overlap_s,
    power_energy_between,
    provider_window,
    timeline,
    value_at,
)
from radt.cli.export import run_export
from radt.cli.runs import run_runs
from radt.errors import UsageError
from radt.launch.session import RecordedRun, start_run
from radt.listener import Sample

# --------------------------------------------------------------------------- pure: interpolation


def test_value_at_uses_samples_interpolates_between_and_refuses_outside():
    s, v = np.array([0.0, 1.0, 2.0]), np.array([0.0, 100.0, 400.0])
    assert value_at(s, v, 1.0) == 100.0  # on a sample: that sample
    assert value_at(s, v, 1.5) == 250.0  # between: linear
    assert math.isnan(value_at(s, v, 2.5)) and math.isnan(value_at(s, v, -0.1))
    assert value_at(s, v, 2.5, reach_s=1.0) == pytest.approx(400.0 + 300.0 * 0.5)
    assert value_at(s, v, -0.5, reach_s=1.0) == pytest.approx(-50.0)


def counter_timeline(first, last, rate, every=0.5, count0=64, epochs=(), marks=(), **extra):
    """A script that reports ``count0`` at ``first`` then ``rate`` examples/s until ``last``."""
    times = np.round(np.arange(first, last + every / 2, every), 9)
    return Timeline(
        counter_s=times,
        counter=count0 + rate * (times - first),
        epoch_s=np.asarray(epochs, float),
        mark_s=np.asarray(marks, float),
        **extra,
    )


def test_client_window_starts_at_the_first_epoch_when_two_or_more_were_reported():
    t = counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 8.0, 11.0), command_start_s=0.0)
    w = client_window(t)
    # 5 s → 11 s: 6 s, counter 432 → 1632
    assert (w.start_s, w.end_s, w.examples) == (5.0, 11.0, 1200.0)
    assert (w.basis, w.warmup, w.note) == ("examples", "first_epoch", None)
    assert w.seconds == 6.0


def test_client_window_rules_in_order():
    base = {"epochs": (5.0, 8.0, 11.0), "command_start_s": 0.0, "command_end_s": 11.5}
    # one epoch only: the first example ends the warm-up (3 s → 11 s)
    one = client_window(counter_timeline(3.0, 11.0, 200.0, epochs=(11.0,)))
    assert (one.start_s, one.examples, one.warmup) == (3.0, 1600.0, "first_example")
    # radt.start_window(): the latest mark wins over everything
    mark = client_window(counter_timeline(3.0, 11.0, 200.0, marks=(4.0, 6.0), warmup_s=1, **base))
    assert (mark.start_s, mark.examples, mark.warmup) == (6.0, 1000.0, "start_window")
    # --warmup-s 4.25: between the samples at 4.0 (264) and 4.5 (364): 314, to 1664 at 11 s
    secs = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_s=4.25, **base))
    assert (secs.start_s, secs.warmup) == (4.25, "warmup_s")
    assert secs.examples == pytest.approx(1664.0 - 314.0)
    # --warmup-epochs 2: from the second epoch mark
    two = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_epochs=2, **base))
    assert (two.start_s, two.examples, two.warmup) == (8.0, 600.0, "warmup_epochs")
    # --warmup-epochs 0: from the command's start, where nothing was counted yet
    zero = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_epochs=0, **base))
    assert (zero.start_s, zero.examples, zero.seconds) == (0.0, 1664.0, 11.0)
    # a warm-up that ends before the first example: the window starts at the first example
    early = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_s=1.0, **base))
    assert (early.start_s, early.warmup) == (3.0, "first_example")
    assert "before the first example" in early.note


def test_client_window_missing_with_the_reason():
    base = {"command_start_s": 0.0, "command_end_s": 12.0}
    far = client_window(counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 8.0), warmup_epochs=3))
    assert math.isnan(far.examples) and not far.valid
    assert far.note == "the warm-up of 3 epochs was not reached (2 reported)"
    late = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_s=20.0, **base))
    assert math.isnan(late.examples) and "lasts until the last example" in late.note
    single = client_window(counter_timeline(3.0, 3.0, 200.0))
    assert not single.valid and "no steady state" in single.note
    unknown = client_window(counter_timeline(3.0, 11.0, 200.0, warmup_s=1.0))
    assert not unknown.valid and "command's start was not recorded" in unknown.note


def test_without_examples_the_window_is_the_commands_duration():
    w = client_window(Timeline(command_start_s=100.0, command_end_s=113.0))
    assert (w.start_s, w.end_s, w.seconds, w.basis, w.warmup) == (100, 113, 13, "duration", "none")
    assert math.isnan(w.examples) and "no examples reported" in w.note
    # warm-up overrides still move the start; a counter that never counted is no counter
    w = client_window(
        Timeline(
            counter_s=np.array([105.0]),
            counter=np.array([0.0]),
            command_start_s=100.0,
            command_end_s=113.0,
            warmup_s=2.0,
        )
    )
    assert (w.start_s, w.seconds, w.basis, w.warmup) == (102.0, 11.0, "duration", "warmup_s")
    assert not client_window(Timeline()).valid


# --------------------------------------------------------------------------- pure: provider window


def test_provider_window_is_the_overlap_and_counts_each_clients_examples_inside_it():
    a = counter_timeline(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 20.0))  # window 8 → 20
    b = counter_timeline(3.0, 15.0, 50.0, count0=32, epochs=(7.0, 11.0, 15.0))  # 7 → 15
    clients = [("A", client_window(a), a), ("B", client_window(b), b)]
    w = provider_window(clients, device_interval_s=0.1)
    # 8 s → 15 s: A counts 100 × 7, B 50 × 7
    assert (w.start_s, w.end_s, w.examples, w.basis, w.warmup) == (
        8,
        15,
        1050,
        "examples",
        "overlap",
    )
    assert w.note is None


def test_provider_window_missing_when_the_clients_do_not_overlap_long_enough():
    a = counter_timeline(2.0, 10.0, 100.0, epochs=(4.0, 10.0))
    b = counter_timeline(12.0, 20.0, 100.0, epochs=(14.0, 20.0))
    apart = provider_window([("A", client_window(a), a), ("B", client_window(b), b)])
    assert not apart.valid and math.isnan(apart.examples)
    assert apart.note == "the runs' windows do not overlap in time"
    c = counter_timeline(9.5, 14.0, 100.0, epochs=(9.5, 14.0))  # overlaps A for 0.5 s
    short = provider_window([("A", client_window(a), a), ("C", client_window(c), c)], 0.1)
    assert not short.valid and "overlap for 0.5 s only, less than 1 s" in short.note
    assert min_overlap_s(0.1) == 1.0 and min_overlap_s(0.5) == 1.5 and min_overlap_s() == 1.0
    quiet = Timeline(command_start_s=0.0, command_end_s=30.0)
    mixed = provider_window([("A", client_window(a), a), ("Q", client_window(quiet), quiet)])
    assert (mixed.start_s, mixed.end_s, mixed.basis) == (4.0, 10.0, "duration")
    assert math.isnan(mixed.examples) and "run Q reports no examples" in mixed.note
    broken = provider_window([("A", client_window(a), a), ("X", Window(), Timeline())])
    assert not broken.valid and "no window for run X" in broken.note


def with_tail(t: Timeline, mark_s: float, count=None) -> Timeline:
    """``t`` with one more counter sample at ``mark_s``: the count its epoch mark repeated
    (``count``: a count the mark was the first to report, when a record's last call was not
    sent before it)."""
    last = t.counter[-1] if count is None else count
    return replace(t, counter_s=np.append(t.counter_s, mark_s), counter=np.append(t.counter, last))


def test_the_window_ends_at_the_last_example_not_at_a_later_epoch_mark():
    # Recorded before the run API stamped a count with its last call's time: the script counts
    # 200 examples/s from 3 s (64) to 11 s (1664), then spends 3 s (validation, logging, a
    # sleep) before each epoch mark, the last at 14 s, where the count 1664 was sent again.
    t = with_tail(counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 8.0, 14.0)), 14.0)
    assert last_example_s(t) == 11.0
    w = client_window(t)
    # from the first epoch mark (5 s: 464) to the last example (11 s: 1664): 1200 in 6 s
    assert (w.start_s, w.end_s, w.examples, w.warmup) == (5.0, 11.0, 1200.0, "first_epoch")
    assert w.examples / w.seconds == 200.0  # not 1200 / 9 s = 133.3
    # two epoch marks, the second after the last example: still two, so the first starts it
    two = client_window(with_tail(counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 14.0)), 14.0))
    assert (two.start_s, two.end_s, two.examples, two.warmup) == (5.0, 11.0, 1200.0, "first_epoch")
    # --warmup-epochs 2: from the second mark (8 s: 1064) to 11 s
    t2 = with_tail(counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 8.0, 14.0)), 14.0)
    later = client_window(replace(t2, warmup_epochs=2))
    assert (later.start_s, later.end_s, later.examples) == (8.0, 11.0, 600.0)
    # a last count first reported at the mark (the call's own time was never sent): the mark
    # is the first time the final count is known, so the window ends there
    late = with_tail(counter_timeline(3.0, 11.0, 200.0, epochs=(5.0, 8.0, 14.0)), 14.0, 1728)
    assert last_example_s(late) == 14.0 and client_window(late).examples == 1264.0
    # a count repeated in the middle (at 2.5 s) is no end; the last increase (4 s) is
    steps = Timeline(
        counter_s=np.array([1.0, 2.0, 2.5, 4.0, 6.0]),
        counter=np.array([10.0, 20.0, 20.0, 30.0, 30.0]),
    )
    assert last_example_s(steps) == 4.0
    assert math.isnan(last_example_s(Timeline()))
    single = Timeline(counter_s=np.array([3.0, 5.0]), counter=np.array([7.0, 7.0]))
    assert last_example_s(single) == 3.0
    # two processes: A's last count (stamped 10.0, its last call) arrives with B's count as of
    # 9.5; B's final (10.1) comes later; each repeats its own at its mark (13.0, 13.05), A's
    # before B's final reached radT: the sum dips at 13.0, and the last example is at 10.1
    ranks = Timeline(
        counter_s=np.array([9.5, 10.0, 10.1, 13.0, 13.05]),
        counter=np.array([100.0, 150.0, 200.0, 150.0, 200.0]),
    )
    assert last_example_s(ranks) == 10.1


def test_a_workloads_overlap_ends_at_its_clients_last_examples():
    # A counts 100/s to 20 s and marks its last epoch at 23 s; B counts 50/s to 15 s, marks at 18
    a = with_tail(counter_timeline(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 23.0)), 23.0)
    b = with_tail(counter_timeline(3.0, 15.0, 50.0, count0=32, epochs=(7.0, 11.0, 18.0)), 18.0)
    clients = [("A", client_window(a), a), ("B", client_window(b), b)]
    w = provider_window(clients, device_interval_s=0.1)
    # 8 s → 15 s (B's last example, not its mark at 18 s): A counts 100 × 7, B 50 × 7
    assert (w.start_s, w.end_s, w.examples) == (8, 15, 1050)


# --------------------------------------------------------------------------- pure: energy


def gpu_counter(begin, end, watts, offset, every=0.1):
    times = np.round(np.arange(begin, end + every / 2, every), 9)
    return times, offset + watts * (times - begin)


def test_energy_counter_at_the_window_bounds():
    s, j = gpu_counter(0.0, 30.0, 300.0, 5000.0)
    assert counter_energy_between(s, j, 6.0, 14.0) == pytest.approx(2400.0, abs=1e-6)
    assert counter_energy_between(s, j, 6.05, 14.03) == pytest.approx(300.0 * 7.98, abs=1e-6)
    # one sampling interval of reach beyond the samples, not more
    assert counter_energy_between(s, j, -0.05, 1.0) == pytest.approx(315.0, abs=1e-6)
    assert math.isnan(counter_energy_between(s, j, -0.5, 1.0))
    # a reset (the counter restarts from 0 at 10 s): the interval across it is not counted
    reset = np.where(s < 10.0, j, 300.0 * (s - 10.0))
    assert counter_energy_between(s, reset, 6.0, 14.0) == pytest.approx(2400.0 - 30.0, abs=1e-6)


def test_power_integrated_over_the_window_skips_gaps():
    s, _ = gpu_counter(0.0, 30.0, 300.0, 0.0)
    w = np.full_like(s, 300.0)
    assert power_energy_between(s, w, 6.0, 14.0) == pytest.approx(2400.0)
    assert power_energy_between(s, w, 6.05, 14.03) == pytest.approx(300.0 * 7.98)
    assert math.isnan(power_energy_between(s, w, 6.0, 31.0))
    hole = (s <= 8.0) | (s >= 12.0)  # no sample for 4 s: more than 5 intervals, not integrated
    assert power_energy_between(s[hole], w[hole], 6.0, 14.0) == pytest.approx(300.0 * 4)


def test_energy_between_prefers_the_counter_and_falls_back_to_power():
    s, j = gpu_counter(0.0, 30.0, 300.0, 5000.0)
    series = {
        ("nvml", "gpu0", "energy_j"): (s, j),
        ("nvml", "gpu0", "power_w"): (s, np.full_like(s, 250.0)),  # disagrees: the counter wins
        ("nvml", "gpu1", "power_w"): (s, np.full_like(s, 100.0)),  # no counter: integrated
    }
    joules, used, note = energy_between(series, 6.0, 14.0)
    assert joules == pytest.approx(2400.0 + 800.0) and note is None
    assert used == {"gpu0": ("nvml", "counter"), "gpu1": ("nvml", "integrated_power")}
    joules, _, note = energy_between(series, 6.0, 40.0)
    assert math.isnan(joules) and "gpu0, gpu1 do not cover the window" in note


# --------------------------------------------------------------------------- pure: jobs and labels


def test_cpu_counter_adds_each_samples_cpu_over_the_interval_before_it():
    # top samples at 1, 2, 3, 4 s: 100, 200, 50, 100 % of a core, its first reading at 0.5 s:
    # 0.5 × 1.0 + 1 × 2.0 + 1 × 0.5 + 1 × 1.0 core-seconds.
    times, core_s = cpu_counter(np.array([1.0, 2.0, 3.0, 4.0]), np.array([100, 200, 50, 100]), 0.5)
    assert times.tolist() == [0.5, 1.0, 2.0, 3.0, 4.0]
    assert core_s.tolist() == pytest.approx([0.0, 0.5, 2.5, 3.0, 4.0])
    # without the first reading's time, the first sample only starts the count
    _, core_s = cpu_counter(np.array([1.0, 2.0, 3.0, 4.0]), np.array([100, 200, 50, 100]))
    assert core_s.tolist() == pytest.approx([0.0, 2.0, 2.5, 3.5])


def test_cpu_between_interpolates_the_counter_at_the_window_bounds():
    series = {
        ("top", "proc", "cpu_pct"): (np.array([1.0, 2.0, 3.0, 4.0]), np.array([100, 200, 50, 100])),
        ("top", "proc", "rss_mib"): (np.array([0.5, 1.0, 2.0, 3.0, 4.0]), np.full(5, 10.0)),
    }
    # 1.5 → 2 s at 200 %, 2 → 3 s at 50 %, 3 → 3.5 s at 100 %: 1.0 + 0.5 + 0.5 core-seconds
    assert cpu_between(series, 1.5, 3.5) == (pytest.approx(2.0), None)
    # reach past the last sample: 4 → 4.5 s at 100 %
    assert cpu_between(series, 3.0, 4.5) == (pytest.approx(1.5), None)
    # two sampling intervals (2 s) of reach, one of them for jitter: 4 → 6 s at 100 %
    assert cpu_between(series, 3.0, 6.0) == (pytest.approx(3.0), None)
    used, why = cpu_between(series, 3.0, 6.5)
    assert math.isnan(used) and why == "the CPU samples (top) do not cover the window"
    used, why = cpu_between({}, 1.0, 2.0)
    assert math.isnan(used) and "the top listener did not record this run" in why


def test_job_is_the_tag_else_the_command_without_seed_only_flags():
    assert job_of({"radt.job": " resnet50 "}) == "resnet50"
    command = "train.py --epochs 3 --seed 1 --lr=0.1"
    assert job_of({"radt.command": command}) == "train.py --epochs 3 --lr=0.1"
    assert job_of({"radt.command": "train.py --seed=7 --epochs 3"}) == "train.py --epochs 3"
    ignore = {
        "radt.command": "t.py --data-seed -3 --amp --seed 2 x",
        "radt.job_ignore": "--data-seed",
    }
    assert job_of(ignore) == "t.py --amp x"
    assert job_of({}, {"seed": "1", "epochs": "3", "radt.command": None}) == "epochs=3"
    assert job_of({}) is None
    assert strip_flags(["a", "--seed", "--amp"], ["seed"]) == ["a", "--amp"]


def test_configuration_labels():
    def runs(mode, n=2, **tags):
        return [{"radt.collocation": mode, **tags} for _ in range(n)]

    assert configuration_label([{"radt.collocation": "none"}]) == "none"
    assert configuration_label([{}]) == "none"
    assert configuration_label(runs("naive")) == "naive x2"
    assert configuration_label(runs("mps")) == "mps x2"
    assert configuration_label(runs("mps", **{"radt.mps_thread_pct": "50"})) == "mps:50 x2"
    shares = [{"radt.collocation": "mps", "radt.mps_thread_pct": p} for p in ("30", "70")]
    assert configuration_label(shares) == "mps:70+30"
    profiles = ["1g.10gb", "4g.40gb", "2g.20gb"]
    mig = [{"radt.collocation": "mig", "radt.mig_profile": p} for p in profiles]
    assert configuration_label(mig) == "4g.40gb+2g.20gb+1g.10gb"


# --------------------------------------------------------------------------- recorded runs

P_ALONE = 200.0
P_PAIR = 300.0
COMMAND = "train.py --epochs 3"


def gpu(begin, end, watts, offset, every=0.1):
    """The constant-power GPU stand-in: power P and an energy counter growing at P J/s."""
    times, joules = gpu_counter(begin, end, watts, offset, every)
    return [(t, "nvml/gpu0/power_w", watts) for t in times] + [
        (t, "nvml/gpu0/energy_j", j) for t, j in zip(times, joules, strict=True)
    ]


def script(first, last, rate, epochs=(), count0=64, every=0.5, marks=()):
    """What the run-API channel leaves: counter samples (also at each epoch end) and marks."""
    times = sorted(set(np.round(np.arange(first, last + every / 2, every), 9)) | set(epochs))
    samples = [(t, "script/run/examples", count0 + rate * (t - first)) for t in times]
    samples += [(t, "script/run/epoch", float(e)) for e, t in enumerate(epochs)]
    samples += [(t, "script/run/window_start", 1.0) for t in marks]
    return samples


class Study:
    """Runs recorded with timestamps counted from ``base`` (epoch seconds)."""

    def __init__(self, client, uri, experiment="study"):
        self.client, self.uri = client, uri
        self.exp = client.create_experiment(experiment)
        self.base = float(math.ceil(time.time()) + 1)  # whole seconds: exact in µs
        self.warnings: list[str] = []

    def command(self, start, end):
        """The tags of a command that ran from ``start`` to ``end`` s after ``base``."""
        return {
            "radt.command_start_s": f"{self.base + start:.6f}",
            "radt.command_end_s": f"{self.base + end:.6f}",
        }

    def tags(self, command_s, **tags):
        return {**{k.replace("__", "."): v for k, v in tags.items()}, **self.command(*command_s)}

    def run(self, name, samples, tags, parent=None):
        run = RecordedRun(
            start_run(
                self.client,
                self.uri,
                self.exp,
                tags=tags,
                params={},
                run_name=name,
                parent_run_id=parent.run_id if parent else None,
                warn=self.warnings.append,
            ),
            [],
            warn=self.warnings.append,
        )
        run.recorder.emit([Sample(self.base + t, k, v) for t, k, v in samples])
        return run

    def close(self, run, end_s, status="FINISHED"):
        assert run.close(status, 0, ended_s=self.base + end_s), self.warnings
        return run.run_id

    def lone(self, name, samples, command_s, **tags):
        tags = self.tags(command_s, radt__collocation="none", **tags)
        return self.close(self.run(name, samples, tags), command_s[1])

    def workload(self, name, device, end_s, clients, mode="naive", **tags):
        """``clients``: (command, samples, command_s) each; closed first, as the runner does."""
        shared = {
            "radt.workload": name,
            "radt.collocation": mode,
            "radt.workload_runs": str(len(clients)),
            **{k.replace("__", "."): v for k, v in tags.items()},
        }
        parent = self.run(name, device, shared)
        kids = []
        for letter, (command, samples, command_s) in zip("ABC", clients, strict=False):
            tags = self.tags(command_s, radt__letter=letter, radt__command=command)
            kids.append(self.run(f"{name}-{letter}", samples, {**shared, **tags}, parent))
        ids = [self.close(kid, cs[1]) for kid, (_, _, cs) in zip(kids, clients, strict=True)]
        return self.close(parent, end_s), ids


def row_of(frame, run_id):
    rows = frame[frame["run_id"] == run_id]
    assert len(rows) == 1
    return rows.iloc[0]


def lone_job(s, name, rate, offset):
    """The job alone at ``P_ALONE``: 64 examples at 2 s, then ``rate``/s, epochs ending at 4,
    8 and 12 s (window 4 → 12 s); the GPU's energy counter starts at ``offset`` J."""
    return s.lone(
        name,
        gpu(0.2, 12.6, P_ALONE, offset) + script(2.0, 12.0, rate, epochs=(4.0, 8.0, 12.0)),
        (0.0, 12.5),
        radt__command=COMMAND,
    )


def pair_job(s):
    """The workload ``pair`` at ``P_PAIR``: A at 100/s, epochs ending 8, 14, 20 s; B
    (``--seed 1``) at 50/s, epochs ending 7, 11, 15 s; returns (workload id, (A, B))."""
    return s.workload(
        "pair",
        gpu(0.0, 25.0, P_PAIR, 123.4),
        25.0,
        [
            (COMMAND, script(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 20.0)), (0.0, 20.5)),
            (
                f"{COMMAND} --seed 1",
                script(3.0, 15.0, 50.0, epochs=(7.0, 11.0, 15.0), count0=32),
                (0.0, 15.5),
            ),
        ],
    )


def build(client, uri):
    s = Study(client, uri)
    ids = {}
    # Two repeats of the job alone. 1: 64 examples at 2 s, then 250/s; epochs end at 4, 8, 12 s:
    # window 4 → 12 s (8 s), 2000 examples, 4 ms each, 250/s; 200 W × 8 s = 1600 J, 0.8 J each.
    ids["alone1"] = lone_job(s, "alone-1", 250.0, 7777.7)
    # 2: 200/s: 1600 examples in 8 s, 5 ms each; 1600 J, 1 J each.
    ids["alone2"] = lone_job(s, "alone-2", 200.0, 31.0)
    # The pair at 300 W. A: 100/s, epochs end 8, 14, 20 s: window 8 → 20 s, 1200 examples,
    # 10 ms each. B (--seed 1, the same job): 50/s, epochs 7, 11, 15 s: window 7 → 15 s,
    # 400 examples, 20 ms each. Overlap 8 → 15 s: 700 + 350 = 1050 examples, 6.667 ms each,
    # 150/s; 300 W × 7 s = 2100 J, 2 J each.
    ids["pair"], (ids["a"], ids["b"]) = pair_job(s)
    # A pair that never ran at the same time: no provider figures.
    ids["apart"], (ids["apart_a"], ids["apart_b"]) = s.workload(
        "apart",
        gpu(0.0, 25.0, P_PAIR, 0.0),
        25.0,
        [
            (COMMAND, script(2.0, 10.0, 100.0, epochs=(4.0, 10.0)), (0.0, 10.5)),
            (COMMAND, script(12.0, 20.0, 100.0, epochs=(14.0, 20.0)), (11.5, 20.5)),
        ],
    )
    # Without radt.log_examples: the command's duration. Alone 10 s; together 15 s and 14 s.
    ids["quiet"] = s.lone(
        "quiet-alone", gpu(0.0, 10.2, P_ALONE, 0.0), (0.0, 10.0), radt__command="q.py"
    )
    ids["qpair"], (ids["qa"], ids["qb"]) = s.workload(
        "quiet-pair",
        gpu(0.0, 15.2, P_PAIR, 0.0),
        15.2,
        [("q.py", [], (0.0, 15.0)), ("q.py --seed 2", [], (0.0, 14.0))],
    )
    # Capped at 250 W: a baseline there (125/s: 8 ms each) and a run alone in a workload (50/s)
    capped = {"radt__power_limit_w": "250"}
    ids["capped_alone"] = s.lone(
        "capped-alone",
        gpu(0.0, 12.6, 150.0, 0.0) + script(2.0, 12.0, 125.0, epochs=(4.0, 8.0, 12.0)),
        (0.0, 12.5),
        radt__command=COMMAND,
        **capped,
    )
    ids["capped"], (ids["capped_a"],) = s.workload(
        "capped",
        gpu(0.0, 12.6, 150.0, 0.0),
        12.6,
        [(COMMAND, script(2.0, 12.0, 50.0, epochs=(4.0, 8.0, 12.0)), (0.0, 12.5))],
        **capped,
    )
    return s, ids


@contextlib.contextmanager
def recorded_store(tmp_path_factory, template_db, name: str):
    """:func:`conftest.sqlite_store` in a folder of its own, while it is in use (for a
    module's fixture); yields ``(client, uri)``."""
    with pytest.MonkeyPatch.context() as patch:
        yield sqlite_store(tmp_path_factory.mktemp(name), template_db, patch)


@pytest.fixture(scope="module")
def study(tmp_path_factory, template_db):
    """The study above, recorded once for the tests that only read it."""
    with recorded_store(tmp_path_factory, template_db, "study") as (client, uri):
        s, ids = build(client, uri)
        yield client, uri, s, ids


def test_client_and_provider_figures_equal_the_hand_computed_ones(study):
    client, uri, s, ids = study
    frame = summary("study", tracking_uri=uri)
    assert list(frame.columns) == list(COLUMNS)

    one = row_of(frame, ids["alone1"])
    assert (one["level"], one["basis"], one["warmup"]) == ("run", "examples", "first_epoch")
    assert one["window_start"] == pd.Timestamp(s.base + 4.0, unit="s", tz="UTC")
    assert one["window_s"] == pytest.approx(8.0)
    assert one["examples"] == pytest.approx(2000.0) and one["examples_total"] == pytest.approx(2564)
    assert one["examples_per_s"] == pytest.approx(250.0)
    assert one["time_per_example_ns"] == pytest.approx(4e6)
    assert one["energy_method"] == "counter"
    assert one["energy_j"] == pytest.approx(1600.0)
    assert one["energy_per_example_nj"] == pytest.approx(8e8)
    assert one["power_mean_w"] == pytest.approx(P_ALONE)
    assert one["configuration"] == "none" and one["job"] == COMMAND
    # the baseline is the mean of both repeats: 4.5 ms, 0.9 J per example
    baseline = f"{ids['alone1']} {ids['alone2']}"
    assert one["slowdown"] == pytest.approx(4.0 / 4.5) and one["baseline_run_id"] == baseline
    # its repeats spread: sample std of (4, 5) ms = 0.7071 ms over 4.5 ms = 15.7 %, flagged
    assert one["baseline_cv_pct"] == pytest.approx(15.713, abs=1e-3)
    two = row_of(frame, ids["alone2"])
    assert two["time_per_example_ns"] == pytest.approx(5e6)
    assert two["energy_per_example_nj"] == pytest.approx(1e9)
    assert two["slowdown"] == pytest.approx(5.0 / 4.5)
    assert two["energy_per_example_norm"] == pytest.approx(1.0 / 0.9)

    pair = row_of(frame, ids["pair"])
    assert (pair["level"], pair["basis"], pair["warmup"]) == ("provider", "examples", "overlap")
    assert pair["window_start"] == pd.Timestamp(s.base + 8.0, unit="s", tz="UTC")
    assert pair["window_end"] == pd.Timestamp(s.base + 15.0, unit="s", tz="UTC")
    assert pair["examples"] == pytest.approx(1050.0)
    assert pair["examples_per_s"] == pytest.approx(150.0)
    assert pair["time_per_example_ns"] == pytest.approx(7e9 / 1050)
    assert pair["energy_j"] == pytest.approx(2100.0) and pair["energy_method"] == "counter"
    assert pair["energy_per_example_nj"] == pytest.approx(2e9)
    assert pair["configuration"] == "naive x2" and pair["job"] == COMMAND
    # normalised: the 1050 examples would take 1050 × 4.5 ms and 1050 × 0.9 J alone
    assert pair["time_per_example_norm"] == pytest.approx(7.0 / (1050 * 4.5e-3))
    assert pair["examples_per_s_norm"] == pytest.approx(1050 * 4.5e-3 / 7.0)
    assert pair["energy_per_example_norm"] == pytest.approx(2100.0 / (1050 * 0.9))
    assert math.isnan(pair["slowdown"])

    a, b = row_of(frame, ids["a"]), row_of(frame, ids["b"])
    assert (a["window_s"], a["examples"], a["time_per_example_ns"]) == pytest.approx(
        (12, 1200, 1e7)
    )
    assert (b["window_s"], b["examples"], b["time_per_example_ns"]) == pytest.approx((8, 400, 2e7))
    assert a["slowdown"] == pytest.approx(10.0 / 4.5) and a["baseline_run_id"] == baseline
    assert b["slowdown"] == pytest.approx(20.0 / 4.5) and b["baseline_run_id"] == baseline
    assert b["job"] == COMMAND  # --seed 1 is the same job
    assert a["time_per_example_norm"] == pytest.approx(10.0 / 4.5)
    assert math.isnan(a["energy_j"]) and "collocated" in a["window_note"]


def test_non_overlapping_clients_give_missing_provider_figures_with_the_reason(study):
    _, uri, _, ids = study
    frame = summary("study", tracking_uri=uri)
    apart = row_of(frame, ids["apart"])
    for figure in ("window_s", "examples", "examples_per_s", "time_per_example_ns", "energy_j"):
        assert math.isnan(apart[figure]), figure
    assert apart["window_note"] == "the runs' windows do not overlap in time"
    # the clients still have their own figures (100/s each: 10 ms)
    assert row_of(frame, ids["apart_a"])["time_per_example_ns"] == pytest.approx(1e7)


def test_runs_without_examples_get_duration_figures_marked_as_such(study):
    _, uri, _, ids = study
    frame = summary("study", tracking_uri=uri)
    quiet = row_of(frame, ids["quiet"])
    assert (quiet["basis"], quiet["warmup"], quiet["window_s"]) == ("duration", "none", 10.0)
    assert math.isnan(quiet["time_per_example_ns"]) and math.isnan(quiet["examples"])
    assert quiet["energy_j"] == pytest.approx(P_ALONE * 10.0)
    assert "no examples reported" in quiet["window_note"]
    qa, qb = row_of(frame, ids["qa"]), row_of(frame, ids["qb"])
    assert qa["basis"] == "duration" and qa["slowdown"] == pytest.approx(1.5)
    assert qb["slowdown"] == pytest.approx(1.4) and qb["baseline_run_id"] == ids["quiet"]
    assert qa["time_per_example_norm"] == pytest.approx(1.5)  # the same work: durations
    provider = row_of(frame, ids["qpair"])
    assert (provider["basis"], provider["window_s"]) == ("duration", pytest.approx(14.0))
    assert provider["energy_j"] == pytest.approx(P_PAIR * 14.0)
    assert math.isnan(provider["time_per_example_ns"])
    # never compared across bases: the examples runs' baselines are not these
    assert row_of(frame, ids["a"])["baseline_run_id"] != ids["quiet"]


def test_baseline_at_the_same_power_limit_first_normalised_at_the_default(study):
    _, uri, _, ids = study
    frame = summary("study", tracking_uri=uri)
    capped = row_of(frame, ids["capped_a"])
    # 50/s = 20 ms against the 250 W baseline's 8 ms; normalised against 4.5 ms at full power
    assert capped["slowdown"] == pytest.approx(20.0 / 8.0)
    assert capped["baseline_run_id"] == ids["capped_alone"]
    assert capped["time_per_example_norm"] == pytest.approx(20.0 / 4.5)
    # the only run of its workload: the workload's energy over its window (150 W × 8 s)
    assert capped["energy_j"] == pytest.approx(1200.0) and capped["energy_method"] == "counter"
    assert capped["energy_per_example_nj"] == pytest.approx(1200.0 / 400 * 1e9)
    assert capped["configuration"] == "naive x1" and capped["power_limit_w"] == "250"


def test_repeats_give_mean_spread_and_count(study):
    _, uri, _, ids = study
    frame = summary("study", tracking_uri=uri)
    table = repeats(frame)
    assert table.equals(summary("study", tracking_uri=uri, by="repeats"))
    alone = table[
        (table["view"] == "client") & (table["configuration"] == "none") & (table["job"] == COMMAND)
    ]
    alone = alone[alone["power_limit_w"] == "default"].iloc[0]
    assert alone["count"] == 2 and alone["basis"] == "examples"
    assert alone["run_ids"] == f"{ids['alone1']} {ids['alone2']}"
    assert alone["time_per_example_ns_mean"] == pytest.approx(4.5e6)
    assert alone["time_per_example_ns_min"] == pytest.approx(4e6)
    assert alone["time_per_example_ns_max"] == pytest.approx(5e6)
    assert alone["time_per_example_ns_std"] == pytest.approx(math.sqrt(2) * 0.5e6)
    assert alone["examples_per_s_mean"] == pytest.approx(225.0)
    pairs = table[(table["view"] == "provider") & (table["configuration"] == "naive x2")]
    assert set(pairs["basis"]) == {"examples", "duration"}  # never mixed in one row
    naive = pairs[pairs["basis"] == "examples"].iloc[0]
    assert naive["count"] == 2  # pair and apart
    assert naive["time_per_example_ns_mean"] == pytest.approx(7e9 / 1050)  # apart has none
    clients = table[(table["view"] == "client") & (table["configuration"] == "naive x2")]
    assert clients[clients["basis"] == "examples"].iloc[0]["count"] == 4
    with pytest.raises(UsageError, match="by= takes 'repeats'"):
        summary("study", tracking_uri=uri, by="jobs")


def test_closing_figures_in_mlflow_and_the_summary_table_artifact(study, tmp_path):
    client, _, _, ids = study
    one = client.get_run(ids["alone1"])
    metrics = one.data.metrics
    assert not [k for k in metrics if k.startswith("summary/")]  # the old single-point sections
    assert metrics["radt/examples_per_s"] == pytest.approx(250.0)
    assert metrics["radt/time_per_example_ns"] == pytest.approx(4e6)
    assert metrics["radt/energy_per_example_nj"] == pytest.approx(8e8)
    assert metrics["radt/energy_j"] == pytest.approx(1600.0)
    assert metrics["radt/window_s"] == pytest.approx(8.0)
    assert metrics["radt/slowdown"] == pytest.approx(1.0)  # alone when it closed: itself
    assert one.data.tags["radt.basis"] == "examples"
    assert one.data.tags["radt.warmup"] == "first_epoch"
    # at its close the second repeat saw the first: mean 4.5 ms
    assert client.get_run(ids["alone2"]).data.metrics["radt/slowdown"] == pytest.approx(5 / 4.5)
    a = client.get_run(ids["a"]).data.metrics
    assert a["radt/slowdown"] == pytest.approx(10.0 / 4.5)
    assert "radt/energy_j" not in a  # collocated: not measured
    pair = client.get_run(ids["pair"]).data.metrics
    assert pair["radt/examples_per_s"] == pytest.approx(150.0)
    assert pair["radt/energy_per_example_nj"] == pytest.approx(2e9)
    assert pair["radt/window_s"] == pytest.approx(7.0)
    apart = client.get_run(ids["apart"])
    assert "radt/examples_per_s" not in apart.data.metrics
    assert "do not overlap" in apart.data.tags["radt.window_note"]
    path = client.download_artifacts(ids["alone1"], "radt/summary.csv", str(tmp_path))
    table = pd.read_csv(path).set_index("key")
    assert list(table.columns) == ["count", "mean", "min", "max"]
    assert table.loc["nvml/gpu0/power_w", "mean"] == pytest.approx(P_ALONE)
    assert table.loc["script/run/examples", "max"] == pytest.approx(2564.0)


def test_runs_and_export_show_the_window_figures(study, tmp_path, capsys):
    _, uri, _, ids = study
    assert run_runs(["-e", "study", "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    one = next(line for line in lines if line.startswith("alone-1 "))
    assert "250.0" in one and "4.000" in one and "800 mJ" in one and "0.89" in one
    assert "examples" in one and "8.0s" in one
    assert "apart: the runs' windows do not overlap in time" in captured.err
    target = tmp_path / "repeats.csv"
    assert run_export(["--repeats", "-e", "study", "-o", str(target), "--tracking-uri", uri]) == 0
    table = pd.read_csv(target)
    assert {"view", "job", "configuration", "count", "time_per_example_ns_std"} <= set(table)
    with pytest.raises(UsageError, match="--repeats takes no --keys"):
        run_export(["--repeats", "-e", "study", "--keys", "x", "-o", "-", "--tracking-uri", uri])
    out = io.StringIO()
    frame = summary("study", tracking_uri=uri)
    frame.to_csv(out, index=False)
    assert "window_note" in out.getvalue().splitlines()[0]


def test_a_manual_run_is_never_the_baseline_of_a_plain_run_nor_the_other_way_round(store):
    """``--manual`` (``radt.manual=1``) windows start at the script's ``RADTBenchmark()``: they
    are compared with ``--manual`` runs only, and a run whose Job has only runs alone of the
    other rule has no slowdown, with the reason."""
    client, uri = store
    s = Study(client, uri, "rules")
    # The job alone, plain: 250/s, window 4 → 12 s, 2000 examples, 4 ms each.
    alone = lone_job(s, "alone", 250.0, 0.0)
    # Each a workload of one run at 125/s (a GPU shared with something else): plain, its window
    # 4 → 12 s, 1000 examples, 8 ms each; --manual, its window from its mark at 3 s to 12 s,
    # 1125 examples, 8 ms each.
    counted = script(2.0, 12.0, 125.0, epochs=(4.0, 8.0, 12.0))
    marked = script(2.0, 12.0, 125.0, epochs=(4.0, 8.0, 12.0), marks=(3.0,))
    device = gpu(0.0, 12.6, P_PAIR, 0.0)
    _, (plain,) = s.workload("plain", device, 12.6, [(COMMAND, counted, (0.0, 12.5))])
    manual_rule = {"radt__manual": "1"}
    _, (manual,) = s.workload(
        "manual", device, 12.6, [(COMMAND, marked, (0.0, 12.5))], **manual_rule
    )
    rows = summary("rules", tracking_uri=uri)
    row = row_of(rows, manual)
    assert (row["warmup"], row["examples"], row["time_per_example_ns"]) == (
        "start_window",
        1125,
        pytest.approx(8e6),
    )
    assert math.isnan(row["slowdown"]) and pd.isna(row["baseline_run_id"])
    assert (
        "no baseline: this run's window does start at radt.run.RADTBenchmark() (--manual) and "
        "those of its job's none runs on basis examples do not (windows of different rules are "
        "not compared)"
    ) in row["window_note"]
    assert "radt/slowdown" not in client.get_run(manual).data.metrics  # nor at its close
    row = row_of(rows, plain)
    assert row["slowdown"] == pytest.approx(8 / 4) and row["baseline_run_id"] == alone
    assert client.get_run(plain).data.metrics["radt/slowdown"] == pytest.approx(2.0)
    # A --manual run alone of the same Job (250/s from its mark at 3 s: 4 ms each) is the
    # baseline of the --manual run only; the plain run's stays the plain one's.
    marked_alone = s.lone(
        "manual-alone",
        gpu(0.2, 12.6, P_ALONE, 0.0)
        + script(2.0, 12.0, 250.0, epochs=(4.0, 8.0, 12.0), marks=(3.0,)),
        (0.0, 12.5),
        radt__command=COMMAND,
        **manual_rule,
    )
    rows = summary("rules", tracking_uri=uri)
    row = row_of(rows, manual)
    assert row["slowdown"] == pytest.approx(2.0) and row["baseline_run_id"] == marked_alone
    row = row_of(rows, plain)
    assert row["slowdown"] == pytest.approx(2.0) and row["baseline_run_id"] == alone
    # the plain run alone, and the --manual one, are each their own baseline, not each other's
    assert row_of(rows, alone)["baseline_run_id"] == alone
    assert row_of(rows, marked_alone)["baseline_run_id"] == marked_alone


# --------------------------------------------------------------------------- CPU and shared loading

LOADER_JOB = "loader-job"


def top(first, last, pct, every=0.5):
    """The top listener's process-tree samples: ``pct`` % of a core and a constant RSS."""
    times = np.round(np.arange(first, last + every / 2, every), 9)
    return [(t, "top/proc/cpu_pct", pct) for t in times] + [
        (t, "top/proc/rss_mib", 100.0) for t in times
    ]


def loader_workload(s, name, clients_pct, loader_pct=None):
    """A naive pair of the same Job at 100 examples/s each (epochs end 8, 14, 20 s: windows
    8 → 20 s, 1200 examples each) whose trees use ``clients_pct`` % of a core; with
    ``loader_pct``, they share a loader (a run with ``radt.role=loader``, 0 → 21 s)."""
    shared = {
        "radt.workload": name,
        "radt.collocation": "naive",
        "radt.workload_runs": str(len(clients_pct) + (loader_pct is not None)),
        "radt.loader": "own" if loader_pct is None else "shared",
        "radt.job": LOADER_JOB,
    }
    parent = s.run(name, gpu(0.0, 22.0, P_PAIR, 0.0), shared)
    role = {} if loader_pct is None else {"radt__role": "consumer"}
    kids = []
    for letter, pct in zip("AB", clients_pct, strict=True):
        tags = s.tags((0.0, 20.5), radt__letter=letter, radt__command=COMMAND, **role)
        samples = script(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 20.0)) + top(0.5, 20.5, pct)
        run = s.run(f"{name}-{letter}", samples, {**shared, **tags}, parent)
        kids.append((run, 20.5))
    if loader_pct is not None:
        tags = s.tags((0.0, 21.0), radt__letter="L", radt__command="loader.py", radt__role="loader")
        run = s.run(f"{name}-L", top(0.5, 21.0, loader_pct), {**shared, **tags}, parent)
        kids.append((run, 21.0))
    ids = [s.close(run, end) for run, end in kids]
    return s.close(parent, 22.0), ids


def test_cpu_per_example_counts_the_shared_loaders_tree_in_its_workload(store, capsys):
    client, uri = store
    s = Study(client, uri, "loading")
    # Own loaders: each training's tree 150 % of a core. Provider window 8 → 20 s (12 s),
    # 2400 examples: CPU 2 × 1.5 × 12 = 36 core-s, 36 / 2400 = 15 ms per example.
    own, (own_a, own_b) = loader_workload(s, "own", (150.0, 150.0))
    # One shared loader: trainings 50 % each, the loader 100 %: (0.5 + 0.5 + 1.0) × 12 = 24
    # core-s over the same window and examples, 10 ms per example.
    shared, (shared_a, _, loader) = loader_workload(s, "shared", (50.0, 50.0), loader_pct=100.0)
    frame = summary("loading", tracking_uri=uri)

    row = row_of(frame, own)
    assert (row["level"], row["loader"], row["configuration"]) == ("provider", "own", "naive x2")
    assert (row["window_s"], row["examples"]) == pytest.approx((12.0, 2400.0))
    assert row["cpu_s"] == pytest.approx(36.0)
    assert row["cpu_per_example_ns"] == pytest.approx(1.5e7)
    a = row_of(frame, own_a)  # its own tree over its own window 8 → 20 s: 1.5 × 12 = 18 core-s
    assert a["cpu_s"] == pytest.approx(18.0) and a["cpu_per_example_ns"] == pytest.approx(1.5e7)

    row = row_of(frame, shared)
    assert (row["loader"], row["configuration"]) == ("shared", "naive x2 + shared loader")
    assert row["job"] == LOADER_JOB and row["command"] == f"{COMMAND} | {COMMAND}"
    assert row["cpu_s"] == pytest.approx(24.0)
    assert row["cpu_per_example_ns"] == pytest.approx(1e7)
    a = row_of(frame, shared_a)  # a consumer alone: 0.5 × 12 = 6 core-s, 5 ms per example
    assert a["cpu_s"] == pytest.approx(6.0) and a["cpu_per_example_ns"] == pytest.approx(5e6)
    assert a["configuration"] == "naive x2 + shared loader"
    lone = row_of(frame, loader)  # its command's samples 0.5 → 21 s at 100 %: 20.5 core-s
    assert (lone["level"], lone["letter"], lone["basis"]) == ("loader", "L", "duration")
    assert lone["cpu_s"] == pytest.approx(20.5) and math.isnan(lone["cpu_per_example_ns"])
    assert math.isnan(lone["slowdown"])
    ordered = frame["run_id"].tolist()  # the workload, its trainings, its loader last
    assert ordered[ordered.index(shared) : ordered.index(shared) + 4] == [
        shared,
        shared_a,
        ordered[ordered.index(shared) + 2],
        loader,
    ]

    from radt.frontend.pages.runs import grid_rows, runs_note

    grid = {row["run_id"]: row for row in grid_rows(frame)}
    assert (grid[loader]["name"], grid[loader]["kind"]) == ("↳ shared-L", "loader")
    kinds = [row["kind"] for row in grid.values()]
    assert runs_note("loading", kinds).startswith(
        "loading: 2 workloads, 4 runs in them, 1 shared loader. "
    )

    # at its close the workload logged the same headline (its loader's samples included)
    metrics = client.get_run(shared).data.metrics
    assert metrics["radt/cpu_per_example_ns"] == pytest.approx(1e7)
    assert client.get_run(own).data.metrics["radt/cpu_per_example_ns"] == pytest.approx(1.5e7)

    assert run_runs(["-e", "loading", "--tracking-uri", uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "CPU ms/example" in lines[0]
    assert "15.000" in next(line for line in lines if line.startswith("own "))
    assert "10.000" in next(line for line in lines if line.startswith("shared "))

    table = summary("loading", tracking_uri=uri, by="loader")
    assert len(table) == 1
    side = table.iloc[0]
    assert (side["job"], side["configuration"], side["basis"]) == (
        LOADER_JOB,
        "naive x2",
        "examples",
    )
    assert (side["own_count"], side["shared_count"]) == (1, 1)
    assert (side["own_run_ids"], side["shared_run_ids"]) == (own, shared)
    assert side["own_cpu_per_example_ns"] == pytest.approx(1.5e7)
    assert side["shared_cpu_per_example_ns"] == pytest.approx(1e7)
    assert side["cpu_per_example_ns_ratio"] == pytest.approx(2 / 3)
    assert side["examples_per_s_ratio"] == pytest.approx(1.0)  # 200/s both ways


def test_figures_missing_for_want_of_a_gpu_listener_say_so_in_the_notes(store, capsys):
    # a CPU-only machine: a lone run and a naive pair with CPU samples and no GPU series; a
    # "-" for energy, power and utilisation used to come with no reason at all
    client, uri = store
    s = Study(client, uri, "cpu-only")
    lone = s.lone("alone", script(2.0, 12.0, 250.0, epochs=(4.0, 8.0, 12.0)), (0.0, 12.5))
    shared = {"radt.workload": "w", "radt.collocation": "naive", "radt.workload_runs": "2"}
    parent = s.run("w", [], shared)
    for letter in "AB":
        tags = s.tags((0.0, 20.5), radt__letter=letter, radt__command=COMMAND)
        samples = script(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 20.0)) + top(0.5, 20.5, 100.0)
        s.close(s.run(f"w-{letter}", samples, {**shared, **tags}, parent), 20.5)
    workload = s.close(parent, 22.0)
    frame = summary("cpu-only", tracking_uri=uri)
    assert len(frame) == 4 and frame["energy_j"].isna().all()
    for row in frame.to_dict("records"):
        assert NO_GPU_NOTE in row["window_note"], row["run_name"]
    assert row_of(frame, lone)["examples_per_s"] == pytest.approx(250.0)  # the rest stands
    assert row_of(frame, workload)["examples_per_s"] == pytest.approx(200.0)
    assert run_runs(["-e", "cpu-only", "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    assert f"\n  every row: {NO_GPU_NOTE}\n" in captured.err
    lone_row = next(line for line in captured.out.splitlines() if line.startswith("alone "))
    assert "nan" not in lone_row.split()  # a lone run's workload is "-"


def test_a_workload_whose_run_has_no_cpu_samples_has_its_cpu_missing_with_the_reason(store):
    client, uri = store
    s = Study(client, uri, "blind")
    shared = {"radt.workload": "w", "radt.collocation": "naive", "radt.workload_runs": "2"}
    parent = s.run("w", gpu(0.0, 22.0, P_PAIR, 0.0), shared)
    kids = []
    for letter, cpu in (("A", top(0.5, 20.5, 100.0)), ("B", [])):
        tags = s.tags((0.0, 20.5), radt__letter=letter, radt__command=COMMAND)
        samples = script(2.0, 20.0, 100.0, epochs=(8.0, 14.0, 20.0)) + cpu
        kids.append(s.run(f"w-{letter}", samples, {**shared, **tags}, parent))
    ids = [s.close(kid, 20.5) for kid in kids]
    workload = s.close(parent, 22.0)
    frame = summary("blind", tracking_uri=uri)
    row = row_of(frame, workload)
    assert math.isnan(row["cpu_s"]) and math.isnan(row["cpu_per_example_ns"])
    assert (
        "run B: no CPU samples (the top listener did not record this run): CPU missing"
        in (row["window_note"])
    )
    assert row["examples_per_s"] == pytest.approx(200.0)  # the rest stands
    assert row_of(frame, ids[0])["cpu_s"] == pytest.approx(12.0)
    assert NO_GPU_NOTE not in str(frame["window_note"].tolist())  # the GPU was recorded


def test_loader_comparison_leaves_out_groups_with_one_kind_only():
    frame = pd.DataFrame(
        {
            "level": ["provider", "provider", "client"],
            "run_id": ["p1", "p2", "c1"],
            "job": ["j", "k", "j"],
            "configuration": ["naive x2", "naive x2 + shared loader", "naive x2"],
            "power_limit_w": [None, None, None],
            "basis": ["examples", "examples", "examples"],
            "loader": ["own", "shared", "own"],
            **{name: [1.0, 2.0, 3.0] for name in ("cpu_per_example_ns", "examples_per_s")},
            **{
                name: [1.0, 2.0, 3.0]
                for name in (
                    "time_per_example_ns",
                    "energy_per_example_nj",
                    "host_energy_per_example_nj",
                )
            },
        }
    )
    table = loader_comparison(frame)
    assert table.empty and "cpu_per_example_ns_ratio" in table.columns


def test_timeline_reads_samples_and_tags():
    frame = pd.DataFrame(
        {
            "timestamp": [3.0, 1.0, 2.0, 2.0, 4.0],
            "key": [
                "script/run/examples",
                "script/run/examples",
                "script/run/examples",
                "script/run/epoch",
                "script/run/window_start",
            ],
            "value": [30.0, 10.0, 20.0, 0.0, 1.0],
        }
    )
    tags = {"radt.command_start_s": "0.5", "radt.warmup_epochs": "2", "radt.warmup_s": "x"}
    t = timeline(frame, tags)
    assert list(t.counter_s) == [1.0, 2.0, 3.0] and list(t.counter) == [10.0, 20.0, 30.0]
    assert list(t.epoch_s) == [2.0] and list(t.mark_s) == [4.0]
    assert t.command_start_s == 0.5 and math.isnan(t.command_end_s)
    assert t.warmup_epochs == 2 and t.warmup_s is None


def test_a_figure_that_cannot_be_computed_never_stops_the_run_completing(store, monkeypatch):
    """A fault in the closing arithmetic (injected here) leaves a FINISHED run and a note."""
    import radt.analysis.levels as levels_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("injected")

    client, uri = store
    s = Study(client, uri, "broken")
    monkeypatch.setattr(levels_module, "_client", broken)
    run_id = s.lone("lone", script(2.0, 12.0, 250.0, epochs=(4.0, 8.0)), (0.0, 12.5))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert (
        "could not be computed (ZeroDivisionError: injected)" in run.data.tags["radt.window_note"]
    )
    assert any("radt.summary computes them" in w for w in s.warnings), s.warnings
    monkeypatch.undo()
    row = summary("broken", tracking_uri=uri).iloc[0]  # computed again from the samples
    assert row["examples_per_s"] == pytest.approx(250.0)


# --------------------------------------------------------------------------- end to end

# Batches timed by sleep, and after each epoch's last batch a 3 s tail (logging, validation) before
# radt.log_epoch. The script records the exact time.time() value of each radT call (one read per
# call, as the run API makes it) in calls.json.
TAIL = """
import json, sys, time
real = time.time
reads = []
def clock():
    t = real()
    if sys._getframe(1).f_globals.get("__name__") == "radt.run_api":
        reads.append(t)
    return t
time.time = clock
import radt
calls = []
for epoch in range(3):
    for batch in range(6):
        time.sleep(0.05)
        first = len(reads)
        radt.log_examples(10)
        calls.append(["examples", 10, reads[first:]])
    time.sleep(3.0 if epoch == 2 else 0.5)
    first = len(reads)
    radt.log_epoch(epoch)
    calls.append(["epoch", epoch, reads[first:]])
with open("calls.json", "w") as f:
    json.dump(calls, f)
"""


@pytest.mark.slow
def test_the_window_ends_at_the_last_example_not_at_the_tail_before_the_epoch_mark(workspace):
    """A recorded run's examples/s is its examples from the end of epoch 0 to its last
    ``radt.log_examples`` call over that time, whatever the script does before its last mark."""
    import json

    workspace.script("tail.py", TAIL)
    done = workspace.run(["-e", "tail", "-l", "none", "tail.py"])
    assert done.returncode == 0, done.stderr
    calls = json.loads((workspace.root / "calls.json").read_text())
    assert all(len(reads) == 1 for _, _, reads in calls), calls
    epoch_t = [reads[0] for kind, _, reads in calls if kind == "epoch"]
    last_t = [reads[0] for kind, _, reads in calls if kind == "examples"][-1]
    # from epoch 0's mark (60 examples counted) to the last call (180): 120 examples
    start, seconds = epoch_t[0], last_t - epoch_t[0]
    row = summary("tail", tracking_uri=workspace.uri).iloc[0]
    assert (row["basis"], row["warmup"], row["examples"]) == ("examples", "first_epoch", 120)
    assert row["window_start"].timestamp() == pytest.approx(start, abs=1e-6)
    assert row["window_end"].timestamp() == pytest.approx(last_t, abs=1e-6)
    assert row["examples_per_s"] == pytest.approx(120 / seconds, rel=1e-4)
    assert 120 / (epoch_t[-1] - start) < 0.7 * row["examples_per_s"]  # what the tail would cost


EPOCH_LINE = re.compile(r"epoch (\d+): loss [\d.]+, (\d+) examples/s")
REPO_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def printed_rates(text: str) -> dict[int, float]:
    """``{epoch: examples/s}`` as examples/train.py prints them."""
    return {int(e): float(r) for e, r in EPOCH_LINE.findall(text)}


def output_log(client, run_id: str, folder: Path) -> str:
    local = client.download_artifacts(run_id, "radt/output.log", str(folder / run_id))
    return Path(local).read_text()


STEADY_LINE = re.compile(r"^steady state: (\d+) examples/s \((\d+) examples in ", re.MULTILINE)


@pytest.mark.slow
@pytest.mark.parametrize("epochs", [1, 2])
def test_the_demo_prints_the_examples_per_s_radt_reports(workspace, epochs):
    """`make demo` (examples/train.py, one epoch; and two): the steady-state rate the script
    prints at its end and radT's examples/s for its run agree within 2 %.

    Both are over the same span, read from the same clock: from the end of the warm-up (the
    first batch with one epoch, the end of epoch 0 with two) to the last batch; neither holds
    what the script does after its last batch (its ``mlflow.log_metrics`` and print, a second
    or more at a first call), which the window held until it ended at the epoch mark.
    """
    pytest.importorskip("torch")
    argv = ["-e", "demo", "-l", "top", str(REPO_EXAMPLES / "train.py"), "--epochs", str(epochs)]
    done = workspace.run([*argv, "--examples", "2048", "--threads", "1"], timeout=600)
    assert done.returncode == 0, done.stderr
    rates = printed_rates(done.stdout)
    assert sorted(rates) == list(range(epochs)), done.stdout
    (printed,) = STEADY_LINE.findall(done.stdout)
    printed_rate, printed_examples = float(printed[0]), int(printed[1])
    row = summary("demo", tracking_uri=workspace.uri).iloc[0]
    warmup, examples = ("first_epoch", 2048) if epochs == 2 else ("first_example", 2048 - 64)
    assert (row["basis"], row["warmup"], row["examples"]) == ("examples", warmup, examples)
    assert printed_examples == examples
    assert row["examples_per_s"] == pytest.approx(printed_rate, rel=0.02)
    metrics = workspace.only_run("demo").data.metrics  # as the run logged it when it closed
    assert metrics["radt/examples_per_s"] == pytest.approx(printed_rate, rel=0.02)
    runs = subprocess.run(
        [sys.executable, "-m", "radt", "runs", "-e", "demo"],
        cwd=workspace.root,
        env=workspace.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert runs.returncode == 0, runs.stderr
    header, line = runs.stdout.splitlines()[:2]
    cells = dict(zip(header.split(), line.split(), strict=False))
    assert float(cells["examples/s"].replace(",", "")) == pytest.approx(printed_rate, rel=0.02)
    # the whole run (Python and torch start-up included) is what radT used to divide by
    assert row["examples_total"] / row["duration_s"] < row["examples_per_s"]


@pytest.mark.slow
def test_the_collocation_example_gives_every_client_a_slowdown_from_the_scripts_own_rates(
    workspace, tmp_path
):
    """`radt examples/collocation.csv` with three epochs: the job alone, then two copies of it.

    Each client's slowdown agrees within 10 % with its script's printed rates against the
    baseline's. The windows start after epoch 0, so each run's rate is its epochs 1 and 2
    together, 2n / (n/r₁ + n/r₂), on the same interval radT measures. (With one epoch the
    script's rate also holds its first batch, which radT's window leaves out: a slow first
    batch under load, in the baseline alone, moved the two apart by a third.)
    """
    pytest.importorskip("torch")
    folder = workspace.root / "examples"
    folder.mkdir()
    for script in ("train.py", "synthetic_data.py"):  # train.py imports its data module
        shutil.copy(REPO_EXAMPLES / script, folder / script)
    plan = (REPO_EXAMPLES / "collocation.csv").read_text()
    assert plan.count("--epochs 1 ") == 3
    (folder / "collocation.csv").write_text(plan.replace("--epochs 1 ", "--epochs 3 "))
    done = workspace.run(["examples/collocation.csv"], timeout=600)
    assert done.returncode == 0, done.stderr
    client = workspace.client()
    frame = summary("collocation-demo", tracking_uri=workspace.uri)
    clients = frame[frame["level"] == "client"].set_index("run_name")
    assert sorted(clients.index) == ["alone-A", "pair-A", "pair-B"]
    n = 2048
    rates = {}
    for name, row in clients.iterrows():
        printed = printed_rates(output_log(client, row["run_id"], tmp_path))
        assert sorted(printed) == [0, 1, 2], name
        rates[name] = 2 * n / (n / printed[1] + n / printed[2])
    for name in ("pair-A", "pair-B"):
        row = clients.loc[name]
        assert row["job"] == "cnn-2048" and row["configuration"] == "naive x2"
        assert row["baseline_run_id"] == clients.loc["alone-A", "run_id"]
        assert row["slowdown"] == pytest.approx(rates["alone-A"] / rates[name], rel=0.10), name
    pair = frame[frame["run_name"] == "pair"].iloc[0]
    assert pair["basis"] == "examples"
    a, b = clients.loc["pair-A"], clients.loc["pair-B"]
    start = max(a["window_start"], b["window_start"])
    end = min(a["window_end"], b["window_end"])
    overlap_s = (end - start).total_seconds()
    # the workload's window is its clients' overlap; after their epoch 0 each, one client
    # can be done before the other (a slow start on a loaded machine): then none, and why
    if pair["window_s"] > 0:
        assert (pair["window_start"], pair["window_end"]) == (start, end)
        assert pair["window_s"] == pytest.approx(overlap_s)
    elif overlap_s <= 0:
        assert "the runs' windows do not overlap in time" in pair["window_note"]
    else:
        assert f"the runs overlap for {overlap_s:.3g} s only" in pair["window_note"]
