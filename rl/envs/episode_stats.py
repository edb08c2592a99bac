"""Return and length of every finished episode in a vector env, and their means over the last 100."""

from __future__ import annotations

from collections import deque

import numpy as np


class EpisodeStats:
    """Accumulates per-env rewards; a finished episode's return and length go into 100-long deques."""

    def __init__(self, num_envs: int, window: int = 100):
        self.returns = np.zeros(num_envs, np.float64)
        self.lengths = np.zeros(num_envs, np.int64)
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0

    def update(self, rewards: np.ndarray, dones: np.ndarray, counted: np.ndarray | None = None) -> None:
        """`counted` masks out steps that are not part of an episode (next-step autoreset's reset step)."""
        if counted is None:
            self.returns += rewards
            self.lengths += 1
        else:
            self.returns += rewards * counted
            self.lengths += counted
        if dones.any():
            for i in np.flatnonzero(dones):
                self.recent_returns.append(float(self.returns[i]))
                self.recent_lengths.append(int(self.lengths[i]))
            self.episodes += int(dones.sum())
            self.returns[dones] = 0.0
            self.lengths[dones] = 0

    def summary(self) -> dict:
        if not self.recent_returns:
            return {}
        return {"charts/episode_return_mean": float(np.mean(self.recent_returns)),
                "charts/episode_length_mean": float(np.mean(self.recent_lengths)),
                "charts/episodes": self.episodes}
