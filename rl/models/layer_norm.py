"""Torsos with LayerNorm (Ba et al. 2016) before every activation: PQN's networks (Gallici et al. 2025, "Simplifying
Deep Temporal Difference Learning"), whose analysis credits LayerNorm with what a target network did for DQN: TD
learning without one stays stable.

- `layer_norm_mlp`: the MLP torso with each hidden layer Linear -> LayerNorm -> activation (CleanRL's pqn.py: 120 and
  84 units, ReLU).
- `layer_norm_nature_cnn`: the Nature CNN (Mnih et al. 2015) with LayerNorm over each conv's whole output [C, H, W]
  and over the 512 dense features, before each ReLU (CleanRL's pqn_atari_envpool.py; purejaxql's pqn_atari.py).

Either feeds any Q head (`model=q_network`); each LayerNorm has its elementwise gain and bias, as torch's and flax's do
by default.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rl.models.cnn import NatureCNN, image_shape
from rl.models.mlp import MLP
from rl.registry import models


@models.register("layer_norm_mlp")
class LayerNormMLP(MLP):
    """MLP with LayerNorm between each linear layer and its activation; `out_dim` as MLP's."""

    def __init__(self, in_dim: int, hidden_sizes: list[int], act: str = "relu"):
        super().__init__(in_dim, hidden_sizes, act)
        self.norms = nn.ModuleList(nn.LayerNorm(layer.out_features) for layer in self.layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1).float()
        for layer, norm in zip(self.layers, self.norms):  # functional calls: no nn.Module call overhead
            x = F.linear(x, layer.weight, layer.bias)
            x = self.act(F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps))
        return x


@models.register("layer_norm_nature_cnn")
class LayerNormNatureCNN(NatureCNN):
    """The Nature CNN with LayerNorm after each conv and the dense layer; `out_dim` = 512. 1,684,128 + 2 x (32x20x20 +
    64x9x9 + 64x7x7 + 512) = 1,727,392 parameters at 4x84x84."""

    def __init__(self, in_shape: tuple[int, int, int], channels_last: bool = False):
        super().__init__(in_shape, channels_last)
        _, h, w = in_shape
        norms = []
        for conv in self.convs:
            h, w = (h - conv.kernel_size[0]) // conv.stride[0] + 1, (w - conv.kernel_size[1]) // conv.stride[1] + 1
            norms.append(nn.LayerNorm([conv.out_channels, h, w]))
        self.norms = nn.ModuleList(norms)
        self.fc_norm = nn.LayerNorm(self.out_dim)

    @classmethod
    def build(cls, hp, obs_space) -> LayerNormNatureCNN:
        return cls(image_shape(obs_space, "layer_norm_nature_cnn"), hp.channels_last).finish(hp.channels_last)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        first = self.convs[0]  # conv(x / 255) as a conv with weights / 255, as NatureCNN's
        x = F.conv2d(self.frames(obs), first.weight / 255.0, first.bias, first.stride)
        x = F.relu(self.norms[0](x))
        for conv, norm in zip(self.convs[1:], self.norms[1:]):
            x = F.relu(norm(conv(x)))
        return F.relu(self.fc_norm(self.fc(x.flatten(1))))
