"""Every option of every group composes; bad values fail with the key and allowed values."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from dataclasses import asdict, fields

import pytest
import torch
import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from runner import CONF_DIR
from runner.backends.cpu import CpuBackend
from runner.config import (
    DAY_S,
    OPTION_SCHEMAS,
    SCHEMAS,
    BackendConfig,
    ConfigError,
    NeuronBackendConfig,
    RunSpec,
    ScheduleConfig,
    WorkloadKeys,
)
from runner.config_loading import load_run_spec, unknown_key
from runner.job.hashing import config_hash
from runner.measure.build import build_workload
from tests.helpers import compose_cfg

# every option file of every group (conf/<group>/*.yaml, hydra/launcher too); conf/*.yaml are no options
OPTIONS = sorted(
    (path.parent.relative_to(CONF_DIR).as_posix(), path.stem)
    for path in CONF_DIR.rglob("*.yaml")
    if path.parent != CONF_DIR
)
# the custom workload runs any module: torch.nn.Linear, with the keys it needs
CUSTOM = ["workload._target_=torch.nn.Linear", "workload.inputs=[[3,8]]"]
CUSTOM += ["+workload.in_features=8", "+workload.out_features=2"]
# custom needs declared inputs; nki_rmsnorm needs NKI, and is refused without it (test_trainium_expectations.py)
WORKLOADS = sorted(p.stem for p in (CONF_DIR / "workload").glob("*.yaml") if p.stem not in ("custom", "nki_rmsnorm"))
# every duration key of every schema (named `*_s`), backend=neuron's too
DURATIONS = sorted(
    f"{group}.{key.name}"
    for group, schema in [*SCHEMAS.items(), *((group, schema) for (group, _), schema in OPTION_SCHEMAS.items())]
    for key in fields(schema)
    if key.name.endswith("_s")
)


def choosing(group: str, option: str) -> list[str]:
    """The overrides that pick `option` of `group` into a config a job can run."""
    if group == "workload":
        return [f"+workload={option}", *(CUSTOM if option == "custom" else [])]
    if group == "experiment":
        return [f"+experiment={option}"]
    return ["+workload=rmsnorm_naive", f"{group}={option}"]


def sweep_points(cfg: DictConfig) -> list[str]:
    """Each value the config's sweeper would set, one override apiece (the grid's axes, not its product)."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return [f"{key}={value}" for key, values in params.items() for value in str(values).split(",")]


@pytest.fixture
def hydra_config_reset() -> Iterator[None]:
    """A test that sets Hydra's config as a job's leaves none set for later tests."""
    yield
    HydraConfig.instance().cfg = None


def composed_as_a_job(*overrides: str) -> DictConfig:
    """The config with Hydra's node, set as the job's Hydra config (`${hydra:sweep.dir}` reads it)."""
    cfg = compose_cfg(*overrides, with_hydra=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def validated(cfg: DictConfig) -> RunSpec:
    """The run spec of the job's part of `cfg`: all of it but Hydra's node."""
    return load_run_spec(OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]))


@pytest.mark.usefixtures("hydra_config_reset")
@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_group_option_composes_and_validates(group: str, option: str) -> None:
    overrides = choosing(group, option)
    cfg = composed_as_a_job(*overrides)
    assert cfg.hydra.runtime.choices[group] == option
    points = sweep_points(cfg)
    assert bool(points) == (group == "experiment"), points  # every experiment sweeps, and only experiments do
    if not points:
        spec = validated(cfg)
        if group in {field.name for field in fields(RunSpec)}:  # hydra/launcher: no node of the job's config
            assert getattr(spec, group) is not None and OmegaConf.select(cfg, group) is not None
    for point in points:  # an experiment's jobs: each value it sweeps composes and validates
        validated(composed_as_a_job(*overrides, point))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_builds_on_cpu(workload: str) -> None:
    spec = load_run_spec(compose_cfg(f"+workload={workload}"))
    built = build_workload(spec.workload, CpuBackend(BackendConfig(name="cpu")))
    assert built.inputs and all(t.dtype == torch.float32 for t in built.inputs)


def test_custom_workload_takes_any_module_with_declared_inputs() -> None:
    cfg = compose_cfg("+workload=custom", *CUSTOM)
    built = build_workload(load_run_spec(cfg).workload, CpuBackend(BackendConfig(name="cpu")))
    assert built.module(*built.inputs).shape == (3, 2)


def test_experiment_sweeps_the_three_variants() -> None:
    cfg = compose_cfg("+experiment=rmsnorm_comparison", "workload.hidden=64", with_hydra=True)
    assert cfg.workload.hidden == 64  # workload keys override without ++ in experiment sweeps
    assert cfg.schedule.wait == 2 and cfg.schedule.warmup == 1 and cfg.schedule.active == 1
    swept = cfg.hydra.sweeper.params.workload.split(",")
    assert swept == ["rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled"]


def test_compiled_variant_is_the_naive_one_with_compile_on() -> None:
    naive = compose_cfg("+workload=rmsnorm_naive").workload
    compiled = compose_cfg("+workload=rmsnorm_compiled").workload
    assert compiled.compile is True and naive.compile is False
    assert OmegaConf.masked_copy(compiled, [k for k in compiled if k != "compile"]) == OmegaConf.masked_copy(
        naive, [k for k in naive if k != "compile"]
    )


def test_runner_keys_default_from_one_dataclass_and_no_workload_file_repeats_a_default() -> None:
    defaults = asdict(WorkloadKeys())
    spec = load_run_spec(compose_cfg("+workload=matmul")).workload
    assert {key: getattr(spec, key) for key in defaults} == defaults
    repeated = [
        f"{path.name}: {key}"
        for path in sorted((CONF_DIR / "workload").glob("*.yaml"))
        for key, value in yaml.safe_load(path.read_text()).items()
        if key in defaults and value == defaults[key]
    ]
    assert not repeated


@pytest.mark.parametrize(
    ("override", "match"),
    [
        pytest.param("workload.hidden=0", r"workload\.hidden must be a positive integer", id="zero-size"),
        pytest.param("workload.batch=-1", r"workload\.batch must be a positive integer", id="negative-size"),
        pytest.param("workload.dtype=float8", r"workload\.dtype='float8'.*float32, float16", id="dtype"),
        pytest.param("+workload.hiden=3", r"workload\.hiden is not a parameter.*hidden", id="misspelled-kwarg"),
        pytest.param("workload.eps=0", r"workload\.eps must be a number > 0", id="eps"),
        pytest.param("schedule.active=0", r"schedule\.active must be >= 1", id="active-zero"),
        pytest.param("schedule.repeat=0", r"schedule\.repeat must be >= 1", id="repeat-zero"),
        pytest.param("schedule.wait=-1", r"schedule\.wait must be >= 0", id="wait-negative"),
        pytest.param("backend.name=tpu", r"backend\.name='tpu'.*auto, cpu, cuda, neuron", id="backend"),
        pytest.param("profiler.modes=[DEVICE,GPU]", r"profiler\.modes='GPU'.*RUNTIME", id="mode"),
        pytest.param("profiler.max_events_per_nc=0", r"profiler\.max_events_per_nc must be >= 1", id="events"),
        pytest.param("workload._target_=nowhere.Module", r"workload\._target_='nowhere\.Module' cannot", id="target"),
        pytest.param("measure.warmup_s=inf", r"measure\.warmup_s=inf is not a finite number", id="warmup-inf"),
        pytest.param("measure.warmup_s=nan", r"measure\.warmup_s=nan is not a finite number", id="warmup-nan"),
        pytest.param("workload.lr=nan", r"workload\.lr=nan is not a finite number", id="lr-nan"),
        pytest.param("workload.eps=inf", r"workload\.eps=inf is not a finite number", id="kwarg-inf"),
        pytest.param("distributed.timeout_s=inf", r"distributed\.timeout_s=inf is not a finite", id="timeout-inf"),
        pytest.param(
            "measure.warmup_s=1e308", r"^measure\.warmup_s=1e\+308 is out of range: at most 86400 s", id="warmup-1e308"
        ),
        pytest.param("backend.price_per_hour=-5", r"backend\.price_per_hour must be >= 0, got -5", id="price"),
        pytest.param("measure.steps_s=0", r"measure\.steps_s must be > 0 seconds or null", id="steps-s"),
        pytest.param(
            "measure.warmup=1000000000000",
            r"^measure\.warmup=1000000000000 is out of range: at most 100000 calls \(measure\.warmup_s",
            id="warmup-calls",
        ),
        pytest.param(
            "backend.cpu_placement=pinned",
            r"^backend\.cpu_placement='pinned' is not allowed; choose one of: one_core, slot_cores, unpinned$",
            id="cpu-placement",
        ),
    ],
)
def test_bad_values_name_the_key(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        spec = load_run_spec(compose_cfg("+workload=rmsnorm_naive", override))
        build_workload(spec.workload, CpuBackend(spec.backend))


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        pytest.param(
            ["+workload=aten_op", "workload.shapes=[[4,inf],[512]]"],
            r"workload\.shapes\[0\]\[1\]=inf ",
            id="list-in-a-list",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "+workload.scales=[0.5,-inf]"], r"workload\.scales\[1\]=-inf ", id="list"
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "+workload.scales=[1,{x:nan}]"],
            r"workload\.scales\[1\]\.x=nan ",
            id="dict-in-a-list",
        ),
    ],
)
def test_non_finite_numbers_inside_lists_name_their_place(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{match}is not a finite number; give a number such as 0\.5$"):
        load_run_spec(compose_cfg(*overrides))


@pytest.mark.parametrize("key", DURATIONS)
def test_a_duration_takes_up_to_a_day_and_more_is_refused_naming_the_key(key: str) -> None:
    job = ["+workload=rmsnorm_naive", "backend=neuron"]
    assert operator.attrgetter(key)(load_run_spec(compose_cfg(*job, f"{key}={DAY_S}"))) == DAY_S
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(key)}=86401(\.0)? is out of range: at most 86400 seconds \(one day\)$"
    ):
        load_run_spec(compose_cfg(*job, f"{key}={DAY_S + 1}"))


def test_the_neuron_keys_belong_to_backend_neuron_alone() -> None:
    neuron = load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=neuron", "backend.cores=0-1"))
    assert isinstance(neuron.backend, NeuronBackendConfig) and neuron.backend.cores == "0-1"
    assert neuron.backend.unpinned().cores is None
    cpu = compose_cfg("+workload=rmsnorm_naive", "backend=cpu")
    # so a cpu job's config hash holds no Neuron key
    assert set(cpu.backend) == {"name", "price_per_hour", "cpu_placement"}
    assert type(load_run_spec(cpu).backend) is BackendConfig
    # a key a `+` adds passes Hydra; the schema check names the option that has it
    only_neuron = (
        r"^backend\.cores is a key of backend=neuron only; "
        r"this job's backend takes: name, price_per_hour, cpu_placement$"
    )
    with pytest.raises(ConfigError, match=only_neuron):
        load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=cpu", "+backend.cores=0"))
    with pytest.raises(ConfigError, match=r"backend\.name='cpu' is not allowed; choose one of: neuron"):
        load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=neuron", "backend.name=cpu"))
    # backend=auto and backend.name=neuron get the Neuron defaults where the backend needs them
    promoted = NeuronBackendConfig.of(BackendConfig(name="auto", price_per_hour=2.0))
    assert (promoted.name, promoted.price_per_hour, promoted.cores) == ("neuron", 2.0, None)
    assert promoted.explorer_timeout_s == NeuronBackendConfig.explorer_timeout_s


def test_a_removed_key_says_why_and_what_to_use() -> None:
    message = str(unknown_key("backend.inflight_requests", ["name", "cores"]))
    assert message.startswith("backend.inflight_requests was removed: it set NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT")
    assert "Neuron SDK 2.31" in message and "measure.inflight" in message and "backend.async_runtime" in message
    with pytest.raises(ConfigError, match=r"^backend\.inflight_requests was removed: "):
        load_run_spec(compose_cfg("+workload=rmsnorm_naive", "backend=neuron", "+backend.inflight_requests=4"))


@pytest.mark.parametrize(
    ("override", "variable"),
    [
        ("measure.worker_start=spawn", "RUNNER_WORKER_START=spawn"),
        ("measure.keep_freed_memory=false", "RUNNER_KEEP_FREED_MEMORY=0"),
        ("measure.layouts=1", "RUNNER_LAYOUTS=<n>"),
    ],
)
def test_a_key_only_benchmarks_set_is_refused_naming_the_variable_that_replaced_it(
    override: str, variable: str
) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} was removed: only benchmarks chose it; {variable} "):
        load_run_spec(compose_cfg("+workload=rmsnorm_naive", f"+{override}"))


def test_the_keys_benchmarks_took_keep_the_config_hash_a_run_had_before_they_left() -> None:
    resolved = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive"), resolve=True)
    knobs = {"worker_start": "auto", "keep_freed_memory": True, "layouts": None}
    assert isinstance(resolved, dict) and not set(knobs) & set(resolved["measure"])
    older = {**resolved, "measure": {**resolved["measure"], **knobs}}
    assert config_hash(resolved) == config_hash(older)


@pytest.mark.parametrize(
    ("override", "instead"),
    [
        ("schedule.skip_first=0", "add them to schedule.wait"),
        ("backend.explorer_view_timeout_s=600", "backend.explorer_timeout_s bounds the summary"),
        ("backend.neff_cache_dir=/x", "export TORCH_NEURONX_NEFF_CACHE_DIR=<folder> instead"),
    ],
)
def test_a_key_no_user_decided_with_is_refused_saying_what_to_do_instead(override: str, instead: str) -> None:
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} was removed: .*{re.escape(instead)}"):
        load_run_spec(compose_cfg("+workload=rmsnorm_naive", f"+{override}"))


@pytest.mark.parametrize(
    ("backend", "group", "key", "value"),
    [
        ("cpu", "schedule", "skip_first", 0),
        ("neuron", "backend", "explorer_view_timeout_s", 300),
        ("neuron", "backend", "neff_cache_dir", None),
    ],
)
def test_a_key_no_user_decided_with_keeps_the_config_hash_a_run_had_before_it_left(
    backend: str, group: str, key: str, value: object
) -> None:
    resolved = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive", f"backend={backend}"), resolve=True)
    assert isinstance(resolved, dict) and key not in resolved[group]
    assert config_hash(resolved) == config_hash({**resolved, group: {**resolved[group], key: value}})


def test_missing_workload_lists_the_options() -> None:
    with pytest.raises(ConfigError, match=r"add \+workload=<name>; available: .*rmsnorm_naive"):
        load_run_spec(compose_cfg())


def test_schedule_runs_exactly_the_steps_it_needs() -> None:
    schedule = ScheduleConfig(wait=2, warmup=1, active=3, repeat=2)
    assert schedule.total_steps == (2 + 1 + 3) * 2
    assert schedule.active_steps == 6


def test_help_shows_the_config_the_overrides_compose() -> None:
    from runner.compose import help_text

    text = help_text("+workload=rmsnorm_naive", "measure=quick")
    measure = text.split("\nmeasure:\n", 1)[1]
    assert measure.startswith("  warmup: 1\n") and "\n  steps: 20\n" in measure
    assert "\nworkload:\n" in text and "hydra:" not in text and "$CONFIG" not in text
    assert "measure: default, quick, stable\n" in text


def test_a_cache_flush_left_off_keeps_the_config_hash_a_run_had_before_the_key_existed() -> None:
    resolved = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive"), resolve=True)
    flushed = OmegaConf.to_container(compose_cfg("+workload=rmsnorm_naive", "measure.flush_cache=true"), resolve=True)
    assert isinstance(resolved, dict) and isinstance(flushed, dict) and resolved["measure"]["flush_cache"] is False
    older = {**resolved, "measure": {k: v for k, v in resolved["measure"].items() if k != "flush_cache"}}
    assert config_hash(resolved) == config_hash(older) != config_hash(flushed)
