"""The names of the run tags radT sets and reads, and what they say about a run.

Every ``radt.*`` tag and every MLflow tag (``mlflow.*``) that radT uses is named here once, as
MLflow names its own in ``mlflow.utils.mlflow_tags``; the rest of radT imports the names.
:func:`run_kind` decides from a run's tags which kind of run it is (a workload, one of its
training runs or its shared loader, or a lone run), :class:`RunTree` holds which runs
are whose children, and :class:`Mode` is the value of :data:`RADT_COLLOCATION`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

# MLflow's own tags that radT sets or reads
MLFLOW_PARENT_RUN_ID = "mlflow.parentRunId"
MLFLOW_SOURCE_NAME = "mlflow.source.name"
MLFLOW_SOURCE_TYPE = "mlflow.source.type"
MLFLOW_USER = "mlflow.user"
MLFLOW_NOTE = "mlflow.note.content"
"""Where MLflow keeps a run's or an experiment's description."""

# What ran and how it ended
RADT_COMMAND = "radt.command"
RADT_COMMAND_START_S = "radt.command_start_s"
RADT_COMMAND_END_S = "radt.command_end_s"
RADT_EXIT_CODE = "radt.exit_code"
RADT_SIGNAL = "radt.signal"
RADT_STOP_REASON = "radt.stop_reason"
RADT_NOTE = "radt.note"
RADT_PHASE_ROWS = "radt.phase_rows"
"""How many phase intervals the run's phases artifact holds (``0``: it marked no phase), set
once the artifact is uploaded; a run without the tag (older radT, or phases still to send with
``radt sync``) is asked for the artifact itself."""
RADT_WORKDIR = "radt.workdir"
RADT_LISTENERS = "radt.listeners"
RADT_DEVICES = "radt.devices"
RADT_JOB = "radt.job"
RADT_JOB_IGNORE = "radt.job_ignore"
RADT_WARMUP_EPOCHS = "radt.warmup_epochs"
RADT_WARMUP_S = "radt.warmup_s"
RADT_MANUAL = "radt.manual"
"""``1`` for a run of ``radt --manual``: its window starts when the script opens
``radt.run.RADTBenchmark()``, and it is only compared with runs of the same rule."""
RADT_TEARDOWN_FAILED = "radt.teardown_failed"

# The machine (radt.launch.environment)
RADT_VERSION = "radt.version"
RADT_HOST = "radt.host"
RADT_PLATFORM = "radt.platform"
RADT_PYTHON = "radt.python"
RADT_CPU_MODEL = "radt.cpu_model"
RADT_CPU_CORES = "radt.cpu_cores"
RADT_CPU_PHYSICAL_CORES = "radt.cpu_physical_cores"
RADT_RAM_GIB = "radt.ram_gib"
RADT_GPUS = "radt.gpus"
RADT_GPU_DRIVER = "radt.gpu_driver"
RADT_CUDA_VERSION = "radt.cuda_version"
RADT_GPU_MEMORY_MIB = "radt.gpu_memory_mib"
"""Each GPU's total memory in MiB (``nvidia-smi -q``'s FB Memory Total), in :data:`RADT_GPUS`'
order, comma-separated."""
RADT_LIBRARIES = "radt.libraries"
"""``name==version`` of the study's libraries that are installed
(:data:`radt.launch.environment.STUDY_LIBRARIES`), space-separated; ``none`` if none is."""

# Plans, workloads and studies
RADT_PLAN = "radt.plan"
RADT_PLAN_LINE = "radt.plan_line"
RADT_WORKLOAD = "radt.workload"
RADT_WORKLOAD_RUNS = "radt.workload_runs"
RADT_LETTER = "radt.letter"
RADT_ROLE = "radt.role"
RADT_LOADER = "radt.loader"
RADT_LOADER_PORTS = "radt.loader_ports"
RADT_STUDY = "radt.study"
RADT_STUDY_FILE = "radt.study_file"
RADT_STUDY_WORKLOADS = "radt.study_workloads"
RADT_STUDY_PROGRESS = "radt.study_progress"

# Collocation (radt.collocation)
RADT_COLLOCATION = "radt.collocation"
RADT_MPS_THREAD_PCT = "radt.mps_thread_pct"
RADT_MIG_PROFILE = "radt.mig_profile"
RADT_MIG_INSTANCE = "radt.mig_instance"
RADT_POWER_LIMIT_W = "radt.power_limit_w"
RADT_GPU_CLOCK_MHZ = "radt.gpu_clock_mhz"

# Batch-size searches (radt.plans.batch)
RADT_PROBE = "radt.probe"
RADT_PROBE_BATCH = "radt.probe.batch"
RADT_PROBE_BATCH_SIZE = "radt.probe.batch_size"
RADT_PROBE_JOB = "radt.probe.job"
RADT_PROBE_OUTCOME = "radt.probe.outcome"
RADT_PROBE_PROBES = "radt.probe.probes"
RADT_PROBE_SLOT = "radt.probe.slot"
RADT_PROBE_SPEC = "radt.probe.spec"

# Slurm (radt.slurm)
RADT_SLURM_JOB_ID = "radt.slurm.job_id"
RADT_SLURM_ARRAY_JOB_ID = "radt.slurm.array_job_id"
RADT_SLURM_ARRAY_TASK_ID = "radt.slurm.array_task_id"
RADT_SLURM_NODE = "radt.slurm.node"
RADT_SLURM_PARTITION = "radt.slurm.partition"
RADT_SLURM_GPUS = "radt.slurm.gpus"
RADT_SLURM_STATE = "radt.slurm.state"
RADT_SLURM_ATTEMPT = "radt.slurm.attempt"
"""1 for a job's first run, n+1 after Slurm requeued it n times (``SLURM_RESTART_COUNT``)."""

# Distributed trainings: a job run and a node run per node (radt.launch.group)
RADT_GROUP = "radt.group"
RADT_GROUP_ROLE = "radt.group.role"
JOB_ROLE = "job"
"""The :data:`RADT_GROUP_ROLE` of a distributed training's job run (the parent)."""
NODE_ROLE = "node"
"""The :data:`RADT_GROUP_ROLE` of one of its node runs (a child per node)."""
RADT_GROUP_NODES = "radt.group.nodes"
RADT_NODE = "radt.node"
RADT_NODE_RANK = "radt.node_rank"
RADT_WINDOW_START_S = "radt.window_start_s"
RADT_WINDOW_END_S = "radt.window_end_s"
RADT_SCALING_BASELINE = "radt.scaling_baseline"

# Who counted the examples: script, autolog or callback (radt.run_api, radt.autologging)
RADT_EXAMPLES_SOURCE = "radt.examples_source"

# The analysis' figures as stored at a run's end (radt.analysis.closing, .stored)
RADT_BASIS = "radt.basis"
RADT_WARMUP = "radt.warmup"
RADT_WINDOW_NOTE = "radt.window_note"
RADT_FIGURES = "radt.figures"

# radt doctor
RADT_DOCTOR = "radt.doctor"
RADT_DOCTOR_LOAD = "radt.doctor.load"  # the load's module (python -m), its runs' command

# Listeners
RADT_DCGM_FIELDS = "radt.dcgm.fields"
RADT_NCU_CAPTURE = "radt.ncu.capture"
RADT_NCU_SKIPPED_LINES = "radt.ncu.skipped_lines"
RADT_NSYS_CAPTURE = "radt.nsys.capture"
RADT_NSYS_REPORT = "radt.nsys.report"
RADT_NSYS_SKIPPED_LINES = "radt.nsys.skipped_lines"
RADT_NSYS_WALL_SOURCE = "radt.nsys.wall_source"
RADT_RAPL_ZONES = "radt.rapl.zones"
RADT_TORCH_ACTIVITIES = "radt.torch.activities"
RADT_TORCH_PROCESSES = "radt.torch.processes"
RADT_TORCH_SCHEDULE = "radt.torch.schedule"
RADT_NVML_ENERGY_METHOD = "radt.nvml.energy_method."
"""Prefix: the GPU's key (``gpu0``) follows; value ``counter`` or ``integrated_power``."""
RADT_NVML_POWER_SOURCE = "radt.nvml.power_source."
"""Prefix: the GPU's key (``gpu0``) follows."""

LOADER_ROLE = "loader"
"""The :data:`RADT_ROLE` of a workload's shared loader."""


class Spelled(str, Enum):
    """A str Enum that is its value wherever a str is: printed, formatted, hashed, compared."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    __hash__ = str.__hash__


class Mode(Spelled):
    """A collocation mode (the value of :data:`RADT_COLLOCATION`, as a plan spells it)."""

    NONE = "none"
    """The run has its GPU to itself (a baseline)."""
    NAIVE = "naive"
    """Runs share a GPU by time slicing."""
    MPS = "mps"
    """Runs share a GPU under NVIDIA MPS."""
    MIG = "mig"
    """Each run has a MIG slice of the GPU."""


MODES = tuple(mode.value for mode in Mode)
"""The modes as a plan spells them: none, naive, mps, mig."""


class RunKind(Spelled):
    """Which kind of run a run is; the values are the summary's ``level`` column."""

    WORKLOAD = "provider"
    """A workload: the parent of the runs that shared its GPUs (tag :data:`RADT_WORKLOAD_RUNS`)."""
    TRAINING = "client"
    """One training run of a workload (or any other child run)."""
    LOADER = "loader"
    """A workload's shared loader (tag :data:`RADT_ROLE` = :data:`LOADER_ROLE`)."""
    LONE = "run"
    """A run on its own: ``radt run`` outside a plan."""


def run_kind(tags: Mapping[str, str], has_children: bool = False) -> RunKind:
    """The kind of the run with ``tags``; ``has_children``: whether other runs name it their
    parent (a run with children is a workload whatever its tags)."""
    if has_children or (RADT_WORKLOAD_RUNS in tags and RADT_LETTER not in tags):
        return RunKind.WORKLOAD
    if not tags.get(MLFLOW_PARENT_RUN_ID) and RADT_LETTER not in tags:
        return RunKind.LONE
    if tags.get(RADT_ROLE) == LOADER_ROLE:
        return RunKind.LOADER
    return RunKind.TRAINING


def parent_id(tags: Mapping[str, str]) -> str | None:
    """The run id of the parent of the run with ``tags``; None for a run without one."""
    return tags.get(MLFLOW_PARENT_RUN_ID) or None


def tag_filter(name: str, value: object, op: str = "=") -> str:
    """An MLflow search filter on tag ``name``: ``tags.`name` op 'value'`` (``value`` as text,
    a quote in it doubled, as MLflow's search syntax reads it)."""
    quoted = str(value).replace("'", "''")
    return f"tags.`{name}` {op} '{quoted}'"


def child_order(run: Any) -> tuple:
    """The order of a workload's runs (an MLflow run): by letter, its shared loader last; of a
    job run's node runs: by node rank (whichever node's radT started first)."""
    tags = run.data.tags
    rank = tags.get(RADT_NODE_RANK) or ""
    return (
        tags.get(RADT_ROLE) == LOADER_ROLE,
        tags.get(RADT_LETTER) or "",
        int(rank) if rank.isdigit() else -1,
        run.info.start_time or 0,
    )


class RunTree:
    """Which of some MLflow runs are the children of which (parent → children).

    Children are in :func:`child_order`; a parent need not be among the runs.
    """

    def __init__(self, runs: Iterable[Any]) -> None:
        self.children: dict[str, list[Any]] = {}
        for run in runs:
            parent = parent_id(run.data.tags)
            if parent:
                self.children.setdefault(parent, []).append(run)
        for kids in self.children.values():
            kids.sort(key=child_order)

    def kids(self, run_id: str) -> Sequence[Any]:
        """The child runs of ``run_id`` (empty if it has none)."""
        return self.children.get(run_id, [])

    def kind(self, run: Any) -> RunKind:
        """The :class:`RunKind` of ``run``, knowing its children."""
        return run_kind(run.data.tags, has_children=run.info.run_id in self.children)


def capture_tag(listener: str) -> str:
    """The tag that says what a wrapping listener (``nsys``, ``ncu``) captured:
    ``radt.<listener>.capture`` (:data:`RADT_NSYS_CAPTURE`, :data:`RADT_NCU_CAPTURE`)."""
    return f"radt.{listener}.capture"
