"""What a process of the Scheme does first. Which process does what:
- a worker forked by the shared-memory transport: `die_with_parent`, then `settle_worker` (one thread for torch and
  BLAS, denormals flushed, numpy's and torch's global generators seeded from its spec);
- a worker in a Ray actor (transports/ray_actors.py's WorkerActor): `settle_worker` only (Ray ends its actors, not a
  parent);
- a rank > 0 of a synchronous gradient group forked by collective.py (`_follower`): `die_with_parent` only; as a Ray
  actor (RankActor) or started by torchrun, neither. A rank runs rl/parallel/follower.py's `follow`, which sets its
  threads (rank 0's `torch_threads`) and seeds (rank 0's, its agent's and envs' offset by rl/settle.py's `rank_seed`)
  as a run does.
Below the transports and the group, which both start such processes."""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> None:
    """Linux sends this process `signum` when its parent dies, however it dies (SIGKILL included); SIGTERM lets a
    process that checkpoints on it save first (a --tune trial worker)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):  # not Linux: the parent-pid check at every beat still ends the worker
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def settle_worker(spec) -> None:
    """A worker's process: one thread (the cores are shared out between processes), denormals flushed, numpy's and
    torch's global generators seeded from its spec (rl/settle.py)."""
    import numpy as np
    import torch

    from rl.settle import settle, worker_seed

    settle(1, reuse_memory=False)
    np.random.seed(worker_seed(spec.seed, spec.rank) % 2**32)
    torch.manual_seed(worker_seed(spec.seed, spec.rank))
