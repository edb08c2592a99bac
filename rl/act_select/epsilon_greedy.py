"""Epsilon-greedy exploration with a linear schedule (Mnih et al. 2015), Ape-X's fixed epsilon per collection worker
(Horgan et al. 2018), and the greedy policy.

Each takes the legal actions `mask` [n, A] (bool) of an env with an action mask (None: every action is legal): the
greedy action is the best legal one and a random action is uniform over the legal ones, so no illegal action is
ever picked. The Q networks already give illegal actions the lowest value (rl/models/multi_input.py); the mask here
makes exploration, which needs no network, legal too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rl.errors import ConfigError
from rl.registry import act_select

QValues = torch.Tensor | np.ndarray | Callable[[], torch.Tensor | np.ndarray]


def _values(q_values: QValues) -> torch.Tensor | np.ndarray:
    """Action values given as a tensor or array, or as a function that computes them (called only when needed)."""
    return q_values() if callable(q_values) else q_values


def _argmax(q_values: torch.Tensor | np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The first maximal (legal, where `mask` is given) action of each row, as numpy (torch's and numpy's argmax
    agree on ties)."""
    if isinstance(q_values, torch.Tensor):
        if mask is None:
            return q_values.argmax(dim=-1).cpu().numpy()
        q_values = q_values.detach().float().cpu().numpy()
    if mask is not None:
        q_values = np.where(mask, q_values, -np.inf)
    return q_values.argmax(-1)


def uniform_actions(rng: np.random.Generator, num_actions: int, n: int, mask: np.ndarray | None = None) -> np.ndarray:
    """`n` actions drawn uniformly, from the legal ones of each row where `mask` [n, A] is given (a row with no legal
    action draws from all)."""
    if mask is None:
        return rng.integers(0, num_actions, n)
    mask = mask | ~mask.any(-1, keepdims=True)
    return np.where(mask, rng.random((n, num_actions)), -1.0).argmax(-1)  # argmax of uniforms: uniform over them


@act_select.register("greedy")
class Greedy:
    """argmax of the action values; used for evaluation."""

    def __init__(self, hp=None, num_actions: int = 0, seed: int = 0):
        pass

    @classmethod
    def build(cls, hp, num_actions: int, seed: int = 0) -> Greedy:
        return cls(hp, num_actions, seed)

    def __call__(self, q_values: QValues, step: int = 0, n: int | None = None,
                 mask: np.ndarray | None = None) -> np.ndarray:
        return _argmax(_values(q_values), mask)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@act_select.register("epsilon_greedy")
class EpsilonGreedy:
    """With probability epsilon a uniform random action, else the greedy one. Epsilon falls linearly from
    `initial_eps` to `final_eps` over the first `fraction * total_steps` environment steps."""

    def __init__(self, num_actions: int, total_steps: int, fraction: float, initial_eps: float = 1.0,
                 final_eps: float = 0.05, seed: int = 0):
        self.num_actions = num_actions
        self.decay_steps = max(1.0, fraction * total_steps)
        self.initial_eps, self.final_eps = initial_eps, final_eps
        self.rng = np.random.default_rng(seed)

    @classmethod
    def build(cls, hp, num_actions: int, seed: int = 0) -> EpsilonGreedy:
        return cls(num_actions, hp.train_steps, hp.exploration_fraction, hp.exploration_initial_eps,
                   hp.exploration_final_eps, seed)

    def epsilon(self, step: int) -> float:
        progress = min(1.0, step / self.decay_steps)
        return self.initial_eps + progress * (self.final_eps - self.initial_eps)

    def __call__(self, q_values: QValues, step: int, n: int | None = None,
                 mask: np.ndarray | None = None) -> np.ndarray:
        """Actions for `n` envs (default: the rows of `q_values`), legal ones where `mask` is given. A callable
        `q_values` is skipped when every env explores, which saves the network's forward pass for most of the early,
        high-epsilon steps."""
        if n is None:
            q_values = _values(q_values)
            n = len(q_values)
        explore = self.rng.random(n) < self.epsilon(step)
        k = int(explore.sum())
        random_actions = (uniform_actions(self.rng, self.num_actions, k, None if mask is None else mask[explore])
                          if k else None)
        if k == n:
            return random_actions
        actions = _argmax(_values(q_values), mask)
        if k:
            actions[explore] = random_actions
        return actions

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def apex_epsilon(base: float, alpha: float, rank: int, count: int) -> float:
    """Ape-X's epsilon of actor `rank` of `count`: base ** (1 + alpha * rank / (count - 1)) (Horgan et al. 2018, with
    base 0.4 and alpha 7); one actor has `base`. From `base` down to base ** (1 + alpha): some actors explore widely,
    others hardly, and the replay memory holds both."""
    if not 0 <= rank < count:
        raise ValueError(f"rank {rank} is not one of {count} workers")
    return base ** (1 + alpha * rank / (count - 1)) if count > 1 else base


def fixed_worker_epsilon(hp, rank: int, count: int) -> float | None:
    """Collection worker `rank`'s own fixed epsilon where `worker_epsilon` > 0 asks for Ape-X's (`apex_epsilon` of
    worker_epsilon and worker_epsilon_alpha), else None: the workers follow the learner's linear schedule (the step
    count travels with the weights)."""
    base = hp.worker_epsilon if "worker_epsilon" in hp else 0.0
    if base <= 0:
        return None
    if hp.act_select != "epsilon_greedy":
        raise ConfigError(f"worker_epsilon={base:g} gives each collection worker a fixed epsilon, which needs "
                          f"act_select=epsilon_greedy (got {hp.act_select!r}): set worker_epsilon=0")
    return apex_epsilon(base, hp.worker_epsilon_alpha, rank, count)
