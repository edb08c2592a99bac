"""Sequence replay's buffers, one per entry of `--replay_parameters` (`build_buffers`), each over its own
`SequenceStore` (sequence_store.py), and a batch composed from them by ratio (`compose`).

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

from collections.abc import Callable, Sequence

import numpy as np
import torch

from rl.memory.elite_sampling import EliteSampler, distance_fn, eviction_index, insertion_candidates
from rl.memory.replay_parameters import CustomReplaySpec, ReplaySpec, fill_in_amount, shares
from rl.memory.sequence_store import SequenceStore
from rl.memory.sequences import SequenceBatch, Sequences, concat

FeaturesFor = Callable[[torch.Tensor], torch.Tensor]  # obs [t, n, ...] -> current features [t, n, F]


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


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
