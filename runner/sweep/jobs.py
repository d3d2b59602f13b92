"""A sweep's jobs before they run (for `runner.callbacks`): overrides, the jobs, the keys they vary, the launcher."""

from __future__ import annotations

import itertools
import logging

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, flag_override

from runner.config import ConfigError
from runner.job import ISOLATED_LAUNCHER, own_process_keys

log = logging.getLogger(__name__)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"  # its grid is known before the first job
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # every job of a sweep in this process


def sweep_overrides(config: DictConfig) -> list[str]:
    """What the sweeper expands into jobs: hydra.sweeper.params, then the command line's overrides (which win)."""
    params = config.hydra.sweeper.get("params") or {}
    return [*(f"{key}={value}" for key, value in params.items()), *config.hydra.overrides.task]


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in the order the basic sweeper launches them; None under another (it picks as it goes).

    Each key's last override, its values in order, and their product with the first key slowest (Hydra's public API).
    """
    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    choices: dict[str, list[str]] = {}
    for override in parser.parse_overrides(sweep_overrides(config)):
        key = override.get_key_element()
        if not override.is_sweep_override():
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:  # an interval: the basic sweeper refuses it, and each job says so
            return None
    return [list(job) for job in itertools.product(*choices.values())]


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: overrides with several values, hydra.sweeper.params' unless overridden."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = sweep_overrides(config)
    last = {override.key_or_group: override for override in OverridesParser.create().parse_overrides(given)}
    return [key for key, override in last.items() if override.is_sweep_override()]


def isolate_if_needed(config: DictConfig, swept: list[str]) -> None:
    """Switch from the basic launcher to the isolated one when the jobs cannot share a process (Hydra makes it next)."""
    if not swept or config.hydra.launcher.get("_target_") != BASIC_LAUNCHER:
        return
    from runner.backends.registry import BACKEND_CLASSES, backend_class

    varied = "backend" in swept or "backend.name" in swept
    try:
        backends = list(BACKEND_CLASSES) if varied else [backend_class(config.backend.name)]
    except ConfigError:  # each job says so itself
        return
    keys = own_process_keys(backends, swept, config)
    if not keys:
        return
    log.info("%s chosen: jobs cannot share a process over %s (read once per process, or needing one of its own)",
             ISOLATED_LAUNCHER, ", ".join(keys))  # fmt: skip
    isolated = ConfigStore.instance().load("hydra/launcher/isolated.yaml").node  # registered by its Hydra plugin
    with flag_override(config.hydra, ["readonly", "struct"], False):
        config.hydra.launcher = isolated
        config.hydra.runtime.choices["hydra/launcher"] = "isolated"
        # the jobs' configs are composed again from these, and then record the launcher they ran under
        config.hydra.overrides.hydra.append(ISOLATED_LAUNCHER)
