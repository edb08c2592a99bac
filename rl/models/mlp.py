"""MLP torso: flattened observations through fully connected layers."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from rl.errors import ConfigError
from rl.registry import models

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}: valid: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def init_orthogonal(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    """Orthogonal weights and zero biases for every Linear layer (the PPO/A2C convention)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


@models.register("mlp")
class MLP(nn.Module):
    """Fully connected torso; `out_dim` is the size of the features it returns."""

    def __init__(self, in_dim: int, hidden_sizes: list[int], act: str = "relu"):
        super().__init__()
        layers, last = [nn.Flatten()], in_dim
        for size in hidden_sizes:
            layers += [nn.Linear(last, size), activation(act)()]
            last = size
        self.net = nn.Sequential(*layers)
        self.out_dim = last

    @classmethod
    def build(cls, hp, obs_space) -> "MLP":
        return cls(int(np.prod(obs_space.shape)), hp.hidden_sizes, hp.activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float())
