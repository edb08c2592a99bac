"""Networks for continuous control: a deterministic actor (DDPG, Lillicrap et al. 2016; TD3, Fujimoto et al. 2018),
a squashed-Gaussian actor (SAC, Haarnoja et al. 2018), its gSDE variant (generalized state-dependent exploration,
Raffin et al. 2022, as Stable-Baselines3 builds it) and a stack of K Q critics (K = 1 for DDPG, 2 for TD3/SAC's
clipped double Q).

A stochastic actor gives SAC's loss a `sampler()`: a function obs -> (actions, log pi(actions | obs)), reparameterised,
for one gradient step (gSDE draws that step's noise matrix there).

Actors work in the normalised action box [-1, 1]^d; the agent scales actions to the env's bounds. Layers are called
through `F.linear` / `torch.baddbmm` rather than nn.Module calls: with small networks and one gradient step per env
step, Python overhead, not arithmetic, is most of the cost. The K critics are one batched matmul per layer.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rl.errors import ConfigError
from rl.models.mlp import activation
from rl.registry import models

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SB3 / the SAC reference implementation


def _box_dims(obs_space, action_space) -> tuple[int, int]:
    if not hasattr(action_space, "low") or len(action_space.shape) != 1:
        raise ConfigError(f"continuous-control models need a 1-d Box action space, the env has {action_space}")
    if obs_space.shape is None:  # the critics read observation and action as one vector
        raise ConfigError(f"continuous-control critics take Box observations, not {type(obs_space).__name__}: Dict "
                          f"and Tuple observations are for the discrete agents (ppo, a2c, vpg, dqn)")
    return int(np.prod(obs_space.shape)), int(action_space.shape[0])


class _Actor(nn.Module):
    """A torso (`hp.torso`, e.g. the MLP) and one linear output layer, called without nn.Module overhead."""

    def __init__(self, torso: nn.Module, out_dim: int):
        super().__init__()
        self.torso = torso
        self.out = nn.Linear(torso.out_dim, out_dim)

    @classmethod
    def build(cls, hp, obs_space, action_space):
        _, action_dim = _box_dims(obs_space, action_space)
        return cls(models[hp.torso].build(hp, obs_space), action_dim)

    def trunk(self, obs: torch.Tensor) -> torch.Tensor:
        return F.linear(self.torso.forward(obs), self.out.weight, self.out.bias)


@models.register("deterministic_actor")
class DeterministicActor(_Actor):
    """a = tanh(head(torso(s))) in [-1, 1]^d."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.trunk(obs))


@models.register("squashed_gaussian_actor")
class SquashedGaussianActor(_Actor):
    """A diagonal Gaussian over pre-squash actions u, a = tanh(u). One output layer gives mean and log std."""

    def __init__(self, torso: nn.Module, action_dim: int):
        super().__init__(torso, 2 * action_dim)
        self.action_dim = action_dim

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) of u, log_std clamped to [-20, 2]."""
        mean, log_std = self.trunk(obs).split(self.action_dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample a = tanh(mean + std * noise) and its log-probability (shape [B])."""
        mean, log_std = self.forward(obs)
        if noise is None:
            noise = torch.randn_like(mean)
        return squash(mean, log_std, noise)

    def sampler(self):
        """Independent noise for every sample."""
        return self.sample


@models.register("gsde_actor")
class GSDEActor(_Actor):
    """gSDE's squashed actor (Raffin et al. 2022; SB3's SAC with use_sde=True, full_std, learned features): the mean
    is head(z) clipped to [-clip_mean, clip_mean] (SB3's Hardtanh), z = torso(s) the last hidden layer, and the
    exploration noise is z @ E for a matrix E ~ N(0, exp(log_std)^2) of shape [z, action] that is held for several
    steps, so that noise is a smooth function of the state instead of white. Given z, u = mean + z @ E is Gaussian with
    variance (z^2) @ exp(log_std)^2 per action; a = tanh(u). `log_std` is a learned [z, action] matrix."""

    VAR_EPS = 1e-6  # SB3's epsilon inside the square root of the variance

    def __init__(self, torso: nn.Module, action_dim: int, log_std_init: float = -3.0, clip_mean: float = 2.0):
        super().__init__(torso, action_dim)
        self.action_dim, self.clip_mean = action_dim, clip_mean
        self.log_std = nn.Parameter(torch.full((torso.out_dim, action_dim), float(log_std_init)))

    @classmethod
    def build(cls, hp, obs_space, action_space):
        _, action_dim = _box_dims(obs_space, action_space)
        return cls(models[hp.torso].build(hp, obs_space), action_dim, hp.log_std_init, hp.gsde_clip_mean)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean, z, log_std): everything that acting needs to draw noise from (act_select `gsde`)."""
        z = self.torso.forward(obs)
        mean = F.linear(z, self.out.weight, self.out.bias)
        if self.clip_mean > 0:
            mean = mean.clamp(-self.clip_mean, self.clip_mean)
        return mean, z, self.log_std

    def exploration_matrix(self) -> torch.Tensor:
        """E = exp(log_std) * N(0, 1), reparameterised: the actor's loss reaches log_std through the noise too."""
        return self.log_std.exp() * torch.randn_like(self.log_std)

    def sample(self, obs: torch.Tensor, exploration: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a = tanh(mean + z @ E) and log pi(a | s) under N(mean, (z^2) @ exp(log_std)^2), squash-corrected."""
        mean, z, log_std = self.forward(obs)
        std = (z.pow(2) @ (2 * log_std).exp() + self.VAR_EPS).sqrt()
        return squash(mean, std.log(), (z @ exploration) / std)

    def sampler(self):
        """One noise matrix for the whole batch, drawn afresh for each gradient step (SB3 resets the noise before
        every gradient step)."""
        exploration = self.exploration_matrix()
        return lambda obs: self.sample(obs, exploration)


def squash(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a = tanh(u), u = mean + exp(log_std) * noise, with log pi(a) = log N(u) - sum log(1 - tanh(u)^2).

    The correction uses the stable identity log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) (the SAC appendix;
    CleanRL and SB3's 1e-6 epsilon variant agree to within that epsilon)."""
    u = mean + log_std.exp() * noise
    log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), log_prob


class QCritics(nn.Module):
    """K independent Q(s, a) MLPs whose layers are stacked into [K, in, out] weights: each layer is one
    `baddbmm` for all K critics. Returns Q values of shape [K, B]."""

    NUM_CRITICS = 2

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: list[int], num_critics: int = 2,
                 act: str = "relu", out_dim: int = 1):
        super().__init__()
        sizes = [obs_dim + action_dim, *hidden_sizes, out_dim]  # out_dim > 1: TQC's atoms (rl/models/quantile.py)
        self.num_critics = num_critics
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers = [nn.Linear(a, b) for _ in range(num_critics)]  # PyTorch's default init, as SB3 and CleanRL
            self.weights.append(nn.Parameter(torch.stack([lin.weight.detach().t() for lin in layers])))
            self.biases.append(nn.Parameter(torch.stack([lin.bias.detach() for lin in layers]).unsqueeze(1)))
        self.act = torch.relu_ if act == "relu" else activation(act)  # in place: no new [K, B, h] tensor
        self._layers = tuple(zip(self.weights, self.biases))

    @classmethod
    def build(cls, hp, obs_space, action_space) -> QCritics:
        obs_dim, action_dim = _box_dims(obs_space, action_space)
        return cls(obs_dim, action_dim, hp.hidden_sizes, cls.NUM_CRITICS, hp.activation)

    def _apply(self, *args, **kwargs):
        out = super()._apply(*args, **kwargs)
        self._layers = tuple(zip(self.weights, self.biases))  # iterating a ParameterList costs a lookup per item
        return out

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, detach: bool = False,
                first: bool = False) -> torch.Tensor:
        """Q values [K, B]. `detach` evaluates with detached weights: gradients reach the actions only (the
        actor's loss), and autograd skips the weight-gradient matmuls. `first` evaluates only the first critic
        ([1, B]: TD3's and DDPG's actor loss), at 1/K of the cost."""
        k = 1 if first else self.num_critics
        x = torch.cat([obs.flatten(1).float(), actions], dim=-1).expand(k, -1, -1)
        last = len(self._layers) - 1
        for i, (w, b) in enumerate(self._layers):
            if first:
                w, b = w[:1], b[:1]
            if detach:
                w, b = w.detach(), b.detach()
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self.act(x)
        return x.squeeze(-1)


@models.register("q_critic")
class QCritic(QCritics):
    """One Q critic (DDPG)."""

    NUM_CRITICS = 1


@models.register("twin_q")
class TwinQ(QCritics):
    """Two Q critics (TD3, SAC: clipped double Q)."""

    NUM_CRITICS = 2
