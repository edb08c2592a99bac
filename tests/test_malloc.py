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

CODE = """
import resource, sys
import torch
from rl.malloc import reuse_freed_memory
applied = reuse_freed_memory() if sys.argv[1] == "on" else False
for _ in range(2):  # 64 MiB, above glibc's largest mmap threshold (32 MiB); the heap grows to hold it (twice:
    x = torch.ones(64 * 2**20 // 4)  # torch's 64-byte alignment asks for a little more than the freed block)
    del x
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):  # a learner's activations: allocated, filled, freed, every update
    x = torch.ones(64 * 2**20 // 4)
    del x
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, **env) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, **env})
    applied, count = out.stdout.split()
    return applied == "True", int(count)


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
