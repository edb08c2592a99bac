"""Stochastic policies for the on-policy family: sample an action from the policy head's parameters, and give the
log-probabilities and entropies the losses need (Williams 1992; Schulman et al. 2017).

- `categorical`: logits -> a sampled action index. `deterministic_categorical`: the most likely action.
- `gaussian`: (mean, log_std) -> a sample u ~ N(mean, std); the env receives u clipped to the action bounds
  (`action_bounds=clip`, SB3's default), tanh(u) rescaled to the bounds (`tanh`), or u itself (`none`).
  `deterministic_gaussian`: the mean, bounded the same way.
The stored action is always u, so log-probabilities are those of the Gaussian: for tanh squashing the Jacobian term
is the same in both halves of PPO's ratio and cancels. Sampling uses a seeded torch.Generator, checkpointed.

The on-policy agents' analytic path (numpy on the CPU, see rl/agents/on_policy.py) uses numpy twins of the policies:
`sample_numpy` (the same draws from the same generator), `log_prob_numpy`, and the closed-form `backward` that maps
d loss / d log pi to d loss / d (policy parameters).
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


def log_softmax_numpy(logits: np.ndarray) -> np.ndarray:
    z = logits - np.maximum.reduce(logits, axis=-1, keepdims=True)  # the ufunc: half the cost of ndarray.max
    z -= np.log(np.add.reduce(np.exp(z), axis=-1, keepdims=True))
    return z


def categorical_log_prob_numpy(logits: np.ndarray, actions: np.ndarray) -> np.ndarray:
    return log_softmax_numpy(logits)[np.arange(len(actions)), actions]


def categorical_backward(logits: np.ndarray, actions: np.ndarray, grad_log_probs: np.ndarray,
                         ent_coef: float = 0.0) -> np.ndarray:
    """d/dlogits of sum_i g_i log pi(a_i) - ent_coef * mean_i H_i, in closed form: g_i (onehot(a_i) - p_i), and
    ent_coef / B * p (log p + H) for the entropy term (numpy, for the agents' analytic path)."""
    log_p = log_softmax_numpy(logits)
    p = np.exp(log_p)
    grad = p * -grad_log_probs[:, None]
    grad[np.arange(len(grad)), actions] += grad_log_probs
    if ent_coef:
        entropy = -(p * log_p).sum(-1, keepdims=True)
        grad += (ent_coef / len(logits)) * p * (log_p + entropy)
    return grad


@act_select.register("categorical")
class Categorical(_Sampler):
    """Sample from softmax(logits)."""

    log_prob = staticmethod(categorical_log_prob)
    entropy = staticmethod(categorical_entropy)
    log_prob_numpy = staticmethod(categorical_log_prob_numpy)
    backward = staticmethod(categorical_backward)

    @classmethod
    def build(cls, hp, action_space, seed: int = 0) -> Categorical:
        _need(action_space, True, "categorical")
        return cls(seed, hp.device)

    def __call__(self, logits: torch.Tensor) -> PolicyAction:
        """Inverse-CDF sampling: one uniform per row, located in the cumulative probabilities."""
        log_p = torch.log_softmax(logits, -1)
        u = torch.rand((*logits.shape[:-1], 1), generator=self.generator, device=logits.device)
        actions = torch.searchsorted(log_p.exp().cumsum(-1), u).clamp_(max=logits.shape[-1] - 1)
        log_probs = log_p.gather(-1, actions).squeeze(-1)
        actions = actions.squeeze(-1)
        return PolicyAction(actions.cpu().numpy(), actions, log_probs)

    def sample_numpy(self, logits: np.ndarray) -> PolicyAction:
        """`__call__` on numpy logits (the analytic path's acting): the same uniforms from the same generator, the
        same inverse-CDF rule, numpy arrays out."""
        log_p = log_softmax_numpy(logits)
        u = torch.rand(len(logits), generator=self.generator).numpy()
        actions = (np.cumsum(np.exp(log_p), -1) < u[:, None]).sum(-1)
        np.minimum(actions, logits.shape[-1] - 1, out=actions)
        return PolicyAction(actions, actions, log_p[np.arange(len(actions)), actions])


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


def gaussian_log_prob_numpy(params: tuple[np.ndarray, np.ndarray], actions: np.ndarray) -> np.ndarray:
    mean, log_std = params
    z = (actions - mean) * np.exp(-log_std)
    return (-0.5 * z * z - log_std - LOG_SQRT_2PI).sum(-1)


def gaussian_backward(params: tuple[np.ndarray, np.ndarray], actions: np.ndarray, grad_log_probs: np.ndarray,
                      ent_coef: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(d/dmean, d/dlog_std) of sum_i g_i log pi(u_i) - ent_coef * mean_i H_i: with z = (u - mean) / std,
    dlog pi/dmean = z / std and dlog pi/dlog_std = z^2 - 1; the entropy's log-std gradient is 1 per dimension
    (numpy, for the agents' analytic path)."""
    mean, log_std = params
    inv_std = np.exp(-log_std)
    z = (actions - mean) * inv_std
    g = grad_log_probs[:, None]
    grad_log_std = (g * (z * z - 1.0)).sum(0) - ent_coef
    return g * z * inv_std, grad_log_std


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
    log_prob_numpy = staticmethod(gaussian_log_prob_numpy)
    backward = staticmethod(gaussian_backward)

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

    def sample_numpy(self, params: tuple[np.ndarray, np.ndarray]) -> PolicyAction:
        """`__call__` on numpy parameters (the analytic path's acting): the same normals, numpy arrays out."""
        mean, log_std = params
        u = mean + np.exp(log_std) * torch.randn(mean.shape, generator=self.generator).numpy()
        return PolicyAction(self.to_env(u), u, gaussian_log_prob_numpy(params, u))


@act_select.register("deterministic_gaussian")
class DeterministicGaussian(_Bounded):
    """The mean, bounded (evaluation)."""

    def __call__(self, params: tuple[torch.Tensor, torch.Tensor]) -> PolicyAction:
        return PolicyAction(self.to_env(params[0]), params[0], None)
