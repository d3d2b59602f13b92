"""Cold and warm compile caches (`measure.compile_cache=cold|warm`): what a first call costs with each.

The job points torch's caches (inductor's FX graphs and AOT autograd, Triton's kernels), the
NEFF cache and the HLO-keyed Neuron Persistent Cache at folders under `measure.compile_cache_dir`
(`Backend.compile_caches`), before anything compiles: a cold job
needs that folder fresh and fills it, a warm one needs it filled. The runner never empties a
cache, and a user's own caches are never read or written. Each job must be a fresh process
(`+experiment=compile_cache` uses the isolated launcher), or in-memory caches would answer first.

Hits and misses are counted as the backend says (`Backend.compile_cache_counting`): torch's
lookup counters, or on Neuron, where torch-neuronx compiles to NEFFs and inductor's counters stay
at 0, the NEFF cache itself: a miss is a NEFF the cache folder gained during the job, a hit a
NEFF the job ran (its capture holds a copy) that the folder already held.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from runner import names
from runner.backends.base import Backend
from runner.backends.registry import COMPILE_CACHES
from runner.config import ConfigError, NeuronBackendConfig, RunSpec

# torch's counters of cache lookups during compilation: (counter group, hit key, miss key)
COUNTERS = [("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss"), ("aot_autograd", "autograd_cache_hit",
            "autograd_cache_miss")]  # fmt: skip
# settings that would send a cache job's compilations past its folders: NEURON_CC_FLAGS' --cache_dir
# wins over NEURON_COMPILE_CACHE_URL and --no_cache turns that cache off
# (SDK:about-neuron/arch/neuron-features/neuron-caching.rst); TORCH_NEURONX_NEFF_DISABLE_CACHE
# turns the NEFF cache off (SRC torch_neuronx/csrc/core/cache/PersistentCacheBackend.cpp)
CC_FLAGS_ENV, CC_FLAGS_AROUND_CACHE = "NEURON_CC_FLAGS", re.compile(r"--(cache_dir|no_cache)\b")
NEFF_CACHE_OFF_ENV, SETTINGS_ON = "TORCH_NEURONX_NEFF_DISABLE_CACHE", ("true", "1", "yes")
# a NEFF as a capture holds it: neff_<hash>_vnc_<core>.neff (session mode) or neff_<hash>.neff
CAPTURED_NEFF = re.compile(r"neff_(?P<key>.+?)(?:_vnc_\d+)?\.neff")


def use_compile_cache(spec: RunSpec) -> None:
    """Point the caches at the job's folder, before anything loads or compiles.

    Raises:
        ConfigError: a cold job's folder already holds a cache, a warm job's is empty,
            backend.neff_cache_dir asks for another NEFF cache, or the environment bypasses the folders.
    """
    measure = spec.measure
    if measure.compile_cache is None:
        return
    if isinstance(spec.backend, NeuronBackendConfig) and spec.backend.neff_cache_dir is not None:
        raise ConfigError(
            f"backend.neff_cache_dir={spec.backend.neff_cache_dir} and measure.compile_cache={measure.compile_cache}: "
            "the cache study keeps the NEFF cache in measure.compile_cache_dir; leave backend.neff_cache_dir unset"
        )
    bypass = CC_FLAGS_AROUND_CACHE.search(os.environ.get(CC_FLAGS_ENV, ""))
    if bypass or os.environ.get(NEFF_CACHE_OFF_ENV, "").lower() in SETTINGS_ON:
        setting = f"{CC_FLAGS_ENV} has {bypass.group()}" if bypass else f"{NEFF_CACHE_OFF_ENV} is set"
        raise ConfigError(
            f"measure.compile_cache={measure.compile_cache}: {setting}, so compilations would bypass "
            "measure.compile_cache_dir; unset it for the cache study"
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


def torch_lookups() -> tuple[dict[str, float], str]:
    """Inductor's FX-graph and AOT-autograd cache hits and misses so far in this process."""
    from torch._dynamo.utils import counters

    hits = sum(counters[group][hit] for group, hit, _ in COUNTERS)
    misses = sum(counters[group][miss] for group, _, miss in COUNTERS)
    counted = "torch's lookups: inductor's FX graphs and AOT autograd"
    return {names.COMPILE_CACHE_HITS: float(hits), names.COMPILE_CACHE_MISSES: float(misses)}, counted


def neff_lookups(capture_dir: Path, neffs_new: float) -> tuple[dict[str, float], str]:
    """NEFF cache misses (NEFFs the cache gained) and hits (NEFFs the job ran that it held before).

    The NEFFs a job ran are those its capture holds (NeuronConfig copies them from the cache at
    stop, DEVICE mode only): without them hits are unknown and left out, not logged as 0.
    """
    ran = {found["key"] for path in capture_dir.rglob("*.neff") if (found := CAPTURED_NEFF.fullmatch(path.name))}
    metrics = {names.COMPILE_CACHE_MISSES: neffs_new}
    counted = "NEFF cache: misses are NEFFs the cache gained, hits NEFFs the job ran that it held before"
    if not ran:
        return metrics, f"{counted}; hits unknown: the capture holds no NEFF (a DEVICE capture copies them)"
    metrics[names.COMPILE_CACHE_HITS] = float(max(0, len(ran) - int(neffs_new)))
    return metrics, counted


def cache_report(
    spec: RunSpec, backend: Backend, capture_dir: Path, neffs_new: float | None
) -> tuple[dict[str, float], dict[str, str]]:
    """The cache's state and folder as tags, and the job's cache hits and misses, for a cache job.

    Args:
        spec: the job.
        backend: says how the hits and misses are counted.
        capture_dir: the job's capture, which holds the NEFFs it ran.
        neffs_new: the NEFFs the NEFF cache gained during the job (`compile/neffs_new`).
    """
    if spec.measure.compile_cache is None:
        return {}, {}
    if backend.compile_cache_counting == "neff":
        metrics, counted = neff_lookups(capture_dir, neffs_new or 0.0)
    else:
        metrics, counted = torch_lookups()
    tags = {
        names.TAG_COMPILE_CACHE: spec.measure.compile_cache,
        names.TAG_COMPILE_CACHE_DIR: str(spec.measure.compile_cache_dir),
        names.TAG_COMPILE_CACHE_COUNTED: counted,
    }
    return metrics, tags
