"""Mixed memories: several buffers, each filled with every transition, a batch drawn from each by its `sample_ratio`
(the elite_buffer_vtrace platform's `--replay_parameters`; with a fresh `queue` and a `replay`, CLEAR's half-fresh,
half-replayed batches, Rolnick et al. 2019).

`replay_parameters` is one JSON string, a list of buffers, parsed by rl/memory/replay_parameters.py (the parser the
V-trace agent's sequence buffers share) with the transition buffers' table:
    [{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "replay", "capacity": 1000, "sample_ratio": 0.5}]
`type` is a memory registry key (replay, prioritized, attentive, queue; the platform's "standard" means replay),
`capacity` >= 1 and the ratios sum to 1. Any other key is a setting for that buffer alone (e.g. "per_alpha": 0.7).
A batch of k is cut into shares by largest remainder so it holds exactly k items, concatenated in the listed order;
each share keeps its buffer's importance weights. Priority updates are routed back to the buffers that have them.
"""

from __future__ import annotations

import math

import torch

from rl.envs.observations import cat
from rl.errors import ConfigError
from rl.memory.replay import Transitions
from rl.memory.replay_parameters import parse_replay_parameters
from rl.registry import memory


def shares(batch_size: int, ratios: list[float]) -> list[int]:
    """Split `batch_size` by `ratios` into integers summing to it (largest remainder, ties to the earlier buffer)."""
    exact = [batch_size * r for r in ratios]
    counts = [int(math.floor(x)) for x in exact]
    order = sorted(range(len(ratios)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: batch_size - sum(counts)]:
        counts[i] += 1
    return counts


@memory.register("mixed")
class MixedMemory:
    """Buffers that all receive every transition; a batch concatenates their shares."""

    def __init__(self, buffers: list, ratios: list[float]):
        self.buffers, self.ratios = buffers, ratios
        self._last_counts: list[int] = []

    @classmethod
    def build(cls, hp, obs_space, action_space, seed: int = 0) -> MixedMemory:
        specs = parse_replay_parameters(hp.replay_parameters, "transitions", hp)
        buffers = []
        for i, spec in enumerate(specs):
            sub_hp = hp.copy().update(spec.settings) if spec.settings else hp
            kind = memory[spec.type]
            buffers.append(kind.build(sub_hp, obs_space, action_space, seed=seed + 1000 * i, capacity=spec.capacity))
        return cls(buffers, [s.sample_ratio for s in specs])

    def __len__(self) -> int:
        """Items available to every share: the smallest buffer that a batch draws from."""
        return min(len(b) for b, r in zip(self.buffers, self.ratios) if r > 0)

    def add(self, *transition, rows=None) -> None:
        for b in self.buffers:
            b.add(*transition, rows=rows)

    def close_rows(self, rows) -> None:
        """End the episodes in flight in env rows `rows` as truncated, in every buffer (ReplayMemory.close_rows)."""
        for b in self.buffers:
            b.close_rows(rows)

    def set_reference(self, obs) -> None:
        for b in self.buffers:
            if hasattr(b, "set_reference"):
                b.set_reference(obs)

    def set_feature_fn(self, fn) -> None:
        for b in self.buffers:
            if hasattr(b, "set_feature_fn"):
                b.set_feature_fn(fn)

    def sample(self, batch_size: int) -> Transitions:
        counts = shares(batch_size, self.ratios)
        parts = [b.sample(c) for b, c in zip(self.buffers, counts) if c > 0]
        self._last_counts = counts
        if all(p.weights is None for p in parts):
            weights = None  # every buffer sampled uniformly
        else:
            weights = torch.cat([torch.ones(len(p.rewards), device=p.rewards.device) if p.weights is None else p.weights
                                 for p in parts])
        return Transitions(**{name: weights if name == "weights" else cat([getattr(p, name) for p in parts])
                              for name in Transitions._fields})

    def update_priorities(self, indices, td_errors) -> None:
        """Route the slices of the last batch to the buffers they came from."""
        start = 0
        for b, c in zip(self.buffers, self._last_counts):
            if c and hasattr(b, "update_priorities"):
                b.update_priorities(indices[start: start + c], td_errors[start: start + c])
            start += c

    def state_dict(self) -> dict:
        return {"buffers": [b.state_dict() for b in self.buffers], "last_counts": list(self._last_counts)}

    def load_state_dict(self, state: dict) -> None:
        if len(state["buffers"]) != len(self.buffers):
            raise ConfigError(f"checkpointed mixed memory has {len(state['buffers'])} buffers, "
                              f"replay_parameters now lists {len(self.buffers)}")
        for b, s in zip(self.buffers, state["buffers"]):
            b.load_state_dict(s)
        self._last_counts = [int(c) for c in state["last_counts"]]

