"""rl/malloc.py: with freed memory kept for reuse, a large block allocated again after it was freed is served from
memory the process already has (no page faults), where glibc alone maps and faults in new memory every time."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc only")

# 64 MiB blocks (above glibc's largest mmap threshold, 32 MiB), allocated, filled and freed six times, as a learner's
# activations are every update; the page faults of the last three (the first let the heap grow to hold the block:
# torch's 64-byte alignment asks for a little more than a freed block), their median
CODE = """
import resource, statistics, sys
import torch
from rl.malloc import reuse_freed_memory
torch.set_num_threads(1)  # no thread pool started (and allocating) between the measured allocations
applied = reuse_freed_memory() if sys.argv[1] == "on" else False
counts = []
for i in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 * 2**20 // 4)
    del x
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, statistics.median(counts[3:]))
"""


def faults(mode: str, **env) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, **env})
    applied, count = out.stdout.split()
    return applied == "True", int(float(count))


def test_a_freed_large_block_is_reused_without_new_page_faults():
    applied, kept = faults("on")
    _, fresh = faults("off")
    assert applied
    assert kept < 1000, f"{kept} page faults for memory the process had already used"
    assert fresh > kept  # glibc alone: 3 x 16,384 pages of 4 kB (fewer with transparent huge pages), faulted afresh


def test_rl_keep_freed_memory_0_leaves_glibc_as_it_is():
    applied, count = faults("on", RL_KEEP_FREED_MEMORY="0")
    assert not applied
    assert count > faults("on")[1]
