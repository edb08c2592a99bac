"""The storage of sequence replay (sequences.py says what an item is): `SequenceStore` keeps `slots` rollouts of T
steps in preallocated numpy arrays and gives them back as a `SequenceBatch`; a buffer (sequence_buffers.py) decides
which slots to write and draw.

Observations are stored as rows, each kept once per item: a frame stack [S, H, W] (uint8, 3-d: Atari) as S frame rows
shared with the neighbouring stacks, any other observation as one row. Sharing is decided by value, as frames.py
does (obs[t+1] == next_obs[t], next_obs[t][:-1] == obs[t][1:]), never assumed from done flags, so what `gather`
rebuilds is exactly what `add` was given, across resets too; all-zero rows map to one blank row. An item owns a block
of T + S rows (what a rollout without a reset needs); the rows beyond it (a reset inside the sequence) come from a
shared overflow area freed when the item is overwritten, so any slot can be overwritten (elite insertion) without
touching another item's frames.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rl.memory.sequences import SequenceBatch


def _rows_equal(a: np.ndarray, b: np.ndarray, lead: int) -> np.ndarray:
    """Whether a and b are equal over everything after their `lead` leading dims."""
    return (a == b).reshape(*a.shape[:lead], -1).all(-1)


class SequenceStore:
    """`slots` items of T steps in preallocated numpy arrays, observations as rows kept once per item."""

    def __init__(self, slots: int, T: int, obs_shape: tuple, obs_dtype, action_shape: tuple = (),
                 action_dtype=np.int64, feature_dim: int = 512, feature_dtype=np.float32, logits_dim: int | None = None,
                 frame_stack: bool | None = None):
        obs_shape = tuple(obs_shape)
        if frame_stack is None:  # Atari's [S, H, W] uint8 stacks; any other observation is one row
            frame_stack = np.dtype(obs_dtype) == np.uint8 and len(obs_shape) == 3
        self.slots, self.T, self.obs_shape = int(slots), int(T), obs_shape
        self.S = obs_shape[0] if frame_stack else 1
        self.row_shape = obs_shape[1:] if frame_stack else obs_shape
        self.block = self.T + self.S
        self.rows = np.zeros((1 + self.slots * self.block, *self.row_shape), obs_dtype)  # row 0: the blank row
        self.extra = np.zeros((0, *self.row_shape), obs_dtype)  # overflow rows (resets inside a sequence)
        self.extra_owner = np.zeros(0, np.int64)  # the slot holding each overflow row, -1 free
        self.obs_ids = np.zeros((self.slots, self.T, self.S), np.int32)
        self.next_ids = np.zeros((self.slots, self.T, self.S), np.int32)
        n, t = self.slots, self.T
        self.data = {"actions": np.zeros((n, t, *action_shape), action_dtype),
                     "rewards": np.zeros((n, t), np.float32), "log_probs": np.zeros((n, t), np.float32),
                     "values": np.zeros((n, t), np.float32), "terminated": np.zeros((n, t), bool),
                     "dones": np.zeros((n, t), bool), "features": np.zeros((n, t, feature_dim), feature_dtype)}
        if logits_dim is not None:
            self.data["logits"] = np.zeros((n, t, logits_dim), np.float32)

    # ------------------------------------------------------------------ observations as rows
    def _row_ids(self, slots: np.ndarray, obs: np.ndarray, next_obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write the unique rows of N items (obs, next_obs [N, T, ...]) into their slots; their id stacks [N, T, S].

        Positions p = t * 2S + j (obs t, row j) and t * 2S + S + j (next_obs t, row j) point to an earlier equal
        position where the stacks continue each other; pointer jumping finds each position's first occurrence, and
        only those are written."""
        N, T, S = len(slots), self.T, self.S
        obs = obs.reshape(N, T, S, *self.row_shape)
        next_obs = next_obs.reshape(N, T, S, *self.row_shape)
        P = 2 * T * S
        pos_obs = np.arange(T)[:, None] * 2 * S + np.arange(S)
        pos_next = pos_obs + S
        parent = np.tile(np.arange(P), (N, 1))
        if T > 1:  # obs[t+1] continues next_obs[t]: the same stack, whole
            n, t = np.nonzero(_rows_equal(obs[:, 1:], next_obs[:, :-1], 2))
            parent[n[:, None], pos_obs[t + 1]] = pos_next[t]
        if S > 1:  # next_obs[t] shifts obs[t] by one frame
            n, t = np.nonzero(_rows_equal(next_obs[:, :, :-1], obs[:, :, 1:], 2))
            parent[n[:, None], pos_next[t, :-1]] = pos_obs[t, 1:]
        while True:
            grand = np.take_along_axis(parent, parent, 1)
            if np.array_equal(grand, parent):
                break
            parent = grand
        rows = np.stack([obs, next_obs], 2).reshape(N, P, *self.row_shape)
        real = rows.reshape(N, P, -1).any(-1)
        new = (parent == np.arange(P)) & real
        local = np.cumsum(new, 1) - 1
        table = 1 + slots[:, None] * self.block + np.arange(max(1, int(new.sum(1).max(initial=0))))
        ni, pi = np.nonzero(new)
        li = local[ni, pi]
        inside = li < self.block
        self.rows[table[ni[inside], li[inside]]] = rows[ni[inside], pi[inside]]
        if not inside.all():
            over = self._allocate(slots[ni[~inside]])
            self.extra[over] = rows[ni[~inside], pi[~inside]]
            table[ni[~inside], li[~inside]] = len(self.rows) + over
        ids = np.where(np.take_along_axis(real, parent, 1), np.take_along_axis(table, np.take_along_axis(
            local, parent, 1).clip(0), 1), 0)
        return ids[:, pos_obs], ids[:, pos_next]

    def _allocate(self, owners: np.ndarray) -> np.ndarray:
        """Free overflow rows for `owners` (one slot per row), growing the area when it is short."""
        free = np.flatnonzero(self.extra_owner < 0)
        if len(free) < len(owners):
            grow = max(len(owners) - len(free), len(self.extra_owner), 16)
            self.extra = np.concatenate([self.extra, np.zeros((grow, *self.row_shape), self.extra.dtype)])
            self.extra_owner = np.concatenate([self.extra_owner, np.full(grow, -1, np.int64)])
            free = np.flatnonzero(self.extra_owner < 0)
        free = free[: len(owners)]
        self.extra_owner[free] = owners
        return free

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """The rows [..., *row_shape] of ids [...]."""
        base = len(self.rows)
        out = self.rows[np.minimum(ids, base - 1)]
        over = ids >= base
        if over.any():
            out[over] = self.extra[ids[over] - base]
        return out

    def _obs(self, ids: np.ndarray) -> np.ndarray:
        """Observations [..., *obs_shape] from id stacks [..., S]."""
        return self.decode(ids).reshape(*ids.shape[:-1], *self.obs_shape)

    # ------------------------------------------------------------------ items
    def write(self, slots: np.ndarray, fields: dict[str, np.ndarray]) -> None:
        """Overwrite `slots` (distinct) with env-major item fields [N, T, ...]."""
        if fields["rewards"].shape[1] != self.T:
            raise ValueError(f"sequence buffer holds rollouts of {self.T} steps, got {fields['rewards'].shape[1]}")
        self.extra_owner[np.isin(self.extra_owner, slots)] = -1
        self.obs_ids[slots], self.next_ids[slots] = self._row_ids(slots, fields["obs"], fields["next_obs"])
        for name, arr in self.data.items():
            if name not in fields:
                raise ValueError(f"sequences lack {name!r}, which this buffer stores")
            arr[slots] = fields[name]

    def gather_obs(self, idx: np.ndarray, bootstrap: bool = True) -> torch.Tensor:
        """The T+1 observations (acted ones plus the bootstrap one) of slots idx, time-major [T+1, k, ...]; the T
        acted ones without `bootstrap`."""
        ids = np.concatenate([self.obs_ids[idx], self.next_ids[idx, -1:]], 1) if bootstrap else self.obs_ids[idx]
        return torch.from_numpy(self._obs(ids.swapaxes(0, 1)))

    def gather(self, idx) -> SequenceBatch:
        idx = np.asarray(idx, np.int64)
        b, t = np.nonzero(self.data["dones"][idx, :-1])
        final_obs = torch.from_numpy(self._obs(self.next_ids[idx[b], t]))
        final_at = torch.from_numpy(np.stack([t, b], 1).astype(np.int64).reshape(-1, 2))

        def tm(name, dtype=None):
            arr = np.ascontiguousarray(self.data[name][idx].swapaxes(0, 1))
            return torch.from_numpy(arr if dtype is None else arr.astype(dtype))

        logits = tm("logits") if "logits" in self.data else None
        return SequenceBatch(self.gather_obs(idx), tm("actions"), tm("rewards"), tm("log_probs"), tm("values"),
                             tm("terminated", np.float32), tm("dones", np.float32), tm("features", np.float32),
                             final_obs, final_at, logits)

    def features(self, idx: np.ndarray) -> torch.Tensor:
        """Stored behaviour features [n, T, F] as float32."""
        return torch.from_numpy(self.data["features"][idx].astype(np.float32))

    def bytes_per_step(self) -> float:
        """Storage bytes per stored step (observation rows with their ids, every other field, no overflow)."""
        total = self.rows.nbytes + self.obs_ids.nbytes + self.next_ids.nbytes + sum(a.nbytes for a in
                                                                                    self.data.values())
        return total / (self.slots * self.T)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self, filled: int) -> dict:
        """The first `filled` slots (views, not copies) and the overflow area."""
        out = {"rows": torch.from_numpy(self.rows[: 1 + filled * self.block]),
               "extra": torch.from_numpy(self.extra), "extra_owner": torch.from_numpy(self.extra_owner),
               "obs_ids": torch.from_numpy(self.obs_ids[:filled]), "next_ids": torch.from_numpy(self.next_ids[:filled])}
        out.update({name: torch.from_numpy(arr[:filled]) for name, arr in self.data.items()})
        return out

    def load_state_dict(self, state: dict, filled: int) -> None:
        if state["rows"].shape[1:] != self.rows.shape[1:] or filled > self.slots:
            raise ValueError(f"checkpointed sequences of rows {tuple(state['rows'].shape[1:])} and {filled} slots do "
                             f"not fit this buffer ({self.rows.shape[1:]}, {self.slots} slots)")
        self.rows[: 1 + filled * self.block] = state["rows"].numpy()
        self.extra, self.extra_owner = state["extra"].numpy().copy(), state["extra_owner"].numpy().copy()
        self.obs_ids[:filled], self.next_ids[:filled] = state["obs_ids"].numpy(), state["next_ids"].numpy()
        for name, arr in self.data.items():
            arr[:filled] = state[name].numpy()


def naive_bytes_per_step(obs_shape: tuple, obs_dtype, T: int) -> float:
    """Observation bytes per step when every item keeps its T+1 whole observations (elite_buffer_vtrace's `states`)."""
    return (T + 1) * math.prod(obs_shape) * np.dtype(obs_dtype).itemsize / T
