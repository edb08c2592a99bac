"""Exploration for continuous actions in the normalised box [-1, 1]^d (the agent scales to the env's bounds).

- `squashed_gaussian`: SAC's policy (Haarnoja et al. 2018): tanh(mean + std * noise) while training, tanh(mean) to
  evaluate.
- `deterministic_noise`: DDPG's and TD3's (Lillicrap et al. 2016; Fujimoto et al. 2018): the actor's action plus
  Gaussian or Ornstein-Uhlenbeck noise, clipped to the box.
- `gsde`: gSDE's (Raffin et al. 2022), for the `gsde_actor`: tanh(mean + z(s) @ E_i), one noise matrix E_i per env,
  held for `sde_sample_freq` steps and then drawn afresh from N(0, exp(log_std)^2).
All act uniformly at random for the first `learning_starts` steps (SB3's and PyTorchRL's warm-up, "start steps").
Noise is drawn with one numpy call per step from the selector's own Generator, which is checkpointed.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.errors import ConfigError
from rl.registry import act_select

NOISE_TYPES = ("normal", "ornstein_uhlenbeck", "none")


class BoxScaler:
    """Maps the normalised box [-1, 1]^d to the env's [low, high] and back (identity when they coincide)."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ConfigError(f"continuous-control agents need a bounded Box action space, got low={low}, high={high}")
        self.center, self.half = (high + low) / 2, (high - low) / 2
        self.identity = bool(np.all(self.center == 0) and np.all(self.half == 1))
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        if self.identity:
            return actions
        return np.clip(self.center + self.half * actions, self.low, self.high).astype(np.float32)

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        if self.identity:
            return actions
        return ((np.asarray(actions) - self.center) / self.half).astype(np.float32)


class Explorer:
    """Shared part: its Generator and the uniform warm-up for the first `learning_starts` env steps."""

    def __init__(self, action_dim: int, learning_starts: int = 0, seed: int = 0):
        self.action_dim, self.learning_starts = action_dim, learning_starts
        self.rng = np.random.default_rng(seed)

    def warming_up(self, step: int) -> bool:
        return step < self.learning_starts

    def random_actions(self, n: int) -> np.ndarray:
        return self.rng.uniform(-1.0, 1.0, (n, self.action_dim)).astype(np.float32)

    def reset(self, done: np.ndarray) -> None:
        """Called with the mask of envs whose episode ended."""

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


@act_select.register("squashed_gaussian")
class SquashedGaussian(Explorer):
    """tanh of a Gaussian sample (or of its mean when `deterministic`)."""

    @classmethod
    def build(cls, hp, action_dim: int, num_envs: int, seed: int = 0) -> SquashedGaussian:
        return cls(action_dim, hp.learning_starts, seed)

    def __call__(self, policy_out: tuple[torch.Tensor, torch.Tensor], deterministic: bool = False) -> np.ndarray:
        """`policy_out` is the actor's (mean, log_std) of the pre-squash Gaussian."""
        mean, log_std = policy_out
        mean = mean.cpu().numpy()
        if deterministic:
            return np.tanh(mean)
        std = np.exp(log_std.cpu().numpy())
        return np.tanh(mean + std * self.rng.standard_normal(mean.shape, np.float32))


@act_select.register("gsde")
class GSDE(Explorer):
    """Noise z(s) @ E_i for env i, with E_i held for `period` acting steps. SB3's `sde_sample_freq` = -1 (its
    default, the zoo's) draws new matrices at the start of every collection phase, i.e. every `train_freq` steps:
    `build` turns -1 into that period. Counting starts when the warm-up ends (a multiple of `train_freq` in the
    zoo's sets), so draws fall on the phase boundaries as in SB3."""

    def __init__(self, action_dim: int, num_envs: int, period: int, learning_starts: int = 0, seed: int = 0):
        super().__init__(action_dim, learning_starts, seed)
        if period < 1:
            raise ConfigError(f"sde_sample_freq must be -1 (every training phase) or >= 1, got {period}")
        self.period, self.calls = period, 0
        self.matrices = None  # [num_envs, z, action], drawn at the first call

    @classmethod
    def build(cls, hp, action_dim: int, num_envs: int, seed: int = 0) -> GSDE:
        phase = hp.update_every if hp.update_every > 0 else hp.train_freq  # env steps per phase (update_schedule)
        period = hp.sde_sample_freq if hp.sde_sample_freq != -1 else max(1, phase // num_envs)
        return cls(action_dim, num_envs, period, hp.learning_starts, seed)

    def __call__(self, policy_out: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 deterministic: bool = False) -> np.ndarray:
        """`policy_out` is the gSDE actor's (mean, z, log_std)."""
        mean, z, log_std = (t.detach().cpu().numpy() for t in policy_out)
        if deterministic:
            return np.tanh(mean)
        if self.calls % self.period == 0 or self.matrices is None or len(self.matrices) != len(z):
            std = np.exp(log_std)
            self.matrices = std * self.rng.standard_normal((len(z), *std.shape), np.float32)  # float32, as std
        self.calls += 1
        return np.tanh(mean + np.einsum("bz,bza->ba", z, self.matrices))

    def state_dict(self) -> dict:
        matrices = {} if self.matrices is None else {"matrices": torch.from_numpy(self.matrices.copy())}
        return {**super().state_dict(), "calls": self.calls, **matrices}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.calls = int(state.get("calls", 0))
        self.matrices = state["matrices"].numpy().copy() if "matrices" in state else None


@act_select.register("deterministic_noise")
class DeterministicNoise(Explorer):
    """The actor's action plus N(0, sigma^2) or Ornstein-Uhlenbeck noise (SB3's discretisation:
    x <- x + theta (0 - x) dt + sigma sqrt(dt) N(0, 1)), clipped to [-1, 1]. The OU state restarts per episode."""

    def __init__(self, action_dim: int, num_envs: int, noise_type: str = "normal", sigma: float = 0.1,
                 theta: float = 0.15, dt: float = 1e-2, learning_starts: int = 0, seed: int = 0):
        super().__init__(action_dim, learning_starts, seed)
        if noise_type not in NOISE_TYPES:
            raise ConfigError(f"unknown noise_type {noise_type!r}: valid: {', '.join(NOISE_TYPES)}")
        self.noise_type, self.sigma, self.theta, self.dt = noise_type, sigma, theta, dt
        self.ou_state = np.zeros((num_envs, action_dim), np.float32)

    @classmethod
    def build(cls, hp, action_dim: int, num_envs: int, seed: int = 0) -> DeterministicNoise:
        return cls(action_dim, num_envs, hp.noise_type, hp.noise_std, hp.ou_theta, hp.ou_dt, hp.learning_starts, seed)

    def noise(self, n: int) -> np.ndarray:
        if self.noise_type == "normal":
            return self.sigma * self.rng.standard_normal((n, self.action_dim), np.float32)
        if self.noise_type == "ornstein_uhlenbeck":
            if len(self.ou_state) != n:
                self.ou_state = np.zeros((n, self.action_dim), np.float32)
            shock = self.rng.standard_normal((n, self.action_dim), np.float32)
            self.ou_state += self.theta * -self.ou_state * self.dt + self.sigma * np.sqrt(self.dt) * shock
            return self.ou_state.copy()
        return np.zeros((n, self.action_dim), np.float32)

    def __call__(self, actions: torch.Tensor, deterministic: bool = False) -> np.ndarray:
        actions = actions.cpu().numpy()
        if deterministic:
            return actions
        return np.clip(actions + self.noise(len(actions)), -1.0, 1.0)

    def reset(self, done: np.ndarray) -> None:
        if len(done) == len(self.ou_state):
            self.ou_state[done] = 0.0

    def state_dict(self) -> dict:
        return {**super().state_dict(), "ou_state": torch.from_numpy(self.ou_state.copy())}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.ou_state = state["ou_state"].numpy().copy()
