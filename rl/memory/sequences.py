"""Sequence replay for V-trace agents: buffers that hold whole worker rollouts (as elite_buffer_vtrace's), one buffer
per entry of `--replay_parameters`, a batch composed from them by ratio.

A stored item is one env's rollout of T steps, kept with the same information as `RolloutMemory`: the T acted
observations and each step's real next observation (the final one where an episode ended), actions, rewards,
behaviour log-probabilities, values, terminated and done flags, per-step behaviour feature vectors [T, F] and
optionally behaviour logits [T, A] (for CLEAR's policy cloning). A batch (`SequenceBatch`) is time-major: `obs`
[T+1, k] holds the acted observations plus the bootstrap one (the next observation of step T-1, the final one if it
ended an episode); a step t < T-1 that ended an episode has its final observation in `final_obs`, at `final_at`
(t, b), so V-trace can bootstrap a truncation from it (`next_values`) while `dones` cuts the trace there: nothing
crosses an episode start unflagged.

Observations are stored as rows, each kept once per item: a frame stack [S, H, W] (uint8, 3-d: Atari) as S frame rows
shared with the neighbouring stacks, any other observation as one row. Sharing is decided by value, as frames.py
does (obs[t+1] == next_obs[t], next_obs[t][:-1] == obs[t][1:]), never assumed from done flags, so what `gather`
rebuilds is exactly what `add` was given, across resets too; all-zero rows map to one blank row. An item owns a block
of T + S rows (what a rollout without a reset needs); the rows beyond it (a reset inside the sequence) come from a
shared overflow area freed when the item is overwritten, so any slot can be overwritten (elite insertion) without
touching another item's frames.

Buffers (all sample with the generator given, so a run with a checkpointed generator samples the same after resume):
- `queue`: FIFO; `sample(k)` removes and returns the k oldest. It holds max(capacity, k) items, so a capacity-1 queue
  (elite_buffer_vtrace's fresh share) can serve k > 1: the published writer blocks on a full queue while the learner
  takes one at a time, here rollouts arrive between batches and the oldest beyond that is dropped.
- `standard`: circular, uniform with replacement.
- `custom`: circular plus sampling counters (1 on store, +1 per draw), elite or attentive sampling through
  `EliteSampler`, optional elite insertion. `dist_function=random` (ours, the elite-against-uniform experiment's
  ablation) ranks by uniform random distances and reads no features, so strategy3 orders by the sampling counter alone.
  After a ranked draw, `diagnostics` holds the mean distance of the chosen sequences and of the whole pool. The buffer
  stays model-free: the caller passes `features_for(obs)`, mapping time-major observations [t, n, ...] to the current
  model's features [t, n, F]; one batched call per sample covers the whole pool (its unique slots).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from rl.memory.elite_sampling import EliteSampler, distance_fn, eviction_index, insertion_candidates
from rl.memory.replay_parameters import CustomReplaySpec, ReplaySpec, fill_in_amount, shares

FeaturesFor = Callable[[torch.Tensor], torch.Tensor]  # obs [t, n, ...] -> current features [t, n, F]
SCALARS = ("rewards", "log_probs", "values", "terminated", "dones")


class Sequences(NamedTuple):
    """Rollouts to store, time-major [T, N, ...] as a worker's `RolloutMemory` holds them (N envs, N items).
    `next_obs[t]` is the real next observation (the final one where step t ended an episode)."""

    obs: np.ndarray | torch.Tensor
    next_obs: np.ndarray | torch.Tensor
    actions: np.ndarray | torch.Tensor
    rewards: np.ndarray | torch.Tensor
    log_probs: np.ndarray | torch.Tensor
    values: np.ndarray | torch.Tensor
    terminated: np.ndarray | torch.Tensor
    dones: np.ndarray | torch.Tensor  # terminated | truncated
    features: np.ndarray | torch.Tensor  # [T, N, F] behaviour features of the acted observations
    logits: np.ndarray | torch.Tensor | None = None  # [T, N, A] behaviour logits (CLEAR), optional


def from_rollout(mem, features, logits=None, columns: slice = slice(None)) -> Sequences:
    """The env columns of a full `RolloutMemory` (a worker's shipment) as sequences, with the features (and logits)
    the worker recorded while acting."""
    f = {name: getattr(mem, name)[: mem.pos, columns] for name in ("obs", "next_obs", "actions", *SCALARS)}
    return Sequences(f["obs"], f["next_obs"], f["actions"], f["rewards"], f["log_probs"], f["values"],
                     f["terminated"], f["dones"], features, logits)


class SequenceBatch(NamedTuple):
    """k sequences, time-major. `final_obs` [m, ...] are the final observations of the steps t < T-1 that ended an
    episode, `final_at` [m, 2] their (t, b); the next observation of any other step t is obs[t + 1]."""

    obs: torch.Tensor  # [T+1, k, ...]
    actions: torch.Tensor  # [T, k, ...]
    rewards: torch.Tensor  # [T, k] float32
    log_probs: torch.Tensor
    values: torch.Tensor
    terminated: torch.Tensor  # float32 0/1
    dones: torch.Tensor  # float32 0/1
    features: torch.Tensor  # [T, k, F] float32
    final_obs: torch.Tensor
    final_at: torch.Tensor  # int64
    logits: torch.Tensor | None = None


def next_values(values: torch.Tensor, final_values: torch.Tensor, final_at: torch.Tensor) -> torch.Tensor:
    """V of each step's real next observation [T, k], from V(obs) [T+1, k] and V(final_obs) [m]: a truncated step
    bootstraps from its final observation, as RolloutMemory's steps do (terminated ones are masked by the loss)."""
    out = values[1:].clone()
    if len(final_at):
        out[final_at[:, 0], final_at[:, 1]] = final_values.to(out.dtype)
    return out


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _rows_equal(a: np.ndarray, b: np.ndarray, lead: int) -> np.ndarray:
    """Whether a and b are equal over everything after their `lead` leading dims."""
    return (a == b).reshape(*a.shape[:lead], -1).all(-1)


def _item_fields(item: Sequences) -> dict[str, np.ndarray]:
    """Env-major numpy fields [N, T, ...]; a single env's rollout ([T] rewards) becomes N = 1."""
    single = _np(item.rewards).ndim == 1
    out = {}
    for name, value in item._asdict().items():
        if value is None:
            continue
        value = _np(value)
        out[name] = value[:, None] if single else value
        out[name] = np.swapaxes(out[name], 0, 1)
    return out


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


class SequenceBuffer:
    """A circular buffer of `capacity` rollouts (elite_buffer_vtrace's `standard`: uniform with replacement); the base
    of the others. `sample` returns slot indices, `gather` the batch: gather before the next `add` (a queue's slots are
    reused)."""

    def __init__(self, spec: ReplaySpec, T: int, obs_shape: tuple, obs_dtype, batch_size: int, seed: int = 0,
                 **store_kw):
        self.spec, self.capacity, self.batch_size = spec, int(spec.capacity), int(batch_size)
        self.share = round(batch_size * spec.sample_ratio)  # whole (`shares` refuses others)
        self.store = SequenceStore(self._slots(), T, obs_shape, obs_dtype, **store_kw)
        self.size = self.pos = self.written = 0
        self.newest = -1  # the slot of the most recent rollout (attentive sampling's query)
        self.rng = np.random.default_rng(seed)  # this buffer's own draws (elite insertion)

    def _slots(self) -> int:
        return self.capacity

    def __len__(self) -> int:
        return self.size

    def ready(self, batch_size: int, training_fill_in_factor: float = 0.2) -> bool:
        """Whether it holds its fill-in amount (`fill_in_amount`) and its share of a batch."""
        need = fill_in_amount(self.spec, batch_size, training_fill_in_factor)
        return self.size >= max(need, 1)

    def add(self, item: Sequences, features_for: FeaturesFor | None = None) -> np.ndarray:
        """Store N env-rollouts (one if a single env's [T] fields); the slots written."""
        fields = _item_fields(item)
        n = len(fields["rewards"])
        keep = min(n, self.store.slots)  # an add larger than the buffer keeps its last rollouts
        fields = {name: arr[n - keep:] for name, arr in fields.items()}
        slots = self._place(keep, fields, features_for)
        if len(slots):
            self.newest = int(slots[-1])
        self.written += keep
        return slots

    def _place(self, n: int, fields: dict, features_for) -> np.ndarray:
        slots = (self.pos + np.arange(n)) % self.capacity
        self.store.write(slots, fields)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return slots

    def sample(self, k: int, rng: np.random.Generator, features_for: FeaturesFor | None = None) -> np.ndarray:
        """k slots uniformly with replacement (`np.random.choice(n, k)`, as published)."""
        if self.size == 0:
            raise ValueError(f"cannot sample from an empty {self.spec.type} buffer")
        return rng.choice(self.size, k).astype(np.int64)

    def gather(self, indices) -> SequenceBatch:
        return self.store.gather(indices)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        filled = min(self.written, self.store.slots)
        return {"type": self.spec.type, "capacity": self.capacity, "T": self.store.T, "size": self.size,
                "pos": self.pos, "written": self.written, "newest": self.newest,
                "rng": self.rng.bit_generator.state, "store": self.store.state_dict(filled)}

    def load_state_dict(self, state: dict) -> None:
        if state["type"] != self.spec.type or int(state["capacity"]) != self.capacity or state["T"] != self.store.T:
            raise ValueError(f"checkpointed {state['type']} buffer of {state['capacity']} rollouts of {state['T']} "
                             f"steps does not match this {self.spec.type} buffer of {self.capacity} of {self.store.T}")
        self.size, self.pos, self.written = int(state["size"]), int(state["pos"]), int(state["written"])
        self.newest = int(state["newest"])
        self.rng.bit_generator.state = state["rng"]
        self.store.load_state_dict(state["store"], min(self.written, self.store.slots))


class QueueBuffer(SequenceBuffer):
    """elite_buffer_vtrace's `queue`: FIFO, `sample(k)` removes and returns the k oldest. Holds max(capacity, share)
    rollouts (dropping the oldest beyond), and is ready once it holds that many: a capacity-1 queue then serves a share
    of 5 from the 5 freshest rollouts, where the published learner would take them one at a time as the writers
    block."""

    def _slots(self) -> int:
        return max(self.capacity, self.share)

    def ready(self, batch_size: int, training_fill_in_factor: float = 0.2) -> bool:
        need = fill_in_amount(self.spec, batch_size, training_fill_in_factor)
        return self.size >= max(need, round(batch_size * self.spec.sample_ratio), 1)

    def _place(self, n: int, fields: dict, features_for) -> np.ndarray:
        slots_total = self.store.slots
        slots = (self.pos + self.size + np.arange(n)) % slots_total  # pos: the oldest held rollout
        self.store.write(slots, fields)
        self.size += n
        if self.size > slots_total:
            self.pos = (self.pos + self.size - slots_total) % slots_total
            self.size = slots_total
        return slots

    def sample(self, k: int, rng: np.random.Generator | None = None,
               features_for: FeaturesFor | None = None) -> np.ndarray:
        if k > self.size:
            raise ValueError(f"queue holds {self.size} rollouts, {k} requested")
        slots = (self.pos + np.arange(k)) % self.store.slots
        self.pos = (self.pos + k) % self.store.slots
        self.size -= k
        return slots.astype(np.int64)


class CustomBuffer(SequenceBuffer):
    """elite_buffer_vtrace's `custom`: circular with sampling counters, uniform, elite or attentive sampling, FIFO or
    elite insertion."""

    def __init__(self, spec: CustomReplaySpec, T: int, obs_shape: tuple, obs_dtype, batch_size: int, seed: int = 0,
                 lr_scheduler_steps: int = 10000, **store_kw):
        super().__init__(spec, T, obs_shape, obs_dtype, batch_size, seed, **store_kw)
        self.counters = np.zeros(self.capacity, np.int64)
        # dist_function=random (the ablation, not elite_buffer_vtrace's): uniform random distances, no features read,
        # so strategy3 ranks by the sampling counter alone and breaks its ties at random
        self.random = spec.dist_function == "random"
        self.distance = None if self.random else distance_fn(spec.dist_function, spec.p)
        self.diagnostics: dict[str, float] = {}  # the last ranked draw's mean distances: selected, and the pool's
        self.sampler = None
        if spec.sample_strategy is not None:
            self.sampler = EliteSampler(self.share, spec.lambda_batch_multiplier, spec.alfa_annealing_factor,
                                        lr_scheduler_steps, spec.elite_sampling_strategy)

    def _place(self, n: int, fields: dict, features_for) -> np.ndarray:
        if self.spec.insert_strategy != "elite_insertion":
            slots = super()._place(n, fields, features_for)
            self.counters[slots] = 1
            return slots
        slots = np.empty(n, np.int64)
        for i in range(n):  # one at a time, as published: a later rollout may evict an earlier one's candidates
            one = {name: arr[i: i + 1] for name, arr in fields.items()}
            if self.size < self.capacity:  # FIFO until full
                slots[i] = super()._place(1, one, features_for)[0]
            else:
                if features_for is None and not self.random:
                    raise ValueError("elite insertion into a full buffer needs features_for (the current features)")
                cand = insertion_candidates(self.rng, self.size, self.spec.elite_batch_size)
                distances = self.rng.random(len(cand)) if self.random else self.off_policy(cand, features_for)
                slots[i] = eviction_index(cand, distances)
                self.store.write(slots[i: i + 1], one)
            self.counters[slots[i]] = 1
        return slots

    def off_policy(self, idx: np.ndarray, features_for: FeaturesFor) -> torch.Tensor:
        """Distances of the current features of the T acted observations (the bootstrap one is not scored, as
        published) to the stored behaviour ones, one batched call."""
        target = features_for(self.store.gather_obs(idx, bootstrap=False)).transpose(0, 1).float()
        return self.distance(self.store.features(idx).to(target.device), target)

    def similarity(self, idx: np.ndarray, features_for: FeaturesFor) -> torch.Tensor:
        """Attentive sampling's distances: each candidate's current features [T, F] to those of the newest rollout's
        last acted observation (as published: its features of the T+1 states with the bootstrap one dropped, then the
        last), tiled T times; one batched call covers the candidates and the query."""
        cand = self.store.gather_obs(idx, bootstrap=False)
        query = self.store.gather_obs(np.array([self.newest]), bootstrap=False)[-1]
        flat = torch.cat([cand.flatten(0, 1), query])[None]  # [1, T * n + 1, ...]: one pass
        feats = features_for(flat)[0].float()
        cand = feats[:-1].view(*cand.shape[:2], -1).transpose(0, 1)
        return self.distance(cand, feats[-1].expand_as(cand))

    def sample(self, k: int, rng: np.random.Generator, features_for: FeaturesFor | None = None) -> np.ndarray:
        if self.size == 0:
            raise ValueError("cannot sample from an empty custom buffer")
        if self.sampler is None:
            idx = rng.choice(self.size, k).astype(np.int64)
        else:
            if k != self.sampler.k:
                raise ValueError(f"this buffer's elite share is {self.sampler.k} sequences, {k} requested")
            self.sampler.rng = rng
            draw = self.sampler.pool(self.size)
            if draw.uniform:
                idx = draw.indices
                self.diagnostics = {}
            else:
                uniq, inverse = np.unique(draw.indices, return_inverse=True)
                if self.random:
                    distances = rng.random(len(uniq))[inverse]
                else:
                    if features_for is None:
                        raise ValueError(f"{self.spec.sample_strategy} needs features_for (the current features)")
                    rank = self.off_policy if self.spec.sample_strategy == "elite_sampling" else self.similarity
                    distances = rank(uniq, features_for).double().cpu().numpy()[inverse]
                idx = self.sampler.select(draw.indices, distances, self.counters[draw.indices])
                if not self.random:  # a slot's distance, whichever of its draws: uniq is sorted
                    per_slot = np.empty(len(uniq))
                    per_slot[inverse] = distances
                    self.diagnostics = {"selected_distance": float(per_slot[np.searchsorted(uniq, idx)].mean()),
                                        "pool_distance": float(distances.mean())}
        np.add.at(self.counters, idx, 1)
        return idx

    def state_dict(self) -> dict:
        out = super().state_dict()
        out["counters"] = torch.from_numpy(self.counters.copy())
        out["sampler_calls"] = self.sampler.calls if self.sampler is not None else 0
        return out

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.counters[:] = state["counters"].numpy()
        if self.sampler is not None:
            self.sampler.calls = int(state["sampler_calls"])


BUFFERS = {"queue": QueueBuffer, "standard": SequenceBuffer, "custom": CustomBuffer}


def build_buffers(specs: Sequence[ReplaySpec], obs_space, T: int, batch_size: int, action_space=None,
                  feature_dim: int = 512, seed: int = 0, lr_scheduler_steps: int = 10000, **store_kw
                  ) -> list[SequenceBuffer]:
    """One buffer per spec, in the listed order (`shares` checks every share is at least one sequence)."""
    shares(tuple(specs), batch_size)
    if action_space is not None:
        store_kw.setdefault("action_shape", tuple(action_space.shape))
        store_kw.setdefault("action_dtype", action_space.dtype)
    out = []
    for i, spec in enumerate(specs):
        kw = dict(store_kw, feature_dim=feature_dim)
        if spec.type == "custom":
            kw["lr_scheduler_steps"] = lr_scheduler_steps
        out.append(BUFFERS[spec.type](spec, T, tuple(obs_space.shape), obs_space.dtype, batch_size,
                                      seed=int(np.random.SeedSequence([seed, i]).generate_state(1)[0]), **kw))
    return out


def concat(batches: Sequence[SequenceBatch]) -> SequenceBatch:
    """Batches joined along the batch dimension, in order (final_at's b offset by the sequences before)."""
    offsets = np.cumsum([0] + [b.obs.shape[1] for b in batches[:-1]])
    final_at = torch.cat([b.final_at + torch.tensor([0, int(o)]) for b, o in zip(batches, offsets)])
    fields = {}
    for name in SequenceBatch._fields:
        parts = [getattr(b, name) for b in batches]
        if name == "final_at":
            fields[name] = final_at
        elif name == "logits" and any(p is None for p in parts):
            fields[name] = None
        else:
            fields[name] = torch.cat(parts, 0 if name == "final_obs" else 1)
    return SequenceBatch(**fields)


def ready(buffers: Sequence[SequenceBuffer], batch_size: int, training_fill_in_factor: float = 0.2) -> bool:
    return all(b.ready(batch_size, training_fill_in_factor) for b in buffers)


def compose(buffers: Sequence[SequenceBuffer], batch_size: int, rng: np.random.Generator,
            features_for: FeaturesFor | None = None, training_fill_in_factor: float = 0.2) -> SequenceBatch | None:
    """One batch: each buffer's share (`shares`) drawn and gathered in the listed order; None until every buffer
    holds its fill-in amount."""
    if not ready(buffers, batch_size, training_fill_in_factor):
        return None
    counts = shares(tuple(b.spec for b in buffers), batch_size)
    return concat([b.gather(b.sample(k, rng, features_for=features_for)) for b, k in zip(buffers, counts)])


def naive_bytes_per_step(obs_shape: tuple, obs_dtype, T: int) -> float:
    """Observation bytes per step when every item keeps its T+1 whole observations (elite_buffer_vtrace's `states`)."""
    return (T + 1) * math.prod(obs_shape) * np.dtype(obs_dtype).itemsize / T
