"""The buffers a worker fills: a rollout (rl.memory.rollout.RolloutMemory), `Rows` of replay transitions, or a flat
gradient. Each transport allocates them its way (shared memory, or the worker's own memory shipped by value).
Structured observations (a Dict or Tuple space, an action mask among them) take one array per entry
(rl/envs/observations.py), laid out as the learner's memory lays them out."""

from __future__ import annotations

import numpy as np
import torch

from rl.envs.observations import fields, zeros
from rl.memory.rollout import RolloutMemory


class Rows:
    """K vector steps of N envs of (obs, action, reward, next_obs, terminated, truncated) for replay agents, with a
    mask of the rows that are transitions (next-step autoreset drops an env's reset step)."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "valid")

    def __init__(self, steps: int, num_envs: int, obs_space, action_space):
        def tensors(shape, dtype):
            return zeros((steps, num_envs), shape, dtype, lambda full, d: torch.from_numpy(np.zeros(full, d)))

        self.steps, self.num_envs = steps, num_envs
        self.obs = tensors(*fields(obs_space))
        self.next_obs = tensors(*fields(obs_space))
        self.actions = tensors(action_space.shape, action_space.dtype)
        self.rewards = tensors((), np.float32)
        self.terminated = tensors((), bool)
        self.truncated = tensors((), bool)
        self.valid = tensors((), bool)

    def share_memory_(self) -> Rows:
        for k in self.FIELDS:
            getattr(self, k).share_memory_()
        return self

    def __getstate__(self):  # shipped by value (Ray): plain tensors
        return {k: getattr(self, k) for k in ("steps", "num_envs", *self.FIELDS)}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def clear(self) -> None:
        """No row is a transition until written (a step skipped by next-step autoreset must not keep the previous
        shipment's row)."""
        self.valid.zero_()

    def add(self, t: int, valid: np.ndarray, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Write vector step `t`; the arguments hold the rows where `valid` is set."""
        self.valid.numpy()[t] = valid
        for name, value in (("obs", obs), ("actions", actions), ("rewards", rewards), ("next_obs", next_obs),
                            ("terminated", terminated), ("truncated", truncated)):
            getattr(self, name).numpy()[t][valid] = value

    def step(self, t: int, row_offset: int) -> tuple[tuple, np.ndarray]:
        """Step t's transitions and their env rows in the learner's memory (offset by the worker's first row)."""
        valid = self.valid[t].numpy()
        rows = np.flatnonzero(valid)
        return tuple(getattr(self, k)[t].numpy()[valid] for k in ("obs", "actions", "rewards", "next_obs",
                                                                   "terminated", "truncated")), rows + row_offset

    def transitions(self, row_offset: int):
        """Every step's (transitions, env rows), in order: what `Agent.take_rows` takes."""
        return (self.step(t, row_offset) for t in range(self.steps))


def make_buffer(role: str, hp, obs_space, action_space, hidden_shape, grad_size: int,
                behaviour: dict[str, int] | None = None):
    """A fresh buffer for a worker of `role` with the worker settings `hp` (on the CPU, not shared); a rollout keeps
    the `behaviour` vectors that the learner's rollout keeps (sequence replay's features and logits)."""
    n = hp.worker_envs or hp.num_envs
    if role == "rollouts":
        return RolloutMemory(hp.num_steps, n, *fields(obs_space), action_space.shape,
                             action_space.dtype, hidden_shape=hidden_shape, behaviour=behaviour)
    if role == "rows":
        return Rows(hp.worker_steps, n, obs_space, action_space)
    return torch.zeros(grad_size)


def share(buffer):
    """`buffer` moved to shared memory (a forked worker writes the pages the learner reads)."""
    return buffer.share_memory_()
