"""The tables of ``radt runs`` (:mod:`radt.cli.runs` prints them): the runs of an experiment
with their summary figures, the experiments of a store, and the notes under them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def _duration(seconds: float, exact: bool = False) -> str:
    """``3725.2`` → ``1:02:05``; ``42.4`` → ``0:42``; ``exact``: under a minute ``42.4s``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if exact and seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _si(value: float, unit: str) -> str:
    """``0.0123, "J"`` → ``12.3 mJ``."""
    if value is None or not math.isfinite(value):
        return "-"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"), (1e-6, "µ")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value / 1e-9:.3g} n{unit}"


def _number(value: float, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


def runs_table(frame: pd.DataFrame) -> str:
    """The text table of ``radt runs`` for a :func:`radt.summary` frame.

    Figures are over each row's window; ``basis`` says which (docs/analysis.md). The figure
    columns are those of :data:`radt.analysis.catalog.CATALOG` with a ``runs`` header, an
    optional one only when a row has it; before them, the params that differ between the runs
    (:func:`swept_params`).
    """
    import pandas as pd

    from radt.analysis.distributed import one_line_per_job

    frame = one_line_per_job(frame)

    from radt.analysis.catalog import CATALOG

    shown = [
        figure
        for figure in CATALOG
        if figure.runs
        and (
            not figure.runs_optional
            or (
                figure.name in frame
                and pd.to_numeric(frame[figure.name], errors="coerce").notna().any()
            )
        )
    ]
    swept, values = swept_params(frame)
    header = [
        "name",
        "status",
        "configuration",
        "workload",
        *swept,
        *(figure.runs for figure in shown),
        "basis",
        "run id",
    ]
    rows = []
    for row, params in zip(frame.itertuples(index=False), values, strict=True):
        name = str(row.run_name or "-")
        if row.level in ("client", "loader"):
            name = f"  {row.letter or '-'}: {name}"
        rows.append(
            [
                name,
                str(row.status or "-"),
                _text(row.configuration),
                _text(row.workload),
                *(params.get(key, "" if row.level == "provider" else "-") for key in swept),
                *(_runs_cell(row, figure.name, figure.runs_show) for figure in shown),
                str(row.basis or "-"),
                str(row.run_id),
            ]
        )
    right = set(range(4 + len(swept), 4 + len(swept) + len(shown)))
    if frame["slurm_job_id"].notna().any():  # runs of Slurm jobs: their job, last
        header.append("slurm job")
        for row, job in zip(rows, frame["slurm_job_id"], strict=True):
            row.append(str(job) if pd.notna(job) else "-")
    return _table(header, rows, right)


def _param_pairs(text) -> dict[str, str]:
    """``batch-size=8 lr=0.1`` (a summary's ``params``) → ``{"batch-size": "8", "lr": "0.1"}``;
    a word without ``=`` belongs to the value before it (a value with a space)."""
    from radt.analysis.runtree import _present

    pairs: dict[str, str] = {}
    key = None
    for word in str(text).split(" ") if _present(text) else []:
        name, sep, value = word.partition("=")
        if sep and name:
            key = name
            pairs[key] = value
        elif key is not None:
            pairs[key] += f" {word}"
    return pairs


def swept_params(frame: pd.DataFrame) -> tuple[list[str], list[dict[str, str]]]:
    """The params whose value differs between the runs of ``frame`` (a study's swept ones,
    sorted by name) and each row's params; a workload's row has what its runs share.

    Runs without params (a shared loader) do not count; a param some runs lack differs."""
    runs = [_param_pairs(text) for text in frame["params"]]
    with_params = [pairs for pairs in runs if pairs]
    keys = sorted({key for pairs in with_params for key in pairs})
    swept = [key for key in keys if len({pairs.get(key) for pairs in with_params}) > 1]
    by_parent: dict[str, list[dict[str, str]]] = {}
    for pairs, parent in zip(runs, frame["parent_run_id"], strict=True):
        if pairs and isinstance(parent, str):
            by_parent.setdefault(parent, []).append(pairs)
    values = []
    for pairs, level, run_id in zip(runs, frame["level"], frame["run_id"], strict=True):
        if level == "provider":
            kids = by_parent.get(run_id, [])
            shared = kids[0] if kids else {}
            pairs = {
                key: shared[key]
                for key in swept
                if key in shared and all(kid.get(key) == shared[key] for kid in kids)
            }
        values.append(pairs)
    return swept, values


def _runs_cell(row, name: str, show: str) -> str:
    """One figure's cell in ``radt runs``, written as its ``runs_show`` says."""
    if show == "slowdown":
        return _slowdown_cell(row)
    import pandas as pd

    value = float(pd.to_numeric(getattr(row, name), errors="coerce"))
    if show in ("duration", "exact"):
        return _duration(value, exact=show == "exact")
    if show == "ms":
        return _number(value * 1e-6, 3)
    if show == "joules":
        return _si(value * 1e-9, "J")
    if show == "estimate":
        if not math.isfinite(value):
            return "-"
        return f"{_si(value * 1e-9, 'J')} ({row.energy_est_method})"
    return _number(value)


def notes(frame: pd.DataFrame) -> list[str]:
    """``names: why a figure is missing``, one line per note of a summary frame's rows, in the
    order first met: the rows that share a note are named together (``every row`` when all
    do)."""
    found: dict[str, list[str]] = {}
    for row in frame.itertuples(index=False):
        if isinstance(row.window_note, str) and row.window_note:
            for note in dict.fromkeys(row.window_note.split("; ")):
                found.setdefault(note, []).append(str(row.run_name or row.run_id))
    return [
        f"{'every row' if len(names) == len(frame) > 1 else ', '.join(names)}: {note}"
        for note, names in found.items()
    ]


def _text(value) -> str:
    """A text cell: ``-`` for a missing value (None or NaN; never ``nan``)."""
    from radt.analysis.runtree import _present

    return str(value) if _present(value) else "-"


def _slowdown_cell(row) -> str:
    """``1.71`` or, against a baseline whose repeats spread over the limit, ``1.71 *``; blank
    for a workload or a shared loader, which have none (``-`` is a figure missing)."""
    from radt.analysis.baselines import baseline_spread_flagged

    if row.level in ("provider", "loader"):
        return ""
    text = _number(row.slowdown, 2)
    return f"{text} *" if baseline_spread_flagged(getattr(row, "baseline_cv_pct", None)) else text


def spread_notes(frame: pd.DataFrame) -> list[str]:
    """``name: slowdown 1.71 against 2 baseline repeats that spread 20.2 %`` for each row whose
    baseline's repeats spread over the limit (coefficient of variation, docs/analysis.md)."""
    from radt.analysis.baselines import baseline_spread_flagged

    found = []
    for row in frame.itertuples(index=False):
        pct = getattr(row, "baseline_cv_pct", None)
        if baseline_spread_flagged(pct) and math.isfinite(row.slowdown):
            repeats = len(str(row.baseline_run_id or "").split())
            found.append(
                f"{row.run_name or row.run_id}: slowdown {row.slowdown:.2f} against "
                f"{repeats} baseline repeats that spread {pct:.1f} %"
            )
    return found


def crosscheck_notes(frame: pd.DataFrame) -> list[str]:
    """``name: the integral of power is 7.2 % above the energy counter`` for each row whose
    energy cross-check is over the limit (docs/analysis.md)."""
    from radt.analysis.attribution import crosscheck_flagged

    found = []
    for row in frame.itertuples(index=False):
        pct = getattr(row, "energy_crosscheck_pct", None)
        if crosscheck_flagged(pct):
            side = "above" if pct > 0 else "below"
            found.append(
                f"{row.run_name or row.run_id}: the integral of power is {abs(pct):.1f} % "
                f"{side} the energy counter"
            )
    return found


def experiments_table(tracking_uri: str | None = None) -> str:
    """The experiments of the store at ``tracking_uri`` (MLFLOW_TRACKING_URI, else
    ./mlflow.db): id, name and last update (UTC), as ``radt runs`` without -e shows them."""
    from radt.analysis.loadruns import open_client

    client = open_client(tracking_uri)
    experiments = []
    token = None
    while True:
        page = client.search_experiments(max_results=1000, page_token=token)
        experiments.extend(page)
        token = page.token
        if not token:
            break
    rows = [
        [
            str(exp.experiment_id),
            exp.name,
            str(_stamp(exp.last_update_time or exp.creation_time)),
        ]
        for exp in experiments
    ]
    return _table(["id", "experiment", "last update (UTC)"], rows, right={0})


def _stamp(millis: int | None) -> str:
    import pandas as pd

    if not millis:
        return "-"
    return pd.Timestamp(millis, unit="ms", tz="UTC").strftime("%Y-%m-%d %H:%M")
