"""Mixed memories: several buffers, each filled with every transition, a batch drawn from each by its `sample_ratio`
(the elite_buffer_vtrace platform's `--replay_parameters`; with a fresh `queue` and a
`replay`, CLEAR's half-fresh, half-replayed batches, Rolnick et al. 2019).

`replay_parameters` is one JSON string, a list of buffers:
    [{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "replay", "capacity": 1000, "sample_ratio": 0.5}]
`type` is a memory registry key (replay, prioritized, attentive, queue; the platform's "standard" means replay),
`capacity` >= 1 and the ratios sum to 1. Any other key is a setting for that buffer alone (e.g. "per_alpha": 0.7).
A batch of k is cut into shares by largest remainder so it holds exactly k items, concatenated in the listed order;
each share keeps its buffer's importance weights. Priority updates are routed back to the buffers that have them.
"""

from __future__ import annotations

import json
import math

import torch

from rl.errors import ConfigError
from rl.memory.replay import Transitions
from rl.registry import memory

ALIASES = {"standard": "replay"}
REQUIRED = ("type", "capacity", "sample_ratio")


def parse_replay_parameters(text: str, hp=None) -> list[dict]:
    """The validated list of buffer specs in `text`; a ConfigError saying what is wrong otherwise."""
    example = '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, {"type": "replay", "capacity": 1000, ' \
              '"sample_ratio": 0.5}]'
    try:
        specs = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"replay_parameters is not valid JSON ({exc}); expected e.g. {example}") from None
    if not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs):
        raise ConfigError(f"replay_parameters must be a non-empty JSON list of objects, e.g. {example}")
    valid = sorted(n for n in memory.names() if n not in ("mixed", "rollout"))
    out = []
    for i, spec in enumerate(specs):
        missing = [k for k in REQUIRED if k not in spec]
        if missing:
            raise ConfigError(f"replay_parameters[{i}] lacks {', '.join(missing)}: each buffer needs "
                              f"type, capacity and sample_ratio")
        kind = ALIASES.get(spec["type"], spec["type"])
        if kind not in valid:
            raise ConfigError(f"replay_parameters[{i}]: unknown buffer type {spec['type']!r}: valid: "
                              f"{', '.join(valid)}")
        capacity, ratio = spec["capacity"], spec["sample_ratio"]
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"replay_parameters[{i}]: capacity must be an integer >= 1, got {capacity!r}")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ConfigError(f"replay_parameters[{i}]: sample_ratio must be a number in [0, 1], got {ratio!r}")
        extra = {k: v for k, v in spec.items() if k not in REQUIRED}
        if hp is not None:
            for key in extra:
                if key not in hp:
                    raise ConfigError(f"replay_parameters[{i}]: {key!r} is neither type, capacity, sample_ratio "
                                      f"nor a setting")
        out.append({"type": kind, "capacity": capacity, "sample_ratio": float(ratio), "settings": extra})
    total = sum(s["sample_ratio"] for s in out)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ConfigError(f"replay_parameters: the sample_ratios must sum to 1, they sum to {total:g}")
    return out


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
        specs = parse_replay_parameters(hp.replay_parameters, hp)
        buffers = []
        for i, spec in enumerate(specs):
            sub_hp = hp.copy().update(spec["settings"]) if spec["settings"] else hp
            kind = memory[spec["type"]]
            buffers.append(kind.build(sub_hp, obs_space, action_space, seed=seed + 1000 * i,
                                      capacity=spec["capacity"]))
        return cls(buffers, [s["sample_ratio"] for s in specs])

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
            weights = torch.cat([torch.ones(len(p.obs), device=p.obs.device) if p.weights is None else p.weights
                                 for p in parts])
        return Transitions(**{name: weights if name == "weights" else torch.cat([getattr(p, name) for p in parts])
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

