"""Frame-stacked observations stored one frame at a time, for Atari replay.

An Atari observation is a stack of the last 4 84x84 frames, and consecutive stacks share 3 of them; storing obs and
next_obs per transition keeps each frame 2 x 4 = 8 times (56 KB a transition, 56 GB for the usual 1M buffer).
Dopamine's circular replay buffer and SB3's `optimize_memory_usage` store one frame per step and rebuild the stacks
by index arithmetic on the ring, which ties a stack to its ring neighbours: Dopamine pads every episode start with
stack - 1 zero frames, and SB3 reads next_obs from the following slot, where a truncated episode's final observation
cannot be (it refuses `handle_timeout_termination` with that option). Here every frame gets an id (an
ever-increasing int64) and a transition keeps the id stacks of its obs and next_obs ([stack] each), so:
- any stack is exact: what `decode` returns is what `encode` was given, frame by frame. Whether a stack continues the
  env's previous one is checked by value (obs == the last next_obs, next_obs[:-1] == obs[1:]), never assumed from
  done flags, zero padding or the env's autoreset convention: a reset writes a fresh stack, a life loss whose stack
  goes on (terminal_on_life_loss) shares its frames;
- the n-step window, the samplers and checkpoints see ids like any other observation array, unchanged;
- all-zero frames (reset padding) map to one blank frame that is never overwritten, so a reset costs one new frame.

Frames live in a ring: an id's slot is reused `capacity` ids later. A transition whose oldest frame was reused is
"lost" (`lost`): samplers redraw it, so it is never returned (rare: with episodes of L steps a transition costs about
1 + 1/L frames, and the ring holds 1% more frames than the memory holds transitions). A transition then costs
7056 B of frame (+1%), 64 B of ids and 24 B of other fields: 7.2 KB, 7.2 GB for 1M transitions. Each buffer of a
mixed memory keeps its own frames.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rl.memory.n_step import closing_rows, env_rows

BLANK = np.iinfo(np.int64).max  # the id of the all-zero frame: above every real id, so `min` over a stack skips it


def frame_capacity(capacity: int, stack: int, num_envs: int, n_step: int) -> int:
    """Frames for `capacity` transitions: one each, 1% more for episode starts, plus what one add can write
    (2 stacks an env) over the adds a transition's frames span before it is stored and sampled (n_step + stack).
    That last term is why the newest transitions are never lost, so redrawing always ends."""
    return capacity + capacity // 100 + 2 * stack * num_envs * (n_step + stack)


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each row of `a` equals that of `b`, element by element."""
    return (a == b).reshape(len(a), math.prod(a.shape[1:])).all(1)


class FrameStore:
    """A ring of `capacity` frames addressed by ids: id f sits in slot f % capacity + 1 until `capacity` newer frames
    are written; slot 0 is the blank frame. Each of `num_envs` env rows remembers its last stack of ids."""

    def __init__(self, capacity: int, frame_shape: tuple, stack: int, num_envs: int):
        self.capacity, self.stack, self.num_envs = int(capacity), int(stack), int(num_envs)
        self.frames = np.zeros((self.capacity + 1, *frame_shape), np.uint8)
        self.next_id = 0
        self.last = np.zeros((self.num_envs, self.stack), np.int64)  # each row's newest stack: its last next_obs
        self.has_last = np.zeros(self.num_envs, bool)

    def encode(self, obs, next_obs, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """The id stacks [count, stack] of obs and next_obs, writing only the frames not stored yet. Transition i
        belongs to env row rows[i] (by default row i: a vector env's env i) and continues that row's previous stack
        where obs equals the row's last next_obs."""
        obs, next_obs = np.asarray(obs, np.uint8), np.asarray(next_obs, np.uint8)
        count = len(obs)
        if rows is None:
            if count > self.num_envs:
                raise ValueError(f"frame store sized for {self.num_envs} envs got {count} transitions in one add "
                                 f"(build the memory with num_envs >= {count})")
            rows = slice(0, count)
        else:
            rows = env_rows(rows, count)
            if rows.max(initial=-1) >= self.num_envs:
                raise ValueError(f"frame store sized for {self.num_envs} envs got env row {rows.max()} "
                                 f"(build the memory with num_envs > {rows.max()})")
        last = self.last[rows]
        same = self.has_last[rows].copy()
        if same.any():
            known = np.flatnonzero(same)
            same[known] = _rows_equal(self.decode(last[known]), obs[known])
        obs_ids = np.empty((count, self.stack), np.int64)
        obs_ids[same] = last[same]
        obs_ids[~same] = self.write(obs[~same])
        shifted = _rows_equal(next_obs[:, :-1], obs[:, 1:])
        next_ids = np.empty_like(obs_ids)
        next_ids[shifted, :-1] = obs_ids[shifted, 1:]
        next_ids[shifted, -1:] = self.write(next_obs[shifted, -1:])
        next_ids[~shifted] = self.write(next_obs[~shifted])
        self.last[rows], self.has_last[rows] = next_ids, True
        return obs_ids, next_ids

    def forget(self, rows) -> None:
        """Env rows `rows` (distinct ints below `num_envs`) start fresh stacks: their next obs is written as new
        frames, never linked to the frames they sent before (their env restarted, or steps were dropped). The frames
        already stored stay, for the transitions that hold them."""
        rows = closing_rows(rows)
        if rows.max(initial=-1) >= self.num_envs:
            raise ValueError(f"frame store sized for {self.num_envs} envs got env row {rows.max()} to close")
        self.has_last[rows] = False

    def write(self, stacks: np.ndarray) -> np.ndarray:
        """Store frames [k, m, H, W]; their ids [k, m] (BLANK for all-zero frames, which take no slot)."""
        flat = stacks.reshape(-1, *self.frames.shape[1:])
        ids = np.full(len(flat), BLANK, np.int64)
        real = np.flatnonzero(flat.reshape(len(flat), math.prod(flat.shape[1:])).any(1))
        new = self.next_id + np.arange(len(real), dtype=np.int64)
        self.frames[new % self.capacity + 1] = flat[real]
        ids[real] = new
        self.next_id += len(real)
        return ids.reshape(stacks.shape[:2])

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """The frames [..., H, W] of ids [...]."""
        return self.frames[np.where(ids == BLANK, 0, ids % self.capacity + 1)]

    def lost(self, ids: np.ndarray) -> np.ndarray:
        """For id stacks [B, stack]: whether a frame of the stack has been overwritten since."""
        return ids.min(axis=1) < self.next_id - self.capacity

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        """The frames as a view, not a copy (torch.from_numpy shares the array; torch.save streams it), so saving
        does not double the memory's RAM; save it before the memory changes again."""
        used = min(self.next_id, self.capacity)
        return {"frames": torch.from_numpy(self.frames[: used + 1]), "next_id": self.next_id,
                "capacity": self.capacity}

    def load_state_dict(self, state: dict) -> None:
        """Restore the frames; every env row starts a fresh stack (a resumed run restarts its envs)."""
        if int(state["capacity"]) != self.capacity or state["frames"].shape[1:] != self.frames.shape[1:]:
            raise ValueError(f"checkpointed frame store holds {int(state['capacity'])} frames of "
                             f"{tuple(state['frames'].shape[1:])}, this one {self.capacity} of "
                             f"{self.frames.shape[1:]} (buffer_size, num_envs and n_step must match)")
        frames = state["frames"].numpy()
        self.frames[: len(frames)] = frames
        self.next_id = int(state["next_id"])
        self.has_last[:] = False
