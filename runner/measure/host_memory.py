"""Keep the host allocator in one mode, so step times do not depend on a process's history.

glibc's malloc serves a large block with a fresh mmap and unmaps it when freed, and moves the
size limit for that as the process frees blocks; a step that allocates its outputs then pays
a page fault for every 4 KiB of them, or none, depending on what the process did before (the
CPU calibration, the profiler, earlier jobs). On a VM a fault costs microseconds: at
8x512x1024 float32 the naive RMSNorm measured 27 ms per step with 8,160 faults, and 7.4 ms
with none, in otherwise identical processes. With `measure.keep_freed_memory` blocks up to
32 MiB come from the heap and freed memory stays there for the next step, in every process.
"""

from __future__ import annotations

import ctypes
import os
import platform

# glibc's mallopt parameters, and the largest mmap threshold it accepts on 64-bit
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_UP_TO_BYTES = 32 * 2**20
TRIM_ABOVE_BYTES = 2**30
# the same settings as variables, which glibc reads as a process starts: a user who set one chose
KEEP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(KEEP_UP_TO_BYTES), "MALLOC_TRIM_THRESHOLD_": str(TRIM_ABOVE_BYTES)}


def is_glibc() -> bool:
    """Whether this process's C library is glibc (other allocators keep their own modes)."""
    return platform.libc_ver()[0] == "glibc"


def keep_freed_memory() -> bool:
    """Switch this process's malloc to the fixed mode now; False where that is not glibc."""
    if not is_glibc() or any(name in os.environ for name in KEEP_ENV):  # the user chose
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(M_MMAP_THRESHOLD, KEEP_UP_TO_BYTES) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE_BYTES))
