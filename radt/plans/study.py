"""Studies: the original radT's YAML sweeps, with radT's extensions, read and checked.

The original radT (0.2.26+) runs a YAML file of the keys ``name, experiment, collocation,
devices, listeners, file, method (grid|random), parameters: {flag: {values: [...]}}``: every
combination of the parameters is one workload of one run (``--flag value`` joined by spaces),
all under one top-level run; after each workload it writes ``parent: <run id>`` and
``status: {N: "<STATUS> <run id> (<params>)"}`` into the file, and on the next start skips the
combinations whose status says FINISHED. Those files run here unchanged.

radT's extensions, each a list whose product with the parameters is the study:
``collocation`` (whole configurations: ``none``, ``naive x3``, ``mps x2``, ``mps:50 x2``,
``4g.40gb+3g.40gb`` (one run per slice)), ``power_limit`` (watts or ``default``),
``gpu_clock`` (the SM clock to lock, MHz, or ``default``), ``repeats``, ``loader`` (``own``:
each training loads its own data; ``shared``: one shared loader, the command ``loader_file``,
feeds every training of the workload, see
:mod:`radt.plans.loader`), plus ``job`` (the Job name), ``seed`` (for ``method: random``),
``autolog: true`` (every run counts its examples as ``radt --autolog`` does), ``nodes: N``
(each workload is one distributed training across N nodes: :mod:`radt.plans.multinode`) and
``batch_size: {search: max, ...}`` (the largest batch that fits each device slot, searched by
:mod:`radt.plans.batch`). Every problem is reported, one line each with its key and line,
before anything starts.

An axis item's values are :mod:`radt.plans.studyaxes`'s; the study becomes its workloads in
:mod:`radt.plans.studyexpand` and its ``status:`` its progress in :mod:`radt.plans.studyprogress`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from radt.errors import UsageError
from radt.plans import columns
from radt.plans.read import _parse_devices, _parse_file, _parse_listeners
from radt.plans.studyaxes import (
    Configuration,
    _cap_text,
    _clock_text,
    _parse_clock,
    _parse_loader,
    _value_text,
    parse_configuration,
    parse_watts,
)
from radt.tags import Mode

T = TypeVar("T")

ORIGINAL_KEYS = (
    "name",
    "experiment",
    "collocation",
    "devices",
    "listeners",
    "file",
    "method",
    "parameters",
    "status",
    "parent",
)
STUDY_COLUMN_KEYS = tuple(column.study_key for column in columns.drawn() if column.study_key)
"""Study keys that are plan columns: every row of the study's plan gets the value."""
EXTENSION_KEYS = (
    "power_limit",
    "gpu_clock",
    "repeats",
    "job",
    "seed",
    "batch_size",
    "loader",
    "loader_file",
    "slurm",
    "nodes",
    *STUDY_COLUMN_KEYS,
)
KEYS = ORIGINAL_KEYS + EXTENSION_KEYS
BATCH_KEYS = ("search", "flag", "min", "max", "power_of_two", "steps", "max_time")
METHODS = ("grid", "random")
SHARED_LOADER_FLAG = "--shared-loader"
"""What a training fed by the shared loader gets (examples/train.py's flag), before the params."""


class StudyError(UsageError):
    """A study with problems: one line each, under a count line."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.problems = problems
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        super().__init__(f"{path} has {count}; nothing was started:\n" + "\n".join(problems))


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class BatchSearch:
    """``batch_size: {search: max, ...}``: find the largest batch that fits each slot."""

    flag: str = "--batch-size"
    min: int = 1
    max: int = 65536
    power_of_two: bool = False
    steps: int = 5
    """Probes end after this many ``radt.log_examples`` calls (``RADT_MAX_STEPS``)."""
    max_time_min: float = 10.0
    """A probe that runs this long without running out of memory fits."""

    @property
    def spec(self) -> str:
        """What was searched, as the cache key: ``--batch-size 1..65536`` (``, powers of 2``)."""
        return f"{self.flag} {self.min}..{self.max}" + (
            ", powers of 2" if self.power_of_two else ""
        )


@dataclass
class Study:
    """A read and checked study file."""

    path: Path
    name: str
    experiment: str
    file: str
    devices: str  # the Devices cell: "0", "0+1", "" (radT's default)
    listeners: str | None
    method: str
    seed: int
    parameters: list[tuple[str, list[str]]]  # flag (with dashes) -> values as written
    configurations: list[Configuration]
    power_limits_w: list[float | None]  # None: the GPU's default limit
    repeats: int
    job: str | None
    batch: BatchSearch | None
    loaders: list[str] = field(default_factory=lambda: ["own"])
    """``own`` and/or ``shared``: a dimension of the study, like the configurations."""
    loader_file: str | None = None
    """The shared loader's command (a ``Role=loader`` plan row); needed with ``shared``."""
    gpu_clocks_mhz: list[int | None] = field(default_factory=lambda: [None])
    """The ``gpu_clock`` dimension: MHz to lock, None for the driver's default."""
    status: dict[int, str] = field(default_factory=dict)
    parent: str | None = None
    nodes: int = 1
    """``nodes: N``: each workload is one training across N nodes, one job run."""
    column_values: dict[str, Any] = field(default_factory=dict)
    """The study keys that are plan columns (:data:`radt.plans.columns.TABLE`'s
    ``study_key``), as Row field → value; absent: the column's default."""
    slurm: dict = field(default_factory=dict)
    """The ``slurm:`` block as written (checked by :mod:`radt.slurm.options` with ``--slurm``)."""
    extended: set[str] = field(default_factory=set)
    """The extension dimensions the file uses (``collocation`` when it is a list)."""
    lines: dict[str, int] = field(default_factory=dict)
    """Line of each top-level key (and ``collocation[i]``, ``parameters.x``) in the file."""


@dataclass
class StudyWorkload:
    """One workload of the expanded study: one combination of every dimension."""

    index: int  # 1-based position in the run order
    params: list[tuple[str, str]]  # (flag, value) of the swept parameters
    configuration: Configuration
    power_limit_w: float | None
    repeat: int
    job: str
    descriptor: str
    """What identifies it in the file's ``status:`` (the original's params string, extended)."""
    name: str  # the plan's Workload: "001", "004-naive-x2-150w-r2"
    loader: str = "own"  # "shared": a shared loader (the study's loader_file) feeds the runs
    gpu_clock_mhz: int | None = None  # the locked SM clock; None: the driver's default

    @property
    def params_text(self) -> str:
        """``--lr 0.1 --epochs 5``, as the original joins them."""
        return " ".join(f"{flag} {value}" for flag, value in self.params)

    @property
    def argv_params(self) -> list[str]:
        """The swept parameters as arguments (a value with spaces stays one argument)."""
        return [part for flag, value in self.params for part in (flag, value)]


# --------------------------------------------------------------------------- reading


def read_study(path: Path, *, cwd: Path | None = None) -> Study:
    """Read and check a study file; raise StudyError with every problem.

    ``cwd`` is the folder the ``file`` is resolved from (default: the current folder, as the
    original radT and plans do).
    """
    import yaml

    path = Path(path)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"study not found: {path}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; save the study as UTF-8 YAML") from None
    except OSError as err:
        raise UsageError(f"cannot read study {path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
        lines = _key_lines(yaml.compose(text))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark is not None else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and start is not None:
            problem += f" ({context} on line {start.line + 1})"
        raise StudyError(path, [f"{where}: not valid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise StudyError(
            path, [f"{path}: a study is a mapping of keys (name, file, parameters, ...)"]
        )
    return _Reader(path, data, lines, cwd).study()


def _key_lines(node) -> dict[str, int]:
    """Line numbers of the top-level keys and of the items of ``collocation``/``parameters``."""
    import yaml

    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        name = str(key.value)
        lines[name] = key.start_mark.line + 1
        if isinstance(value, yaml.SequenceNode):
            for i, item in enumerate(value.value):
                lines[f"{name}[{i}]"] = item.start_mark.line + 1
        elif isinstance(value, yaml.MappingNode):
            for sub, _ in value.value:
                lines[f"{name}.{sub.value}"] = sub.start_mark.line + 1
    return lines


class _Reader:
    """Checks one study's keys, collecting every problem."""

    def __init__(self, path: Path, data: dict, lines: dict[str, int], cwd: Path) -> None:
        self.path = path
        self.data = data
        self.lines = lines
        self.cwd = cwd
        self.problems: list[str] = []

    def problem(self, key: str, message: str) -> None:
        line = self.lines.get(key) or self.lines.get(key.split("[")[0].split(".")[0])
        where = f"{self.path} line {line}" if line else str(self.path)
        self.problems.append(f"{where}: {key}: {message}")

    def study(self) -> Study:
        data = self.data
        for key in data:
            if str(key) not in KEYS:
                close = difflib.get_close_matches(str(key), KEYS, n=1, cutoff=0.6)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.problem(str(key), f"unknown key (allowed: {', '.join(KEYS)}){hint}")
        name = self.text("name") or self.path.stem
        experiment = self.text("experiment") or name
        file = self.file()
        devices = self.devices()
        listeners = self.listeners()
        method = (self.text("method") or "grid").lower()
        if method not in METHODS:
            self.problem("method", f"{method!r} is not grid or random")
        seed = self.integer("seed", 0, minimum=None)
        parameters = self.parameters()
        configurations = self.configurations()
        limits = self.power_limits()
        gpu_clocks = self.gpu_clocks()
        repeats = self.integer("repeats", 1, minimum=1)
        job = self.text("job") or None
        batch = self.batch(parameters)
        loaders = self.loaders()
        loader_file = self.loader_file(loaders)
        status = self.status()
        parent = self.text("parent") or None
        nodes = self.nodes(configurations, limits, gpu_clocks, loaders, batch)
        column_values = self.column_values()
        slurm = data.get("slurm") or {}
        if not isinstance(slurm, dict):
            self.problem("slurm", "a mapping of sbatch options, e.g. partition: gpu")
        extended = {
            key
            for key in EXTENSION_KEYS
            if key in data
            and key not in ("job", "seed", "loader_file", "slurm", "nodes")
            and key not in STUDY_COLUMN_KEYS
        }
        if isinstance(data.get("collocation"), list):
            extended.add("collocation")
        if self.problems:
            raise StudyError(self.path, self.problems)
        return Study(
            path=self.path,
            name=name,
            experiment=experiment,
            file=file,
            devices=devices,
            listeners=listeners,
            method=method,
            seed=seed,
            parameters=parameters,
            configurations=configurations,
            power_limits_w=limits,
            gpu_clocks_mhz=gpu_clocks,
            repeats=repeats,
            job=job,
            batch=batch,
            loaders=loaders,
            loader_file=loader_file,
            status=status,
            parent=parent,
            nodes=nodes,
            column_values=column_values,
            slurm=slurm if isinstance(slurm, dict) else {},
            extended=extended,
            lines=self.lines,
        )

    # ----------------------------------------------------------------- scalar keys

    def column_values(self) -> dict[str, Any]:
        """The values of the study keys that become plan columns in every row."""
        found: dict[str, Any] = {}
        for column in columns.drawn():
            if column.study_key is None or column.study_parse is None:
                continue
            if column.study_key in self.data:
                try:
                    found[column.field] = column.study_parse(self.data[column.study_key])
                except ValueError as err:
                    self.problem(column.study_key, str(err))
        return found

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            self.problem(key, "must be a single value, not a list or mapping")
            return ""
        return str(value).strip()

    def integer(self, key: str, default: int, minimum: int | None) -> int:
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"{value!r} is not a whole number")
            return default
        if minimum is not None and value < minimum:
            self.problem(key, f"{value} must be at least {minimum}")
            return default
        return value

    def nodes(self, configurations, limits, gpu_clocks, loaders, batch) -> int:
        """``nodes``: a positive whole number; above 1, what cannot span nodes is a problem."""
        value = self.data.get("nodes", 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.problem("nodes", f"{value!r} is not a positive whole number of nodes")
            return 1
        if value == 1:
            return 1
        for i, configuration in enumerate(configurations):
            if configuration.mode != Mode.NONE:
                key = "collocation" if len(configurations) == 1 else f"collocation[{i}]"
                self.problem(
                    key,
                    f"{configuration.label} shares one GPU and cannot span nodes; with "
                    f"nodes: {value} each workload is one training alone on its GPUs (none)",
                )
        refused = {
            "power_limit": any(cap is not None for cap in limits),
            "gpu_clock": any(clock is not None for clock in gpu_clocks),
            "loader": "shared" in loaders,
            "batch_size": batch is not None,
        }
        for key, used in refused.items():
            if used:
                self.problem(
                    key, f"is not available with nodes: {value} (one node's setting); remove it"
                )
        return value

    def file(self) -> str:
        value = self.text("file")
        try:
            return _parse_file(value, self.cwd)
        except ValueError as err:
            self.problem("file", str(err))
            return value

    def devices(self) -> str:
        value = self.text("devices")
        try:
            return "+".join(_parse_devices(value))
        except ValueError as err:
            self.problem("devices", str(err))
            return ""

    def listeners(self) -> str | None:
        try:
            return _parse_listeners(self.text("listeners"))
        except ValueError as err:
            self.problem("listeners", str(err))
            return None

    # ----------------------------------------------------------------- dimensions

    def parameters(self) -> list[tuple[str, list[str]]]:
        raw = self.data.get("parameters")
        if raw is None:
            return []
        if not isinstance(raw, dict):
            self.problem("parameters", "must map each flag to {values: [...]}")
            return []
        found: list[tuple[str, list[str]]] = []
        for name, spec in raw.items():
            key = f"parameters.{name}"
            if not isinstance(spec, dict) or "values" not in spec:
                self.problem(key, "needs values: [...] (e.g. lr: {values: [0.1, 0.01]})")
                continue
            extra = [str(k) for k in spec if k != "values"]
            if extra:
                self.problem(key, f"unknown key {extra[0]!r} (a parameter has values: [...])")
            values = spec["values"]
            if not isinstance(values, list):
                values = [values]
            if not values:
                self.problem(key, "values is empty, so the study has no workload (empty product)")
                continue
            if any(isinstance(v, (dict, list)) or v is None for v in values):
                self.problem(key, "values must be single values (numbers, words)")
                continue
            flag = str(name) if str(name).startswith("-") else f"--{name}"
            found.append((flag, [_value_text(v) for v in values]))
        return found

    def _axis(
        self,
        name: str,
        default: str,
        parse: Callable[[Any], T],
        label: Callable[[T], str],
    ) -> list[T]:
        """The values of the list ``name`` (one value is a list of one), each parsed, none
        twice; an empty list, a value ``parse`` refuses (ValueError) and a repeat are problems."""
        raw = self.data.get(name, default)
        items = raw if isinstance(raw, list) else [raw]
        if not items:
            self.problem(name, "the list is empty, so the study has no workload")
        found: list[T] = []
        for i, item in enumerate(items):
            key = f"{name}[{i}]" if isinstance(raw, list) else name
            try:
                value = parse(item)
            except ValueError as err:
                self.problem(key, str(err))
                continue
            if label(value) in [label(v) for v in found]:
                self.problem(key, f"{label(value)} is listed twice")
                continue
            found.append(value)
        return found

    def configurations(self) -> list[Configuration]:
        return self._axis(
            "collocation",
            Mode.NONE.value,
            lambda item: parse_configuration(_value_text(item)),
            lambda configuration: configuration.label,
        )

    def gpu_clocks(self) -> list[int | None]:
        return self._axis("gpu_clock", "default", _parse_clock, _clock_text)

    def power_limits(self) -> list[float | None]:
        return self._axis("power_limit", "default", parse_watts, _cap_text)

    def loaders(self) -> list[str]:
        return self._axis("loader", "own", _parse_loader, str)

    def loader_file(self, loaders: list[str]) -> str | None:
        value = self.text("loader_file")
        if not value:
            if "shared" in loaders:
                self.problem(
                    "loader",
                    "shared needs loader_file: the shared loader's command "
                    "(e.g. loader_file: examples/loader.py --epochs 2)",
                )
            return None
        if "shared" not in loaders:
            self.problem(
                "loader_file", "is only run with loader: [own, shared] (or [shared]); add that"
            )
        try:
            return _parse_file(value, self.cwd)
        except ValueError as err:
            self.problem("loader_file", str(err))
            return value

    def batch(self, parameters: list[tuple[str, list[str]]]) -> BatchSearch | None:
        raw = self.data.get("batch_size")
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.problem(
                "batch_size", "must be a mapping: {search: max, flag: --batch-size, min: 1, ...}"
            )
            return None
        for key in raw:
            if str(key) not in BATCH_KEYS:
                self.problem(f"batch_size.{key}", f"unknown key (allowed: {', '.join(BATCH_KEYS)})")
        if str(raw.get("search", "")).strip().lower() != "max":
            self.problem("batch_size", "needs search: max (the largest batch that fits each slot)")
        defaults = BatchSearch()
        flag = str(raw.get("flag", defaults.flag)).strip()
        if not flag.startswith("-") or " " in flag:
            self.problem("batch_size.flag", f"{flag!r} is not a flag like --batch-size")
        if flag in [name for name, _ in parameters]:
            self.problem(
                "batch_size.flag",
                f"{flag} is also swept under parameters; sweep it or search it, not both",
            )
        numbers = {}
        for key, default in (("min", defaults.min), ("max", defaults.max), ("steps", 5)):
            value = raw.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                self.problem(f"batch_size.{key}", f"{value!r} is not a whole number of at least 1")
                value = default
            numbers[key] = value
        if numbers["min"] > numbers["max"]:
            self.problem("batch_size", f"min {numbers['min']} is above max {numbers['max']}")
        power_of_two = raw.get("power_of_two", False)
        if not isinstance(power_of_two, bool):
            self.problem("batch_size.power_of_two", f"{power_of_two!r} is not true or false")
            power_of_two = False
        if power_of_two and not _powers_of_two(numbers["min"], numbers["max"]):
            self.problem(
                "batch_size", f"no power of two lies between {numbers['min']} and {numbers['max']}"
            )
        max_time = raw.get("max_time", defaults.max_time_min)
        if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or max_time <= 0:
            self.problem("batch_size.max_time", f"{max_time!r} is not a positive number of minutes")
            max_time = defaults.max_time_min
        return BatchSearch(
            flag, numbers["min"], numbers["max"], power_of_two, numbers["steps"], float(max_time)
        )

    def status(self) -> dict[int, str]:
        raw = self.data.get("status")
        if raw is None or raw == {}:
            return {}
        if not isinstance(raw, dict):
            self.problem("status", "radT writes this mapping; remove the key to start afresh")
            return {}
        found: dict[int, str] = {}
        for key, value in raw.items():
            try:
                number = int(key)
            except (TypeError, ValueError):
                self.problem(f"status.{key}", "is not a workload number")
                continue
            found[number] = str(value)
        return found


def _powers_of_two(low: int, high: int) -> list[int]:
    found, value = [], 1
    while value <= high:
        if value >= low:
            found.append(value)
        value *= 2
    return found
