"""Loading: a composed config to its typed RunSpec (runner.config's schemas), and the one-line refusals.

Hydra composes; this registers the schemas it composes with, refuses what it lets through (a `+`-added key,
inf and nan, a workload's unknown constructor argument) and names the key of what no schema has. No torch or
mlflow imports here: `python -m runner` refuses a bad config before either loads.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import math
import os
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf

from runner import CONF_DIR
from runner.config import (
    OPTION_SCHEMAS,
    SCHEMAS,
    TOP_LEVEL_KEYS,
    WORKLOAD_DEFAULTS,
    ConfigError,
    RunSpec,
    WorkloadKeys,
    WorkloadSpec,
)

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
    "measure.layouts": "only benchmarks chose it; RUNNER_LAYOUTS=<n> times each process's steps in n memory layouts "
    "(docs/trust.md)",
    # no user decided anything with them
    "schedule.skip_first": "the profiled window starts after the warm-up and the timed steady state, so steps "
    "skipped before the first cycle are schedule.wait's; add them to schedule.wait",
    "backend.explorer_view_timeout_s": "it is the runner's fixed limit for a Parquet view (300 s) before it asks "
    "for summary-json; backend.explorer_timeout_s bounds the summary",
    "backend.neff_cache_dir": "torch-neuronx writes its NEFFs where TORCH_NEURONX_NEFF_CACHE_DIR says (default "
    "/tmp/neff_cache), and the runner reads them there; export TORCH_NEURONX_NEFF_CACHE_DIR=<folder> instead",
}


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
