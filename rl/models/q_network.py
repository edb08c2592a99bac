"""Q networks for discrete actions: a torso and a Q head, or a dueling head (Wang et al. 2016); either head may use
noisy linear layers (Fortunato et al. 2018, rl/models/noisy.py) with `noisy=true`."""

from __future__ import annotations

import torch
from torch import nn

from rl.errors import ConfigError
from rl.models.multi_input import legal, mask_key, mask_out
from rl.models.noisy import NoisyMixin, linear
from rl.registry import models


@models.register("q")
class QHead(nn.Module):
    """One linear layer from features to one value per action."""

    def __init__(self, in_dim: int, num_actions: int, noisy: bool = False, sigma0: float = 0.5):
        super().__init__()
        self.out = linear(in_dim, num_actions, noisy, sigma0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.out.forward(features)  # .forward: skips nn.Module call overhead


@models.register("dueling")
class DuelingHead(nn.Module):
    """Q = V + A - mean(A): separate value and advantage streams."""

    def __init__(self, in_dim: int, num_actions: int, noisy: bool = False, sigma0: float = 0.5):
        super().__init__()
        self.value = linear(in_dim, 1, noisy, sigma0)
        self.advantage = linear(in_dim, num_actions, noisy, sigma0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        adv = self.advantage.forward(features)
        return self.value.forward(features) + adv - adv.mean(dim=-1, keepdim=True)


def fp32_head(head: nn.Module, features: torch.Tensor) -> torch.Tensor:
    """The head on `features`, in fp32 even under bf16 autocast (`precision=bf16` speeds up the torso): TD targets,
    action gaps and the distributional losses need more than bf16's 8 mantissa bits, and the head costs little."""
    if not torch.is_autocast_enabled(features.device.type):
        return head.forward(features)  # .forward: skips nn.Module call overhead
    with torch.autocast(features.device.type, enabled=False):
        return head.forward(features.float())


def num_actions(action_space) -> int:
    if not hasattr(action_space, "n"):
        raise ConfigError(f"Q networks need a Discrete action space, the env has {action_space}")
    return int(action_space.n)


def noisy_settings(hp) -> tuple[bool, float]:
    """(`noisy`, `noisy_sigma0`) where the family defines them, else no noise."""
    return (hp.noisy, hp.noisy_sigma0) if "noisy" in hp else (False, 0.5)


@models.register("q_network")
class QNetwork(NoisyMixin, nn.Module):
    """torso (`hp.torso`) + Q or dueling head (`hp.dueling`), noisy with `hp.noisy`; the actions that the
    observation's action mask forbids get the lowest Q-value (rl/models/multi_input.py)."""

    def __init__(self, torso: nn.Module, head: nn.Module):
        super().__init__()
        self.torso, self.head = torso, head
        self.mask_key = None  # the observation entry of the action mask (build sets it)

    @classmethod
    def build(cls, hp, obs_space, action_space) -> QNetwork:
        n = num_actions(action_space)
        torso = models[hp.torso].build(hp, obs_space)
        head = models["dueling" if hp.dueling else "q"](torso.out_dim, n, *noisy_settings(hp))
        net = cls(torso, head)
        net.mask_key = mask_key(hp, obs_space)
        return net

    def legal(self, values: torch.Tensor, obs) -> torch.Tensor:
        """Values [B, A] of the observations `obs` with the illegal actions' at the lowest float."""
        return legal(values, obs, self.mask_key)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        q = fp32_head(self.head, self.torso.forward(obs))
        return q if self.mask_key is None else mask_out(q, obs[self.mask_key])
