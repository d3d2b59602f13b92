"""A sweep before its jobs run (for `runner.callbacks`): its overrides, the keys they vary, the launcher."""

from __future__ import annotations

import logging

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, flag_override

from runner.config import ConfigError
from runner.job import ISOLATED_LAUNCHER, own_process_keys

log = logging.getLogger(__name__)
# every job of a sweep in this process (hydra/launcher=inprocess, the runner's default)
IN_PROCESS_LAUNCHER = "hydra_plugins.runner_launcher.process_launcher.InProcessLauncher"


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: overrides with several values, hydra.sweeper.params' unless overridden."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    # what the sweeper expands into jobs: hydra.sweeper.params, then the command line's overrides (which win)
    given = [*(f"{key}={value}" for key, value in params.items()), *config.hydra.overrides.task]
    last = {override.key_or_group: override for override in OverridesParser.create().parse_overrides(given)}
    return [key for key, override in last.items() if override.is_sweep_override()]


def isolate_if_needed(config: DictConfig, swept: list[str]) -> None:
    """Switch from the in-process launcher to the isolated one when the jobs cannot share a process (made next)."""
    if not swept or config.hydra.launcher.get("_target_") != IN_PROCESS_LAUNCHER:
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
