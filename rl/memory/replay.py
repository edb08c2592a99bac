"""Uniform experience replay (Lin 1992; Mnih et al. 2015) over preallocated numpy arrays.

Transitions arrive in batches of N (one per env; where several collection workers share one memory, `rows` says
which env rows a batch holds). `terminated` and `truncated` are stored separately: the TD target bootstraps through a
truncation but not through a termination. `next_obs` is stored explicitly, so gymnasium's autoreset never mixes two
episodes in one transition. With `n_step` > 1 an `NStepWindow` (rl/memory/n_step.py) turns
the one-step stream into n-step transitions before storage; each item keeps its own discount gamma^k.

With `frames` (Atari: `replay_frames`, a uint8 stack of frames) a `FrameStore` (rl/memory/frames.py) keeps each
frame once and obs/next_obs hold int64 id stacks, decoded back to pixels in `gather`: about 7.2 KB a transition instead
of 56 KB. The few items whose frames the ring has reused are redrawn by every sampler (`_redraw_lost`).

`close_rows(rows)` ends the episodes in flight in some env rows as truncated, for when their next transitions come
from new episodes (a collection worker restarted, or one of its shipments dropped): the rows' pending n-step items
are stored, bootstrapping at the cut, and the frame store starts the rows' next stacks afresh.

Structured observations (a Dict or Tuple space) are stored one array per entry (rl/envs/observations.py), an action
mask among them: a sampled batch's next observations carry the masks its bootstrap obeys.

Subclasses (prioritized, attentive, queue) change how indices are drawn (`sample`) or what happens when items are
written (`_written`); storage, gathering and checkpointing live here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from rl.envs.observations import as_obs, fields, obs_map, plain, zeros
from rl.memory.frames import FrameStore, frame_capacity
from rl.memory.n_step import NStepWindow, closing_rows, env_rows
from rl.registry import memory


class Transitions(NamedTuple):
    """A sampled batch, as torch tensors. `discounts` is gamma^k for the k-step return in `rewards`;
    `weights` are importance weights, None where sampling is uniform (losses then take a plain mean); `indices` locate
    the items for priority updates."""

    obs: torch.Tensor  # or a DictObs (rl/envs/observations.py)
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    discounts: torch.Tensor
    weights: torch.Tensor | None
    indices: torch.Tensor

    def split(self, size: int) -> list[Transitions]:
        """Consecutive minibatches of `size` items (views, no copies)."""
        parts = -(-len(self.obs) // size)
        return [Transitions(*fields) for fields in zip(*(f.split(size) if f is not None else [None] * parts
                                                          for f in self))]


def _storage_dtype(dtype: np.dtype) -> np.dtype:
    return np.float32 if np.issubdtype(dtype, np.floating) else dtype


@memory.register("replay")
class ReplayMemory:
    """A ring buffer of `capacity` transitions, sampled uniformly with replacement."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "discounts")
    UNIFORM = True  # draws are i.i.d. and independent of training: a phase's minibatches may be drawn at once

    def __init__(self, capacity: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (), action_dtype=np.int64,
                 gamma: float = 0.99, seed: int = 0, device: str | torch.device = "cpu", n_step: int = 1,
                 total_steps: int = 0, frames: bool = False, num_envs: int = 1):
        if capacity < 1:
            raise ValueError(f"memory capacity must be >= 1, got {capacity}")
        self.capacity, self.gamma, self.device = int(capacity), float(gamma), torch.device(device)
        self.obs_shape = obs_map(tuple, obs_shape)  # per entry where observations are structured
        self.obs_dtype = obs_map(lambda d: _storage_dtype(np.dtype(d)), obs_dtype)
        self.store = None
        if not frames:
            self.obs = zeros((self.capacity,), self.obs_shape, self.obs_dtype, np.zeros)
        elif self.obs_dtype == np.uint8 and len(self.obs_shape) == 3:  # obs, next_obs: frame id stacks
            stack = self.obs_shape[0]
            self.store = FrameStore(frame_capacity(self.capacity, stack, num_envs, n_step), self.obs_shape[1:],
                                    stack, num_envs)
            self.obs = np.zeros((self.capacity, stack), np.int64)
        else:
            raise ValueError(f"frame storage needs uint8 frame stacks (stack, H, W), got {self.obs_dtype} "
                             f"{self.obs_shape}")
        self.next_obs = obs_map(np.zeros_like, self.obs)
        self.actions = np.zeros((self.capacity, *action_shape), _storage_dtype(np.dtype(action_dtype)))
        self.rewards = np.zeros(self.capacity, np.float32)
        self.terminated = np.zeros(self.capacity, np.float32)
        self.truncated = np.zeros(self.capacity, np.float32)
        self.discounts = np.full(self.capacity, self.gamma, np.float32)
        self.pos, self.size = 0, 0
        self.added = 0  # one-step transitions received (= env steps): the clock of annealed samplers
        self.total_steps = int(total_steps)  # the run's length, for samplers that anneal over it
        self.window = NStepWindow(n_step, gamma) if n_step > 1 else None
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(cls, hp, obs_space, action_space, seed: int = 0, capacity: int | None = None) -> ReplayMemory:
        frames = (hp.replay_frames and hp.env_type == "atari" and obs_space.dtype == np.uint8
                  and len(obs_space.shape) == 3)
        return cls(hp.buffer_size if capacity is None else capacity, *fields(obs_space),
                   action_space.shape, action_space.dtype, gamma=hp.gamma, seed=seed, device=hp.device,
                   n_step=hp.n_step, total_steps=hp.train_steps, frames=frames, num_envs=hp.num_envs,
                   **cls.options(hp))

    @classmethod
    def options(cls, hp) -> dict:
        """Constructor arguments a subclass reads from hparams."""
        return {}

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Bytes of the stored transitions (with the frame store's frames)."""
        frames = 0 if self.store is None else self.store.frames.nbytes
        return frames + sum(getattr(self, f).nbytes for f in self.FIELDS)

    def progress(self) -> float:
        """Fraction of the run done, by transitions received (0.0, i.e. no annealing, when the length is unknown)."""
        return min(1.0, self.added / self.total_steps) if self.total_steps > 0 else 0.0

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, rows=None) -> None:
        """Store a batch of transitions (arrays with a leading env dimension). `rows` are the env rows of the batch's
        transitions, distinct ints below `num_envs` (a collection worker's block of a memory shared by several):
        they key the n-step windows and the frame store's stack continuity. None: rows 0..len-1 (the n-step window
        maps a short batch by next-step autoreset)."""
        self.added += len(rewards)
        obs, next_obs = as_obs(obs), as_obs(next_obs)
        if rows is not None:
            rows = env_rows(rows, len(rewards))
        if self.store is not None:
            obs, next_obs = self.store.encode(obs, next_obs, rows=rows)
        if self.window is None:
            self._store(obs, actions, rewards, next_obs, terminated, truncated, self.gamma)
            return
        out = self.window.add(obs, actions, rewards, next_obs, terminated, truncated, rows=rows)
        if out is not None:
            self._store(**out)

    def close_rows(self, rows) -> None:
        """End the episodes in flight in env rows `rows` (a 1-D array of distinct ints, as in `add`; None is refused)
        as truncated at the last step each row added: with n_step > 1 the rows' pending partial n-step transitions
        are stored now, each with the discounted return of the k steps it holds, that step's next_obs, truncated set
        and discount gamma^k, and the rows' windows are emptied; with frames the rows' next add starts a fresh stack,
        not linked to their previous frames. Nothing added later enters those transitions; other rows are untouched.
        With n_step 1 and no frames there is nothing in flight: a no-op (rows still checked). Call it when the next
        transitions of the rows do not continue their episodes: a collection worker restarted, or a batch of its
        transitions was dropped."""
        rows = closing_rows(rows)
        if self.store is not None:  # first: it refuses rows beyond num_envs before anything changes
            self.store.forget(rows)
        if self.window is not None:
            out = self.window.close(rows)
            if out is not None:
                self._store(**out)

    def _store(self, obs, actions, rewards, next_obs, terminated, truncated, discounts) -> None:
        n = len(rewards)
        if n > self.capacity:  # only the newest `capacity` survive
            keep = slice(n - self.capacity, n)
            obs, actions, rewards, next_obs = obs[keep], actions[keep], rewards[keep], next_obs[keep]
            terminated, truncated = terminated[keep], truncated[keep]
            discounts = discounts[keep] if np.ndim(discounts) else discounts
            n = self.capacity
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
        self.discounts[where] = discounts
        self._written(where, n)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def _written(self, where: slice | np.ndarray, n: int) -> None:
        """Hook: items were written at `where` (prioritized memories give them the max priority)."""

    def sample(self, batch_size: int) -> Transitions:
        return self.gather(self._uniform(batch_size))

    def _uniform(self, n: int) -> np.ndarray:
        """`n` indices drawn uniformly from the items held (and usable)."""
        return self._redraw_lost(self.rng.integers(0, self.size, n), lambda k: self.rng.integers(0, self.size, k))

    def _lost(self, idx: np.ndarray) -> np.ndarray:
        """Which items at `idx` lost a frame to the frame ring (none without a frame store)."""
        if self.store is None:
            return np.zeros(len(idx), bool)
        return self.store.lost(self.obs[idx]) | self.store.lost(self.next_obs[idx])

    def _redraw_lost(self, idx: np.ndarray, draw) -> np.ndarray:
        """Replace lost items by new draws of `draw(k)` until none is left: rejection sampling keeps the sampler's
        distribution, restricted to usable items. It ends: the newest items are never lost (`frame_capacity`)."""
        if self.store is None:
            return idx
        lost = self._lost(idx)
        while lost.any():
            idx[lost] = draw(int(lost.sum()))
            lost = self._lost(idx)
        return idx

    def _pixels(self, stored: np.ndarray) -> np.ndarray:
        """Stored observations as the env gave them (frame stacks rebuilt from their ids)."""
        return stored if self.store is None else self.store.decode(stored)

    def gather(self, idx: np.ndarray, weights: np.ndarray | None = None) -> Transitions:
        """The transitions at `idx` as tensors on the memory's device."""
        def t(a):
            return obs_map(lambda x: torch.from_numpy(x).to(self.device, non_blocking=True), a)
        return Transitions(
            t(self._pixels(self.obs[idx])), t(self.actions[idx]), t(self.rewards[idx]),
            t(self._pixels(self.next_obs[idx])),
            t(self.terminated[idx]), t(self.truncated[idx]), t(self.discounts[idx]),
            None if weights is None else t(weights.astype(np.float32)),
            t(idx),
        )

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        """A copy of the transitions; the frame store's frames are a view (see FrameStore.state_dict)."""
        data = {f: plain(obs_map(lambda a: torch.from_numpy(a[: self.size].copy()), getattr(self, f)))
                for f in self.FIELDS}
        frames = {"frames": self.store.state_dict()} if self.store is not None else {}
        return {"data": data, "pos": self.pos, "size": self.size, "added": self.added,
                "rng": self.rng.bit_generator.state,
                "window": self.window.state_dict() if self.window is not None else {}, **frames}

    def load_state_dict(self, state: dict) -> None:
        """Restore the content and the sampler. Episodes that were in flight in the n-step windows end there as
        truncated (a resumed run restarts its envs), so their transitions are stored, bootstrapping at the cut."""
        if (self.store is None) != ("frames" not in state):
            raise ValueError("the checkpointed memory and this one differ in frame storage (replay_frames)")
        if self.store is not None:
            self.store.load_state_dict(state["frames"])
        self.pos, self.size, self.added = int(state["pos"]), int(state["size"]), int(state.get("added", 0))
        for f in self.FIELDS:
            getattr(self, f)[: self.size] = obs_map(lambda t: t.numpy(), state["data"][f])
        self.rng.bit_generator.state = state["rng"]
        if self.window is not None:
            self.window.load_state_dict(state.get("window", {}))
            out = self.window.flush()
            if out is not None:
                self._store(**out)
