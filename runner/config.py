"""Typed schemas for the runner-owned config groups, and validation that names the key.

Each option file in `conf/<group>/` extends its `schema_<group>`, so unknown keys and wrong types
fail at composition; cross-field rules live in `__post_init__`. No torch or mlflow imports here:
`python -m runner --help` loads this module.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf

from runner import CONF_DIR
from runner.backends.cores import parse_core_range, parse_cores
from runner.errors import ConfigError as ConfigError  # re-exported: where every layer has imported it from

BACKENDS = ("auto", "cpu", "cuda", "neuron")
NEURON_MODES = ("DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY")
DTYPES = ("float32", "float16", "bfloat16", "float64")
MODES = ("forward", "train_step")
# Tracking URI schemes MLflow 3 accepts (a dialect may follow '+'); it refuses the old ./mlruns file store
TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
# the longest any duration key (`*_s`) takes, in seconds
DAY_S = 86400


def _allowed(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def _at_least(key: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}")


def _at_most_a_day(key: str, value: float | None) -> None:
    """Refuse a duration over a day: no job needs one, and a typo such as measure.warmup_s=1e308 runs for ever."""
    if value is not None and value > DAY_S:
        raise ConfigError(f"{key}={value} is out of range: at most {DAY_S} seconds (one day)")


def check_launcher_limits(jobs: int | None, timeout_s: float | None) -> None:
    """Refuse what the runner's process launchers would hang or kill on: no job at a time, or every job timed out.

    None: the launcher has no such key.
    """
    if jobs is not None and jobs < 0:
        raise ConfigError(
            f"hydra.launcher.jobs must be 0 (one per CPU core, GPU or NeuronCore group) or a count >= 1, got {jobs}"
        )
    if timeout_s is not None and timeout_s < 0:
        raise ConfigError(f"hydra.launcher.timeout_s must be seconds >= 0 (0: no limit), got {timeout_s}")


def _refuse_non_finite(value: Any, key: str) -> None:
    """Refuse inf and nan anywhere in a config: every bound check (`warmup_s >= 0`) lets them through."""
    if isinstance(value, dict):
        for name, item in value.items():
            _refuse_non_finite(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_non_finite(item, f"{key}[{index}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value} is not a finite number; give a number such as 0.5")


@dataclass
class BackendConfig:
    """Which device runs the workload: the keys every device takes (conf/backend/neuron.yaml adds Neuron's)."""

    # auto picks neuron, then cuda, then cpu
    name: str = "auto"
    # hourly price of the device, for cost per million steps in comparisons; no prices are built in
    price_per_hour: float | None = None
    # a CPU worker's cores: one_core (one thread), slot_cores (its share's), unpinned (benchmarks/cpu_placement.py)
    cpu_placement: str = "one_core"

    def __post_init__(self) -> None:
        _allowed("backend.name", self.name, BACKENDS)
        _allowed("backend.cpu_placement", self.cpu_placement, ("one_core", "slot_cores", "unpinned"))
        _at_least("backend.price_per_hour", self.price_per_hour, 0)

    def unpinned(self) -> BackendConfig:
        """The config without a pin to particular cores, for processes a slot's environment pins."""
        return self


@dataclass
class NeuronBackendConfig(BackendConfig):
    """backend=neuron: the NeuronCores, the NEFF cache, the explorer and the runtime's asynchronous mode."""

    name: str = "neuron"
    # NeuronCores this job owns, e.g. "0" or "2-3"; null: the launcher's, else every visible core
    cores: str | None = None
    # NEFF cache that NeuronConfig copies into the capture; null: $TORCH_NEURONX_NEFF_CACHE_DIR or /tmp/neff_cache
    neff_cache_dir: str | None = None
    # seconds neuron-explorer may spend summarising a capture (big NTFFs take tens of minutes)
    explorer_timeout_s: int = 1800
    # seconds Explorer's Parquet `view` may take before the runner asks for summary-json instead (a hung
    # view would hold the job for explorer_timeout_s per format)
    explorer_view_timeout_s: int = 300
    # TORCH_NEURONX_ENABLE_ASYNC_NRT; null: the environment's, else torch-neuronx's (documented default 0, the
    # shipped package sets 1): the manifest says which
    async_runtime: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _allowed("backend.name", self.name, ("neuron",))
        _at_least("backend.explorer_timeout_s", self.explorer_timeout_s, 1)
        _at_most_a_day("backend.explorer_timeout_s", self.explorer_timeout_s)
        _at_least("backend.explorer_view_timeout_s", self.explorer_view_timeout_s, 1)
        _at_most_a_day("backend.explorer_view_timeout_s", self.explorer_view_timeout_s)
        if self.cores is not None:
            parse_core_range(self.cores, "backend.cores")

    def unpinned(self) -> NeuronBackendConfig:
        """Without backend.cores: the slot's NEURON_RT_VISIBLE_CORES pins the process instead."""
        return replace(self, cores=None)

    @classmethod
    def of(cls, config: BackendConfig) -> NeuronBackendConfig:
        """`config` as the Neuron schema: backend=auto and backend.name=neuron get its defaults."""
        if isinstance(config, cls):
            return config
        return cls(**{f.name: getattr(config, f.name) for f in fields(BackendConfig) if f.name != "name"})


# Keys that no longer reach anything: refused with why, and what to use instead.
REMOVED_KEYS = {
    "backend.inflight_requests": (
        "it set NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS, which no longer enables asynchronous execution "
        "since Neuron SDK 2.31 (removed in 2.32); queue depth is measure.inflight (steps queued per synchronize, "
        "measure.mode=throughput) with torch-neuronx's asynchronous runtime (backend.async_runtime)"
    ),
    # set only by tests and benchmarks: each is now an environment variable, a benchmark's knob
    "measure.worker_start": "only benchmarks chose it; RUNNER_WORKER_START=spawn starts each worker in a new "
    "interpreter (docs/trust.md)",
    "measure.keep_freed_memory": "only benchmarks chose it; RUNNER_KEEP_FREED_MEMORY=0 leaves glibc's own malloc "
    "modes (docs/trust.md)",
}


@dataclass
class ProfilerConfig:
    """torch.profiler options, plus the NeuronConfig options used by backend=neuron."""

    # false runs the schedule without a profiler (a no-op profiler with the same interface)
    enabled: bool = True
    # record input shapes; the op table then has one row per (op, shapes)
    record_shapes: bool = True
    # record tensor memory allocated/freed per op
    profile_memory: bool = True
    # record Python stacks (slow: symbolising frames costs seconds per step)
    with_stack: bool = False
    # estimate FLOPs per op; off: it made a 0.07 ms CPU step take 0.9 ms (the roofline has its own model)
    with_flops: bool = False
    # Neuron capture modes (NeuronConfig.modes): DEVICE, RUNTIME, CPU_UTIL, HOST_MEMORY
    modes: list[str] = field(default_factory=lambda: ["DEVICE", "RUNTIME"])
    # NeuronCores to capture, e.g. "0,1,2-5"; null means the cores the job uses
    capture_enabled_for_nc: str | None = None
    # system-trace ring buffer size per NeuronCore; null keeps the Neuron default (1,000,000)
    max_events_per_nc: int | None = None
    # ask the Neuron build to attach device time to ops; passed only when set
    correlate_device_time: bool | None = None

    def __post_init__(self) -> None:
        for mode in self.modes:
            _allowed("profiler.modes", mode, NEURON_MODES)
        _at_least("profiler.max_events_per_nc", self.max_events_per_nc, 1)
        if self.capture_enabled_for_nc is not None:
            parse_cores(self.capture_enabled_for_nc, "profiler.capture_enabled_for_nc")


@dataclass
class ScheduleConfig:
    """torch.profiler.schedule; the runner runs exactly the steps the schedule needs."""

    # steps skipped before each cycle (not recorded)
    wait: int = 2
    # steps recorded but discarded, so the active steps are warm
    warmup: int = 1
    # steps recorded and reported
    active: int = 1
    # number of wait/warmup/active cycles
    repeat: int = 1
    # steps skipped once, before the first cycle
    skip_first: int = 0

    def __post_init__(self) -> None:
        _at_least("schedule.active", self.active, 1)
        _at_least("schedule.repeat", self.repeat, 1)
        for key in ("wait", "warmup", "skip_first"):
            _at_least(f"schedule.{key}", getattr(self, key), 0)

    @property
    def total_steps(self) -> int:
        """Steps the profiled loop runs: skip_first, then `repeat` full cycles."""
        return self.skip_first + (self.wait + self.warmup + self.active) * self.repeat

    @property
    def active_steps(self) -> int:
        """Steps whose events end up in key_averages()."""
        return self.active * self.repeat


MAX_WARMUP_CALLS = 100_000  # 100 s of 1 ms steps; more is a typo (measure.warmup=1000000000000 ran silently for ever)


@dataclass
class MeasureConfig:
    """The unprofiled phases: warm-up and the timed steady state."""

    # calls after the first one and before timing, so caches and allocators settle (at most MAX_WARMUP_CALLS)
    warmup: int = 5
    # and for at least this long (0.02, 0.1 and 0.5 s read the same median: docs/trust.md)
    warmup_s: float = 0.1
    # synchronized steps timed without the profiler, per repeat
    steps: int = 200
    # or fewer (30 at least) past this many seconds: drift, not count, limits a median; null: all
    steps_s: float | None = 0.15
    # memory layouts each process's steps are timed in, so a median is not one layout's luck; null: the backend's
    layouts: int | None = None
    # times the warm-up and timed phases run; > 1 logs the spread of per-repeat medians
    repeats: int = 1
    # fresh worker processes, one after another; 0 = the job's own process; null = the backend's default
    processes: int | None = None
    # steady states timed at once, each on its own share of the machine; null = measure.processes
    copies: int | None = None
    # latency: synchronized steps; throughput: also blocks of `inflight` steps per synchronize
    mode: str = "latency"
    # steps queued between synchronizes in throughput mode, and where device events time the steady state
    inflight: int = 8
    # where device events time the steady state (cuda): evict the last-level cache before each step
    flush_cache: bool = False
    # cold: compile caches start empty in a fresh compile_cache_dir; warm: as a cold job left them; null: the user's
    compile_cache: str | None = None
    compile_cache_dir: str | None = None
    # compare the output with the workload's float64 reference on CPU
    accuracy: bool = True
    # compare every submodule's output with a float64 CPU copy: a table, a plot, the first layer over tolerance
    layer_accuracy: bool = False
    # the submodules layer_accuracy compares, as named_modules() names them (e.g. layers.1.mlp); null: all
    layers: list[str] | None = None
    # peak figures for the roofline: auto (by device) or an entry of conf/peaks.yaml
    peak: str = "auto"
    # record the profiled window's allocations: a snapshot memory_viz opens, the peak and its sites
    memory_snapshot: bool = False

    def __post_init__(self) -> None:
        _at_least("measure.warmup", self.warmup, 0)
        if self.warmup > MAX_WARMUP_CALLS:  # in a worker process a warm-up is silent: a typo would hang quietly
            raise ConfigError(
                f"measure.warmup={self.warmup} is out of range: at most {MAX_WARMUP_CALLS} calls "
                "(measure.warmup_s warms up for a time)"
            )
        _at_least("measure.warmup_s", self.warmup_s, 0)
        _at_most_a_day("measure.warmup_s", self.warmup_s)
        _at_least("measure.steps", self.steps, 1)
        _at_least("measure.repeats", self.repeats, 1)
        if self.steps_s is not None and not self.steps_s > 0:
            raise ConfigError(f"measure.steps_s must be > 0 seconds or null (every step), got {self.steps_s}")
        _at_most_a_day("measure.steps_s", self.steps_s)
        _at_least("measure.layouts", self.layouts, 1)
        _at_least("measure.copies", self.copies, 1)
        _at_least("measure.processes", self.processes, 0)
        _allowed("measure.mode", self.mode, ("latency", "throughput"))
        if self.compile_cache is not None:
            _allowed("measure.compile_cache", self.compile_cache, ("cold", "warm"))
        if (self.compile_cache is None) != (self.compile_cache_dir is None):
            raise ConfigError(
                "measure.compile_cache (cold or warm) and measure.compile_cache_dir (the cache's folder) go together"
            )
        _at_least("measure.inflight", self.inflight, 1)
        if self.layers is not None and not self.layer_accuracy:
            raise ConfigError("measure.layers names layers to compare: it needs measure.layer_accuracy=true")


MAX_EXPERIMENT_NAME = 500  # characters of an experiment's name MLflow takes (MAX_EXPERIMENT_NAME_LENGTH)


@dataclass
class TrackingConfig:
    """Where runs are logged."""

    # false skips MLflow entirely (dry runs)
    enabled: bool = True
    # MLflow tracking URI; MLflow 3 refuses ./mlruns, so a SQLite file is the local default
    uri: str = "sqlite:///mlflow.db"
    # MLflow experiment that receives the runs (at most 500 characters, as MLflow takes)
    experiment: str = "runner"
    # artifact budget per run in MiB; larger captures keep their biggest files local (path and size logged)
    max_artifact_mb: int = 1024

    def __post_init__(self) -> None:
        _at_least("tracking.max_artifact_mb", self.max_artifact_mb, 0)
        scheme = urlsplit(self.uri).scheme.split("+")[0]
        if scheme not in TRACKING_SCHEMES:
            raise ConfigError(
                f"tracking.uri={self.uri!r}: MLflow takes a {', '.join(TRACKING_SCHEMES)} URI here, "
                "e.g. sqlite:///mlflow.db or http://127.0.0.1:5000"
            )
        if not self.experiment.strip():
            raise ConfigError("tracking.experiment must name an MLflow experiment, e.g. runner; got ''")
        if len(self.experiment) > MAX_EXPERIMENT_NAME:  # MLflow would refuse it at each job's start, with a traceback
            raise ConfigError(
                f"tracking.experiment is {len(self.experiment)} characters long: MLflow takes at most "
                f"{MAX_EXPERIMENT_NAME} (mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH)"
            )


@dataclass
class DistributedConfig:
    """A job run as several torch.distributed ranks on this host."""

    # processes that run the job's steps together, each on its own share of the machine; 1 = the job's own
    ranks: int = 1
    # seconds a rank waits in a collective (or at start-up) for the others before the job fails
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        _at_least("distributed.ranks", self.ranks, 1)
        if not self.timeout_s > 0:
            raise ConfigError(f"distributed.timeout_s must be a number of seconds > 0, got {self.timeout_s!r}")
        _at_most_a_day("distributed.timeout_s", self.timeout_s)


@dataclass
class MonitorConfig:
    """System metrics sampled while a job measures, as time series beside the runner's own metrics."""

    # whole seconds between samples (neuron-monitor's, NVML's, the host's); null: off, nothing is started
    period_s: int | None = None

    def __post_init__(self) -> None:
        _at_least("monitor.period_s", self.period_s, 1)
        _at_most_a_day("monitor.period_s", self.period_s)


# Keys of the composed config: the groups, and resume (sweeps skip FINISHED configurations).
TOP_LEVEL_KEYS = ("workload", "backend", "profiler", "schedule", "measure", "tracking", "distributed", "resume",
                  "monitor")  # fmt: skip
# option files whose schema extends their group's, registered as `schema_<group>_<option>`
OPTION_SCHEMAS: dict[tuple[str, str], type] = {("backend", "neuron"): NeuronBackendConfig}


@dataclass
class WorkloadKeys:
    """The workload keys the runner consumes itself, with their only defaults; other keys are constructor arguments."""

    # one of DTYPES
    dtype: str = "float32"
    # seeds the weight and the inputs, so variants see identical data
    seed: int = 0
    # true wraps the module in torch.compile (the backend's compiler)
    compile: bool = False
    # input shapes for modules that do not build their own example inputs
    inputs: list[list[int]] | None = None
    # forward, or train_step: forward, a scalar loss, backward and an optimizer step
    mode: str = "forward"
    # the train_step optimizer and its learning rate
    optimizer: str = "sgd"
    lr: float = 1e-3


# Every workload node starts from these, so each accepts them without a `+`; `inputs` only where declared (custom)
WORKLOAD_DEFAULTS: dict[str, Any] = {key: value for key, value in asdict(WorkloadKeys()).items() if value is not None}


@dataclass(kw_only=True)
class WorkloadSpec(WorkloadKeys):
    """A workload config split into what the runner consumes and the constructor kwargs."""

    target: str
    kwargs: dict[str, Any]


@dataclass
class JobInfo:
    """What the launcher knows about this job; filled from HydraConfig in __main__ only."""

    # the readable MLflow run name: workload plus overrides
    run_name: str
    # the selected workload option, e.g. rmsnorm_naive
    workload_name: str
    overrides: list[str]
    # the job's output directory (traces and captures go under it)
    output_dir: Path
    # Hydra's .hydra/ folder with the composed config and overrides, when there is one
    hydra_dir: Path | None = None
    # a sweep's job: where the sweep's rounds leave its steady state (runner.sweep.rounds)
    rounds_dir: Path | None = None


@dataclass
class RunSpec:
    """The validated, typed form of one job's config."""

    workload: WorkloadSpec
    backend: BackendConfig
    profiler: ProfilerConfig
    schedule: ScheduleConfig
    measure: MeasureConfig
    tracking: TrackingConfig
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)


# the schema behind each config group the runner owns: RunSpec's fields but the workload
SCHEMAS: dict[str, type] = {group: schema for group, schema in get_type_hints(RunSpec).items() if group != "workload"}


def locate_target(target: str) -> Any:
    """Import the object a dotted `_target_` names, or fail naming the key."""
    module_name, _, attr = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"workload._target_={target!r} cannot be imported: {err}") from None


def _check_kwargs(target: str, kwargs: dict[str, Any]) -> None:
    """Reject constructor kwargs the target does not accept, listing those it does."""
    params = inspect.signature(locate_target(target)).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for key in kwargs:
        if key not in params:
            allowed = [*(name for name in params if name != "self"), *(f.name for f in fields(WorkloadKeys))]
            raise ConfigError(f"workload.{key} is not a parameter of {target}; allowed: {', '.join(allowed)}")


def _workload_spec(node: DictConfig | None) -> WorkloadSpec:
    if node is None:
        options = sorted(p.stem for p in (CONF_DIR / "workload").glob("*.yaml"))
        raise ConfigError(f"no workload selected: add +workload=<name>; available: {', '.join(options)}")
    if missing := sorted(OmegaConf.missing_keys(node)):
        raise ConfigError(f"{missing[0]} is required by this workload config; set it on the command line")
    raw = OmegaConf.to_container(node, resolve=True)
    assert isinstance(raw, dict)
    target = raw.pop("_target_", None)
    if not isinstance(target, str) or not target:
        raise ConfigError("workload._target_ must name a module class, e.g. my_pkg.MyModule")
    runner_keys = {key.name: raw.pop(key.name) for key in fields(WorkloadKeys) if key.name in raw}
    spec = WorkloadSpec(target=target, kwargs={str(k): v for k, v in raw.items()}, **runner_keys)
    _allowed("workload.dtype", spec.dtype, DTYPES)
    _allowed("workload.mode", spec.mode, MODES)
    _allowed("workload.optimizer", spec.optimizer, ("sgd", "adamw"))
    if not isinstance(spec.lr, (int, float)) or spec.lr <= 0:
        raise ConfigError(f"workload.lr must be a positive number, got {spec.lr!r}")
    if not isinstance(spec.compile, bool):
        raise ConfigError(f"workload.compile must be true or false, got {spec.compile!r}")
    if spec.inputs is not None and not all(
        isinstance(shape, list) and all(isinstance(d, int) and d > 0 for d in shape) for shape in spec.inputs
    ):
        raise ConfigError(f"workload.inputs must be a list of shapes like [[4, 128]], got {spec.inputs}")
    _check_kwargs(target, spec.kwargs)
    return spec


def unknown_key(key: str, known: list[str]) -> ConfigError:
    """The error for a key no schema has: removed (and why), another option's, or the nearest known key."""
    if key in REMOVED_KEYS:
        return ConfigError(f"{key} was removed: {REMOVED_KEYS[key]}")
    group, _, name = key.rpartition(".")
    for (option_group, option), schema in OPTION_SCHEMAS.items():
        if option_group == group and name in {f.name for f in fields(schema)}:
            return ConfigError(f"{key} is a key of {group}={option} only; this job's {group} takes: {', '.join(known)}")
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {group + '.' if group else ''}{close[0]}? " if close else ""
    return ConfigError(f"{key} is not a config key; {hint}allowed{' in ' + group if group else ''}: {', '.join(known)}")


def unknown_option(group: str, option: str, options: Sequence[str]) -> ConfigError:
    """The error for a config group option that does not exist, with the nearest one as a hint."""
    close = difflib.get_close_matches(option, options, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return ConfigError(f"{group}={option} is not an option; {hint}choose one of: {', '.join(options)}")


def _check_keys(node: DictConfig, group: str) -> None:
    """Refuse keys a `+` added to a group with a schema: Hydra lets `+measure.step=10` through."""
    schema = OmegaConf.get_type(node)  # an option's own schema, such as backend=neuron's
    known = [f.name for f in fields(schema if isinstance(schema, type) and is_dataclass(schema) else SCHEMAS[group])]
    for key in node:
        if key not in known:
            raise unknown_key(f"{group}.{str(key)}", known)


def _to_object(node: DictConfig | ListConfig, key: str) -> Any:
    try:
        return OmegaConf.to_object(node)
    except ConfigError:
        raise
    except ValueError as err:  # OmegaConf wraps nothing else; keep the key in the message
        raise ConfigError(f"{key}: {err}") from None


def load_run_spec(cfg: DictConfig) -> RunSpec:
    """Validate a composed config and return its typed form.

    Raises:
        ConfigError: a value is out of range, unknown, or of the wrong kind; the message
            names the full key and the allowed values.
    """
    for key in cfg:
        if key not in TOP_LEVEL_KEYS:
            raise unknown_key(str(key), list(TOP_LEVEL_KEYS))
    for group in SCHEMAS:
        _check_keys(cfg[group], group)
    _refuse_non_finite(OmegaConf.to_container(cfg, resolve=True), "")
    groups = {group: _to_object(cfg[group], group) for group in SCHEMAS}  # first: the workload's check imports torch
    return RunSpec(_workload_spec(cfg.get("workload")), **groups)


def device_dtype(backend: str) -> str:
    """The dtype a study computes in: bfloat16 on Neuron (its Tensor Engine's peak is not FP32's), float32 elsewhere.

    `auto` counts as Neuron where torch_neuronx is installed (auto tries Neuron first), found without importing it.
    """
    if backend == "auto":
        backend = "neuron" if importlib.util.find_spec("torch_neuronx") else "cpu"
    return "bfloat16" if backend == "neuron" else "float32"


def register_schemas() -> None:
    """Register the group schemas as top-level configs (`schema_<group>`), so options list real ones; the resolvers."""
    # the process id that names a job's default folder; cached, so a sweep's jobs share their parent's
    OmegaConf.register_new_resolver("runner.pid", os.getpid, use_cache=True, replace=True)
    # ${runner.device_dtype:${backend.name}}: a study's dtype for the device it runs on
    OmegaConf.register_new_resolver("runner.device_dtype", device_dtype, replace=True)
    store = ConfigStore.instance()
    for group, schema in SCHEMAS.items():
        store.store(name=f"schema_{group}", node=schema)
    for (group, option), schema in OPTION_SCHEMAS.items():
        store.store(name=f"schema_{group}_{option}", node=schema)
    # workloads are open (every other key is a constructor argument): defaults only, no schema
    store.store(name="schema_workload", node=WORKLOAD_DEFAULTS)
