"""MLP torso: flattened observations through fully connected layers."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rl.errors import ConfigError
from rl.registry import models

# functions, not nn.Modules: a module call costs microseconds of overhead, several per forward pass of a small network
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "elu": F.elu, "gelu": F.gelu, "silu": F.silu}


def activation(name: str):
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
        sizes = [in_dim, *hidden_sizes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.act = activation(act)
        self.out_dim = sizes[-1]

    @classmethod
    def build(cls, hp, obs_space) -> MLP:
        return cls(int(np.prod(obs_space.shape)), hp.hidden_sizes, hp.activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1).float()
        for layer in self.layers:  # F.linear skips nn.Module call overhead, which dominates for small layers
            x = self.act(F.linear(x, layer.weight, layer.bias))
        return x
