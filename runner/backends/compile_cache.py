"""A device's compile caches as the cache study (`measure.compile_cache`) sees them: torch.compile's by default."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from runner import names
from runner.config import RunSpec

# torch's counters of cache lookups during compilation: (counter group, hit key, miss key)
_COUNTERS = [("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss"), ("aot_autograd", "autograd_cache_hit",
            "autograd_cache_miss")]  # fmt: skip


class CompileCache:
    """The folders a device's compilations fill, what would bypass them, and how a cache job counts its lookups."""

    # folder under measure.compile_cache_dir -> the variable that moves that cache there
    folders: ClassVar[dict[str, str]] = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}

    def check(self, spec: RunSpec) -> None:  # noqa: B027  (a no-op default, by design)
        """Refuse settings that send a cache job's compilations past its folders; torch's caches have none.

        Raises:
            ConfigError: naming the key or variable.
        """

    def lookups(self, capture_dir: Path, neffs_new: float) -> tuple[dict[str, float], str]:
        """Inductor's FX-graph and AOT-autograd cache hits and misses so far in this process, and what was counted."""
        from torch._dynamo.utils import counters

        hits = sum(counters[group][hit] for group, hit, _ in _COUNTERS)
        misses = sum(counters[group][miss] for group, _, miss in _COUNTERS)
        counted = "torch's lookups: inductor's FX graphs and AOT autograd"
        return {names.COMPILE_CACHE_HITS: float(hits), names.COMPILE_CACHE_MISSES: float(misses)}, counted
