"""``radt report``: a study's findings, computed from its runs, as one page to share.

:func:`report` reads the experiments' figure table once (:func:`radt.summary`), and draws every
section from it: the repeats (:func:`radt.repeats`, FINISHED runs), the frontier
(:func:`radt.analysis.frontier.frontier_table`), the phases (:func:`radt.phases`), the
findings and what to run (:mod:`radt.analysis.findings`). It returns a :class:`Report`: the
tables as data, and the page as HTML (one file, plotly embedded: it opens offline) or
Markdown (its charts as SVG files beside it, exported by kaleido through the local Chromium;
without kaleido the Markdown links to the HTML's interactive charts instead, and says so).
"""

from __future__ import annotations

import html as _html
import logging
import math
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from radt.analysis.findings import (
    BASELINE_WORDS,
    MIN_REPEATS,
    Objective,
    findings,
    power_words,
    row_setting,
    what_to_run,
)
from radt.errors import RadtError, UsageError
from radt.launch.environment import (
    ENV_FOLDER,
    PIP_FREEZE,
    SMI_Q,
    STUDY_LIBRARIES,
    gpu_facts,
    library_versions,
)
from radt.plans.columns import JOB
from radt.tags import (
    MLFLOW_NOTE,
    RADT_CUDA_VERSION,
    RADT_GPU_DRIVER,
    RADT_GPU_MEMORY_MIB,
    RADT_GPUS,
    RADT_LIBRARIES,
    RADT_NOTE,
    RADT_PYTHON,
    RADT_STOP_REASON,
    RADT_VERSION,
    RunKind,
    RunTree,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

FORMATS = ("html", "md")


@dataclass
class Report:
    """A study's report: its tables as data and its page.

    ``findings`` (:data:`radt.analysis.findings.FINDING_COLUMNS`) and ``what_to_run``
    (:data:`radt.analysis.findings.PLAN_COLUMNS`) are the page's statements; ``summary``,
    ``repeats``, ``frontier`` and ``phases`` the tables they are drawn from; ``problems``
    the runs that failed or miss figures, with the reason; ``study`` the facts of the study.
    """

    experiments: list[dict]
    study: dict
    summary: pd.DataFrame
    repeats: pd.DataFrame
    frontier: pd.DataFrame
    phases: pd.DataFrame
    findings: pd.DataFrame
    what_to_run: pd.DataFrame
    problems: pd.DataFrame
    objective: Objective
    ui: str | None = None
    """The address of a ``radt ui`` serving the same store (run ids link to its pages)."""
    mlflow_ui: str | None = None
    """The address of an MLflow UI serving the same store (used when ``ui`` is not given)."""
    notes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ pages

    @property
    def html(self) -> str:
        """The page as one self-contained HTML file (plotly's script embedded)."""
        return render_html(self)

    def markdown(self, images: dict[str, str] | None = None, html_page: str = "report.html") -> str:
        """The page as Markdown; ``images``: chart name → path of its image (relative to the
        Markdown file); without, the charts are named with a link to the HTML page
        ``html_page`` (relative to the Markdown file)."""
        return render_markdown(self, images, html_page)

    def charts(self) -> dict[str, object]:
        """The page's charts (plotly figures), by name; every axis has its title."""
        return charts(self)

    def write(self, path: str | Path, fmt: str | None = None) -> list[Path]:
        """Write the page to ``path`` (``fmt``: ``html`` or ``md``, else from the suffix);
        returns the files written (a Markdown page's charts beside it, in ``<stem>_files/``)."""
        path = Path(path)
        fmt = fmt or ("md" if path.suffix.lower() in (".md", ".markdown") else "html")
        if fmt not in FORMATS:
            raise UsageError(f"--format takes html or md, not {fmt!r}")
        if fmt == "html":
            path.write_text(self.html, encoding="utf-8")
            return [path]
        figures = self.charts()
        folder = path.with_name(f"{path.stem}_files")
        images = export_images(figures, folder)
        written = [path]
        if images:
            written += [folder / Path(p).name for p in images.values()]
            relative = {name: f"{folder.name}/{Path(p).name}" for name, p in images.items()}
            path.write_text(self.markdown(relative), encoding="utf-8")
        else:
            page = path.with_suffix(".html")
            page.write_text(self.html, encoding="utf-8")
            written.append(page)
            path.write_text(self.markdown(None, page.name), encoding="utf-8")
        return written


# --------------------------------------------------------------------------- data


def report(
    experiments: str | Sequence[str],
    *,
    objective: str | Objective | None = None,
    tracking_uri: str | None = None,
    ui: str | None = None,
    mlflow_ui: str | None = None,
    cache_dir: Path | None = None,
) -> Report:
    """The report of one or more experiments (names or ids): their findings as a table and
    the page as a string (:class:`Report`).

    Args:
        experiments: the study's experiments.
        objective: ``throughput`` (default), ``energy`` or ``slowdown:BOUND``: what ranks
            the findings first; a slowdown bound adds its answer to what to run.
        tracking_uri: else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.
        ui: the address of a ``radt ui`` serving the same store: each run id links to its
            time series there (``UI/timeseries?runs=RUN``), and each finding's runs to their
            overlay.
        mlflow_ui: the address of an MLflow UI serving the same store: without ``ui``, each
            run id links to its MLflow page (``UI/#/experiments/ID/runs/RUN``).
        cache_dir: as for :func:`radt.summary`.
    """
    from radt.analysis.loadruns import searches_shared

    with searches_shared():
        made = _report(experiments, objective, tracking_uri, cache_dir)
    made.ui = ui.rstrip("/") if ui else None
    made.mlflow_ui = mlflow_ui.rstrip("/") if mlflow_ui else None
    return made


def _report(experiments, objective, tracking_uri, cache_dir) -> Report:
    import pandas as pd

    from radt.analysis.frontier import frontier_table
    from radt.analysis.loadruns import find_experiment, open_client, search_all
    from radt.analysis.summary import repeats, summary

    goal = objective if isinstance(objective, Objective) else Objective.parse(objective)
    names = [experiments] if isinstance(experiments, str) else list(experiments)
    if not names:
        raise UsageError("name at least one experiment (-e NAME)")
    client = open_client(tracking_uri)
    infos, frames, runs, notes = [], [], [], []
    for name in dict.fromkeys(names):
        exp = find_experiment(client, name)
        infos.append(
            {
                "id": exp.experiment_id,
                "name": exp.name,
                "description": (exp.tags or {}).get(MLFLOW_NOTE),
            }
        )
        frames.append(summary(exp.experiment_id, tracking_uri=tracking_uri, cache_dir=cache_dir))
        runs.extend(search_all(client, [exp.experiment_id]))
    frame = (
        pd.concat([f for f in frames if not f.empty], ignore_index=True)
        if any(not f.empty for f in frames)
        else frames[0]
    )
    if frame.empty:
        raise UsageError(
            f"{_listing([i['name'] for i in infos])} has no runs: record a study first "
            f"(radt study.yaml), then report it"
        )
    finished = frame[frame["status"] == "FINISHED"]
    table = repeats(finished)
    front = frontier_table(frame)
    phase_table = _phases(infos, tracking_uri, cache_dir, notes)
    found = findings(table, front, goal)
    plan = what_to_run(table, goal)
    return Report(
        experiments=infos,
        study=study_facts(frame, runs, table, client=client, notes=notes),
        summary=frame,
        repeats=table,
        frontier=front,
        phases=phase_table,
        findings=found,
        what_to_run=plan,
        problems=problems(frame, runs),
        objective=goal,
        notes=notes,
    )


def _phases(infos, tracking_uri, cache_dir, notes: list[str]):
    import pandas as pd

    from radt.analysis.phases import TABLE_COLUMNS, phases

    parts = []
    for info in infos:
        try:
            parts.append(phases(info["id"], tracking_uri=tracking_uri, cache_dir=cache_dir))
        except RadtError as exc:
            notes.append(f"energy per phase of {info['name']}: not read ({exc})")
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TABLE_COLUMNS)


def _listing(items: Iterable[str]) -> str:
    items = [str(i) for i in items if i not in (None, "")]
    if len(items) <= 1:
        return "".join(items) or "-"
    return ", ".join(items[:-1]) + " and " + items[-1]


def _distinct(values) -> list:
    out = []
    for value in values:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if value not in out:
            out.append(value)
    return out


NOT_RECORDED = "not recorded"
NOT_INSTALLED = "not installed"


def tally(values: Iterable[str | None]) -> str:
    """One value when every run agrees; else each distinct value with how many runs have it,
    the commonest first (a run without one: ``not recorded``, last)."""
    counts = Counter(
        NOT_RECORDED if value is None or _nat(value) or value == "" else str(value)
        for value in values
    )
    if len(counts) <= 1:
        return next(iter(counts), NOT_RECORDED)
    ranked = sorted(counts.items(), key=lambda item: (item[0] == NOT_RECORDED, -item[1]))
    return ", ".join(f"{value} ({n} run{'' if n == 1 else 's'})" for value, n in ranked)


def memory_words(tag: str | None) -> str | None:
    """A :data:`RADT_GPU_MEMORY_MIB` value in words: ``40960 MiB (40.0 GiB)``, ``2 × …`` for
    GPUs alike; None for a run without one."""
    if not tag:
        return None
    each = [int(part) for part in tag.split(",") if part.strip().isdigit()]
    if not each:
        return None
    words = [f"{mib} MiB ({mib / 1024:.1f} GiB)" for mib in each]
    if len(set(each)) == 1 and len(each) > 1:
        return f"{len(each)} × {words[0]}"
    return ", ".join(words)


def _libraries(tag: str | None) -> dict[str, str] | None:
    if tag is None:
        return None
    pins = dict(pin.partition("==")[::2] for pin in tag.split() if "==" in pin)
    return {name: pins.get(name, NOT_INSTALLED) for name in STUDY_LIBRARIES}


def _environment_tags(runs: Sequence, client, notes: list[str]) -> list[dict]:
    """The tags of the runs that ran a command (not workloads). The first run recorded by a
    radT older than :data:`RADT_GPU_MEMORY_MIB` and :data:`RADT_LIBRARIES` has them filled in
    from its environment artifacts: read once per report, never per run."""
    tree = RunTree(runs)
    ran = [run for run in runs if tree.kind(run) != RunKind.WORKLOAD]
    tags = [dict(run.data.tags) for run in ran]
    older = [
        i
        for i, t in enumerate(tags)
        if RADT_PYTHON in t
        and (RADT_LIBRARIES not in t or (RADT_GPUS in t and RADT_GPU_MEMORY_MIB not in t))
    ]
    if older and client is not None:
        first = older[0]
        read = _artifact_tags(client, ran[first].info.run_id)
        tags[first] = {**read, **tags[first]}
        if read:
            rest = len(older) - 1
            more = f"; {rest} more such run{'' if rest == 1 else 's'}: {NOT_RECORDED}"
            notes.append(
                f"GPU memory and library versions of run {ran[first].info.run_id} read from its "
                f"artifacts ({ENV_FOLDER}), recorded before radT tagged them"
                + (more if rest else "")
            )
    return tags


def _artifact_tags(client, run_id: str) -> dict[str, str]:
    """The GPU and library tags from a run's ``nvidia-smi -q`` and ``pip freeze`` artifacts
    (those it has)."""
    from mlflow.exceptions import MlflowException

    readers = (
        (SMI_Q, gpu_facts),
        (PIP_FREEZE, lambda text: {RADT_LIBRARIES: library_versions(text)}),
    )
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, read in readers:
            try:
                path = client.download_artifacts(run_id, f"{ENV_FOLDER}/{name}", scratch)
                found.update(read(Path(path).read_text()))
            except (MlflowException, OSError) as exc:
                log.debug("no %s in run %s: %s", name, run_id, exc)
    return found


def study_facts(
    frame: pd.DataFrame,
    runs: Sequence,
    table: pd.DataFrame,
    *,
    client=None,
    notes: list[str] | None = None,
) -> dict:
    """What the study is: its GPUs (model, memory, driver, MIG profiles), radT's and the
    libraries' versions, modes, power limits, clocks, repeats, Jobs, commands, how many runs
    over what dates (from the summary frame and the runs' tags; ``client``: read one run's
    environment artifacts where its tags predate GPU memory and library versions).

    A GPU or version fact is one value when the runs that ran a command agree, else each
    value with its count of runs (:func:`tally`); a run without it counts as not recorded.
    """
    tags = _environment_tags(runs, client, [] if notes is None else notes)
    libraries = [_libraries(t.get(RADT_LIBRARIES)) for t in tags]
    powers = _distinct(frame["power_limit_w"])
    clocks = _distinct(frame["gpu_clock_mhz"])
    counts = table[table["view"] == "provider"]["count"].astype(int).tolist()
    start, end = frame["start"].min(), frame["end"].max()
    mig = frame[frame["collocation"] == "mig"]
    return {
        "gpus": tally(t.get(RADT_GPUS) for t in tags),
        "gpu_memory": tally(memory_words(t.get(RADT_GPU_MEMORY_MIB)) for t in tags),
        "driver": tally(t.get(RADT_GPU_DRIVER) for t in tags),
        "cuda": tally(t.get(RADT_CUDA_VERSION) for t in tags),
        "mig_profiles": tally(mig["mig_profile"]) if len(mig) else "no MIG run",
        "radt": tally(t.get(RADT_VERSION) for t in tags),
        "python": tally(t.get(RADT_PYTHON) for t in tags),
        "libraries": {
            name: tally(None if got is None else got[name] for got in libraries)
            for name in STUDY_LIBRARIES
            if any(got and got[name] != NOT_INSTALLED for got in libraries)
        },
        "libraries_recorded": any(got is not None for got in libraries),
        "modes": _listing(_distinct(frame["collocation"])),
        "configurations": _listing(_distinct(frame["configuration"])),
        "power_limits": _listing(
            ["full power (default)"] + [power_words(p) for p in sorted(map(float, powers))]
        ),
        "clocks": _listing(["default"] + [f"{float(c):g} MHz" for c in sorted(map(float, clocks))]),
        "repeats": (
            f"{min(counts)}–{max(counts)}"
            if counts and min(counts) != max(counts)
            else str(counts[0])
            if counts
            else "-"
        ),
        "jobs": _distinct(frame[frame["level"] != "provider"]["job"]),
        "commands": _distinct(frame[frame["level"] != "provider"]["command"]),
        "runs": len(frame),
        "workloads": int((frame["level"] == "provider").sum()),
        "dates": f"{start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC"
        if start is not None and not _nat(start) and not _nat(end)
        else "-",
    }


def _nat(value) -> bool:
    import pandas as pd

    return value is None or pd.isna(value)


def problems(frame: pd.DataFrame, runs: Sequence) -> pd.DataFrame:
    """The runs that did not finish (each with its reason) and the figures missing, one row
    per reason with the runs it concerns (``run_ids``, ``run_names``)."""
    import pandas as pd

    by_id = {run.info.run_id: run.data.tags for run in runs}
    found: dict[tuple, list] = {}
    for _, row in frame.iterrows():
        tags = by_id.get(row["run_id"], {})
        if row["status"] != "FINISHED":
            why = tags.get(RADT_NOTE) or tags.get(RADT_STOP_REASON) or "no reason recorded"
            key = ("not in the figures", f"{str(row['status']).lower()}: {why}")
            found.setdefault(key, []).append(row)
        elif isinstance(row["window_note"], str) and row["window_note"]:
            for reason in row["window_note"].split("; "):
                found.setdefault(("missing figures", reason), []).append(row)
    rows = [
        {
            "what": what,
            "reason": reason,
            "count": len(kept),
            "run_names": " ".join(str(r["run_name"]) for r in kept),
            "run_ids": " ".join(str(r["run_id"]) for r in kept),
        }
        for (what, reason), kept in found.items()
    ]
    return pd.DataFrame(rows, columns=["what", "reason", "count", "run_names", "run_ids"])


# --------------------------------------------------------------------------- numbers


def number(value, digits: int = 3) -> str:
    """A number as the page writes it (``-`` when missing)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def spread(row, figure: str, scale: float = 1.0, digits: int = 3) -> str:
    """``mean (min–max)`` of a repeats row's figure, times ``scale``; ``-`` when missing."""
    mean = row.get(f"{figure}_mean")
    if mean is None or not math.isfinite(float(mean)):
        return "-"
    low, high = float(row[f"{figure}_min"]) * scale, float(row[f"{figure}_max"]) * scale
    text = number(float(mean) * scale, digits)
    if int(row.get("count") or 0) >= MIN_REPEATS:
        text += f" ({number(low, digits)}–{number(high, digits)})"
    return text


PROVIDER_HEADERS = (
    JOB,
    "configuration",
    "power",
    "n",
    "examples/s",
    "energy/example (J)",
    "examples/s vs alone (×)",
    "energy/example vs alone (×)",
    "runs",
)
CLIENT_HEADERS = (
    JOB,
    "configuration",
    "power",
    "n",
    "time/example (ms)",
    "energy/example (J)",
    "slowdown (×)",
    "runs",
)


def _point_cells(row) -> list[str]:
    """A table row's first cells, naming its point: Job, configuration (and basis when not
    examples), power limit and clock, and how many repeats."""
    basis = f" ({row['basis']})" if row["basis"] != "examples" else ""
    return [
        str(row["job"]),
        str(row["configuration"]) + basis,
        power_words(row["power_limit_w"]) + _clock(row["gpu_clock_mhz"]),
        str(int(row["count"])),
    ]


def provider_rows(table: pd.DataFrame) -> list[list[str]]:
    """The provider view: examples/s across all slices and energy per example while all
    slices run, with the repeats' mean (min–max), and both against the Job alone."""
    rows = []
    for _, row in table[table["view"] == "provider"].iterrows():
        rows.append(
            [
                *_point_cells(row),
                spread(row, "examples_per_s", digits=1),
                spread(row, "energy_per_example_nj", 1e-9, 4),
                spread(row, "examples_per_s_norm"),
                spread(row, "energy_per_example_norm"),
                row["run_ids"],
            ]
        )
    return rows


def client_rows(table: pd.DataFrame) -> list[list[str]]:
    """The client view: each job's time and energy per example (a collocated job's energy is
    the labelled estimate, marked est.) and its slowdown, mean (min–max)."""
    rows = []
    for _, row in table[table["view"] == "client"].iterrows():
        energy = spread(row, "energy_per_example_nj", 1e-9, 4)
        if energy == "-":
            estimate = spread(row, "energy_per_example_nj_est", 1e-9, 4)
            energy = f"{estimate} est." if estimate != "-" else "-"
        rows.append(
            [
                *_point_cells(row),
                spread(row, "time_per_example_ns", 1e-6, 3),
                energy,
                spread(row, "slowdown"),
                row["run_ids"],
            ]
        )
    return rows


def _clock(clock) -> str:
    from radt.analysis.findings import clock_words

    return clock_words(clock)


# --------------------------------------------------------------------------- charts


def charts(rep: Report) -> dict[str, object]:
    """Frontier per Job (time vs energy per example, the Pareto set marked), slowdown bars
    (client view), energy per phase (where recorded)."""
    import plotly.graph_objects as go

    out: dict[str, object] = {}
    front = rep.frontier
    if front is not None and not front.empty:
        known = front[(front["basis"] == "examples") & front["on_frontier"].notna()]
        for i, (job, part) in enumerate(known.groupby("job", sort=False), 1):
            fig = go.Figure()
            labels = [row_setting(r) for _, r in part.iterrows()]
            x = part["time_per_example_ns"].astype(float) / 1e6
            y = part["energy_per_example_nj"].astype(float) / 1e9
            on = part["on_frontier"] == True  # noqa: E712
            fig.add_trace(
                go.Scatter(
                    x=x[~on],
                    y=y[~on],
                    mode="markers+text",
                    name="off the frontier",
                    text=[t for t, o in zip(labels, on, strict=True) if not o],
                    textposition="top center",
                    marker={"size": 10, "color": "#999"},
                )
            )
            order = x[on].sort_values().index
            fig.add_trace(
                go.Scatter(
                    x=x[order],
                    y=y[order],
                    mode="markers+lines+text",
                    name="frontier (Pareto set)",
                    text=[labels[list(part.index).index(k)] for k in order],
                    textposition="top center",
                    marker={"size": 12, "color": "#1f77b4"},
                )
            )
            fig.update_traces(cliponaxis=False)
            _lay_out(
                fig,
                f"Time–energy frontier: {job}",
                "time per example (ms), provider",
                "energy per example (J), provider",
                margin={"t": 50, "l": 90, "r": 150},
            )
            out[f"frontier-{i}"] = fig
    clients = rep.repeats[
        (rep.repeats["view"] == "client") & rep.repeats["slowdown_mean"].astype(float).notna()
    ]
    if not clients.empty:
        labels = [f"{r['job']}: {row_setting(r)}" for _, r in clients.iterrows()]
        mean = clients["slowdown_mean"].astype(float)
        fig = go.Figure(
            go.Bar(
                x=labels,
                y=mean,
                name="slowdown",
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (clients["slowdown_max"].astype(float) - mean).fillna(0),
                    "arrayminus": (mean - clients["slowdown_min"].astype(float)).fillna(0),
                },
            )
        )
        fig.add_hline(y=1.0, line_dash="dot", annotation_text="alone")
        _lay_out(
            fig,
            "Slowdown of each job (mean, bars min–max of the repeats)",
            "Job: configuration at power limit",
            "slowdown (× time per example alone)",
        )
        out["slowdown"] = fig
    ph = rep.phases
    if ph is not None and not ph.empty:
        fig = go.Figure()
        for phase, part in ph.groupby("phase", sort=False):
            fig.add_trace(
                go.Bar(x=part["run_name"], y=part["energy_j"].astype(float), name=str(phase))
            )
        _lay_out(fig, "GPU energy per phase", "run", "energy (J)", barmode="stack")
        out["phases"] = fig
    return out


def _lay_out(fig, title: str, x_title: str, y_title: str, **layout: object) -> None:
    """Every report chart's look: its title and axis titles on one white template and height."""
    layout.setdefault("margin", {"t": 50})
    fig.update_layout(
        title=title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        template="plotly_white",
        height=420,
        **layout,
    )


def export_images(figures: dict[str, object], folder: Path) -> dict[str, str]:
    """Each chart as an SVG file in ``folder`` (kaleido, through a local Chrome or Chromium);
    empty when kaleido is not installed or cannot run here (the Markdown then links to the
    HTML page's charts)."""
    if not figures:
        return {}
    try:
        import kaleido  # noqa: F401
        import plotly.io as pio
    except ImportError:
        log.info("charts not exported as images: kaleido is not installed (pip install kaleido)")
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: str(folder / f"{name}.svg") for name in figures}
    try:
        pio.write_images(list(figures.values()), list(paths.values()), format="svg")
    except Exception as exc:  # kaleido's Chrome may be missing: the HTML carries the charts
        log.info("charts not exported as images: %s", str(exc).splitlines()[0] if str(exc) else exc)
        return {}
    return paths


# --------------------------------------------------------------------------- pages


def run_link(rep: Report, run_id: str) -> str | None:
    """The run's page: its time series in the radT UI given as ``ui``, else its page in the
    MLflow UI given as ``mlflow_ui``, else None."""
    if rep.ui:
        return overlay_link(rep, [run_id])
    if not rep.mlflow_ui:
        return None
    exp = rep.summary.loc[rep.summary["run_id"] == run_id, "experiment_id"]
    if exp.empty:
        return None
    return f"{rep.mlflow_ui}/#/experiments/{exp.iloc[0]}/runs/{run_id}"


def overlay_link(rep: Report, run_ids: Sequence[str]) -> str | None:
    """The radT UI's time series of ``run_ids`` together (None without ``ui``)."""
    if not rep.ui or not run_ids:
        return None
    return f"{rep.ui}/timeseries?runs={','.join(run_ids)}"


def _title(rep: Report) -> str:
    return "radT report: " + _listing([e["name"] for e in rep.experiments])


def _study_items(rep: Report) -> list[tuple[str, str]]:
    s = rep.study
    question = "; ".join(
        f"{e['name']}" + (f": {e['description']}" if e.get("description") else "")
        for e in rep.experiments
    )
    return [
        ("question", question),
        ("GPUs", s["gpus"]),
        ("GPU memory", s["gpu_memory"]),
        ("GPU driver", s["driver"]),
        ("CUDA", s["cuda"]),
        ("MIG profiles", s["mig_profiles"]),
        ("radT", s["radt"]),
        ("Python", s["python"]),
        *((name, versions) for name, versions in s["libraries"].items()),
        *(
            []
            if s["libraries"]
            else [
                (
                    "libraries",
                    f"none of {_listing(STUDY_LIBRARIES)} installed"
                    if s["libraries_recorded"]
                    else NOT_RECORDED,
                )
            ]
        ),
        ("modes", s["modes"]),
        ("configurations", s["configurations"]),
        ("power limits", s["power_limits"]),
        ("GPU clocks", s["clocks"]),
        ("repeats per point", s["repeats"]),
        ("Jobs", _listing(s["jobs"])),
        ("commands", " | ".join(s["commands"]) or "-"),
        ("runs", f"{s['runs']} rows ({s['workloads']} workloads) from {s['dates']}"),
    ]


RULES = (
    f"Each finding compares repeat means with the Job {BASELINE_WORDS} (configuration none at "
    f"the default power limit and clock), through the normalised figures (1.000× = alone). "
    f"A difference is claimed only when the two sides' repeats do not overlap (min–max) and "
    f"each has at least {MIN_REPEATS} repeats; otherwise it is said to be within noise. "
    "Ranges in parentheses are min–max of the repeats; n counts them."
)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:24px auto;
padding:0 16px;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:1.8em}
table{border-collapse:collapse;margin:8px 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.ids{font-family:monospace;font-size:.8em;word-break:break-all;max-width:260px}
ol.findings li{margin:6px 0}.noise{color:#666}.note{color:#555;font-size:.9em}
.chart{page-break-inside:avoid;break-inside:avoid}
@media print{body{max-width:none;margin:0}h2{page-break-after:avoid}
table{page-break-inside:auto}tr{page-break-inside:avoid}a{color:#222;text-decoration:none}}
"""


def _e(text) -> str:
    return _html.escape(str(text), quote=True)


def _ids_html(rep: Report, ids: str) -> str:
    parts = []
    run_ids = str(ids or "").split()
    for run_id in run_ids:
        link = run_link(rep, run_id)
        parts.append(f'<a href="{_e(link)}">{_e(run_id)}</a>' if link else _e(run_id))
    overlay = overlay_link(rep, run_ids) if len(run_ids) > 1 else None
    if overlay:
        parts.append(f'(<a href="{_e(overlay)}">overlay</a>)')
    return " ".join(parts)


def _table_html(rep: Report, headers: Sequence[str], rows: list[list[str]], ids_col=None) -> str:
    if not rows:
        return '<p class="note">none</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            if ids_col is not None and i == ids_col:
                cells.append(f'<td class="ids">{_ids_html(rep, cell)}</td>')
            else:
                numeric = cell[:1].isdigit() or cell[:1] == "-" and cell[1:2].isdigit()
                cells.append(
                    f'<td class="num">{_e(cell)}</td>' if numeric else f"<td>{_e(cell)}</td>"
                )
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _finding_class(row) -> str:
    claimed = row["throughput_verdict"] in ("more", "less") or row["energy_verdict"] in (
        "more",
        "less",
    )
    return "" if claimed or row["kind"] in ("frontier", "spread across Jobs") else "noise"


def phase_rows(rep: Report) -> list[list[str]]:
    """Energy per phase: one row per run and phase (radt.phases)."""
    return [
        [
            str(r["run_name"]),
            str(r["phase"]),
            number(r["time_s"], 2),
            number(r["energy_j"], 1),
            number(r["power_mean_w"], 1),
            str(r["energy_scope"]),
            str(r["note"]) if isinstance(r["note"], str) else "",
        ]
        for _, r in rep.phases.iterrows()
    ]


PHASE_HEADERS = ("run", "phase", "time (s)", "energy (J)", "mean power (W)", "energy of", "note")
PROBLEM_HEADERS = ("what", "why", "runs", "run ids")


def problem_rows(rep: Report) -> list[list[str]]:
    """Runs not in the figures and missing figures, one row per reason."""
    return [
        [r["what"], r["reason"], f"{r['count']}: {r['run_names']}", r["run_ids"]]
        for _, r in rep.problems.iterrows()
    ]


PLAN_HEADERS = ("objective", JOB, "run", "vs alone (×)", "runner-up", "margin (%)", "margin")


def plan_rows(rep: Report) -> list[list[str]]:
    """What to run, as table rows."""
    return [
        [
            str(r["objective"]),
            str(r["job"]),
            str(r["winner"]) if isinstance(r["winner"], str) else "none qualifies",
            number(r["winner_value"]),
            str(r["runner_up"]) if isinstance(r["runner_up"], str) else "-",
            number(r["margin_pct"], 1),
            str(r["margin_verdict"]) if isinstance(r["margin_verdict"], str) else "-",
        ]
        for _, r in rep.what_to_run.iterrows()
    ]


def render_html(rep: Report) -> str:
    """The page as one HTML file: plotly's script inline, no request to any host."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(_title(rep))}</title><style>{CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body>",
        f"<h1>{_e(_title(rep))}</h1>",
        f'<p class="note">Computed by radT from the runs of the study; objective: '
        f"{_e(rep.objective)}. {_e(RULES)}</p>",
        "<h2>Findings</h2>",
    ]
    if rep.findings.empty:
        parts.append(
            '<p class="note">No finding: no configuration has both a baseline and '
            "figures to compare (see the runs without figures below).</p>"
        )
    else:
        parts.append('<ol class="findings">')
        for _, row in rep.findings.iterrows():
            parts.append(
                f'<li class="{_finding_class(row)}">{_e(row["sentence"])} '
                f'<span class="note">Runs: {_ids_html(rep, row["run_ids"])}'
                + (
                    f"; alone: {_ids_html(rep, row['baseline_run_ids'])}"
                    if row["baseline_run_ids"]
                    else ""
                )
                + "</span></li>"
            )
        parts.append("</ol>")
    parts.append("<h2>What to run</h2><ul>")
    parts += [f"<li>{_e(r['sentence'])}</li>" for _, r in rep.what_to_run.iterrows()]
    parts.append("</ul>")
    parts.append(_table_html(rep, PLAN_HEADERS, plan_rows(rep)))
    parts.append("<h2>The study</h2><table><tbody>")
    parts += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in _study_items(rep)]
    parts.append("</tbody></table>")
    parts.append("<h2>Provider view: the GPU's throughput and energy</h2>")
    parts.append(
        '<p class="note">Examples/s across all slices and GPU energy per example while '
        "all slices run, mean (min–max) of the repeats; vs alone: over the Job "
        f"{BASELINE_WORDS}.</p>"
    )
    parts.append(_table_html(rep, PROVIDER_HEADERS, provider_rows(rep.repeats), ids_col=8))
    parts.append("<h2>Client view: each job</h2>")
    parts.append(
        '<p class="note">Each job\'s time and energy per example over its own window '
        "(a collocated job's energy is an estimate, marked est.), and its slowdown: "
        "its time per example over its time alone.</p>"
    )
    parts.append(_table_html(rep, CLIENT_HEADERS, client_rows(rep.repeats), ids_col=7))
    figures = rep.charts()
    parts.append("<h2>Charts</h2>")
    if not figures:
        parts.append(
            '<p class="note">No chart: no point has both time and energy per '
            "example, and no job a slowdown.</p>"
        )
    for name, fig in figures.items():
        div = pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            div_id=f"chart-{name}",
            config={"displaylogo": False, "responsive": True},
        )
        parts.append(f'<div class="chart">{div}</div>')
    parts.append("<h2>Energy per phase</h2>")
    if rep.phases.empty:
        parts.append('<p class="note">No run marked phases (radt.phase).</p>')
    else:
        parts.append(_table_html(rep, PHASE_HEADERS, phase_rows(rep)))
    parts.append("<h2>Runs not in the figures, and missing figures</h2>")
    parts.append(_table_html(rep, PROBLEM_HEADERS, problem_rows(rep), ids_col=3))
    for note in rep.notes:
        parts.append(f'<p class="note">{_e(note)}</p>')
    parts.append("</body></html>")
    return "\n".join(parts)


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ids_md(rep: Report, ids: str) -> str:
    out = []
    run_ids = str(ids or "").split()
    for run_id in run_ids:
        link = run_link(rep, run_id)
        out.append(f"[`{run_id}`]({link})" if link else f"`{run_id}`")
    overlay = overlay_link(rep, run_ids) if len(run_ids) > 1 else None
    if overlay:
        out.append(f"([overlay]({overlay}))")
    return " ".join(out)


def _table_md(rep: Report, headers, rows, ids_col=None) -> str:
    if not rows:
        return "_none_\n"
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = [_ids_md(rep, c) if i == ids_col else _md_cell(c) for i, c in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_markdown(
    rep: Report, images: dict[str, str] | None, html_page: str = "report.html"
) -> str:
    """The page as Markdown (for a README or a paper draft)."""
    out = [f"# {_title(rep)}", "", f"Objective: {rep.objective}. {RULES}", "", "## Findings", ""]
    if rep.findings.empty:
        out.append("No finding: no configuration has both a baseline and figures to compare.")
    for _, row in rep.findings.iterrows():
        tail = f" Runs: {_ids_md(rep, row['run_ids'])}"
        if row["baseline_run_ids"]:
            tail += f"; alone: {_ids_md(rep, row['baseline_run_ids'])}"
        out.append(f"{int(row['rank'])}. {row['sentence']}{tail}")
    out += ["", "## What to run", ""]
    out += [f"- {r['sentence']}" for _, r in rep.what_to_run.iterrows()]
    out += ["", _table_md(rep, PLAN_HEADERS, plan_rows(rep)), "## The study", ""]
    out.append(_table_md(rep, ("", ""), [list(item) for item in _study_items(rep)]))
    out += ["## Provider view: the GPU's throughput and energy", ""]
    out.append(_table_md(rep, PROVIDER_HEADERS, provider_rows(rep.repeats), ids_col=8))
    out += ["## Client view: each job", ""]
    out.append(_table_md(rep, CLIENT_HEADERS, client_rows(rep.repeats), ids_col=7))
    out += ["## Charts", ""]
    figures = rep.charts()
    if not figures:
        out.append(
            "No chart: no point has both time and energy per example, and no job a slowdown."
        )
    elif images:
        for name, fig in figures.items():
            if name in images:
                out.append(f"![{fig.layout.title.text}]({images[name]})")
                out.append("")
    else:
        out.append(
            "The charts ("
            + ", ".join(f.layout.title.text for f in figures.values())
            + ") could not be exported as images here (kaleido and a local Chrome or Chromium "
            f"are needed); they are interactive in [the HTML report]({html_page})."
        )
    out += ["", "## Energy per phase", ""]
    if rep.phases.empty:
        out.append("No run marked phases (radt.phase).")
    else:
        out.append(_table_md(rep, PHASE_HEADERS, phase_rows(rep)))
    out += ["", "## Runs not in the figures, and missing figures", ""]
    out.append(_table_md(rep, PROBLEM_HEADERS, problem_rows(rep), ids_col=3))
    out += [f"_{note}_" for note in rep.notes]
    return "\n".join(out) + "\n"
