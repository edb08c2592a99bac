"""MLP torso: flattened observations through fully connected layers."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rl.envs.observations import leaves
from rl.errors import ConfigError
from rl.models.multi_input import observation_torso
from rl.registry import models

# functions, not nn.Modules: a module call costs microseconds of overhead, several per forward pass of a small network
ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "elu": F.elu, "gelu": F.gelu, "silu": F.silu}


def activation(name: str):
    if name not in ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}: valid: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


@torch.no_grad()
def init_orthogonal(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    """Orthogonal weights and zero biases for every Linear and Conv2d layer (the PPO/A2C convention; CleanRL and SB3
    treat conv layers so too). A module with `self_initialised = True` (impala_cnn under Fixup) keeps its own
    initialisation, and so does everything inside it."""
    if getattr(module, "self_initialised", False):
        return
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        # filled through a contiguous tensor (the same draws): orthogonal_ cannot fill a channels-last weight in place
        module.weight.copy_(nn.init.orthogonal_(torch.empty_like(module.weight, memory_format=torch.contiguous_format),
                                                gain))
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    for child in module.children():
        init_orthogonal(child, gain)


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
        if leaves(obs_space) is not None:  # a Dict or Tuple: an encoder per entry (rl/models/multi_input.py)
            return observation_torso(hp, obs_space)
        return cls(int(np.prod(obs_space.shape)), hp.hidden_sizes, hp.activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1).float()
        for layer in self.layers:  # F.linear skips nn.Module call overhead, which dominates for small layers
            x = self.act(F.linear(x, layer.weight, layer.bias))
        return x
