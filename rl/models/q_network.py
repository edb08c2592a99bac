"""Q networks for discrete actions: a torso and a Q head, or a dueling head (Wang et al. 2016)."""

from __future__ import annotations

import torch
from torch import nn

from rl.errors import ConfigError
from rl.registry import models


@models.register("q")
class QHead(nn.Module):
    """One linear layer from features to one value per action."""

    def __init__(self, in_dim: int, num_actions: int):
        super().__init__()
        self.out = nn.Linear(in_dim, num_actions)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out(features)


@models.register("dueling")
class DuelingHead(nn.Module):
    """Q = V + A - mean(A): separate value and advantage streams."""

    def __init__(self, in_dim: int, num_actions: int):
        super().__init__()
        self.value = nn.Linear(in_dim, 1)
        self.advantage = nn.Linear(in_dim, num_actions)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        adv = self.advantage(features)
        return self.value(features) + adv - adv.mean(dim=-1, keepdim=True)


@models.register("q_network")
class QNetwork(nn.Module):
    """torso (`hp.torso`) + Q or dueling head (`hp.dueling`)."""

    def __init__(self, torso: nn.Module, head: nn.Module):
        super().__init__()
        self.torso, self.head = torso, head

    @classmethod
    def build(cls, hp, obs_space, action_space) -> "QNetwork":
        if not hasattr(action_space, "n"):
            raise ConfigError(f"Q networks need a Discrete action space, the env has {action_space}")
        torso = models[hp.torso].build(hp, obs_space)
        head = models["dueling" if hp.dueling else "q"](torso.out_dim, int(action_space.n))
        return cls(torso, head)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(obs))
