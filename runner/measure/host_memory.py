"""Keep the host allocator in one mode, so step times do not depend on a process's history.

glibc's malloc moves its mmap threshold as a process frees, so a step pays a page fault per 4 KiB
of its outputs, or none, by history (docs/trust.md); blocks up to 32 MiB now stay in the heap.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping

from runner.errors import ConfigError

# glibc's mallopt parameters, and the largest mmap threshold it accepts on 64-bit
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_UP_TO_BYTES = 32 * 2**20
_TRIM_ABOVE_BYTES = 2**30
# the same settings as variables, which glibc reads as a process starts: a user who set one chose
KEEP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(KEEP_UP_TO_BYTES), "MALLOC_TRIM_THRESHOLD_": str(_TRIM_ABOVE_BYTES)}
# a benchmark's knob, no config key (docs/trust.md): 0 leaves glibc's own modes, to measure what the fixed one gives
KEEP_FREED_MEMORY_ENV = "RUNNER_KEEP_FREED_MEMORY"


def is_glibc() -> bool:
    """Whether this process's C library is glibc (other allocators keep their own modes)."""
    return platform.libc_ver()[0] == "glibc"


def freed_memory_kept(environ: Mapping[str, str] = os.environ) -> bool:
    """RUNNER_KEEP_FREED_MEMORY: the fixed malloc mode (1, the default) or glibc's own (0)."""
    knob = environ.get(KEEP_FREED_MEMORY_ENV, "1")
    if knob not in ("0", "1"):
        raise ConfigError(
            f"{KEEP_FREED_MEMORY_ENV}={knob!r} is not allowed; choose 1 (the default) or 0 (glibc's modes)"
        )
    return knob == "1"


def keep_freed_memory(environ: Mapping[str, str] = os.environ) -> bool:
    """Switch this process's malloc to the fixed mode now; False where not glibc, or a user or benchmark chose."""
    if not freed_memory_kept(environ) or not is_glibc() or any(name in environ for name in KEEP_ENV):
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(M_MMAP_THRESHOLD, KEEP_UP_TO_BYTES) and libc.mallopt(M_TRIM_THRESHOLD, _TRIM_ABOVE_BYTES))
