"""``radt report`` on a study with known answers, recorded through the stand-ins.

The study (radT's recorder and closing steps, test_windows' ``Study``): one Job
(``train.py --epochs 3``), each configuration 3 repeats at a constant known power, every run's
window 4 → 12 s (epochs end at 4, 8 and 12 s):

- alone on the full GPU at full power (200 W): 240, 250 and 260 examples/s;
- alone capped at 150 W (150 W drawn): 246, 251 and 256 examples/s: within noise of alone in
  examples/s, 25 % less energy per example;
- naive x2 at full power (300 W drawn): both jobs at 150, 155 and 160 examples/s each;
- a failed run, and a run of another Job without a GPU listener (its energy missing).

Every figure below is computed by hand from those rates and powers.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_windows import COMMAND, Study, gpu, recorded_store, script

from radt.analysis.findings import Objective
from radt.analysis.report import report
from radt.cli.report import run_report
from radt.errors import RadtError, UsageError
from radt.launch.environment import ENV_FOLDER, gpu_facts, library_versions

ALONE = (240.0, 250.0, 260.0)
CAPPED = (246.0, 251.0, 256.0)
PAIR = (150.0, 155.0, 160.0)
P_ALONE, P_CAPPED, P_PAIR = 200.0, 150.0, 300.0
WINDOW_S = 8.0
JOB = COMMAND
EPOCHS = (4.0, 8.0, 12.0)


def mean(values) -> float:
    return sum(values) / len(values)


# the baseline: the job alone at full power
T_BASE = mean([1 / r for r in ALONE])  # s per example
E_BASE = mean([P_ALONE / r for r in ALONE])  # J per example


FAKE_SMI = Path(__file__).parent / "fakes" / "nvidia-smi"
PYTHON = {"radt.python": "3.11.9"}
# the 14 runs that ran a command: alone and capped record the GPU (the stand-in A100, whose
# `nvidia-smi -q` says FB Memory Total 40960 MiB) and libraries as tags; the failed run predates
# those tags (its artifacts hold them); the 6 pair runs and the quiet run record none.
TORCH_231 = {"radt.libraries": "torch==2.3.1 mlflow==2.14.1"}
TORCH_240 = {"radt.libraries": "torch==2.4.0 mlflow==2.14.1"}


def lone(s, name, rate, watts, **tags):
    return s.lone(
        name,
        gpu(0.2, 12.6, watts, 0.0) + script(2.0, 12.0, rate, epochs=EPOCHS),
        (0.0, 12.5),
        radt__command=COMMAND,
        **tags,
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory, template_db):
    with recorded_store(tmp_path_factory, template_db, "report") as (client, uri):
        s = Study(client, uri, experiment="sharing-study")
        client.set_experiment_tag(s.exp, "mlflow.note.content", "Is naive sharing worth it?")
        smi_q = subprocess.run(
            [sys.executable, str(FAKE_SMI), "-q"], capture_output=True, text=True, check=True
        ).stdout
        machine = {**gpu_facts(smi_q), **PYTHON}
        ids = {"alone": [], "capped": [], "pair": []}
        for i, rate in enumerate(ALONE):
            ids["alone"].append(lone(s, f"alone-{i}", rate, P_ALONE, **machine, **TORCH_231))
        for i, rate in enumerate(CAPPED):
            ids["capped"].append(
                lone(
                    s,
                    f"capped-{i}",
                    rate,
                    P_CAPPED,
                    radt__power_limit_w="150",
                    **machine,
                    **TORCH_240,
                )
            )
        for i, rate in enumerate(PAIR):
            pair, _ = s.workload(
                f"pair-{i}",
                gpu(0.0, 12.6, P_PAIR, 0.0),
                12.6,
                [
                    (COMMAND, script(2.0, 12.0, rate, epochs=EPOCHS), (0.0, 12.5)),
                    (f"{COMMAND} --seed 1", script(2.0, 12.0, rate, epochs=EPOCHS), (0.0, 12.5)),
                ],
            )
            ids["pair"].append(pair)
        failed = s.run(
            "crashed",
            gpu(0.2, 5.0, P_ALONE, 0.0),
            s.tags((0.0, 5.0), radt__collocation="none", radt__command=COMMAND, **PYTHON),
        )
        env = tmp_path_factory.mktemp("environment")
        (env / "nvidia-smi-q.txt").write_text(smi_q)
        (env / "pip-freeze.txt").write_text("mlflow==2.14.1\nnumpy==1.26.4\ntorch==2.3.1\n")
        client.log_artifacts(failed.run_id, str(env), ENV_FOLDER)
        ids["failed"] = s.close(failed, 5.0, status="FAILED")
        ids["quiet"] = s.lone(
            "no-gpu",
            script(2.0, 12.0, 100.0, epochs=EPOCHS),
            (0.0, 12.5),
            radt__command="other.py",
        )
        yield client, uri, ids


@pytest.fixture(scope="module")
def made(study):
    _, uri, _ = study
    return report("sharing-study", tracking_uri=uri, objective="slowdown:1.2")


def finding(made, configuration, power="default"):
    rows = made.findings[
        (made.findings["configuration"] == configuration)
        & (made.findings["power_limit_w"].astype(str).str.removesuffix(".0") == str(power))
    ]
    assert len(rows) == 1, made.findings[["configuration", "power_limit_w", "sentence"]]
    return rows.iloc[0]


def test_findings_equal_the_hand_values_and_the_within_noise_pair_is_not_claimed(made):
    pair = finding(made, "naive x2")
    # provider: 2 r examples/s over the 8 s window, 300 W: against alone's mean time per example
    throughput = mean([2 * r * T_BASE for r in PAIR])
    energy = mean([P_PAIR / (2 * r) / E_BASE for r in PAIR])
    assert pair["throughput_pct"] == pytest.approx(100 * (throughput - 1))
    assert pair["energy_pct"] == pytest.approx(100 * (energy - 1))
    assert (pair["throughput_verdict"], pair["energy_verdict"]) == ("more", "more")
    assert pair["n"] == 3 and pair["baseline_n"] == 3
    assert f"{100 * (throughput - 1):.1f} % more examples/s" in pair["sentence"]
    assert f"{100 * (energy - 1):.1f} % more energy per example" in pair["sentence"]

    capped = finding(made, "none", 150)
    energy = mean([P_CAPPED / r / E_BASE for r in CAPPED])
    assert capped["energy_pct"] == pytest.approx(100 * (energy - 1))
    assert capped["energy_verdict"] == "less"
    # 246–256/s against 240–260/s: the repeats overlap
    assert capped["throughput_verdict"] == "within noise"
    assert "examples/s within noise" in capped["sentence"]
    assert "more examples/s" not in capped["sentence"]
    assert "fewer examples/s" not in capped["sentence"]
    assert f"{100 * (1 - energy):.1f} % less energy per example" in capped["sentence"]
    # ranked: the claimed gain in examples/s first (the objective's figure), then energy
    ranks = made.findings.set_index("configuration")["rank"]
    assert ranks["naive x2"] < ranks["none"]
    assert made.findings.iloc[-1]["kind"] == "frontier"
    # the runs behind each finding
    assert set(pair["run_ids"].split()) == set(made.summary.pipe(workloads, "naive x2"))
    assert set(pair["baseline_run_ids"].split()) == set(
        made.summary.pipe(lone_runs, "none", "default")
    )


def workloads(frame, configuration):
    return frame[(frame["level"] == "provider") & (frame["configuration"] == configuration)][
        "run_id"
    ].tolist()


def lone_runs(frame, configuration, power):
    rows = frame[(frame["level"] == "run") & (frame["status"] == "FINISHED")]
    rows = rows[rows["job"] == JOB]
    if power == "default":
        rows = rows[rows["power_limit_w"].isna()]
    return rows["run_id"].tolist()


def test_what_to_run_is_the_hand_picked_answer(made):
    plan = made.what_to_run.set_index(["objective", "job"])
    best = plan.loc[("throughput", JOB)]
    assert best["winner"] == "naive x2 at full power"
    assert best["runner_up"] == "the full GPU alone at 150 W"
    throughput = mean([2 * r * T_BASE for r in PAIR])
    capped = mean([T_BASE * r for r in CAPPED])
    assert best["winner_value"] == pytest.approx(throughput)
    assert best["margin_pct"] == pytest.approx(100 * (throughput / capped - 1))
    assert best["margin_verdict"] == "ahead"
    cheap = plan.loc[("energy", JOB)]
    assert cheap["winner"] == "the full GPU alone at 150 W"
    assert cheap["runner_up"] == "the full GPU alone at full power"
    energy = mean([P_CAPPED / r / E_BASE for r in CAPPED])
    assert cheap["margin_pct"] == pytest.approx(100 * (1 / energy - 1))
    # naive x2 slows each job 1/(r T_BASE) = 1.56–1.66×: out; capped within noise of alone
    bound = plan.loc[("slowdown:1.2", JOB)]
    assert bound["winner"] == "the full GPU alone at 150 W"
    assert bound["runner_up"] == "the full GPU alone at full power"
    assert bound["margin_verdict"] == "within noise"
    assert "within noise of the runner-up" in bound["sentence"]


def test_every_number_on_the_page_is_the_hand_value(made):
    page, markdown = made.html, made.markdown()
    rates = [2 * r for r in PAIR]
    energies = [P_PAIR / (2 * r) for r in PAIR]
    expected = [
        # provider view: examples/s, J/example (mean (min–max))
        f"{mean(rates):.1f} ({min(rates):.1f}–{max(rates):.1f})",
        f"{mean(energies):.4f} ({min(energies):.4f}–{max(energies):.4f})",
        f"{mean(ALONE):.1f} ({min(ALONE):.1f}–{max(ALONE):.1f})",
        f"{E_BASE:.4f} ({P_ALONE / 260:.4f}–{P_ALONE / 240:.4f})",
        # client view: each job of the pair, ms per example and its slowdown
        f"{1e3 * mean([1 / r for r in PAIR]):.3f} ({1e3 / 160:.3f}–{1e3 / 150:.3f})",
        f"{mean([1 / r / T_BASE for r in PAIR]):.3f} "
        f"({1 / 160 / T_BASE:.3f}–{1 / 150 / T_BASE:.3f})",
        # normalised: the pair's examples/s over alone's
        f"{mean([2 * r * T_BASE for r in PAIR]):.3f} "
        f"({2 * 150 * T_BASE:.3f}–{2 * 160 * T_BASE:.3f})",
    ]
    for text in expected:
        assert text in page, text
        assert text in markdown, text
    for _, row in made.findings.iterrows():
        assert row["sentence"] in markdown
    # the study, as recorded
    assert "sharing-study: Is naive sharing worth it?" in page
    assert "full power (default) and 150 W" in page


def test_failed_runs_and_missing_figures_are_named_with_their_reason(made, study):
    _, _, ids = study
    problems = made.problems.set_index("reason")
    failed = problems.loc["failed: no reason recorded"]
    assert (failed["what"], failed["run_ids"], failed["count"]) == (
        "not in the figures",
        ids["failed"],
        1,
    )
    no_gpu = problems.loc[
        "no GPU listener (nvml, dcgm, smi) recorded: no GPU energy, power or utilisation"
    ]
    assert (no_gpu["what"], no_gpu["run_ids"]) == ("missing figures", ids["quiet"])
    for reason in problems.index:
        assert reason.replace("'", "&#x27;") in made.html
        assert reason in made.markdown()
    # the Job without energy: its throughput answer stands, its energy answer says why not
    plan = made.what_to_run.set_index(["objective", "job"])
    assert plan.loc[("throughput", "other.py"), "winner"] == "the full GPU alone at full power"
    assert "missing figures" in plan.loc[("energy", "other.py"), "sentence"]
    assert not any(ids["failed"] in r for r in made.findings["run_ids"])
    assert made.study["runs"] == 17 and made.study["repeats"] == "1–3"


def test_the_study_states_gpu_memory_and_library_versions_with_their_run_counts(made, study):
    _, _, ids = study
    facts = made.study
    # 7 runs record the stand-in A100 (6 as tags, the failed run in its artifacts), 7 nothing
    assert facts["gpus"] == "NVIDIA A100-SXM4-40GB (7 runs), not recorded (7 runs)"
    assert facts["gpu_memory"] == "40960 MiB (40.0 GiB) (7 runs), not recorded (7 runs)"
    assert facts["driver"] == "535.129.03 (7 runs), not recorded (7 runs)"
    assert facts["cuda"] == "12.2 (7 runs), not recorded (7 runs)"
    assert facts["python"] == "3.11.9 (7 runs), not recorded (7 runs)"
    assert facts["mig_profiles"] == "no MIG run"
    # alone 3 + the failed run's pip freeze: 2.3.1; capped 3: 2.4.0; transformers & co: none
    assert facts["libraries"] == {
        "torch": "2.3.1 (4 runs), 2.4.0 (3 runs), not recorded (7 runs)",
        "mlflow": "2.14.1 (7 runs), not recorded (7 runs)",
    }
    assert any(ids["failed"] in note and ENV_FOLDER in note for note in made.notes)
    page = html.unescape(made.html)
    assert "<th>GPU memory</th><td>40960 MiB (40.0 GiB) (7 runs)" in page
    assert "<th>torch</th><td>2.3.1 (4 runs), 2.4.0 (3 runs), not recorded (7 runs)" in page
    assert "transformers" not in page


def test_one_agreed_value_is_stated_once_and_a_missing_one_is_not_recorded():
    from radt.analysis.report import memory_words, tally

    assert tally(["2.3.1", "2.3.1"]) == "2.3.1"
    assert tally([None, "", float("nan")]) == tally([]) == "not recorded"
    assert tally(["a", "b", "b", None]) == "b (2 runs), a (1 run), not recorded (1 run)"
    assert memory_words("81559, 81559") == "2 × 81559 MiB (79.6 GiB)"  # 81559 / 1024
    assert memory_words("40960, 81920") == "40960 MiB (40.0 GiB), 81920 MiB (80.0 GiB)"
    assert memory_words(None) is None
    pins = "numpy==1.26.4\nPyTorch_Lightning==2.2.0\ntorch==2.3.1+cu121\n"
    assert library_versions(pins) == "torch==2.3.1+cu121 pytorch-lightning==2.2.0"
    assert library_versions("numpy==1.26.4\n") == "none"


def test_links_go_to_the_ui_when_its_address_is_given(study):
    _, uri, ids = study
    plain = report("sharing-study", tracking_uri=uri)
    for page in (plain.html, plain.markdown()):  # without an address, ids are plain text
        assert "timeseries?runs=" not in page and "/#/experiments/" not in page
    # a radt ui: each run to its time series, a finding's runs to their overlay
    linked = report("sharing-study", tracking_uri=uri, ui="http://127.0.0.1:8050/")
    pair = ids["pair"][0]
    href = f"http://127.0.0.1:8050/timeseries?runs={pair}"
    assert f'href="{href}"' in linked.html
    assert f"[`{pair}`]({href})" in linked.markdown()
    several = next(r for r in linked.findings["run_ids"] if len(r.split()) > 1).split()
    overlay = "http://127.0.0.1:8050/timeseries?runs=" + ",".join(several)
    assert f'(<a href="{overlay}">overlay</a>)' in linked.html
    assert f"([overlay]({overlay}))" in linked.markdown()
    # an MLflow UI: each run to its MLflow page; a radt ui given too is preferred
    mlflow_ui = "http://mlflow.example:5000/"
    linked = report("sharing-study", tracking_uri=uri, mlflow_ui=mlflow_ui)
    exp = linked.experiments[0]["id"]
    href = f"http://mlflow.example:5000/#/experiments/{exp}/runs/{pair}"
    assert f'href="{href}"' in linked.html
    assert f"]({href})" in linked.markdown()
    assert "overlay" not in linked.markdown()
    both = report("sharing-study", tracking_uri=uri, ui="http://h:8050", mlflow_ui=mlflow_ui)
    assert "mlflow.example" not in both.html
    assert f"http://h:8050/timeseries?runs={pair}" in both.html


def test_the_report_asks_the_store_for_the_experiments_runs_once(study, monkeypatch, tmp_path):
    """The summary, the phases and the study facts share one search of the experiment."""
    from mlflow import MlflowClient

    _, uri, _ = study
    searches = []
    real = MlflowClient.search_runs

    def counted(self, experiment_ids, filter_string="", *args, **kwargs):
        searches.append((tuple(experiment_ids), filter_string))
        return real(self, experiment_ids, filter_string, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "search_runs", counted)
    again = report("sharing-study", tracking_uri=uri, cache_dir=tmp_path)
    whole = [s for s in searches if s[1] == ""]
    assert len(whole) == 1, searches
    assert len(again.summary) == 17  # the same study as every other test here reads


def test_the_command_writes_html_and_markdown_whose_links_and_images_resolve(
    study, tmp_path, capsys
):
    _, uri, _ = study
    out = tmp_path / "page.html"
    assert run_report(["-e", "sharing-study", "--tracking-uri", uri, "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "naive x2 at full power" in printed.out
    assert str(out) in printed.err
    text = out.read_text()
    assert "<script" in text
    assert not re.search(r"<script[^>]*\bsrc=|<link[^>]*\bhref=|<img[^>]*\bsrc=", text)
    md = tmp_path / "page.md"
    assert run_report(["-e", "sharing-study", "--tracking-uri", uri, "-o", str(md)]) == 0
    body = md.read_text()
    targets = re.findall(r"\]\(([^)]+)\)", body)
    assert targets, "the Markdown links its charts (images) or the HTML page"
    for target in targets:
        assert (md.parent / target).is_file(), target
    images = [t for t in targets if t.endswith(".svg")]
    for image in images:
        svg = (md.parent / image).read_text()
        assert svg.startswith("<svg") and "energy per example (J)" in svg or "slowdown" in svg


def test_bad_arguments_are_one_line_each(study, tmp_path):
    _, uri, _ = study
    with pytest.raises(UsageError, match="slowdown:BOUND"):
        Objective.parse("slowdown:fast")
    with pytest.raises(UsageError, match="does not exist"):
        run_report(["-e", "sharing-study", "--tracking-uri", uri, "-o", str(tmp_path / "x/y.md")])
    with pytest.raises(RadtError, match="nope"):
        report("nope", tracking_uri=uri)
    client, _, _ = study
    client.create_experiment("empty-study")
    with pytest.raises(UsageError, match="empty-study has no runs: record a study first"):
        report("empty-study", tracking_uri=uri)


@pytest.mark.browser
def test_the_html_opens_offline_with_no_console_error_and_no_request(made, tmp_path):
    from chromium import CHROMIUM, launch

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    page_file = Path(tmp_path / "report.html")
    made.write(page_file)
    errors, requests = [], []
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            page.set_default_timeout(180_000)  # 4.6 MB of inline plotly on a loaded machine
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_file.as_uri(), timeout=180_000)
            page.wait_for_selector("#chart-slowdown .main-svg")
            assert page.locator(".js-plotly-plot").count() == len(made.charts())
            titles = page.eval_on_selector_all(
                ".g-xtitle text, .g-ytitle text", "found => found.map(e => e.textContent)"
            )
            assert "slowdown (× time per example alone)" in titles
            assert "time per example (ms), provider" in titles
        finally:
            browser.close()
    assert errors == []
    assert requests == [page_file.as_uri()]


def dash_call(client, outputs: list[str], inputs: dict, state: dict | None = None, changed=None):
    """One Dash callback request of several outputs, as the page's JavaScript sends it."""
    import json

    def spec(items: dict) -> list[dict]:
        return [
            {"id": key.split(".")[0], "property": key.split(".")[1], "value": value}
            for key, value in items.items()
        ]

    body = {
        "output": ".." + "...".join(outputs) + ".." if len(outputs) > 1 else outputs[0],
        "outputs": [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in outputs]
        if len(outputs) > 1
        else {"id": outputs[0].split(".")[0], "property": outputs[0].split(".")[1]},
        "inputs": spec(inputs),
        "state": spec(state or {}),
        "changedPropIds": [changed or next(iter(inputs))],
    }
    answer = client.post("/_dash-update-component", json=body)
    assert answer.status_code == 200, answer.data[:500]
    return json.loads(answer.data)["response"]


def test_the_report_page_shows_the_findings_and_downloads_both_pages(study, made):
    import base64
    import io
    import zipfile

    from radt.frontend.app import create_app

    _, uri, _ = study
    client = create_app(uri).server.test_client()
    exp = made.experiments[0]["id"]
    shown = dash_call(
        client,
        ["rep-note.children", "rep-findings.children", "rep-plan.children"],
        {"rep-experiments.value": [exp], "rep-objective.value": "slowdown:1.2"},
    )
    sentences = [item["props"]["children"] for item in shown["rep-findings"]["children"]]
    assert sentences == made.findings["sentence"].tolist()
    plan = [item["props"]["children"] for item in shown["rep-plan"]["children"]]
    assert plan == made.what_to_run["sentence"].tolist()
    state = {"rep-experiments.value": [exp], "rep-objective.value": "slowdown:1.2"}
    clicks = {"rep-html.n_clicks": 1, "rep-md.n_clicks": 0}
    page = dash_call(client, ["rep-download.data"], clicks, state, "rep-html.n_clicks")
    assert page["rep-download"]["data"]["filename"] == "radt-report.html"
    sentence = html.escape(made.findings["sentence"].iloc[0], quote=True)
    assert sentence in page["rep-download"]["data"]["content"]
    clicks = {"rep-html.n_clicks": 1, "rep-md.n_clicks": 1}
    md = dash_call(client, ["rep-download.data"], clicks, state, "rep-md.n_clicks")
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(md["rep-download"]["data"]["content"])))
    names = archive.namelist()
    assert "report.md" in names
    body = archive.read("report.md").decode()
    links = re.findall(r"\]\(([^)#]+)\)", body)
    # the run ids link back to this UI (the test client's address); every other link is a file
    assert any(t.startswith("http://localhost/timeseries?runs=") for t in links), links
    for target in links:
        assert target.startswith("http://localhost/timeseries?runs=") or target in names, target


def point_row(job, configuration, power, throughput, energy, n=3, half=0.02):
    """A provider-view repeats row: normalised figures' mean and min–max (± ``half``)."""
    row = {
        "view": "provider",
        "job": job,
        "configuration": configuration,
        "power_limit_w": power,
        "gpu_clock_mhz": "default",
        "basis": "examples",
        "count": n,
        "run_ids": f"{job}-{configuration}-{power}",
    }
    for name, value in (("examples_per_s_norm", throughput), ("energy_per_example_norm", energy)):
        row.update(
            {f"{name}_mean": value, f"{name}_min": value - half, f"{name}_max": value + half}
        )
    return row


def test_what_holds_at_every_power_limit_or_for_every_job_is_said_once():
    import pandas as pd

    from radt.analysis.findings import findings

    rows = [point_row(job, "none", "default", 1.0, 1.0) for job in ("a", "b", "c")]
    rows += [
        # a: naive x2 more examples/s and less energy at both power limits
        point_row("a", "naive x2", "default", 1.20, 0.90),
        point_row("a", "naive x2", "200", 1.10, 0.80),
        # b and c: mps x2 the same verdicts for both Jobs; mig differs (c within noise)
        point_row("b", "mps x2", "default", 1.30, 0.70),
        point_row("c", "mps x2", "default", 1.40, 0.75),
        point_row("b", "3g.40gb+3g.40gb", "default", 1.05, 0.95),
        point_row("c", "3g.40gb+3g.40gb", "default", 1.01, 0.95),
    ]
    found = findings(pd.DataFrame(rows)).set_index("kind")
    power = found.loc["every power"]
    assert power["sentence"].startswith(
        "a: at every power limit (full power, 200 W), naive x2 gives 10.0–20.0 % more "
        "examples/s, 10.0–20.0 % less energy per example"
    )
    assert "±5.0 % examples/s, ±5.0 % energy" in power["sentence"]
    jobs = found.loc["every Job"]
    assert jobs["sentence"].startswith(
        "For every Job (b, c), mps x2 at full power gives 30.0–40.0 % more examples/s, "
        "25.0–30.0 % less energy per example"
    )
    spread = found.loc["spread across Jobs"]
    assert spread["sentence"] == (
        "Between Jobs (b, c), 3g.40gb+3g.40gb at full power differs: against each Job alone on "
        "the full GPU at full power, examples/s +1.0 to +5.0 % (±2.0 %), energy per example "
        "-5.0 to -5.0 % (±0.0 %)."
    )
    # each point stated once: the covered ones have no finding of their own
    assert "point" not in found.index or not any(
        c in ("naive x2", "mps x2") for c in found.loc[["point"], "configuration"]
    )
    # b's and c's mig points stay stated on their own: c's examples/s within noise
    points = found.loc[["point"]].set_index("job")
    assert points.loc["c", "throughput_verdict"] == "within noise"
    assert points.loc["b", "throughput_verdict"] == "more"
    # ranked by the claimed gain in examples/s: mps (every Job) before naive (every power)
    order = list(found.reset_index().sort_values("rank")["kind"])
    assert order.index("every Job") < order.index("every power") < order.index("spread across Jobs")
