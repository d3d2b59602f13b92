"""Cold and warm compile caches (`measure.compile_cache=cold|warm`): what a first call costs with each.

The runner never empties a cache nor touches a user's own; on Neuron, inductor's counters stay at 0,
so the NEFF cache itself is counted.
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
    """Point the caches at the job's folder, before anything loads or compiles; ConfigError where that cannot hold."""
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
    """NEFF cache misses (NEFFs it gained) and hits (captured NEFFs it held before; unknown without DEVICE capture)."""
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
    """The cache's state and folder as tags, and the job's hits and misses (`neffs_new`: NEFFs the cache gained)."""
    if spec.measure.compile_cache is None:
        return {}, {}
    neff = backend.compile_cache_counting == "neff"
    metrics, counted = neff_lookups(capture_dir, neffs_new or 0.0) if neff else torch_lookups()
    tags = {
        names.TAG_COMPILE_CACHE: spec.measure.compile_cache,
        names.TAG_COMPILE_CACHE_DIR: str(spec.measure.compile_cache_dir),
        names.TAG_COMPILE_CACHE_COUNTED: counted,
    }
    return metrics, tags
