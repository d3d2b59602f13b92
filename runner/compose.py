"""Compose the runner's config from Python, as `python -m runner <overrides>` would.

For notebooks, benchmarks and tests that want a job's config without launching a job.
"""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from runner import CONF_DIR
from runner.config import register_schemas


def compose_config(*overrides: str, with_hydra: bool = False) -> DictConfig:
    """Return the composed config; `with_hydra` keeps the `hydra` node (sweeper params etc.)."""
    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)
