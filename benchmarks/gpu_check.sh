#!/usr/bin/env bash
# benchmarks/gpu_check.sh: the first thing to run on a real GPU (an H100/H200 lent for a few
# minutes: one GPU, 16 cores, no network). It installs radT from this tree into a fresh venv,
# runs `radt doctor` (plain and --measure), trains a ResNet-18-like network
# (benchmarks/gpu_check_train.py) alone, as a naive pair and as an MPS pair from one plan, and
# once more under each profiler listener that is available (torch, nsys, ncu), and brings back
# every tool's output. BENCHMARKS.md, "The first real GPU", says how to run it and what to
# do with what comes back (benchmarks/gpu_check_fixtures.py turns it into test fixtures).
#
#   bash benchmarks/gpu_check.sh             # writes into $OUT, else ./gpu_check_out
#
# What comes back, in $OUT (at most 8 files, as the lent machine returns them):
#   manifest.tsv      every step: name, exit status (or "skipped"), seconds, limit, command,
#                     note; one row per step, also for the steps that failed or were skipped
#   summary.txt       the manifest as a table, then what `radt runs` printed
#   gpu_check.tar.gz  everything: gpu_check/ with nvidia-smi -q/-L/--version, the driver's
#                     query, versions, pip list, radt listeners, doctor JSONs, the plan with
#                     its Status/Run written back, `radt runs`, the exports (summary CSV,
#                     samples Parquet), each step's stdout/stderr under logs/
#   store.tar.gz      the MLflow store (mlflow.db, artifacts) and RADT_HOME of the runs
# GPU_CHECK_KEEP_TREE=1 leaves the unpacked gpu_check/ folder in $OUT as well.
#
# Guarded: nothing here changes a GPU setting. Every nvidia-smi call (radT's included) goes
# through a guard in front of the real tool that refuses the setting flags listed in
# FORBIDDEN below (exit 3, logged in logs/guard_refused.txt); dcgmi is let through for
# `dmon`, `discovery` and `--version` only; ncu profiles with `--clock-control none` (its
# default locks the clocks at base while it profiles). The plan sets no PowerLimit or GpuClock and no
# MIG profile. The MPS pair's control daemon is radT's own, with a private pipe folder, quit
# by radT's teardown; this script's EXIT trap quits any daemon left in its private folders.
# The whole run keeps to GPU_CHECK_BUDGET_S (default 360 s): each step runs under `timeout`,
# cut to the time left, and a step that no longer fits is skipped (and says so).
#
# Environment:
#   OUT                 where the results go (default ./gpu_check_out)
#   GPU_CHECK_PYTHON    the Python that holds torch (default python3; on the lent machines
#                       /opt/torch/.venv/bin/python3). The fresh venv sees its packages
#                       through a .pth file, so torch, numpy, pandas, ... come from there.
#   GPU_CHECK_WHEELS    a folder of wheels for what that Python lacks (default ./.whl, made
#                       by benchmarks/gpu_check_wheels.sh): mlflow, dash, plotly, ... are not
#                       on the lent machines and nothing can be downloaded there. Without
#                       them the install step fails and says so, the radT steps fail fast,
#                       and the nvidia-smi steps still bring back what they read.
#   GPU_CHECK_TRAIN_S   seconds each training of the plan runs (default 15; the profiled
#                       runs half of it)
#   GPU_CHECK_BUDGET_S  the whole run's limit (default 360)
#   GPU_CHECK_DRY=1     the stand-in run of tests/test_gpu_check.py: the same steps, with a
#                       5 s doctor load, 4 s trainings of a tiny network on the CPU, and
#                       each step's limit times GPU_CHECK_LIMIT_SCALE (default 8) within a
#                       budget of 3600 s (for a loaded 2-core machine)
# Without torch the training steps are skipped ("torch missing"); without CUDA in torch they
# are skipped too ("torch sees no CUDA device"), except in the dry run, which trains on the
# CPU on purpose.

set -u
set -o pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
DRY=${GPU_CHECK_DRY:-0}
PY=${GPU_CHECK_PYTHON:-python3}
WHEELS=${GPU_CHECK_WHEELS:-$REPO/.whl}
if [ "$DRY" = 1 ]; then
    TRAIN_S=${GPU_CHECK_TRAIN_S:-4}
    BUDGET_S=${GPU_CHECK_BUDGET_S:-3600}
    LIMIT_SCALE=${GPU_CHECK_LIMIT_SCALE:-8} # each step's limit: a 2-core machine, shared
    MEASURE_S=5
    DEVICE=cpu
    TRAIN_ARGS="--width 4 --batch-size 8 --steps-per-epoch 10 --threads 1"
else
    TRAIN_S=${GPU_CHECK_TRAIN_S:-15}
    BUDGET_S=${GPU_CHECK_BUDGET_S:-360}
    LIMIT_SCALE=${GPU_CHECK_LIMIT_SCALE:-1}
    MEASURE_S=30
    DEVICE=cuda
    TRAIN_ARGS=""
fi
RESERVE_S=20 # kept for packing up
START=$(date +%s)
EXPERIMENT=gpu-check

# nvidia-smi flags that change a setting: the guard refuses any argument among these
# (an --option=VALUE form too), before the real tool sees the call.
FORBIDDEN="-pl --power-limit -lgc --lock-gpu-clocks -rgc --reset-gpu-clocks -lmc
--lock-memory-clocks -rmc --reset-memory-clocks -ac --applications-clocks -rac
--reset-applications-clocks -mig --multi-instance-gpu -c --compute-mode -r --gpu-reset -pm
--persistence-mode -e --ecc-config -p --reset-ecc-errors -am --accounting-mode -caa
--clear-accounted-apps -acp --auto-boost-default --auto-boost-permission -cc --cuda-clocks
-cgi --create-gpu-instance -dgi --destroy-gpu-instance -cci --create-compute-instance -dci
--destroy-compute-instance -gtt -mt -smpm -sep -scp -cpc"

TREE=$OUT/gpu_check
rm -rf "$TREE"
mkdir -p "$TREE/logs"
MANIFEST=$TREE/manifest.tsv
printf 'step\tstatus\tseconds\tlimit_s\tcommand\tnote\n' >"$MANIFEST"

TMPROOT=$(mktemp -d /tmp/gck.XXXXXX) # short and private (0700): venv, guard, MPS, store
WORK=$TMPROOT/work
VENV=$TMPROOT/venv
mkdir -p "$WORK" "$TMPROOT/guard" "$TMPROOT/mps/pipe" "$TMPROOT/mps/log"
cp "$REPO/benchmarks/gpu_check_train.py" "$WORK/"

export RADT_HOME=$TMPROOT/home
export MLFLOW_TRACKING_URI=sqlite:///$WORK/mlflow.db
export MLFLOW_DISABLE_TELEMETRY=true
export PYTHONUNBUFFERED=1
# CUDA processes outside radT's MPS rows look for a daemon here, where none runs
export CUDA_MPS_PIPE_DIRECTORY=$TMPROOT/mps/pipe
export CUDA_MPS_LOG_DIRECTORY=$TMPROOT/mps/log

# ------------------------------------------------------------------ manifest and steps

record() { # record NAME STATUS SECONDS LIMIT COMMAND NOTE
    local cmd=${5//$'\t'/ }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${cmd//$'\n'/ }" "$6" >>"$MANIFEST"
}

left_s() { echo $((START + BUDGET_S - RESERVE_S - $(date +%s))); }

SKIP_REASON=""
# step NAME LIMIT_S OUTFILE COMMAND...: run COMMAND under `timeout` in $WORK, its stdout into
# $TREE/OUTFILE (- : logs/NAME.out), its stderr into logs/NAME.err; record it; return its
# status. SKIP_REASON, when set, skips the step instead (and is cleared).
step() {
    local name=$1 limit=$(($2 * LIMIT_SCALE)) out=$3 note="" rc t0 t1 left
    shift 3
    if [ -n "$SKIP_REASON" ]; then
        record "$name" skipped 0 "$limit" "$*" "$SKIP_REASON"
        SKIP_REASON=""
        return 0
    fi
    left=$(left_s)
    if [ "$left" -lt 5 ]; then
        record "$name" skipped 0 "$limit" "$*" "no time left in GPU_CHECK_BUDGET_S=$BUDGET_S"
        return 0
    fi
    if [ "$limit" -gt "$left" ]; then
        limit=$left
        note="limit cut to the time left"
    fi
    [ "$out" = - ] && out=logs/$name.out
    local cmd="$*"
    # a function of this script runs in a bash of its own (exported), so that timeout can stop it
    [ "$(type -t "$1")" = function ] && set -- bash -c "$1"
    echo "gpu_check: $name (limit ${limit} s)" >&2
    t0=$(date +%s.%N)
    (cd "$WORK" && timeout -k 20 "$limit" "$@") >"$TREE/$out" 2>"$TREE/logs/$name.err" </dev/null
    rc=$?
    t1=$(date +%s.%N)
    [ "$rc" = 124 ] && note="timed out after ${limit} s"
    [ "$rc" = 137 ] && note="killed 20 s after its timeout of ${limit} s"
    record "$name" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
        "$limit" "$cmd" "$note"
    return "$rc"
}

# ------------------------------------------------------------------ the guard

REAL_SMI=$(command -v nvidia-smi || true)
REAL_DCGMI=$(command -v dcgmi || true)
REAL_NCU=$(command -v ncu || true)
make_guard() {
    local pattern="" flag
    for flag in $FORBIDDEN; do
        pattern+="${pattern:+|}$flag|$flag=*"
    done
    if [ -n "$REAL_SMI" ]; then
        cat >"$TMPROOT/guard/nvidia-smi" <<EOF
#!/usr/bin/env bash
# gpu_check's guard: nvidia-smi for reading only
for arg in "\$@"; do
    case "\$arg" in
        $pattern)
            echo "gpu_check guard: refused \\\`nvidia-smi \$*\\\`: \$arg changes a GPU setting" >&2
            echo "nvidia-smi \$*" >>"$TREE/logs/guard_refused.txt"
            exit 3 ;;
    esac
done
exec "$REAL_SMI" "\$@"
EOF
        chmod +x "$TMPROOT/guard/nvidia-smi"
    fi
    if [ -n "$REAL_DCGMI" ]; then
        cat >"$TMPROOT/guard/dcgmi" <<EOF
#!/usr/bin/env bash
# gpu_check's guard: dcgmi for reading only
case "\${1:-}" in
    dmon | discovery | --version | -v) exec "$REAL_DCGMI" "\$@" ;;
esac
echo "gpu_check guard: refused \\\`dcgmi \$*\\\`: only dmon, discovery and --version run here" >&2
echo "dcgmi \$*" >>"$TREE/logs/guard_refused.txt"
exit 3
EOF
        chmod +x "$TMPROOT/guard/dcgmi"
    fi
    if [ -n "$REAL_NCU" ]; then
        # ncu locks the GPU's clocks at base while it profiles (its default --clock-control
        # base): here it profiles with the clocks left as they are
        cat >"$TMPROOT/guard/ncu" <<EOF
#!/usr/bin/env bash
# gpu_check's guard: ncu profiles with --clock-control none
case "\${1:-}" in
    --import | --version | -v | --query-metrics | --list-sets | --list-sections)
        exec "$REAL_NCU" "\$@" ;;
esac
for arg in "\$@"; do
    case "\$arg" in
        --clock-control | --clock-control=*)
            echo "gpu_check guard: refused \\\`ncu \$*\\\`: it sets --clock-control itself" >&2
            echo "ncu \$*" >>"$TREE/logs/guard_refused.txt"
            exit 3 ;;
    esac
done
exec "$REAL_NCU" --clock-control none "\$@"
EOF
        chmod +x "$TMPROOT/guard/ncu"
    fi
    export PATH=$TMPROOT/guard:$PATH
}
make_guard

# the guard must refuse a setting before the real tool sees it: asked for a power limit of
# 1 W on GPU 4242 (no such GPU, no such limit: harmless even if the guard were broken)
guard_check() {
    [ -n "$REAL_SMI" ] || { echo "no nvidia-smi: nothing to guard"; return 0; }
    nvidia-smi -i 4242 -pl 1
    local rc=$?
    [ "$rc" = 3 ] && echo "refused as it should (exit 3)" && return 0
    echo "the guard let \`nvidia-smi -i 4242 -pl 1\` through (exit $rc)"
    return 1
}

# ------------------------------------------------------------------ MPS clean-up, packing

MPS_BEFORE=$(ls -d /tmp/radt-mps* 2>/dev/null | sort)
# quit every MPS control daemon whose pipe folder is this run's: under $TMPROOT, or a
# /tmp/radt-mps* folder (radT's short pipe path) that was not there before the run
quit_leftover_mps() {
    local dirs pipe found=0
    dirs=$(
        find "$TMPROOT" -name nvidia-cuda-mps-control.pid -printf '%h\n' 2>/dev/null
        comm -13 <(echo "$MPS_BEFORE") <(ls -d /tmp/radt-mps* 2>/dev/null | sort)
    )
    for pipe in $dirs; do
        [ -e "$pipe/nvidia-cuda-mps-control.pid" ] || continue
        found=1
        echo "quitting the MPS control daemon of $pipe"
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe timeout 15 nvidia-cuda-mps-control
    done
    [ "$found" = 1 ] || echo "no MPS control daemon left"
}

FINISHED=0
finish() {
    [ "$FINISHED" = 1 ] && return
    FINISHED=1
    trap '' TERM INT
    local t0 big
    t0=$(date +%s.%N)
    quit_leftover_mps >"$TREE/logs/mps-cleanup.out" 2>&1
    record mps-cleanup "$?" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" \
        15 "quit_leftover_mps" ""
    # the files the lent machine could not return (16 MiB each at most) stay out of the tars
    big=$TMPROOT/too_big.txt
    find "$TREE" "$WORK" "$RADT_HOME" -type f -size +12M 2>/dev/null >"$big"
    if [ -s "$big" ]; then
        sed 's/^/left out (over 12 MiB): /' "$big" >"$TREE/logs/left_out.txt"
    fi
    sed "s|^$TMPROOT/||" "$big" >"$big.store"
    sed "s|^$OUT/||" "$big" >"$big.tree"
    {
        column -t -s $'\t' "$MANIFEST" 2>/dev/null || cat "$MANIFEST"
        echo
        cat "$TREE/runs.txt" 2>/dev/null
    } >"$OUT/summary.txt"
    cp "$MANIFEST" "$OUT/manifest.tsv"
    tar -czf "$OUT/store.tar.gz" -X "$big.store" -C "$TMPROOT" \
        --exclude=work/gpu_check_train.py work home 2>>"$TREE/logs/pack.err"
    tar -czf "$OUT/gpu_check.tar.gz" -X "$big.tree" -C "$OUT" gpu_check 2>>"$TREE/logs/pack.err"
    [ "${GPU_CHECK_KEEP_TREE:-0}" = 1 ] || rm -rf "$TREE"
    rm -rf "$TMPROOT"
    echo "gpu_check: done in $(($(date +%s) - START)) s; results in $OUT" >&2
}
trap finish EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ------------------------------------------------------------------ the machine

system_info() {
    date -u +%FT%TZ
    uname -a
    echo "cores: $(nproc)"
    free -m
    echo "dry run: $DRY"
    echo "python: $(command -v "$PY")"
    for tool in nvidia-smi dcgmi nvidia-cuda-mps-control nsys ncu nvcc; do
        printf '%s: %s\n' "$tool" "$(command -v "$tool" || echo missing)"
    done
    env | grep -E '^(CUDA|NVIDIA|RADT|MLFLOW)_' | sort
}

export REPO OUT TREE TMPROOT WORK VENV PY WHEELS DRY REAL_SMI
export -f system_info guard_check

step system 20 system.txt system_info
step guard 20 - guard_check
step nvidia-smi-L 30 nvidia_smi_L.txt nvidia-smi -L
step nvidia-smi-q 60 nvidia_smi_q.txt nvidia-smi -q
step nvidia-smi-version 30 nvidia_smi_version.txt nvidia-smi --version
step driver 30 driver.csv nvidia-smi \
    --query-gpu=index,name,uuid,pci.bus_id,driver_version,vbios_version,memory.total,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,compute_mode,mig.mode.current \
    --format=csv
step supported-clocks 30 supported_clocks.csv nvidia-smi \
    --query-supported-clocks=memory,graphics --format=csv

# ------------------------------------------------------------------ radT in a fresh venv

make_venv() {
    "$PY" -m venv --without-pip "$VENV" || return
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # the packages of $PY (torch, numpy, pip, ... ; $PY may be a venv itself) after the
    # venv's own, which win
    "$PY" -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' |
        sort -u >"$site/_gpu_check_base.pth"
    cat "$site/_gpu_check_base.pth"
}

install_radt() {
    local src=$TMPROOT/src links=()
    mkdir -p "$src"
    cp -r "$REPO/pyproject.toml" "$REPO/README.md" "$REPO/radt" "$REPO/listeners" \
        "$REPO/frontend" "$src/" || return
    if [ -d "$WHEELS" ]; then
        links=(--find-links "$WHEELS")
        echo "wheels from $WHEELS: $(ls "$WHEELS" | wc -l) files"
    else
        echo "no wheel folder at $WHEELS: radT's dependencies must already be in $PY"
    fi
    local pip=("$VENV/bin/python" -m pip install --no-input --disable-pip-version-check
        --no-index --no-build-isolation)
    "${pip[@]}" "${links[@]}" "$src" && return 0
    # the wheel folder leaves out the UI's packages (dash, plotly: `radt ui` only), and the
    # image's own versions may miss a pin: radT and the wheels as they are, unresolved
    echo "radT with its dependencies could not be installed; now radT and the carried wheels" \
        "without resolving dependencies (pip check below says what is missing)"
    "${pip[@]}" --no-deps "$src" "$WHEELS"/*.whl || return 1
    "$VENV/bin/python" -m pip check
    if ! "$VENV/bin/python" -c 'import mlflow, radt.cli' 2>&1; then
        echo "radT cannot run: a dependency is missing in $PY and in $WHEELS;" \
            "make the wheel folder with benchmarks/gpu_check_wheels.sh and carry it"
        return 1
    fi
    echo "radT's command line runs (its UI may not: see pip check above)"
}

export -f make_venv install_radt
step venv 60 - make_venv
step install 150 - install_radt
RADT=("$VENV/bin/python" -m radt)

versions() {
    "$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import platform
import sys

print(f"python {platform.python_version()} ({sys.executable})")
for name in ("radt", "mlflow", "torch", "numpy", "pandas", "pyarrow", "psutil",
             "nvidia-ml-py", "dash", "plotly", "tensorsocket", "triton"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} missing")
try:
    import torch
except ImportError:
    print("torch: cannot be imported")
else:
    print(f"torch.version.cuda {torch.version.cuda}")
    print(f"torch.cuda.is_available {torch.cuda.is_available()}")
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print(f"torch device 0: {p.name}, {p.total_memory / 2**30:.1f} GiB, "
              f"{p.multi_processor_count} SMs, capability {p.major}.{p.minor}")
        print(f"cudnn {torch.backends.cudnn.version()}")
try:
    import pynvml
    pynvml.nvmlInit()
    print(f"NVML driver {pynvml.nvmlSystemGetDriverVersion()}")
    print(f"NVML CUDA driver {pynvml.nvmlSystemGetCudaDriverVersion_v2()}")
    pynvml.nvmlShutdown()
except Exception as error:  # what NVML says is the reading
    print(f"NVML: {type(error).__name__}: {error}")
EOF
    local tool
    for tool in nvcc ncu nsys dcgmi nvidia-cuda-mps-control; do
        if ! command -v "$tool" >/dev/null; then
            echo "$tool missing"
        elif [ "$tool" = nvidia-cuda-mps-control ]; then
            echo "$tool at $(command -v "$tool")"
        else
            echo "$tool: $(timeout 30 "$tool" --version 2>&1 | tr '\n' ' ')"
        fi
    done
}

export -f versions
step versions 60 versions.txt versions
step pip-list 60 pip_list.txt "$VENV/bin/python" -m pip list --disable-pip-version-check
step radt-version 30 radt_version.txt "${RADT[@]}" --version
step listeners 60 listeners.txt "${RADT[@]}" listeners
available() { awk -v n="$1" 'NR > 1 && $1 == n && $2 == "yes" { found = 1 } END { exit !found }' \
    "$TREE/listeners.txt"; }
step doctor 120 doctor.json "${RADT[@]}" doctor --json
step doctor-measure $((MEASURE_S + 90)) doctor_measure.json \
    "${RADT[@]}" doctor --measure --seconds "$MEASURE_S" --json

# ------------------------------------------------------------------ the GPU cases

TORCH_STATE=$("$VENV/bin/python" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null)
TRAIN_SKIP=""
if [ -z "$TORCH_STATE" ]; then
    TRAIN_SKIP="torch missing in $PY: carry it as wheels (device README) or set GPU_CHECK_PYTHON"
elif [ "$TORCH_STATE" = cpu ] && [ "$DRY" != 1 ]; then
    TRAIN_SKIP="torch sees no CUDA device"
fi

LISTENERS=nvml+smi+top
available dcgm && LISTENERS+=+dcgm
PARAMS="--seconds $TRAIN_S --device $DEVICE $TRAIN_ARGS"
PLAN=$WORK/gpu_check.csv
cat >"$PLAN" <<EOF
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, Job
$EXPERIMENT, lone, , , 0, none, gpu_check_train.py, $LISTENERS, $PARAMS, resnet18
$EXPERIMENT, naive-pair, , , 0, naive, gpu_check_train.py, $LISTENERS, $PARAMS, resnet18
$EXPERIMENT, naive-pair, , , 0, naive, gpu_check_train.py, $LISTENERS, $PARAMS --seed 1, resnet18
$EXPERIMENT, mps-pair, , , 0, mps, gpu_check_train.py, $LISTENERS, $PARAMS, resnet18
$EXPERIMENT, mps-pair, , , 0, mps, gpu_check_train.py, $LISTENERS, $PARAMS --seed 1, resnet18
EOF
cp "$PLAN" "$TREE/plan_before.csv"

# one workload each, so that each has its own limit and row in the manifest
for mode in none naive mps; do
    SKIP_REASON=$TRAIN_SKIP
    step "plan-$mode" $((TRAIN_S + 120)) - "${RADT[@]}" --modes "$mode" "$PLAN"
done
cp "$PLAN" "$TREE/plan.csv"

# the profilers, each in a short lone run of its own (nsys and ncu wrap the command)
profile() { # profile LISTENER [-o OPTION]
    local name=$1
    shift
    SKIP_REASON=$TRAIN_SKIP
    if [ -z "$SKIP_REASON" ] && ! available "$name"; then
        SKIP_REASON="listener $name not available here (listeners.txt)"
    elif [ -z "$SKIP_REASON" ] && [ "$(left_s)" -lt $((90 * LIMIT_SCALE)) ]; then
        SKIP_REASON="the time left is kept for radt runs and the exports"
    fi
    step "profile-$name" $((TRAIN_S + 120)) - "${RADT[@]}" -e "$EXPERIMENT" -n "profile-$name" \
        -d 0 -l "top+$name" "$@" gpu_check_train.py --seconds "$((TRAIN_S / 2 + 1))" \
        --device "$DEVICE" $TRAIN_ARGS
}
profile torch
profile nsys
profile ncu -o ncu.launch_count=20

# ------------------------------------------------------------------ what was recorded

step runs-experiments 60 runs_experiments.txt "${RADT[@]}" runs
step runs 60 runs.txt "${RADT[@]}" runs -e "$EXPERIMENT"
step runs-doctor 60 runs_doctor.txt "${RADT[@]}" runs -e radt-doctor
step export-summary 60 - "${RADT[@]}" export -e "$EXPERIMENT" --summary -o "$TREE/summary.csv"
step export-samples 90 - "${RADT[@]}" export -e "$EXPERIMENT" -o "$TREE/samples.parquet"
step export-doctor 60 - "${RADT[@]}" export -e radt-doctor -o "$TREE/doctor_samples.parquet"
exit 0
