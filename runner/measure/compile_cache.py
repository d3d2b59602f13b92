"""Cold and warm compile caches (`measure.compile_cache=cold|warm`): what a first call costs with each.

The runner never empties a cache nor touches a user's own; what the caches are and how their lookups are
counted is the backend's (`Backend.compile_cache`).
"""

from __future__ import annotations

import os
from pathlib import Path

from runner import names
from runner.backends.base import Backend
from runner.backends.registry import COMPILE_CACHES
from runner.config import ConfigError, RunSpec


def use_compile_cache(spec: RunSpec) -> None:
    """Point the caches at the job's folder, before anything loads or compiles; ConfigError where that cannot hold."""
    measure = spec.measure
    if measure.compile_cache is None:
        return
    for cache in COMPILE_CACHES:  # every device's: they are moved before the device is chosen
        cache.check(spec)
    root = Path(str(measure.compile_cache_dir)).expanduser().resolve()
    filled = root.is_dir() and any(root.iterdir())
    if measure.compile_cache == "cold" and filled:
        raise ConfigError(
            f"measure.compile_cache=cold: measure.compile_cache_dir={root} already holds a cache; "
            "give a fresh folder (the runner never empties one)"
        )
    if measure.compile_cache == "warm" and not filled:
        raise ConfigError(
            f"measure.compile_cache=warm: measure.compile_cache_dir={root} is empty; "
            "run a job with measure.compile_cache=cold and this folder first"
        )
    folders = {folder: variable for cache in COMPILE_CACHES for folder, variable in cache.folders.items()}
    for folder, variable in folders.items():  # each under measure.compile_cache_dir
        (root / folder).mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(root / folder)


def cache_report(
    spec: RunSpec, backend: Backend, capture_dir: Path, neffs_new: float | None
) -> tuple[dict[str, float], dict[str, str]]:
    """The cache's state and folder as tags, and the job's hits and misses (`neffs_new`: NEFFs the cache gained)."""
    if spec.measure.compile_cache is None:
        return {}, {}
    metrics, counted = backend.compile_cache.lookups(capture_dir, neffs_new or 0.0)
    tags = {
        names.TAG_COMPILE_CACHE: spec.measure.compile_cache,
        names.TAG_COMPILE_CACHE_DIR: str(spec.measure.compile_cache_dir),
        names.TAG_COMPILE_CACHE_COUNTED: counted,
    }
    return metrics, tags
