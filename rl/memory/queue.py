"""A FIFO of the freshest transitions: the on-policy part of a mixed batch (CLEAR, Rolnick et al. 2019; LASER,
Schmitt et al. 2020), as the `queue` buffer of the elite_buffer_vtrace platform (its `--replay_parameters`).

It holds the last `capacity` transitions and `sample(k)` returns the k freshest, newest first, cycling through what it
holds when k exceeds it (capacity 1: the whole share is the latest transition). Unlike the platform's queue, sampling
does not remove items: there, workers block until the learner consumes a rollout; here the learner samples
synchronously between env steps (possibly several gradient steps per step), and removal would starve it.
"""

from __future__ import annotations

import numpy as np

from rl.memory.replay import ReplayMemory, Transitions
from rl.registry import memory


@memory.register("queue")
class QueueMemory(ReplayMemory):
    """The newest `capacity` transitions; sampling is deterministic, freshest first."""

    UNIFORM = False

    def sample(self, batch_size: int) -> Transitions:
        if self.size == 0:
            raise ValueError("cannot sample from an empty queue")
        age = np.arange(batch_size) % self.size  # 0 = the newest item
        idx = (self.pos - 1 - age) % self.capacity
        if self._lost(idx).any():  # the frame ring reused some frames: cycle through the usable items only
            held = (self.pos - 1 - np.arange(self.size)) % self.capacity
            held = held[~self._lost(held)]
            idx = held[np.arange(batch_size) % len(held)]
        return self.gather(idx)
