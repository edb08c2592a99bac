"""rl/malloc.py: with freed memory kept for reuse, a large block freed stays in the process, its pages resident for the
next block to be served from, where glibc alone unmaps it at once (the next one is new memory the kernel must fault in
and zero; benchmarks/malloc_reuse.py measures what that costs).

What is asserted is where the freed block's pages are (mincore), not a count of page faults: a kernel may fault a
process's resident pages for its own reasons (NUMA balancing's hinting faults are one), and CI once counted a full
16,384 faults for a block the process held, while an unmapped block is unmapped on every kernel."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc only")

# 64 MiB blocks (above glibc's largest mmap threshold, 32 MiB), allocated, filled and freed four times, as a learner's
# activations are every update; after each, the block's address and the share of its pages still resident.
CODE = """
import ctypes, resource, sys
import torch
from rl.malloc import reuse_freed_memory
torch.set_num_threads(1)
applied = reuse_freed_memory() if sys.argv[1] == "on" else False
libc = ctypes.CDLL(None, use_errno=True)
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
PAGE = resource.getpagesize()

def resident(addr, size):
    start = addr - addr % PAGE
    pages = (addr + size - start + PAGE - 1) // PAGE
    vec = ctypes.create_string_buffer(pages)
    if libc.mincore(start, pages * PAGE, vec) != 0:
        return 0.0  # ENOMEM: no longer mapped
    return sum(b & 1 for b in vec.raw) / pages

blocks = []
for i in range(4):
    x = torch.ones(64 * 2**20 // 4)
    addr = x.data_ptr()
    del x
    blocks.append((addr, resident(addr, 64 * 2**20)))
print(applied, *(f"{a}:{r}" for a, r in blocks))
"""


def freed_blocks(mode: str, **env) -> tuple[bool, list[tuple[int, float]]]:
    """Whether keeping applied; each freed block's address and the share of its pages still resident."""
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, **env})
    applied, *blocks = out.stdout.split()
    return applied == "True", [(int(a), float(r)) for a, r in (b.split(":") for b in blocks)]


def test_a_freed_large_block_stays_resident():
    applied, kept = freed_blocks("on")
    _, glibc = freed_blocks("off")
    assert applied
    assert all(r == 1.0 for _, r in kept), kept  # still the process's memory, nothing to fault in again
    assert all(r == 0.0 for _, r in glibc), glibc  # glibc alone: unmapped at free


def test_rl_keep_freed_memory_0_leaves_glibc_as_it_is():
    applied, blocks = freed_blocks("on", RL_KEEP_FREED_MEMORY="0")
    assert not applied
    assert all(r == 0.0 for _, r in blocks), blocks
