# %% [markdown]
# # Time and energy per example of a collocation study
#
# A percent-format notebook (open it in Jupyter with jupytext, or in VS Code),
# which also runs top to bottom as a plain script:
#
# ```
# mkdir -p scratch                                 # git ignores it
# cp examples/collocation.csv scratch/my-study.csv # radT writes progress into the plan: a copy
# radt scratch/my-study.csv          # the study: one job alone, then two copies together
# python examples/analysis.py collocation-demo scratch/analysis.html
#                                    # in the same folder (it reads ./mlflow.db,
#                                    # or MLFLOW_TRACKING_URI)
# ```
#
# It prints the summary of every workload (provider) and run (client), then
# draws time per example against energy per example into the file named second
# (default `analysis.html` in the current folder) and says where it wrote it.
# Energy needs a GPU listener (`nvml`, `dcgm`); on a CPU-only machine the
# figure shows time per example per configuration instead.

# %%
import sys
from pathlib import Path

import pandas as pd

import radt

EXPERIMENT = sys.argv[1] if len(sys.argv) > 1 else "collocation-demo"
OUTPUT = Path(sys.argv[2] if len(sys.argv) > 2 else "analysis.html").resolve()

table = radt.summary(EXPERIMENT)
shown = [
    "level",
    "run_name",
    "configuration",
    "status",
    "basis",
    "window_s",
    "examples",
    "examples_per_s",
    "time_per_example_ns",
    "energy_j",
    "energy_method",
    "energy_per_example_nj",
    "power_mean_w",
    "slowdown",
]
text = ["configuration", "status", "basis"]
readable = table[shown].fillna({column: "-" for column in text})
print(readable.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:,.4g}"))


# %% [markdown]
# Each configuration is one point: a workload (the provider view: all its
# runs together on the GPU) or a lone run. Down and to the left is better:
# less time and less energy for each example.


# %%
def label(row: pd.Series) -> str:
    """``pair (naive x2)``, ``mig-3g (4g.40gb+3g.40gb · 250 W)``, ``alone (none)``."""
    cap = f" · {row['power_limit_w']} W" if isinstance(row["power_limit_w"], str) else ""
    return f"{row['workload'] or row['run_name']} ({row['configuration']}{cap})"


configurations = table[table["level"].isin(["provider", "run"])].copy()
configurations["label"] = configurations.apply(label, axis=1)
clients = table[table["level"] == "client"]
has_energy = configurations["energy_per_example_nj"].notna().any()
has_examples = configurations["time_per_example_ns"].notna().any()

import plotly.express as px  # noqa: E402 (pip install plotly)

if has_energy:
    points = configurations.dropna(subset=["time_per_example_ns", "energy_per_example_nj"])
    figure = px.scatter(
        points,
        x="time_per_example_ns",
        y="energy_per_example_nj",
        color="collocation",
        text="label",
        hover_data=["run_id", "basis", "window_s", "examples", "energy_j", "energy_method"],
        labels={
            "time_per_example_ns": "time per example (ns)",
            "energy_per_example_nj": "GPU energy per example (nJ)",
        },
        title=f"{EXPERIMENT}: provider time vs energy per example (down-left is better)",
    )
    figure.update_traces(textposition="top center", marker={"size": 12})
    figure.add_annotation(
        xref="paper",
        yref="paper",
        x=0.02,
        y=0.02,
        ax=60,
        ay=-60,
        text="better",
        showarrow=True,
        arrowhead=2,
    )
    print(f"\n{len(points)} configuration(s) with time and energy per example")
else:
    why = "no run reports examples" if not has_examples else "no GPU energy was recorded"
    print(
        f"\n{why} (a CPU-only machine, or no nvml/dcgm listener): "
        "showing time per example per configuration instead of the energy scatter"
    )
    rows = pd.concat(
        [
            configurations.assign(view="provider (all runs of the workload)"),
            clients.assign(
                view="client (one run)",
                label=clients["run_name"],
            ),
        ]
    ).dropna(subset=["time_per_example_ns"])
    figure = px.bar(
        rows,
        x="label",
        y="time_per_example_ns",
        color="collocation",
        facet_col="view",
        hover_data=["run_id", "basis", "window_s", "examples", "slowdown"],
        labels={"time_per_example_ns": "time per example (ns)"},
        title=f"{EXPERIMENT}: time per example (lower is better); no energy recorded",
    )
    figure.update_xaxes(matches=None)
figure.write_html(OUTPUT)
print(f"wrote the chart to {OUTPUT} (open it in a browser)")

# %% [markdown]
# Each client against the same job alone on the whole machine (its baseline:
# the mean of the Job's FINISHED runs with collocation `none`, the same command
# up to `--seed`; docs/analysis.md):

# %%
columns = ["run_name", "configuration", "time_per_example_ns", "slowdown", "baseline_run_id"]
print(clients[columns].to_string(index=False, na_rep="-", float_format=lambda v: f"{v:,.4g}"))
unmatched = clients[clients["slowdown"].isna()]
if len(unmatched):
    for row in unmatched.itertuples():
        print(f"no slowdown for {row.run_name}: {row.window_note}")

# %% [markdown]
# The samples behind these figures, one row per sample, e.g. the memory of
# each run's processes (or `*/gpu*/power_w` where a GPU listener ran):

# %%
samples = radt.load(EXPERIMENT, keys=["*/gpu*/power_w", "top/proc/rss_mib"])
print(
    samples.groupby(["run_name", "key"], observed=True)["value"]
    .agg(["count", "mean", "max"])
    .to_string(float_format=lambda v: f"{v:,.1f}")
)
