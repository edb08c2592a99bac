"""Freed memory kept for reuse (glibc's malloc on Linux).

glibc serves every allocation above its mmap threshold (at most 32 MiB) with a fresh mmap and unmaps it when freed, so
the next such allocation is new memory the kernel must fault in and zero. A CNN learner's activations are that large
(elite_buffer_vtrace's network on a batch of 500 frames allocates about 470 MB per update), and that zeroing took 27-29%
of its CPU time (measured on a `*_impala_seaquest` learner: 0.30 of 1.03 s per update in the kernel). With glibc's mmap
off (M_MMAP_MAX = 0) large blocks come from the heap, which keeps freed memory for the next update, and a trim threshold
of 1 GiB returns free memory to the kernel only when that much lies unused at the top. Numpy's and torch's one-off large
buffers (a replay memory) are served from the heap too; where the heap cannot grow, glibc still falls back to mmap.
Other C libraries and systems are left alone, and so is a process started with RL_KEEP_FREED_MEMORY=0 (glibc's own
behaviour: less memory held, more time in the kernel).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>
TRIM_THRESHOLD = 1 << 30


def reuse_freed_memory() -> bool:
    """Set glibc's malloc to keep freed large blocks for reuse in this process; whether it applied."""
    if os.environ.get("RL_KEEP_FREED_MEMORY") == "0" or sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
