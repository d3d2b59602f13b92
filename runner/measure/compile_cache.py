"""Cold and warm compile caches (`measure.compile_cache=cold|warm`): what a first call costs with each.

The job points torch's caches (inductor's FX graphs and AOT autograd, Triton's kernels) and the
NEFF cache at folders under `measure.compile_cache_dir`, before anything compiles: a cold job
needs that folder fresh and fills it, a warm one needs it filled. The runner never empties a
cache, and a user's own caches are never read or written. Each job must be a fresh process
(`+experiment=compile_cache` uses the isolated launcher), or in-memory caches would answer first.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner import names
from runner.backends.registry import COMPILE_CACHES
from runner.config import ConfigError, NeuronBackendConfig, RunSpec

# torch's counters of cache lookups during compilation: (counter group, hit key, miss key)
COUNTERS = [("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss"), ("aot_autograd", "autograd_cache_hit",
            "autograd_cache_miss")]  # fmt: skip


def use_compile_cache(spec: RunSpec) -> None:
    """Point the caches at the job's folder, before anything loads or compiles.

    Raises:
        ConfigError: a cold job's folder already holds a cache, a warm job's is empty, or
            backend.neff_cache_dir asks for another NEFF cache.
    """
    measure = spec.measure
    if measure.compile_cache is None:
        return
    if isinstance(spec.backend, NeuronBackendConfig) and spec.backend.neff_cache_dir is not None:
        raise ConfigError(
            f"backend.neff_cache_dir={spec.backend.neff_cache_dir} and measure.compile_cache={measure.compile_cache}: "
            "the cache study keeps the NEFF cache in measure.compile_cache_dir; leave backend.neff_cache_dir unset"
        )
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
    for folder, variable in COMPILE_CACHES.items():  # each under measure.compile_cache_dir
        (root / folder).mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(root / folder)


def cache_report(spec: RunSpec) -> tuple[dict[str, float], dict[str, str]]:
    """The cache's state and folder as tags, and torch's cache hits and misses so far, for a cache job."""
    if spec.measure.compile_cache is None:
        return {}, {}
    from torch._dynamo.utils import counters

    hits = sum(counters[group][hit] for group, hit, _ in COUNTERS)
    misses = sum(counters[group][miss] for group, _, miss in COUNTERS)
    tags = {
        names.TAG_COMPILE_CACHE: spec.measure.compile_cache,
        names.TAG_COMPILE_CACHE_DIR: str(spec.measure.compile_cache_dir),
    }
    return {names.COMPILE_CACHE_HITS: float(hits), names.COMPILE_CACHE_MISSES: float(misses)}, tags
