"""Elite experience replay's ranking machinery (elite_buffer_vtrace's elite sampling and insertion).

A replayed sequence is ranked by how far the current model's features of its states (the target features) have moved
from those the worker recorded while acting (the behaviour features): its "off-policiness". This file holds the parts
that know nothing of buffers or models, so the `elite` memory (and elite_buffer_vtrace's attentive sampling, which ranks
by the distance to the newest state with the same pool and strategies) can share them:
- the distance functions, one batched computation over [B, T, F] feature tensors;
- `EliteSampler`: the uniform pool of lambda * k candidates, lambda annealed to 1 (plain uniform replay), and the four
  selection strategies, reproducing the published `EliteSampleStrategy.sample` (with a guard where it hangs);
- elite insertion's choice of the slot to overwrite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from rl.errors import ConfigError

STRATEGIES = ("strategy1", "strategy2", "strategy3", "strategy4")


def ln_norm(behaviour: torch.Tensor, target: torch.Tensor, p: float = 2.0) -> torch.Tensor:
    """The p-norm of each sequence's flattened feature difference: `torch.dist` per sequence, [B, T, F] -> [B]."""
    return torch.linalg.vector_norm((target - behaviour).flatten(1), ord=p, dim=1)


def cos_dist(behaviour: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The cosine *similarity* (not a distance) of each sequence's flattened features, [B, T, F] -> [B].

    Kept as the published code has it: selection sorts ascending, so with this function the *least* similar (most
    off-policy) sequences come first, and elite insertion evicts the *most* similar one.
    """
    return F.cosine_similarity(target.flatten(1), behaviour.flatten(1), dim=1, eps=1e-6)


def kl_div(behaviour: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Sum over steps of KL(Cat(logits=target_t) || Cat(logits=behaviour_t)), the features taken as logits,
    [B, T, F] -> [B]."""
    log_p, log_q = F.log_softmax(target, dim=-1), F.log_softmax(behaviour, dim=-1)
    p = log_p.exp()
    terms = (p * (log_p - log_q)).masked_fill(p == 0, 0.0)  # 0 log 0 = 0, as torch.distributions has it
    return terms.sum(dim=(1, 2))


DISTANCES: dict[str, Callable[..., torch.Tensor]] = {"ln_norm": ln_norm, "cos_dist": cos_dist, "kl_div": kl_div}


def distance_fn(name: str, p: float = 2.0) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The distance `name` as f(behaviour, target) -> [B]; `p` (elite_buffer_vtrace's `p` key) is used by `ln_norm`
    only."""
    if name not in DISTANCES:
        raise ConfigError(f"unknown dist_function {name!r}: valid: {', '.join(DISTANCES)}")
    if name == "ln_norm":
        return lambda behaviour, target: ln_norm(behaviour, target, p)
    return DISTANCES[name]


def _numpy(values) -> np.ndarray:
    """Distances as float64 numpy, from a tensor (any device) or a sequence, without a float32 round trip."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


class Pool(NamedTuple):
    """A draw of candidate slots: `uniform` when lambda has reached 1 and `indices` is already the batch share."""

    indices: np.ndarray
    uniform: bool


class EliteSampler:
    """The lambda pool with its annealing, and strategies 1-4 over the ranked pool (as elite_buffer_vtrace's
    `EliteSampleStrategy`).

    Use: `draw = pool(n_valid)`; if `draw.uniform`, the share is `draw.indices`; else compute the distance of every
    entry of `draw.indices` (duplicates included) and call `select(draw.indices, distances, counters[draw.indices])`.
    Incrementing the sampling counters of what was selected is the memory's job.
    """

    def __init__(self, k: int, lambda_batch_multiplier: float, alfa_annealing_factor: float, lr_scheduler_steps: int,
                 strategy: str = "strategy3", rng: np.random.Generator | None = None):
        if k < 1:
            raise ConfigError(f"elite sampling needs a share of at least 1 sequence, got k={k}")
        if lambda_batch_multiplier < 1:
            raise ConfigError(f"lambda_batch_multiplier must be >= 1, got {lambda_batch_multiplier}")
        if alfa_annealing_factor <= 0 or lr_scheduler_steps < 1:
            raise ConfigError(f"alfa_annealing_factor must be > 0 and lr_scheduler_steps >= 1, got "
                              f"{alfa_annealing_factor} and {lr_scheduler_steps}")
        if strategy not in STRATEGIES:
            raise ConfigError(f"unknown elite_sampling_strategy {strategy!r}: valid: {', '.join(STRATEGIES)}")
        self.k, self.lam0, self.strategy = int(k), float(lambda_batch_multiplier), strategy
        self.anneal_calls = float(lr_scheduler_steps) * float(alfa_annealing_factor)
        self.rng = rng if rng is not None else np.random.default_rng()
        self.calls = 0

    @property
    def lam(self) -> float:
        """lambda after `calls` pool draws: max(1, lam0 - calls * (lam0 - 1) / (steps * alfa)).

        Computed from the count rather than by the published repeated subtraction, so it is exactly 1 from call
        steps * alfa on (the subtraction can leave 1 + 1e-15 for one more call) and the state is one integer.
        """
        frac = self.calls / self.anneal_calls
        return 1.0 if frac >= 1.0 else self.lam0 - (self.lam0 - 1.0) * frac

    def pool(self, n_valid: int) -> Pool:
        """Anneal lambda one step, then draw int(lambda * k) of the first `n_valid` slots uniformly with replacement."""
        self.calls += 1
        lam = self.lam
        indices = self.rng.choice(n_valid, int(lam * self.k))
        return Pool(indices.astype(np.int64), lam == 1.0)

    def select(self, indices, distances, counters) -> np.ndarray:
        """The k slots the strategy picks from the pool, in order.

        `indices` is the pool (duplicates included), `distances` and `counters` (the sampling counters, >= 1) are
        aligned with it. As the published code: the unique indices are ranked by ascending distance (ties in order of
        first appearance); `g = int(unique / k)`. strategy1 takes the first k entries, an index drawn m times counting
        m times; strategy2 every g-th unique index; strategy3 the unique indices by counter 1, 2, 3, ..., ties to the
        lower distance; strategy4 from each of the first k consecutive groups of g the lowest counter, ties to the
        lower distance.
        Guard (the published strategy3 loops forever and strategies 2 and 4 divide by zero when the pool holds fewer
        than k unique indices): g is taken as at least 1, and when a strategy picks fewer than k, its picks are
        repeated in order until there are k.
        """
        indices = np.asarray(indices, dtype=np.int64)
        distances = _numpy(distances)
        counters = np.asarray(counters)
        uniq, first, mult = np.unique(indices, return_index=True, return_counts=True)
        appearance = np.argsort(first, kind="stable")  # the published dict's insertion order
        order = appearance[np.argsort(distances[first][appearance], kind="stable")]
        ranked, count, mult = uniq[order], counters[first][order], mult[order]
        k, n = self.k, len(ranked)
        g = max(1, n // k)
        if self.strategy == "strategy1":
            picks = np.repeat(ranked, mult)[:k]
        elif self.strategy == "strategy2":
            picks = ranked[::g][:k]
        elif self.strategy == "strategy3":
            picks = ranked[np.lexsort((np.arange(n), count))][:k]
        else:
            groups = min(k, n // g)
            lowest = count[: groups * g].reshape(groups, g).argmin(axis=1)  # the first lowest: the lower distance
            picks = ranked[np.arange(groups) * g + lowest]
        return np.resize(picks, k) if 0 < len(picks) < k else picks

    def state_dict(self) -> dict:
        """The annealing count (lambda follows from it) and the generator's state: plain numbers."""
        return {"calls": self.calls, "lambda": self.lam, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])
        self.rng.bit_generator.state = state["rng"]


def insertion_candidates(rng: np.random.Generator, n_valid: int, elite_batch_size: int = 20) -> np.ndarray:
    """Elite insertion's candidates: `elite_batch_size` slots without replacement (all of them if fewer are held,
    where the published code raises)."""
    return rng.choice(n_valid, min(elite_batch_size, n_valid), replace=False).astype(np.int64)


def eviction_index(candidates, distances) -> int:
    """The candidate to overwrite: the one with the largest distance, the most off-policy (the first on ties, as the
    published stable sort)."""
    distances = _numpy(distances)
    return int(np.asarray(candidates)[int(np.argmax(distances))])
