"""Proportional prioritized experience replay (Schaul et al. 2016, "Prioritized Experience Replay", ICLR).

Item i is drawn with probability P(i) = p_i / sum_k p_k, where p_i = (|delta_i| + eps)^alpha and delta_i is its last TD
error (for C51, its cross-entropy loss). New items get the largest priority seen so far, so each is replayed at least
about once. The bias is corrected with importance weights w_i = (N P(i))^-beta / max_j w_j, the max taken over the
whole memory (through the min priority), with beta annealed linearly from `per_beta` to 1 over the run
(`train_steps`, counted in transitions received). Sampling is stratified: one draw in each of k equal slices of the
total. Priorities live in a vectorised sum tree (rl/memory/sum_tree.py).

Any off-policy agent uses it by `memory=prioritized`; it calls `update_priorities(batch.indices, td_errors)` after
each gradient step and multiplies its per-item losses by `batch.weights`.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.memory.replay import ReplayMemory, Transitions
from rl.memory.sum_tree import SumTree
from rl.registry import memory


@memory.register("prioritized")
class PrioritizedMemory(ReplayMemory):
    """A ring buffer whose items are sampled in proportion to their priority."""

    UNIFORM = False

    def __init__(self, *args, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, **kwargs):
        super().__init__(*args, **kwargs)
        if alpha < 0 or not 0 <= beta <= 1 or eps < 0:
            raise ValueError(f"need alpha >= 0, 0 <= beta <= 1, eps >= 0; got {alpha}, {beta}, {eps}")
        self.alpha, self.beta0, self.eps = float(alpha), float(beta), float(eps)
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0  # p = (|delta| + eps)^alpha already raised to alpha

    @classmethod
    def options(cls, hp) -> dict:
        return {"alpha": hp.per_alpha, "beta": hp.per_beta, "eps": hp.per_eps}

    @property
    def beta(self) -> float:
        return self.beta0 + (1.0 - self.beta0) * self.progress()

    def _written(self, where, n: int) -> None:
        idx = np.arange(where.start, where.stop) if isinstance(where, slice) else where
        self.tree.update(idx, np.full(n, self.max_priority))

    def sample(self, batch_size: int) -> Transitions:
        if self.size == 0:
            raise ValueError("cannot sample from an empty memory")
        total = self.tree.total
        if total <= 0:  # every priority is zero: nothing to prefer, sample uniformly with unit weights
            return self.gather(self._uniform(batch_size))
        idx = self._redraw_lost(self.tree.sample(batch_size, self.rng),
                                lambda k: self.tree.find(self.rng.random(k) * total))
        probs = self.tree.get(idx) / total
        p_min = self.tree.min / total
        beta = self.beta
        weights = (probs / p_min) ** -beta if p_min > 0 else (probs / probs.min()) ** -beta
        return self.gather(idx, weights)

    def update_priorities(self, indices, td_errors) -> None:
        """p_i = (|td_i| + eps)^alpha for the items just trained on."""
        if isinstance(indices, torch.Tensor):
            indices = indices.cpu().numpy()
        if isinstance(td_errors, torch.Tensor):
            td_errors = td_errors.detach().float().cpu().numpy()
        priorities = (np.abs(np.asarray(td_errors, np.float64)) + self.eps) ** self.alpha
        self.tree.update(indices, priorities)
        self.max_priority = max(self.max_priority, float(priorities.max(initial=0.0)))

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict:
        return {**super().state_dict(), "tree": self.tree.state_dict(self.size), "max_priority": self.max_priority}

    def load_state_dict(self, state: dict) -> None:
        self.tree.load_state_dict(state["tree"])
        self.max_priority = float(state["max_priority"])
        super().load_state_dict(state)  # last: flushed n-step items then get the max priority
