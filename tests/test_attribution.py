"""Energy cross-check, host energy and per-client estimates (radt.analysis.attribution).

First the pure arithmetic, then runs recorded the way radT records them
(``RecordedRun`` on a real SQLite store, samples with chosen timestamps) with
known timelines: a GPU stand-in whose power steps at known times (its energy
counter the exact integral), per-client SM utilisation and per-GPU-instance
activity at known values, and RAPL zones at known powers. Every expected
figure is computed by hand in the comments. Last, a real radT process with the
powercap stand-in of tests/fakes for host energy.
"""

from __future__ import annotations

import io
import math
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest
import test_windows as windows
from test_windows import recorded_store, row_of, script

from radt.analysis.attribution import (
    ATTRIBUTION_COLUMNS,
    EnergyCurve,
    Sharer,
    activity_on,
    client_gpus,
    compute_slices,
    crosscheck,
    crosscheck_flagged,
    estimate_share,
    host_energy,
    host_zones,
    idle_floor_w,
    method_of,
    split_energy,
)
from radt.analysis.export import runs_table
from radt.analysis.summary import COLUMNS, repeats, summary
from radt.analysis.windows import counter_energy_between, power_energy_between
from radt.cli.runs import run_runs

# --------------------------------------------------------------------------- pure: energy in pieces


def test_the_energy_curve_gives_the_windows_own_energy_between_any_two_times():
    rng = np.random.default_rng(7)
    s = np.round(np.arange(0.0, 20.0, 0.1), 9)
    watts = 200.0 + 100.0 * rng.random(len(s))
    hole = (s <= 8.0) | (s >= 10.0)  # 2 s without a sample: a gap, not integrated
    s, watts = s[hole], watts[hole]
    counter = 5000.0 + np.concatenate([[0.0], np.cumsum((watts[1:] + watts[:-1]) / 2 * np.diff(s))])
    power = EnergyCurve(s, watts, "integrated_power")
    count = EnergyCurve(s, counter, "counter")
    for start, end in ((3.05, 7.93), (0.0, 19.9), (-0.05, 4.0), (7.95, 10.07), (4.0, 4.03)):
        a, b = power.at(np.array([start, end]))
        assert b - a == pytest.approx(power_energy_between(s, watts, start, end), rel=1e-12)
        a, b = count.at(np.array([start, end]))
        assert b - a == pytest.approx(counter_energy_between(s, counter, start, end), rel=1e-12)
    assert np.isnan(power.at(np.array([-0.5]))).all() and np.isnan(count.at(np.array([21.0]))).all()
    series = {("nvml", "gpu0", "power_w"): (s, watts)}
    assert EnergyCurve.of(series, "gpu0").kind == "integrated_power"
    series[("dcgm", "gpu0", "energy_j")] = (s, counter)
    assert (
        EnergyCurve.of(series, "gpu0").kind == "counter" and EnergyCurve.of(series, "gpu1") is None
    )


def test_idle_floor_is_the_lowest_power_else_the_lowest_counter_slope():
    s = np.arange(0.0, 5.0, 0.5)
    watts = np.array([80.0, 61.0, 300.0, 300.0, 250.0, 300.0, 90.0, 300.0, 300.0, 300.0])
    assert idle_floor_w({("nvml", "gpu0", "power_w"): (s, watts)}, "gpu0") == 61.0
    # a counter that rose at watts[k] W in the k-th interval: its slowest interval, 61 W
    joules = np.concatenate([[0.0], np.cumsum(watts[1:] * 0.5)])
    assert idle_floor_w({("dcgm", "gpu0", "energy_j"): (s, joules)}, "gpu0") == pytest.approx(61.0)
    assert math.isnan(idle_floor_w({}, "gpu0"))


def test_activity_over_pieces_means_its_samples_or_takes_the_next_one_within_reach():
    seconds = np.array([1.0, 2.0, 3.0, 6.0])  # interval 1 s: reach 1.5 s
    values = np.array([10.0, 20.0, 30.0, 60.0])
    edges = np.array([0.0, 2.5, 2.8, 3.5, 4.0, 7.0, 8.0])
    # (0, 2.5]: 10 and 20; (2.5, 2.8]: none, 3.0 is 0.2 s after; (2.8, 3.5]: 30;
    # (3.5, 4]: none, 6.0 is 2 s after (too far); (4, 7]: 60; (7, 8]: nothing after
    got = activity_on(seconds, values, edges)
    assert got[:3].tolist() == [15.0, 30.0, 30.0] and got[4] == 60.0
    assert np.isnan(got[3]) and np.isnan(got[5])
    assert np.isnan(activity_on(np.empty(0), np.empty(0), edges)).all()


def test_split_shares_the_idle_floor_equally_and_the_rest_by_weight_else_fallback_else_equally():
    energy = np.array([30.0, 30.0, 30.0, 20.0, 30.0])
    idle = np.full(5, 6.0)
    present = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 1]], bool)
    weights = np.array([[60, np.nan, 0, 60, 60], [20, np.nan, 0, np.nan, 20.0]])
    fallback = np.array([[3, 3, 3, 3, np.nan], [4, 4, 4, 4, 4.0]])
    joules, idle_share, level = split_energy(energy, idle, present, weights, fallback)
    # piece 0: weights 3:1 of 24 J, +3 J idle each: 21 / 9
    # piece 1: weights unknown, fallback 3:4 of 24: 10.29 / 13.71 (+3 each)
    # piece 2: weights all 0: fallback again
    # piece 3: only the first present (its weight known): 20 J, idle 6 J its own
    # piece 4: weights 3:1 (the fallback is not needed)
    first = 21 + 2 * (24 * 3 / 7 + 3) + 20 + 21
    second = 9 + 2 * (24 * 4 / 7 + 3) + 9
    assert joules == pytest.approx([first, second])
    assert joules.sum() == pytest.approx(energy.sum())  # every joule goes to someone
    assert idle_share == pytest.approx([3 * 4 + 6, 3 * 4])
    assert level.tolist() == [0, 1, 1, 0, 0]
    nobody = split_energy(
        energy[:1], idle[:1], np.zeros((2, 1), bool), weights[:, :1], fallback[:, :1]
    )
    assert nobody[0].tolist() == [0.0, 0.0] and nobody[2].tolist() == [-1]
    none_known = np.full((2, 5), np.nan)
    joules, _, level = split_energy(energy, idle, present, none_known, none_known)
    assert (level == 2).all() and joules[1] == pytest.approx(15 * 4)


def test_estimate_share_cuts_the_window_at_the_samples():
    s = np.round(np.arange(0.0, 10.05, 0.1), 9)
    curve = EnergyCurve(s, 100.0 * s, "counter")  # 100 W
    sm = (s, np.full_like(s, 50.0))
    a = Sharer(0.0, 10.0, sm)
    b = Sharer(0.0, 5.0, (s[s <= 5.0], np.full((s <= 5.0).sum(), 50.0)))
    # 2 → 8 s: 2 → 5 both (20 W idle split, 80 W active split 1:1): 150 J; 5 → 8 A alone: 300 J
    split = estimate_share(curve, 20.0, 2.0, 8.0, [a, b], 0)
    assert split.energy_j == pytest.approx(450.0) and split.idle_j == pytest.approx(30 + 60)
    assert split.level_s == pytest.approx((6.0, 0.0, 0.0))
    assert estimate_share(curve, 20.0, 2.0, 12.0, [a, b], 0) is None  # beyond the samples


def test_method_names_each_rule_used_and_says_for_how_much_of_the_window():
    assert method_of(("sm_util", None, "equal"), (8.0, 0.0, 0.0)) == ("sm_util", None)
    assert method_of(("sm_util", None, "equal"), (0.0, 0.0, 8.0)) == ("equal", None)
    method, note = method_of(("mig_activity", "mig_slices", "equal"), (6.0, 2.0, 0.0))
    assert method == "mig_activity+mig_slices"
    assert note.startswith("estimated energy: mig_activity over 75 %, mig_slices over 25 %")
    assert "no GPU-instance activity" in note


def test_clients_gpus_and_compute_slices():
    gpus = ["gpu0", "gpu1"]
    mig = {"radt.mig_instance": "GPU 1 GPU instance 2 compute instance 0 at 0:4"}
    assert client_gpus(mig, gpus) == ["gpu1"]
    assert client_gpus({"radt.devices": "0"}, gpus) == ["gpu0"]
    assert client_gpus({"radt.devices": "GPU-abc"}, gpus) == gpus
    assert client_gpus({}, gpus) == gpus
    assert compute_slices("3g.20gb") == 3 and compute_slices("1g.10gb+me") == 1
    assert compute_slices("weird") is None and compute_slices(None) is None


# -------------------------------------------------------------------------- pure: cross-check, host


def test_crosscheck_compares_the_counter_with_the_integral_of_power():
    s = np.round(np.arange(0.0, 10.05, 0.1), 9)
    series = {
        ("nvml", "gpu0", "energy_j"): (s, 300.0 * s),
        ("nvml", "gpu0", "power_w"): (s, np.full_like(s, 330.0)),  # reads 10 % high
        ("nvml", "gpu1", "energy_j"): (s, 100.0 * s),
        ("nvml", "gpu1", "power_w"): (s, np.full_like(s, 99.0)),  # 1 % low
    }
    check = crosscheck(series, 2.0, 6.0)
    assert check["energy_counter_j"] == pytest.approx(1200.0 + 400.0)
    assert check["energy_power_integral_j"] == pytest.approx(1320.0 + 396.0)
    assert check["energy_crosscheck_pct"] == pytest.approx(10.0)  # the GPU that differs most
    assert crosscheck_flagged(check["energy_crosscheck_pct"])
    assert (
        not crosscheck_flagged(-1.0) and crosscheck_flagged(-5.5) and not crosscheck_flagged(None)
    )
    whole = crosscheck(series, None, None)
    assert whole["energy_counter_j"] == pytest.approx(4000.0)
    # an nvml "counter" that is the listener's own integral of power is no cross-check
    own = crosscheck(series, 2.0, 6.0, {"radt.nvml.energy_method.gpu0": "integrated_power"})
    assert own["energy_crosscheck_pct"] == pytest.approx(-1.0)
    assert math.isnan(crosscheck({}, 2.0, 6.0)["energy_crosscheck_pct"])


def test_host_energy_is_packages_and_dram_never_cores_again():
    assert host_zones(["package0", "core0", "uncore0", "dram0", "package1", "dram1"]) == [
        "dram0",
        "dram1",
        "package0",
        "package1",
    ]
    assert host_zones(["psys", "core0"]) == ["psys"]
    assert host_zones(["package0", "psys"]) == ["package0"]
    s = np.round(np.arange(0.0, 10.05, 0.1), 9)
    rapl = {
        "rapl/package0/energy_j": (s, 40.0 * s),
        "rapl/core0/energy_j": (s, 30.0 * s),
        "rapl/dram0/power_w": (s, np.full_like(s, 5.0)),  # no counter: its power integrated
    }
    assert host_energy(rapl, 2.0, 6.0) == (pytest.approx(180.0), None)
    joules, note = host_energy(rapl, 2.0, 16.0)
    assert math.isnan(joules) and "dram0, package0 do not cover the window" in note
    assert host_energy({}, 2.0, 6.0)[1] is None


# --------------------------------------------------------------------------- recorded runs

STEP = 0.1


def power_steps(steps, end, every=STEP, reads=1.0):
    """A GPU stand-in whose power steps at known times: ``steps`` = ((from_s, watts), …).

    ``nvml/gpu0/power_w`` at each sample (× ``reads``: a power sensor that is off) and
    ``nvml/gpu0/energy_j``, the exact integral of the true power.
    """
    times = np.round(np.arange(0.0, end + every / 2, every), 9)
    starts = np.array([s for s, _ in steps])
    watts = np.array([w for _, w in steps])

    def power(t):
        return watts[np.searchsorted(starts, t, side="right") - 1]

    edges = np.sort(np.unique(np.concatenate([starts, times])))
    pieces = power(edges[:-1]) * np.diff(edges)
    energy = np.interp(times, edges, np.concatenate([[0.0], np.cumsum(pieces)]))
    # the power sample at a step's time reads the power before it (as a 1-s average would)
    sample_power = power(np.maximum(times - 1e-6, 0.0))
    return [
        (t, "nvml/gpu0/power_w", p * reads) for t, p in zip(times, sample_power, strict=True)
    ] + [(t, "nvml/gpu0/energy_j", 1234.5 + e) for t, e in zip(times, energy, strict=True)]


def series(key, first, last, value, every=STEP, drop=()):
    """Samples of ``key`` at a constant value, without those strictly inside ``drop`` (a, b)."""
    times = np.round(np.arange(first, last + every / 2, every), 9)
    for a, b in drop:
        times = times[(times <= a + 1e-9) | (times >= b - 1e-9)]
    return [(t, key, value) for t in times]


def rapl(first, last, package_w=40.0, dram_w=5.0, core_w=30.0):
    """RAPL zones at known powers: package, DRAM and a core zone (inside the package)."""
    times = np.round(np.arange(first, last + STEP / 2, STEP), 9)
    out = []
    for zone, watts in (("package0", package_w), ("dram0", dram_w), ("core0", core_w)):
        out += [(t, f"rapl/{zone}/energy_j", watts * (t - first)) for t in times]
        out += [(t, f"rapl/{zone}/power_w", watts) for t in times[1:]]
    return out


class Study(windows.Study):
    """test_windows' study, with lone runs and workloads of the shapes attribution needs."""

    def __init__(self, client, uri):
        super().__init__(client, uri, "attribution")

    def lone(self, name, samples, command_s):
        tags = {"radt.collocation": "none", "radt.command": "train.py", **self.command(*command_s)}
        return self.close(self.run(name, samples, tags), command_s[1])

    def workload(self, name, device, end_s, mode, clients):
        """``clients``: (samples, command_s, tags) each; closed before the workload."""
        shared = {
            "radt.workload": name,
            "radt.collocation": mode,
            "radt.workload_runs": str(len(clients)),
        }
        parent = self.run(name, device, {**shared, "radt.devices": "0"})
        kids = []
        for letter, (samples, command_s, tags) in zip("AB", clients, strict=False):
            own = {
                **shared,
                **self.command(*command_s),
                "radt.letter": letter,
                "radt.command": f"train.py --job {letter}",
                "radt.devices": "0",
                **tags,
            }
            kids.append(self.run(f"{name}-{letter}", samples, own, parent))
        ids = [self.close(k, c[1][1]) for k, c in zip(kids, clients, strict=True)]
        return self.close(parent, end_s), ids


def build(client, uri):
    s = Study(client, uri)
    ids = {}
    # MPS pair. The GPU draws 60 W until 3 s (the clients start up: its idle floor), 300 W
    # while both run, 200 W once B is done (10 s). A: 100/s, epochs 4, 8, 12: window 4 → 12 s,
    # 800 examples; its processes use 60 % of the SMs. B: 50/s, epochs 4, 7, 10: window
    # 4 → 10 s, 300 examples; 20 % of the SMs; its command ends at 10 s. Neither has SM
    # samples from 6 to 8 s (NVML had none): split equally there.
    # Pieces of 0.1 s; 4 → 10 s: 30 J each = 6 J idle floor (3 J each) + 24 J split 3:1 or
    # 1:1. Without samples: (6.0, 6.1] … (7.7, 7.8], 18 pieces ((7.8, 7.9] takes the sample
    # at 8.0, 0.1 s after it, within 1.5 intervals). So 42 pieces at 3:1 and 18 at 1:1:
    #   A: 42 × (18 + 3) + 18 × (12 + 3) = 1152 J; B: 42 × (6 + 3) + 18 × 15 = 648 J;
    #   together 1800 J = 300 W × 6 s. Then 10 → 12 s A alone: 200 W × 2 s = 400 J.
    #   A: 1552 J over 800 examples = 1.94 J each; B: 648 J / 300 = 2.16 J each.
    #   Idle shares: A 60 × 3 J + 20 × 6 J = 300 J, B 180 J.
    gap = ((6.0, 8.0),)
    ids["mps"], (ids["mps_a"], ids["mps_b"]) = s.workload(
        "mps",
        power_steps(((0.0, 60.0), (3.0, 300.0), (10.0, 200.0)), 14.5) + rapl(0.0, 14.5),
        14.5,
        "mps",
        [
            (
                script(3.0, 12.0, 100.0, (4.0, 8.0, 12.0))
                + series("nvml/gpu0/proc/sm_pct", 3.0, 14.5, 60.0, drop=gap),
                (0.0, 14.5),
                {"radt.mps_thread_pct": "50"},
            ),
            (
                script(3.0, 10.0, 50.0, (4.0, 7.0, 10.0), count0=32)
                + series("nvml/gpu0/proc/sm_pct", 3.0, 10.0, 20.0, drop=gap),
                (0.0, 10.0),
                {"radt.mps_thread_pct": "50"},
            ),
        ],
    )
    # MIG 3g.20gb (GPU instance 2) + 4g.20gb (GPU instance 1), both 4 → 12 s, 300 W after
    # 60 W until 3 s. DCGM: instance 2 active 80 %, instance 1 50 %, every 0.5 s. Weights
    # 0.8 × 3 = 2.4 and 0.5 × 4 = 2.0: A gets 6/11 of the 1920 J above the floor, + 240 J:
    #   A 1047.27 + 240 = 1287.27 J, B 872.73 + 240 = 1112.73 J (2400 J together).
    # The same pair without DCGM: by compute slices, 3/7 and 4/7: A 822.86 + 240 = 1062.86 J.
    for name, dcgm in (("mig", True), ("mig-slices", False)):
        device = power_steps(((0.0, 60.0), (3.0, 300.0)), 12.5)
        if dcgm:
            device += series("dcgm/gpu0/gi2/gract_ratio", 3.0, 12.5, 0.8, every=0.5)
            device += series("dcgm/gpu0/gi1/gract_ratio", 3.0, 12.5, 0.5, every=0.5)
        ids[name], (ids[f"{name}_a"], ids[f"{name}_b"]) = s.workload(
            name,
            device,
            12.5,
            "mig",
            [
                (
                    script(3.0, 12.0, 100.0, (4.0, 8.0, 12.0)),
                    (0.0, 12.5),
                    {
                        "radt.mig_profile": "3g.20gb",
                        "radt.mig_instance": "GPU 0 GPU instance 2 compute instance 0 at 0:4",
                        "radt.devices": "MIG-aaaa",
                    },
                ),
                (
                    script(3.0, 12.0, 100.0, (4.0, 8.0, 12.0)),
                    (0.0, 12.5),
                    {
                        "radt.mig_profile": "4g.20gb",
                        "radt.mig_instance": "GPU 0 GPU instance 1 compute instance 0 at 4:4",
                        "radt.devices": "MIG-bbbb",
                    },
                ),
            ],
        )
    # Alone, with RAPL: window 4 → 12 s, 250/s: 2000 examples; GPU 200 W: 1600 J;
    # host = package 40 W + DRAM 5 W (the core zone is inside the package) = 360 J:
    # 0.18 J per example, total 0.98 J. Its power reads 10 % high: cross-check +10 %.
    ids["alone"] = s.lone(
        "alone",
        power_steps(((0.0, 200.0),), 12.6, reads=1.1)
        + rapl(0.0, 12.6)
        + script(2.0, 12.0, 250.0, (4.0, 8.0, 12.0)),
        (0.0, 12.5),
    )
    return s, ids


@pytest.fixture(scope="module")
def study(tmp_path_factory, template_db):
    """The study above, recorded once."""
    with recorded_store(tmp_path_factory, template_db, "attribution") as (client, uri):
        s, ids = build(client, uri)
        frame = summary("attribution", tracking_uri=uri)
        yield uri, s, ids, frame


def test_columns_are_the_summarys_and_kept_apart_from_the_measured_ones(study):
    _, _, _, frame = study
    assert list(frame.columns) == list(COLUMNS)
    assert set(ATTRIBUTION_COLUMNS) <= set(frame.columns)


def test_mps_clients_get_the_hand_computed_estimates_labelled_as_such(study):
    _, _, ids, frame = study
    a, b = row_of(frame, ids["mps_a"]), row_of(frame, ids["mps_b"])
    assert a["energy_j_est"] == pytest.approx(1552.0, rel=1e-6)
    assert b["energy_j_est"] == pytest.approx(648.0, rel=1e-6)
    assert a["energy_per_example_nj_est"] == pytest.approx(1.94e9, rel=1e-6)
    assert b["energy_per_example_nj_est"] == pytest.approx(2.16e9, rel=1e-6)
    for row in (a, b):
        assert row["energy_est_method"] == "sm_util+equal"
        assert math.isnan(row["energy_j"]) and row["energy_method"] == "none"  # not measured
        assert math.isnan(row["energy_per_example_nj"])
        assert row["idle_power_w"] == pytest.approx(60.0) and row["idle_method"] == "lowest_power"
        assert "estimated energy: sm_util over" in row["window_note"]
        assert "host energy (rapl) is the whole machine's" in row["window_note"]
        assert math.isnan(row["host_energy_j"])
    assert "sm_util over 70 %, equal over 30 % of the window" in b["window_note"]
    assert a["idle_energy_j"] == pytest.approx(300.0) and b["idle_energy_j"] == pytest.approx(180.0)
    provider = row_of(frame, ids["mps"])
    # the provider: 4 → 10 s, 1800 J measured (the clients' estimates there add up to it)
    assert provider["energy_j"] == pytest.approx(1800.0) and pd.isna(provider["energy_j_est"])
    assert provider["idle_energy_j"] == pytest.approx(360.0)
    # host: 45 W × 6 s; 900 examples (100 × 6 + 50 × 6)
    assert provider["host_energy_j"] == pytest.approx(270.0)
    assert provider["host_energy_per_example_nj"] == pytest.approx(0.3e9)
    assert provider["total_energy_per_example_nj"] == pytest.approx(2070.0 / 900 * 1e9)
    assert provider["total_energy_parts"] == "gpu+host"
    assert provider["energy_crosscheck_pct"] == pytest.approx(0.0, abs=1e-9)


def test_mig_clients_split_by_instance_activity_times_slices_else_by_slices(study):
    _, _, ids, frame = study
    a, b = row_of(frame, ids["mig_a"]), row_of(frame, ids["mig_b"])
    assert a["energy_j_est"] == pytest.approx(1920 * 6 / 11 + 240, rel=1e-6)
    assert b["energy_j_est"] == pytest.approx(1920 * 5 / 11 + 240, rel=1e-6)
    assert a["energy_est_method"] == b["energy_est_method"] == "mig_activity"
    assert a["energy_per_example_nj_est"] == pytest.approx(1e9 * a["energy_j_est"] / 800)
    plain_a, plain_b = row_of(frame, ids["mig-slices_a"]), row_of(frame, ids["mig-slices_b"])
    assert plain_a["energy_j_est"] == pytest.approx(1920 * 3 / 7 + 240, rel=1e-6)
    assert plain_b["energy_j_est"] == pytest.approx(1920 * 4 / 7 + 240, rel=1e-6)
    assert plain_a["energy_est_method"] == "mig_slices"
    provider = row_of(frame, ids["mig"])
    assert provider["energy_j"] == pytest.approx(a["energy_j_est"] + b["energy_j_est"])


def test_a_lone_run_gets_host_energy_and_a_crosscheck_that_flags_its_power(study):
    _, _, ids, frame = study
    alone = row_of(frame, ids["alone"])
    assert alone["energy_j"] == pytest.approx(1600.0) and alone["energy_method"] == "counter"
    assert alone["host_energy_j"] == pytest.approx(360.0)
    assert alone["host_energy_per_example_nj"] == pytest.approx(0.18e9)
    assert alone["total_energy_per_example_nj"] == pytest.approx(0.98e9)
    assert alone["energy_counter_j"] == pytest.approx(1600.0)
    assert alone["energy_power_integral_j"] == pytest.approx(1760.0)
    assert alone["energy_crosscheck_pct"] == pytest.approx(10.0)
    assert crosscheck_flagged(alone["energy_crosscheck_pct"])
    assert pd.isna(alone["energy_j_est"]) and pd.isna(alone["energy_est_method"])


def test_radt_runs_shows_host_energy_estimates_and_the_crosscheck(study):
    uri, _, ids, frame = study
    text = runs_table(frame)
    header = text.splitlines()[0]
    assert "host energy/example" in header and "est. energy/example" in header
    line = next(ln for ln in text.splitlines() if ln.startswith("alone"))
    assert "180 mJ" in line  # 0.18 J of host energy per example
    line = next(ln for ln in text.splitlines() if "A: mps-A" in ln)
    assert "1.94 J (sm_util+equal)" in line
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert run_runs(["-e", "attribution", "--tracking-uri", uri]) == 0
    assert "energy cross-check" in err.getvalue()
    assert "alone: the integral of power is 10.0 % above the energy counter" in err.getvalue()


def test_repeats_carry_the_estimates_and_their_method(study):
    _, _, _, frame = study
    table = repeats(frame)
    mig = table[(table["view"] == "client") & (table["configuration"] == "4g.20gb+3g.20gb")]
    assert set(mig["energy_est_method"]) == {"mig_activity, mig_slices"}
    assert "energy_per_example_nj_est_mean" in table.columns


def test_the_ui_shows_host_energy_and_the_estimates_labelled(study):
    from radt.frontend.charts import client_energy_figure, efficiency_figure
    from radt.frontend.pages.runs import grid_rows

    _, _, ids, frame = study
    rows = {r["run_id"]: r for r in grid_rows(frame)}
    assert rows[ids["alone"]]["host_energy_per_example_nj"] == pytest.approx(0.18e9)
    assert rows[ids["mps_a"]]["energy_est_method"] == "sm_util+equal"
    hover = " ".join(str(c) for t in efficiency_figure(frame).data for c in t.customdata[:, 3])
    assert "host (CPU+DRAM, whole machine): 180mJ per example, GPU+host 980mJ" in hover
    assert "+10.0 % off the counter" in hover
    fig = client_energy_figure(frame)
    estimated = [t for t in fig.data if t.name.endswith("est.")]
    assert {n for t in estimated for n in t.text} == {
        "mps-A",
        "mps-B",
        "mig-A",
        "mig-B",
        "mig-slices-A",
        "mig-slices-B",
    }
    assert all(t.marker.symbol.endswith("-open") for t in estimated)
    mps = next(t for t in estimated if "mps-A" in t.text)
    assert dict(zip(mps.text, mps.y, strict=True))["mps-A"] == pytest.approx(1.94, rel=1e-6)


# --------------------------------------------------------------------------- real radT, fake RAPL

# Once radT has the package, core and uncore counters open, the command raises package 0 at
# 40 W (core 0 at 25 W, inside it) for one second, reports 512 examples, and waits for radT to
# read the final values. The window runs from the first reported example (made once the
# counters are open: a bound at the command's start could fall before radT's first reading on a
# loaded machine) to the last, each 0.3 s (6 readings) away from the rise, so the counter is flat
# at both bounds; the host energy in it is the package's 40 J (the core zone is not added
# again): 40 J / 512 = 78.1 mJ per example.
RAPL_TRAIN = """
import os, sys, time
import radt
sys.path.insert(0, {fakes!r})
import powercap
classes, tree = sys.argv[1], os.path.realpath(sys.argv[1] + "/../..")

def opened():
    found = 0
    for fd in os.listdir(f"/proc/{{os.getppid()}}/fd"):
        try:
            target = os.readlink(f"/proc/{{os.getppid()}}/fd/{{fd}}")
        except OSError:
            continue
        found += target.startswith(tree) and target.endswith("/energy_uj")
    return found

deadline = time.monotonic() + 60
while opened() < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
radt.log_examples(0)
time.sleep(0.3)
powercap.advance(classes, {{"0": 40.0, "0:0": 25.0}}, seconds=1.0)
time.sleep(0.3)
radt.log_examples(512)
time.sleep(1.0)
"""


@pytest.mark.slow
def test_a_real_run_with_a_fake_powercap_tree_shows_host_energy_in_radt_runs(workspace):
    from conftest import FAKES, FIXTURES
    from radt.frontend.pages.runs import grid_rows
    from test_listener_rapl import powercap

    folder = workspace.root.parent / "powercap"
    folder.mkdir()
    root = powercap.build(FIXTURES / "powercap_info_i5_13500.txt", folder)
    workspace.script("train.py", RAPL_TRAIN.format(fakes=str(FAKES)))
    done = workspace.run(
        ["-e", "host", "-l", "rapl", "-o", f"rapl.root={root}", "--interval", "0.05"]
        + ["train.py", str(root)]
    )
    assert done.returncode == 0, done.stderr
    frame = summary("host", tracking_uri=workspace.uri)
    (run,) = [r for _, r in frame.iterrows()]  # a lone run: one row
    assert run["examples"] == 512
    assert run["host_energy_j"] == pytest.approx(40.0, abs=1e-6), run["window_note"]
    assert run["host_energy_per_example_nj"] == pytest.approx(40.0 / 512 * 1e9, rel=1e-6)
    assert pd.isna(run["energy_j"])  # no GPU here: the total is the host's alone
    assert run["total_energy_per_example_nj"] == pytest.approx(40.0 / 512 * 1e9, rel=1e-6)
    assert run["total_energy_parts"] == "host"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert run_runs(["-e", "host", "--tracking-uri", workspace.uri]) == 0
    header, first = out.getvalue().splitlines()[:2]
    assert "host energy/example" in header and "78.1 mJ" in first
    (row,) = [r for r in grid_rows(frame) if r["run_id"] == run["run_id"]]
    assert row["host_energy_per_example_nj"] == pytest.approx(40.0 / 512 * 1e9, rel=1e-6)
