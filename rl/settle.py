"""What every process of a run does first, written once: its threads, denormal floats flushed to zero, freed memory
kept for reuse, and its seeds; and the seed of a rank of a gradient group.

A run's own process (rl/trainer.py `configure_torch`), the Scheme's workers (rl/parallel/processes.py
`settle_worker`) and the ranks of a synchronous gradient group (rl/trainer.py `follow`) all call `settle`.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from rl.malloc import reuse_freed_memory
from rl.threads import limit_threads

RANK_STRIDE = 7919  # a prime: the seeds of a run's ranks and workers stay apart from those of runs seeded nearby


def settle(threads: int, reuse_memory: bool = True) -> None:
    """Run on `threads` threads (torch, BLAS, OpenCV: rl/threads.py), flush denormal floats to zero and, with
    `reuse_memory`, keep freed memory for reuse (rl/malloc.py). Adam's moment estimates of parameters whose gradient
    is zero (dead ReLU units) decay into denormals, and CPU arithmetic on denormals is tens of times slower: without
    flushing, the optimizer step dominates a small network's update."""
    limit_threads(threads)
    torch.set_flush_denormal(True)
    if reuse_memory:
        reuse_freed_memory()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank` of a gradient group (rank 0: the run's own)."""
    return seed + RANK_STRIDE * rank


def worker_seed(seed: int, rank: int) -> int:
    """The seed of the global generators of collection worker `rank` (its envs and agent have their own, from its
    spec)."""
    return seed * RANK_STRIDE + rank
