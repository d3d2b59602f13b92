"""Typed schemas for the runner-owned config groups, and the checks that name the key.

Each option file in `conf/<group>/` extends its `schema_<group>`, so unknown keys and wrong types
fail at composition; value and cross-field rules live in `__post_init__`. Turning a composed config
into these is `runner.config_loading`'s. No torch or mlflow imports here: every layer imports these
types, `python -m runner --help` too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, get_type_hints
from urllib.parse import urlsplit

from runner.backends.cores import parse_core_range, parse_cores
from runner.errors import ConfigError as ConfigError  # re-exported: where every layer has imported it from

BACKENDS = ("auto", "cpu", "cuda", "neuron")
NEURON_MODES = ("DEVICE", "RUNTIME", "CPU_UTIL", "HOST_MEMORY")
_DTYPES = ("float32", "float16", "bfloat16", "float64")
MODES = ("forward", "train_step")
# Tracking URI schemes MLflow 3 accepts (a dialect may follow '+'); it refuses the old ./mlruns file store
_TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")
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
    """backend=neuron: the NeuronCores, the explorer and the runtime's asynchronous mode."""

    name: str = "neuron"
    # NeuronCores this job owns, e.g. "0" or "2-3"; null: the launcher's, else every visible core
    cores: str | None = None
    # seconds neuron-explorer may spend summarising a capture (big NTFFs take tens of minutes)
    explorer_timeout_s: int = 1800
    # TORCH_NEURONX_ENABLE_ASYNC_NRT; null: the environment's, else torch-neuronx's (documented default 0, the
    # shipped package sets 1): the manifest says which
    async_runtime: bool | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _allowed("backend.name", self.name, ("neuron",))
        _at_least("backend.explorer_timeout_s", self.explorer_timeout_s, 1)
        _at_most_a_day("backend.explorer_timeout_s", self.explorer_timeout_s)
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

    def __post_init__(self) -> None:
        _at_least("schedule.active", self.active, 1)
        _at_least("schedule.repeat", self.repeat, 1)
        for key in ("wait", "warmup"):
            _at_least(f"schedule.{key}", getattr(self, key), 0)

    @property
    def total_steps(self) -> int:
        """Steps the profiled loop runs: `repeat` full cycles."""
        return (self.wait + self.warmup + self.active) * self.repeat

    @property
    def active_steps(self) -> int:
        """Steps whose events end up in key_averages()."""
        return self.active * self.repeat


_MAX_WARMUP_CALLS = 100_000  # 100 s of 1 ms steps; more is a typo (measure.warmup=1000000000000 ran silently for ever)


@dataclass
class MeasureConfig:
    """The unprofiled phases: warm-up and the timed steady state."""

    # calls after the first one and before timing, so caches and allocators settle (at most _MAX_WARMUP_CALLS)
    warmup: int = 5
    # and for at least this long (0.02, 0.1 and 0.5 s read the same median: docs/trust.md)
    warmup_s: float = 0.1
    # synchronized steps timed without the profiler, per repeat
    steps: int = 200
    # or fewer (30 at least) past this many seconds: drift, not count, limits a median; null: all
    steps_s: float | None = 0.15
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
        if self.warmup > _MAX_WARMUP_CALLS:  # in a worker process a warm-up is silent: a typo would hang quietly
            raise ConfigError(
                f"measure.warmup={self.warmup} is out of range: at most {_MAX_WARMUP_CALLS} calls "
                "(measure.warmup_s warms up for a time)"
            )
        _at_least("measure.warmup_s", self.warmup_s, 0)
        _at_most_a_day("measure.warmup_s", self.warmup_s)
        _at_least("measure.steps", self.steps, 1)
        _at_least("measure.repeats", self.repeats, 1)
        if self.steps_s is not None and not self.steps_s > 0:
            raise ConfigError(f"measure.steps_s must be > 0 seconds or null (every step), got {self.steps_s}")
        _at_most_a_day("measure.steps_s", self.steps_s)
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


_MAX_EXPERIMENT_NAME = 500  # characters of an experiment's name MLflow takes (MAX_EXPERIMENT_NAME_LENGTH)


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
        if scheme not in _TRACKING_SCHEMES:
            raise ConfigError(
                f"tracking.uri={self.uri!r}: MLflow takes a {', '.join(_TRACKING_SCHEMES)} URI here, "
                "e.g. sqlite:///mlflow.db or http://127.0.0.1:5000"
            )
        if not self.experiment.strip():
            raise ConfigError("tracking.experiment must name an MLflow experiment, e.g. runner; got ''")
        if len(self.experiment) > _MAX_EXPERIMENT_NAME:  # MLflow would refuse it at each job's start, with a traceback
            raise ConfigError(
                f"tracking.experiment is {len(self.experiment)} characters long: MLflow takes at most "
                f"{_MAX_EXPERIMENT_NAME} (mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH)"
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

    # one of _DTYPES
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

    def __post_init__(self) -> None:
        _allowed("workload.dtype", self.dtype, _DTYPES)
        _allowed("workload.mode", self.mode, MODES)
        _allowed("workload.optimizer", self.optimizer, ("sgd", "adamw"))
        if not isinstance(self.lr, (int, float)) or self.lr <= 0:
            raise ConfigError(f"workload.lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.compile, bool):
            raise ConfigError(f"workload.compile must be true or false, got {self.compile!r}")
        if self.inputs is not None and not all(
            isinstance(shape, list) and all(isinstance(d, int) and d > 0 for d in shape) for shape in self.inputs
        ):
            raise ConfigError(f"workload.inputs must be a list of shapes like [[4, 128]], got {self.inputs}")


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
