"""A vectorised sum tree (with a min tree beside it) for proportional prioritized replay (Schaul et al. 2016).

The tree is one flat numpy array of 2 * size nodes, size = capacity rounded up to a power of two: node 1 is the root,
node i has children 2i and 2i+1, and leaf j lives at node size + j (node 0 is unused). Updating k leaves recomputes
their ancestors level by level with k-wide numpy ops (log2(size) levels, never a Python loop over items); a prefix-sum
search descends all k queries at once. The total (root of the sum tree) and the minimum over stored leaves (root of
the min tree, where empty leaves hold +inf) are read in O(1) and kept up to date in O(log n) per update.
Sums are float64 and are recomputed from the children, never adjusted by deltas, so they do not drift.
(Dopamine's `sum_tree.py` and TorchRL's segment trees keep the same layout.)
"""

from __future__ import annotations

import numpy as np
import torch


def next_power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class SumTree:
    """Priorities of `capacity` leaves; `update(idx, p)` sets them, `find(values)` inverts the prefix sum."""

    SCALAR_BELOW = 8  # updates of at most this many leaves take the scalar path

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"sum tree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.size = next_power_of_two(self.capacity)
        self.depth = self.size.bit_length() - 1  # levels below the root
        self.sums = np.zeros(2 * self.size, np.float64)
        self.mins = np.full(2 * self.size, np.inf, np.float64)

    # ------------------------------------------------------------------ reads
    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """The smallest priority among leaves ever set (inf when none is)."""
        return float(self.mins[1])

    def get(self, idx) -> np.ndarray:
        return self.sums[self.size + np.asarray(idx, np.int64)]

    # ------------------------------------------------------------------ writes
    def update(self, idx, priorities) -> None:
        """Set the priorities of leaves `idx` (a later duplicate index wins, as in numpy assignment)."""
        idx = np.asarray(idx, np.int64).reshape(-1)
        priorities = np.asarray(priorities, np.float64).reshape(-1)
        if idx.size == 0:
            return
        if np.any(priorities < 0) or not np.all(np.isfinite(priorities)):
            raise ValueError("priorities must be finite and >= 0")
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"leaf index out of range [0, {self.capacity})")
        if idx.size <= self.SCALAR_BELOW:
            self._update_few(idx.tolist(), priorities.tolist())
            return
        nodes = idx + self.size
        self.sums[nodes] = priorities
        self.mins[nodes] = self.sums[nodes]  # the value that won among duplicates
        sums, mins = self.sums, self.mins
        for _ in range(self.depth):
            nodes >>= 1  # duplicate parents just recompute the same value
            left = nodes << 1
            sums[nodes] = sums[left] + sums[left + 1]
            mins[nodes] = np.minimum(mins[left], mins[left + 1])

    def _update_few(self, idx: list[int], priorities: list[float]) -> None:
        """The same update as a scalar loop: for a handful of leaves (one env step's transitions) it avoids ~10 numpy
        calls per level, each costing more than the arithmetic it does."""
        sums, mins = self.sums, self.mins
        for i, p in zip(idx, priorities):
            node = i + self.size
            sums[node] = mins[node] = p
            node >>= 1
            while node:
                left = node << 1
                sums[node] = sums[left] + sums[left + 1]
                a, b = mins[left], mins[left + 1]
                mins[node] = a if a < b else b
                node >>= 1

    # ------------------------------------------------------------------ search
    def find(self, values) -> np.ndarray:
        """For each value v in [0, total), the leaf j with prefix(j) <= v < prefix(j) + p_j.

        Zero-priority leaves are never returned while the total is positive, even for v >= total from rounding: the
        fast descent (6 numpy calls a level) can only reach one through rounding, and those rare queries are redone
        by a descent that never enters a zero-mass subtree. With total == 0 it returns leaf 0."""
        values = np.array(values, np.float64).reshape(-1)
        nodes = self._descend(values.copy(), safe=False)
        bad = self.sums[nodes] <= 0
        if bad.any() and self.total > 0:
            nodes[bad] = self._descend(values[bad], safe=True)
        elif self.total <= 0:
            nodes[:] = self.size
        return nodes - self.size

    def _descend(self, values: np.ndarray, safe: bool) -> np.ndarray:
        nodes = np.ones(values.shape, np.int64)
        sums = self.sums
        for _ in range(self.depth):
            left = nodes << 1
            left_sum = sums[left]
            right = values >= left_sum
            if safe:
                right &= sums[left + 1] > 0
            values -= left_sum * right
            nodes = left + right
        return nodes

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Stratified proportional sampling: one uniform draw in each of `batch_size` equal slices of the total."""
        bounds = (np.arange(batch_size) + rng.random(batch_size)) * (self.total / batch_size)
        return self.find(bounds)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self, used: int) -> dict:
        """The priorities of leaves [0, used) (the tree is rebuilt from them on load)."""
        return {"leaves": torch.from_numpy(self.sums[self.size: self.size + used].copy()),
                "set": torch.from_numpy(np.isfinite(self.mins[self.size: self.size + used]))}

    def load_state_dict(self, state: dict) -> None:
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        leaves, was_set = state["leaves"].numpy(), state["set"].numpy()
        idx = np.flatnonzero(was_set)
        self.update(idx, leaves[idx])
