"""Uniform experience replay (Lin 1992; Mnih et al. 2015) over preallocated numpy arrays.

Transitions arrive in batches of N (one per env). `terminated` and `truncated` are stored separately: the TD target
bootstraps through a truncation but not through a termination. `next_obs` is stored explicitly, so gymnasium's
autoreset never mixes two episodes in one transition.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from rl.registry import memory


class Transitions(NamedTuple):
    """A sampled batch, as torch tensors. `discounts` is gamma^n for the return in `rewards` (n = 1 here);
    `weights` are importance weights (ones for uniform sampling); `indices` locate the items for priority updates."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor
    indices: torch.Tensor


def _storage_dtype(dtype: np.dtype) -> np.dtype:
    return np.float32 if np.issubdtype(dtype, np.floating) else dtype


@memory.register("replay")
class ReplayMemory:
    """A ring buffer of `capacity` transitions, sampled uniformly with replacement."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (), action_dtype=np.int64,
                 gamma: float = 0.99, seed: int = 0, device: str | torch.device = "cpu"):
        self.capacity, self.gamma, self.device = int(capacity), float(gamma), torch.device(device)
        self.obs = np.zeros((self.capacity, *obs_shape), _storage_dtype(np.dtype(obs_dtype)))
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((self.capacity, *action_shape), _storage_dtype(np.dtype(action_dtype)))
        self.rewards = np.zeros(self.capacity, np.float32)
        self.terminated = np.zeros(self.capacity, np.float32)
        self.truncated = np.zeros(self.capacity, np.float32)
        self.pos, self.size = 0, 0
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(cls, hp, obs_space, action_space, seed: int = 0) -> "ReplayMemory":
        return cls(hp.buffer_size, obs_space.shape, obs_space.dtype, action_space.shape, action_space.dtype,
                   gamma=hp.gamma, seed=seed, device=hp.device)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Store a batch of N transitions (arrays with a leading env dimension)."""
        n = len(rewards)
        if self.pos + n <= self.capacity:  # the common case: one contiguous slice, no index arrays
            where = slice(self.pos, self.pos + n)
        else:
            where = (self.pos + np.arange(n)) % self.capacity
        self.obs[where] = obs
        self.actions[where] = actions
        self.rewards[where] = rewards
        self.next_obs[where] = next_obs
        self.terminated[where] = terminated
        self.truncated[where] = truncated
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Transitions:
        return self.gather(self.rng.integers(0, self.size, batch_size))

    def gather(self, idx: np.ndarray, weights: np.ndarray | None = None) -> Transitions:
        """The transitions at `idx` as tensors on the memory's device."""
        def t(a):
            return torch.from_numpy(a).to(self.device, non_blocking=True)
        n = len(idx)
        return Transitions(
            t(self.obs[idx]), t(self.actions[idx]), t(self.rewards[idx]), t(self.next_obs[idx]),
            t(self.terminated[idx]), t(self.truncated[idx]),
            torch.full((n,), self.gamma, device=self.device),
            torch.ones(n, device=self.device) if weights is None else t(weights.astype(np.float32)),
            t(idx),
        )

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        data = {f: torch.from_numpy(getattr(self, f)[: self.size].copy()) for f in self.FIELDS}
        return {"data": data, "pos": self.pos, "size": self.size, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.pos, self.size = int(state["pos"]), int(state["size"])
        for f in self.FIELDS:
            getattr(self, f)[: self.size] = state["data"][f].numpy()
        self.rng.bit_generator.state = state["rng"]
