"""Running observation and reward normalisation (OpenAI baselines' VecNormalize, as used by PPO on MuJoCo/PyBullet;
Engstrom et al. 2020, "Implementation Matters in Deep RL").

Observations are standardised by a running mean and variance (Chan et al.'s parallel update), then clipped. Rewards
are divided by the running standard deviation of the discounted return (not its mean: the sign of a reward is kept),
then clipped. The statistics are part of the agent's checkpoint, so a resumed or evaluated agent sees the same inputs.
"""

from __future__ import annotations

import numpy as np
import torch


class RunningMeanStd:
    """Mean and variance of a stream of batches, merged batch by batch (Chan et al.). It also keeps the moments of
    what it saw since the last `take_fresh()`: a collection worker ships those, the learner `merge`s them, so the
    statistics of every worker's data end up in the learner's (and, published with the weights, back in all)."""

    def __init__(self, shape: tuple = (), epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon
        self.fresh: dict | None = None  # {"mean", "var", "count"} since the last take_fresh()

    def update(self, x: np.ndarray) -> None:
        batch_mean, batch_var, n = x.mean(0), x.var(0), x.shape[0]
        self.mean, self.var, self.count = _chan(self.mean, self.var, self.count, batch_mean, batch_var, n)
        if self.fresh is None:
            self.fresh = {"mean": np.asarray(batch_mean, np.float64), "var": np.asarray(batch_var, np.float64),
                          "count": float(n)}
        else:
            f = self.fresh
            f["mean"], f["var"], f["count"] = _chan(f["mean"], f["var"], f["count"], batch_mean, batch_var, n)

    def merge(self, mean, var, count: float) -> None:
        """Fold in the moments of `count` samples seen elsewhere."""
        self.mean, self.var, self.count = _chan(self.mean, self.var, self.count, np.asarray(mean, np.float64),
                                                np.asarray(var, np.float64), float(count))

    def take_fresh(self) -> dict | None:
        fresh, self.fresh = self.fresh, None
        return fresh

    def state_dict(self) -> dict:
        return {"mean": torch.from_numpy(np.array(self.mean, np.float64)),
                "var": torch.from_numpy(np.array(self.var, np.float64)), "count": float(self.count)}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var = state["mean"].numpy().copy(), state["var"].numpy().copy()
        self.count = float(state["count"])


def _chan(mean, var, count, batch_mean, batch_var, n):
    """The mean, variance and count of two samples' union from their moments."""
    delta = batch_mean - mean
    total = count + n
    return (mean + delta * n / total, (var * count + batch_var * n + delta**2 * count * n / total) / total, total)


class ObsNormalizer:
    """(obs - mean) / sqrt(var + eps), clipped to +-clip; statistics updated only on training observations."""

    def __init__(self, shape: tuple, clip: float = 10.0, eps: float = 1e-8):
        self.rms, self.clip, self.eps = RunningMeanStd(shape), clip, eps
        self._cache()

    def __call__(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        if update:
            self.rms.update(obs)
            self._cache()
        return np.clip((obs - self.mean_f32) / self.std_f32, -self.clip, self.clip).astype(np.float32, copy=False)

    def _cache(self) -> None:
        self.mean_f32 = self.rms.mean.astype(np.float32)
        self.std_f32 = np.sqrt(self.rms.var + self.eps).astype(np.float32)

    def state_dict(self) -> dict:
        return self.rms.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state)
        self._cache()

    def refresh(self) -> None:
        """Re-read the statistics after they changed from outside (merged or loaded)."""
        self._cache()


class RewardNormalizer:
    """Scale rewards by the running std of each env's discounted return; the return restarts at episode ends."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.rms, self.gamma, self.clip, self.eps = RunningMeanStd(()), gamma, clip, eps
        self.returns = np.zeros(num_envs, np.float64)

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        out = np.clip(rewards / np.sqrt(self.rms.var + self.eps), -self.clip, self.clip)
        self.returns[dones] = 0.0
        return out.astype(np.float32)

    def reset(self) -> None:
        self.returns[:] = 0.0

    def state_dict(self) -> dict:
        return {"rms": self.rms.state_dict(), "returns": torch.from_numpy(self.returns.copy())}

    def load_state_dict(self, state: dict) -> None:
        self.rms.load_state_dict(state["rms"])
        self.returns = state["returns"].numpy().copy()
