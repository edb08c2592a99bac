"""Stochastic policies for the on-policy family: sample an action from the policy head's parameters, and give the
log-probabilities and entropies the losses need (Williams 1992; Schulman et al. 2017).

- `categorical`: logits -> a sampled action index. `deterministic_categorical`: the most likely action. Masked
  logits (an env's action mask, rl/models/multi_input.py) give illegal actions probability 0: they are never drawn,
  and log-probabilities and entropies are over the legal actions.
- `gaussian`: (mean, log_std) -> a sample u ~ N(mean, std); the env receives u clipped to the action bounds
  (`action_bounds=clip`, SB3's default), tanh(u) rescaled to the bounds (`tanh`), or u itself (`none`).
  `deterministic_gaussian`: the mean, bounded the same way.
The stored action is always u, so log-probabilities are those of the Gaussian: for tanh squashing the Jacobian term
is the same in both halves of PPO's ratio and cancels. Sampling uses a seeded torch.Generator, checkpointed.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from rl.errors import ConfigError
from rl.registry import act_select

BOUNDS = ("clip", "tanh", "none")
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class PolicyAction(NamedTuple):
    """What acting produced: the actions for the env (numpy), the actions to store, and their log-probabilities."""

    env_actions: np.ndarray
    actions: torch.Tensor
    log_probs: torch.Tensor | None


class _Sampler:
    """A seeded generator on the policy's device, checkpointed with the agent."""

    def __init__(self, seed: int = 0, device: str | torch.device = "cpu"):
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def _need(action_space, discrete: bool, name: str) -> None:
    if hasattr(action_space, "n") != discrete:
        other = "categorical" if not discrete else "gaussian"
        raise ConfigError(f"act_select {name!r} does not fit the action space {action_space}: use act_select={other}")


# ---------------------------------------------------------------------------------------------------- categorical
def categorical_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log_softmax(logits, -1)
    return -(log_p.exp() * log_p).sum(-1)


@act_select.register("categorical")
class Categorical(_Sampler):
    """Sample from softmax(logits)."""

    log_prob = staticmethod(categorical_log_prob)
    entropy = staticmethod(categorical_entropy)

    @classmethod
    def build(cls, hp, action_space, seed: int = 0) -> Categorical:
        _need(action_space, True, "categorical")
        return cls(seed, hp.device)

    def __call__(self, logits: torch.Tensor) -> PolicyAction:
        """Inverse-CDF sampling: one uniform per row, scaled to the row's total probability (1 up to rounding) and
        located in the cumulative probabilities: the first action whose cumulative sum passes it, so an action of
        probability 0 (a masked logit, rl/models/multi_input.py) is never drawn, at u = 0 or near the top."""
        log_p = torch.log_softmax(logits, -1)
        u = torch.rand((*logits.shape[:-1], 1), generator=self.generator, device=logits.device)
        cdf = log_p.exp().cumsum(-1)
        actions = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).clamp_(max=logits.shape[-1] - 1)
        log_probs = log_p.gather(-1, actions).squeeze(-1)
        actions = actions.squeeze(-1)
        return PolicyAction(actions.cpu().numpy(), actions, log_probs)


@act_select.register("deterministic_categorical")
class DeterministicCategorical:
    """The most likely action (evaluation)."""

    @classmethod
    def build(cls, hp, action_space, seed: int = 0) -> DeterministicCategorical:
        return cls()

    def __call__(self, logits: torch.Tensor) -> PolicyAction:
        actions = logits.argmax(-1)
        return PolicyAction(actions.cpu().numpy(), actions, None)


# ---------------------------------------------------------------------------------------------------- gaussian
def gaussian_log_prob(params: tuple[torch.Tensor, torch.Tensor], actions: torch.Tensor) -> torch.Tensor:
    mean, log_std = params
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(params: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    mean, log_std = params
    return (log_std + 0.5 + LOG_SQRT_2PI).sum(-1).expand(mean.shape[:-1])


class _Bounded:
    """Maps an unbounded Gaussian action to the env's Box (`clip`, `tanh` or `none`)."""

    def __init__(self, low: np.ndarray, high: np.ndarray, bounds: str = "clip"):
        if bounds not in BOUNDS:
            raise ConfigError(f"unknown action_bounds {bounds!r}: valid: {', '.join(BOUNDS)}")
        if bounds == "tanh" and not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ConfigError("action_bounds=tanh needs finite action bounds; use action_bounds=clip or none")
        self.low, self.high, self.bounds = low.astype(np.float32), high.astype(np.float32), bounds

    @classmethod
    def build(cls, hp, action_space, seed: int = 0):
        _need(action_space, False, "gaussian")
        return cls(action_space.low, action_space.high, hp.action_bounds)

    def to_env(self, u: torch.Tensor | np.ndarray) -> np.ndarray:
        a = u.cpu().numpy() if isinstance(u, torch.Tensor) else u
        if self.bounds == "clip":
            return np.clip(a, self.low, self.high)
        if self.bounds == "tanh":
            return self.low + (np.tanh(a) + 1.0) * 0.5 * (self.high - self.low)
        return a


@act_select.register("gaussian")
class Gaussian(_Bounded, _Sampler):
    """Sample u ~ N(mean, exp(log_std)^2) and bound it for the env."""

    log_prob = staticmethod(gaussian_log_prob)
    entropy = staticmethod(gaussian_entropy)

    def __init__(self, low, high, bounds: str = "clip", seed: int = 0, device="cpu"):
        _Bounded.__init__(self, low, high, bounds)
        _Sampler.__init__(self, seed, device)

    @classmethod
    def build(cls, hp, action_space, seed: int = 0) -> Gaussian:
        _need(action_space, False, "gaussian")
        return cls(action_space.low, action_space.high, hp.action_bounds, seed, hp.device)

    def __call__(self, params: tuple[torch.Tensor, torch.Tensor]) -> PolicyAction:
        mean, log_std = params
        u = mean + torch.exp(log_std) * torch.randn(mean.shape, generator=self.generator, device=mean.device)
        return PolicyAction(self.to_env(u), u, gaussian_log_prob(params, u))


@act_select.register("deterministic_gaussian")
class DeterministicGaussian(_Bounded):
    """The mean, bounded (evaluation)."""

    def __call__(self, params: tuple[torch.Tensor, torch.Tensor]) -> PolicyAction:
        return PolicyAction(self.to_env(params[0]), params[0], None)
