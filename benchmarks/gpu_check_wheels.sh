#!/usr/bin/env bash
# benchmarks/gpu_check_wheels.sh [FOLDER]: the wheels benchmarks/gpu_check.sh needs on a lent
# GPU machine, made here (where pip reaches an index) into FOLDER (default ./.whl, which
# gpu_check.sh reads; add `/.whl/` to .git/info/exclude and name `.whl` in the run's carry).
#
# Those machines have no network; their python3 (/opt/torch/.venv/bin/python3, Python 3.12)
# holds torch, numpy, pandas, pyarrow, psutil, nvidia-ml-py, pyyaml, ... but not mlflow. This
# downloads radT's dependencies for CPython 3.12 on manylinux x86-64, then deletes the wheels
# of the packages that image already has (ON_IMAGE below: the list that
# /work/.library/device/KINDS.md gave on 2026-11-17) and of the UI's packages (dash,
# dash-ag-grid, plotly, tsdownsample: `radt ui` only, 25 MiB), so that the folder fits the
# 64 MiB a run may carry beside the repository (about 35 MiB, of which mlflow is 12).
# gpu_check.sh installs radT with them; where pip's resolution fails for the packages left
# out, it installs radT and these wheels unresolved and checks that radT's command line runs.
#
# PYTHON_VERSION=3.12 (default) picks the interpreter the wheels are for.

set -euo pipefail

FOLDER=${1:-.whl}
PYTHON_VERSION=${PYTHON_VERSION:-3.12}
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)

ON_IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio
attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf
psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools
shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz
torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers
treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig
werkzeug wheel wrapt xarray xxhash yarl zipp"
UI_ONLY="dash dash-ag-grid plotly tsdownsample"

# radT's dependencies, as pyproject.toml lists them
mapfile -t DEPS < <(
    python3 - "$REPO/pyproject.toml" <<'EOF'
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
EOF
)
mkdir -p "$FOLDER"
python3 -m pip download --quiet --dest "$FOLDER" --only-binary=:all: \
    --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 "${DEPS[@]}"

kept=0
for wheel in "$FOLDER"/*.whl; do
    # a wheel's name is its project's with - as _; PEP 503 normalises both to -
    name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')
    if [[ " $(echo $ON_IMAGE $UI_ONLY) " == *" $name "* ]]; then
        rm "$wheel"
    else
        kept=$((kept + 1))
    fi
done
echo "$FOLDER: $kept wheels, $(du -sh "$FOLDER" | cut -f1)"
