"""Declarative profiling runner: Hydra configs -> workload -> torch.profiler -> MLflow."""

from pathlib import Path

__version__ = "0.1.0"

# Absolute, so @hydra.main and tests' initialize_config_dir find conf/ wherever they run from.
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
