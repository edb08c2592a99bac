"""Distributional Q network: C51 (Bellemare, Dabney and Munos 2017, "A Distributional Perspective on Reinforcement
Learning", ICML), as used in Rainbow (Hessel et al. 2018).

For each action the head gives a categorical distribution over `num_atoms` fixed returns z_i evenly spaced on
[v_min, v_max]. `log_probs(obs)` returns log p(z_i | s, a) as [B, A, atoms] for the loss (rl/grad_comp/c51.py);
`forward(obs)` returns Q(s, a) = sum_i z_i p_i, so action selection (greedy, epsilon-greedy) is unchanged. The dueling
variant adds a value stream to mean-centred advantage logits, per atom, before the softmax (Rainbow's form). Either
stream may use noisy layers.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rl.errors import ConfigError
from rl.models.multi_input import legal, mask_key
from rl.models.noisy import NoisyMixin, linear
from rl.models.q_network import fp32_head, noisy_settings, num_actions
from rl.registry import models


@models.register("categorical")
class CategoricalHead(nn.Module):
    """Logits [B, A, atoms], from one linear layer or from dueling value and advantage streams."""

    def __init__(self, in_dim: int, num_actions: int, num_atoms: int, dueling: bool = False, noisy: bool = False,
                 sigma0: float = 0.5):
        super().__init__()
        self.num_actions, self.num_atoms, self.dueling = num_actions, num_atoms, dueling
        self.advantage = linear(in_dim, num_actions * num_atoms, noisy, sigma0)
        self.value = linear(in_dim, num_atoms, noisy, sigma0) if dueling else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        logits = self.advantage(features).view(-1, self.num_actions, self.num_atoms)
        if self.value is not None:
            value = self.value(features).view(-1, 1, self.num_atoms)
            logits = value + logits - logits.mean(dim=1, keepdim=True)
        return logits


@models.register("c51_network")
class C51Network(NoisyMixin, nn.Module):
    """torso (`hp.torso`) + categorical head over `num_atoms` atoms on [v_min, v_max]."""

    def __init__(self, torso: nn.Module, head: CategoricalHead, v_min: float, v_max: float):
        super().__init__()
        if not v_min < v_max or head.num_atoms < 2:
            raise ConfigError(f"C51 needs v_min < v_max and num_atoms >= 2, got {v_min}, {v_max}, {head.num_atoms}")
        self.torso, self.head = torso, head
        self.register_buffer("support", torch.linspace(v_min, v_max, head.num_atoms))
        self.mask_key = None  # the observation entry of the action mask (build sets it)

    @classmethod
    def build(cls, hp, obs_space, action_space) -> C51Network:
        torso = models[hp.torso].build(hp, obs_space)
        head = CategoricalHead(torso.out_dim, num_actions(action_space), hp.num_atoms, hp.dueling,
                               *noisy_settings(hp))
        net = cls(torso, head, hp.v_min, hp.v_max)
        net.mask_key = mask_key(hp, obs_space)
        return net

    def legal(self, values: torch.Tensor, obs) -> torch.Tensor:
        """Expected values [B, A] of the observations `obs` with the illegal actions' at the lowest float (the loss
        picks the bootstrap action among the legal ones, rl/grad_comp/c51.py)."""
        return legal(values, obs, self.mask_key)

    def log_probs(self, obs: torch.Tensor) -> torch.Tensor:
        """log p(z_i | s, a): [B, A, atoms]."""
        return F.log_softmax(fp32_head(self.head, self.torso(obs)), dim=-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q(s, a) = E[Z(s, a)]: [B, A], the illegal actions' at the lowest float."""
        return self.legal((self.log_probs(obs).exp() * self.support).sum(-1), obs)
