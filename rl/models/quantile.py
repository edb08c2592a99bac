"""Quantile networks: QR-DQN's Q network (Dabney et al. 2018, "Distributional Reinforcement Learning with Quantile
Regression", AAAI) and TQC's batched quantile critics (Kuznetsov et al. 2020, "Controlling Overestimation Bias with
Truncated Mixture of Continuous Distributional Quantile Critics", ICML).

Both represent a return distribution by N atoms of equal probability 1/N whose locations are learned: atom i
(i = 0..N-1) estimates the quantile of fraction tau_i = (2i + 1) / 2N (the midpoints; rl/grad_comp/quantile.py).
`quantiles(obs)` gives QR-DQN's loss the atoms, [B, A, N]; `forward(obs)` their mean, Q(s, a) = (1/N) sum_i
theta_i(s, a), so acting (greedy, epsilon-greedy, Ape-X's workers) is a Q network's. The critics give [K, B, N]: K
independent critics, each of N atoms.
"""

from __future__ import annotations

import torch
from torch import nn

from rl.errors import ConfigError
from rl.models.continuous import QCritics, _box_dims
from rl.models.multi_input import legal, mask_key
from rl.models.noisy import NoisyMixin, linear
from rl.models.q_network import fp32_head, noisy_settings, num_actions
from rl.registry import models


@models.register("quantile")
class QuantileHead(nn.Module):
    """Atoms [B, A, N] from one linear layer, or from dueling value and advantage streams (value + advantage - mean
    over actions, per atom, as C51's categorical head does with its logits)."""

    def __init__(self, in_dim: int, num_actions: int, num_quantiles: int, dueling: bool = False, noisy: bool = False,
                 sigma0: float = 0.5):
        super().__init__()
        self.num_actions, self.num_quantiles = num_actions, num_quantiles
        self.advantage = linear(in_dim, num_actions * num_quantiles, noisy, sigma0)
        self.value = linear(in_dim, num_quantiles, noisy, sigma0) if dueling else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        atoms = self.advantage.forward(features).view(-1, self.num_actions, self.num_quantiles)
        if self.value is not None:
            value = self.value.forward(features).view(-1, 1, self.num_quantiles)
            atoms = value + atoms - atoms.mean(dim=1, keepdim=True)
        return atoms


@models.register("quantile_network")
class QuantileNetwork(NoisyMixin, nn.Module):
    """torso (`hp.torso`) + quantile head of `num_quantiles` atoms per action (`dueling`, `noisy` as for DQN); the
    actions that the observation's action mask forbids get the lowest Q-value (rl/models/multi_input.py)."""

    def __init__(self, torso: nn.Module, head: QuantileHead):
        super().__init__()
        if head.num_quantiles < 1:
            raise ConfigError(f"a quantile network needs num_quantiles >= 1, got {head.num_quantiles}")
        self.torso, self.head = torso, head
        self.mask_key = None  # the observation entry of the action mask (build sets it)

    @classmethod
    def build(cls, hp, obs_space, action_space) -> QuantileNetwork:
        if "num_quantiles" not in hp:
            raise ConfigError("model=quantile_network needs the setting num_quantiles: start from a qrdqn set "
                              "(hparams/quantile.py)")
        torso = models[hp.torso].build(hp, obs_space)
        head = QuantileHead(torso.out_dim, num_actions(action_space), hp.num_quantiles, hp.dueling,
                            *noisy_settings(hp))
        net = cls(torso, head)
        net.mask_key = mask_key(hp, obs_space)
        return net

    def legal(self, values: torch.Tensor, obs) -> torch.Tensor:
        """Q-values [B, A] of `obs` with the illegal actions' at the lowest float (the loss picks the bootstrap action
        among the legal ones)."""
        return legal(values, obs, self.mask_key)

    def quantiles(self, obs: torch.Tensor) -> torch.Tensor:
        """theta_i(s, a), the atoms in the order of their fractions tau_i: [B, A, N]."""
        return fp32_head(self.head, self.torso.forward(obs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q(s, a), the atoms' mean: [B, A], the illegal actions' at the lowest float."""
        return self.legal(self.quantiles(obs).mean(-1), obs)


@models.register("quantile_critics")
class QuantileCritics(QCritics):
    """TQC's K critics Z_k(s, a), each `num_quantiles` atoms, batched as SAC's twin critics are (one `baddbmm` per
    layer for all K): `(obs, actions, detach=False, first=False)` -> atoms [K, B, N] ([1, B, N] with `first`)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden_sizes: list[int], num_critics: int = 2,
                 act: str = "relu", num_quantiles: int = 25):
        if num_quantiles < 2 or num_critics < 1:
            raise ConfigError(f"quantile critics need num_quantiles >= 2 and num_critics >= 1, got {num_quantiles} "
                              f"and {num_critics}")
        super().__init__(obs_dim, action_dim, hidden_sizes, num_critics, act, out_dim=num_quantiles)
        self.num_quantiles = num_quantiles

    @classmethod
    def build(cls, hp, obs_space, action_space) -> QuantileCritics:
        if "num_quantiles" not in hp or "num_critics" not in hp:
            raise ConfigError("critic=quantile_critics needs the settings num_quantiles and num_critics: start from a "
                              "tqc set (hparams/quantile.py)")
        obs_dim, action_dim = _box_dims(obs_space, action_space)
        return cls(obs_dim, action_dim, hp.hidden_sizes, hp.num_critics, hp.activation, hp.num_quantiles)
