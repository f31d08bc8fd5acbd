#!/usr/bin/env bash
# Make benchmarks/.venv-radt0230: the original radT 0.2.30 from PyPI, for the side-by-side
# benchmarks. Same MLflow and torch as the main environment, so only radT differs.
# pandas is held below 3: radT 0.2.30 writes a letter into an int64 column
# (schedule.py, `df_workload.loc[i, "Number"] = ...`), which pandas 3 refuses
# ("Invalid value 'A' for dtype 'int64'"); pandas 2 only warns.
# Its `iostat` listener needs the `iostat` tool (Debian: apt-get install sysstat).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-radt0230"
python -m venv "$venv"
"$venv/bin/pip" install --quiet "radt==0.2.30" "mlflow==3.17.2" "torch==2.13.0" "pandas<3"
"$venv/bin/python" -c "from importlib.metadata import version as v; print('radt', v('radt'), 'mlflow', v('mlflow'), 'torch', v('torch'), 'pandas', v('pandas'))"
command -v iostat >/dev/null || echo "note: iostat not found; radT 0.2.30's iostat listener will not start (apt-get install sysstat)"
