"""Keep the host allocator in one mode, so step times do not depend on a process's history.

glibc's malloc moves its mmap threshold as a process frees, so a step pays a page fault per 4 KiB
of its outputs, or none, by history (docs/trust.md); blocks up to 32 MiB now stay in the heap.
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
