"""TorchNeuron's and torch-xla's compile caches: their folders, the settings that bypass them, NEFF counting.

On Neuron inductor's counters stay at 0: torch-neuronx compiles to NEFFs in its own cache, so that is counted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from runner import names
from runner.backends.compile_cache import CompileCache
from runner.config import ConfigError, RunSpec

# TorchNeuron's NEFF cache (SDK:tools/neuron-explorer/environment-variables.rst; default /tmp/neff_cache, SRC)
NEFF_CACHE_ENV = "TORCH_NEURONX_NEFF_CACHE_DIR"
# TorchNeuron's local NEFF cache beside it, default /tmp/local_cache (SRC torch_neuronx/csrc/core/compilation/
# CompilationCache.cpp), and its HLO cache: named by DOCS-latest compiler/about-compiler-artifacts (2026-11)
# and torch/reference/env-vars ("compilation caching"), whose variable and default could not be read here;
# the variable is the one TorchNeuron users set (inferred), its default unknown (docs/trainium.md, caches)
_NEFF_LOCAL_CACHE_ENV = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"
_HLO_CACHE_ENV = "TORCH_NEURONX_HLO_CACHE_DIR"
# the torch-xla flow's Neuron Persistent Cache, unless NEURON_CC_FLAGS sets --cache_dir
# (SDK:about-neuron/arch/neuron-features/neuron-caching.rst)
COMPILE_CACHE_URL_ENV = "NEURON_COMPILE_CACHE_URL"
DEFAULT_NEFF_CACHE = "/tmp/neff_cache"
# where those caches go when nothing moves them (the HLO cache's default is unknown): a cache job must
# leave them as they were
DEFAULT_CACHES = (Path(DEFAULT_NEFF_CACHE), Path("/tmp/local_cache"), Path("/var/tmp/neuron-compile-cache"))
# settings that would send a cache job's compilations past its folders: NEURON_CC_FLAGS' --cache_dir
# wins over NEURON_COMPILE_CACHE_URL and --no_cache turns that cache off
# (SDK:about-neuron/arch/neuron-features/neuron-caching.rst); TORCH_NEURONX_NEFF_DISABLE_CACHE
# turns the NEFF cache off (SRC torch_neuronx/csrc/core/cache/PersistentCacheBackend.cpp)
_CC_FLAGS_ENV, _CC_FLAGS_AROUND_CACHE = "NEURON_CC_FLAGS", re.compile(r"--(cache_dir|no_cache)\b")
_NEFF_CACHE_OFF_ENV, _SETTINGS_ON = "TORCH_NEURONX_NEFF_DISABLE_CACHE", ("true", "1", "yes")
# a NEFF as a capture holds it: neff_<hash>_vnc_<core>.neff (session mode) or neff_<hash>.neff
_CAPTURED_NEFF = re.compile(r"neff_(?P<key>.+?)(?:_vnc_\d+)?\.neff")


class NeuronCompileCache(CompileCache):
    """torch.compile's caches, TorchNeuron's (NEFF, local NEFF, HLO) and torch-xla's, counted by NEFF files."""

    folders = {**CompileCache.folders, "neff": NEFF_CACHE_ENV, "neff_local": _NEFF_LOCAL_CACHE_ENV,
               "hlo": _HLO_CACHE_ENV, "neuron_compile_cache": COMPILE_CACHE_URL_ENV}  # fmt: skip

    def check(self, spec: RunSpec) -> None:
        """Refuse a NEURON_CC_FLAGS or TorchNeuron setting that bypasses the folders.

        The variables are checked whatever the backend: the caches are moved before it is chosen.

        Raises:
            ConfigError: naming the variable.
        """
        compile_cache = spec.measure.compile_cache
        bypass = _CC_FLAGS_AROUND_CACHE.search(os.environ.get(_CC_FLAGS_ENV, ""))
        if bypass or os.environ.get(_NEFF_CACHE_OFF_ENV, "").lower() in _SETTINGS_ON:
            setting = f"{_CC_FLAGS_ENV} has {bypass.group()}" if bypass else f"{_NEFF_CACHE_OFF_ENV} is set"
            raise ConfigError(
                f"measure.compile_cache={compile_cache}: {setting}, so compilations would bypass "
                "measure.compile_cache_dir; unset it for the cache study"
            )

    def lookups(self, capture_dir: Path, neffs_new: float) -> tuple[dict[str, float], str]:
        """NEFF misses (NEFFs it gained) and hits (captured NEFFs it held before; unknown without DEVICE capture)."""
        ran = {found["key"] for path in capture_dir.rglob("*.neff") if (found := _CAPTURED_NEFF.fullmatch(path.name))}
        metrics = {names.COMPILE_CACHE_MISSES: neffs_new}
        counted = "NEFF cache: misses are NEFFs the cache gained, hits NEFFs the job ran that it held before"
        if not ran:
            return metrics, f"{counted}; hits unknown: the capture holds no NEFF (a DEVICE capture copies them)"
        metrics[names.COMPILE_CACHE_HITS] = float(max(0, len(ran) - int(neffs_new)))
        return metrics, counted
