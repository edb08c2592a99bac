"""How the networks read a structured observation (a gymnasium Dict or Tuple, held as a DictObs,
rl/envs/observations.py): the multi-input torso, and the action mask.

- `multi_input` (Stable-Baselines3's CombinedExtractor, with an MLP per vector): each entry through its own encoder,
  an MLP of `hidden_sizes` for a vector (any array of one dimension or more, flattened), a one-hot code then the MLP
  for a Discrete, the configured CNN torso (`torso`, nature_cnn where it names no CNN) for a uint8 image [channels,
  height, width]; the encodings concatenated, then one fusion layer of `hidden_sizes[-1]` units. The heads on top are
  linear: without the fusion layer a value could only be a sum of one term per entry.
- `observation_torso` is what a torso's `build` gives for a Dict or Tuple space (`MLP.build` and the CNNs' hand it
  over, so every network that builds `models[hp.torso]` takes structured observations unchanged): the multi-input
  torso, or where one entry is left besides the mask (`observation` of an env whose info gave the mask) that entry's
  own torso, reading only it.
- The action mask, the entry `action_mask`, is never encoded: `mask_key` tells a network to read it, and `mask_out`
  gives illegal actions the lowest finite value of the dtype: a logit whose probability is exactly 0 (log-probability
  and entropy over the legal actions), a Q-value that no max or argmax picks. Finite, so that 0 x it is 0 where a
  terminated step's bootstrap is multiplied away. With `mask_actions=false` (a set's setting, hparams/masked.py) the
  mask is neither applied nor read.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl.envs.observations import MASK_KEY, leaves
from rl.envs.spaces import describe
from rl.errors import ConfigError
from rl.registry import models


def entries(obs_space) -> dict:
    """The entries of a Dict or Tuple space that a torso encodes (the action mask left out)."""
    return {k: s for k, s in leaves(obs_space).items() if k != MASK_KEY}


def is_image(space) -> bool:
    return getattr(space, "dtype", None) == "uint8" and len(space.shape) == 3


def mask_key(hp, obs_space) -> str | None:
    """The observation entry a network masks its actions by: `action_mask` where the space has one and the set does
    not turn masks off (`mask_actions`), else None."""
    entries_ = leaves(obs_space)
    if entries_ is None or MASK_KEY not in entries_:
        return None
    return MASK_KEY if ("mask_actions" not in hp or hp.mask_actions) else None


def mask_out(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`values` [B, A] with the illegal actions' (mask 0) set to the dtype's lowest finite value."""
    if mask is None:
        return values
    return values.masked_fill(mask.logical_not(), torch.finfo(values.dtype).min)


def legal(values: torch.Tensor, obs, key: str | None) -> torch.Tensor:
    """`mask_out` by the mask entry `key` of the observations (a no-op where `key` is None)."""
    return values if key is None else mask_out(values, obs[key])


def legal_values(net: nn.Module, values: torch.Tensor, obs) -> torch.Tensor:
    """`values` [B, A] of `obs` as `net` masks them (its `legal` method), for a loss that computes a network's values
    itself (C51's expected values from its atoms); unchanged for a network without masks."""
    return net.legal(values, obs) if hasattr(net, "legal") else values


class EntryTorso(nn.Module):
    """A torso that reads one entry of a structured observation (what a Dict(observation, action_mask) leaves)."""

    def __init__(self, key: str, torso: nn.Module):
        super().__init__()
        self.key, self.torso, self.out_dim = key, torso, torso.out_dim

    def forward(self, obs) -> torch.Tensor:
        return self.torso.forward(obs[self.key])


@models.register("multi_input")
class MultiInput(nn.Module):
    """An encoder per entry, their features concatenated, then a fusion layer (see the module docstring)."""

    def __init__(self, encoders: dict[str, nn.Module], one_hot: dict[str, tuple[int, int]], fusion: nn.Module):
        super().__init__()
        self.keys = list(encoders)  # an entry's name may be a ModuleDict's method ("values"): a list, by position
        self.encoders = nn.ModuleList(encoders.values())
        self.one_hot = dict(one_hot)  # Discrete entries: (number of values, first value)
        self.fusion = fusion  # an MLP of one layer
        self.out_dim = fusion.out_dim

    @classmethod
    def build(cls, hp, obs_space) -> MultiInput:
        mlp = models["mlp"]
        image_torso = hp.torso if getattr(models[hp.torso], "READS_IMAGES", False) else "nature_cnn"
        encoders, one_hot = {}, {}
        for key, space in entries(obs_space).items():
            if isinstance(space, gym.spaces.Discrete):
                one_hot[key] = (int(space.n), int(space.start))
                encoders[key] = mlp(int(space.n), hp.hidden_sizes, hp.activation)
            elif is_image(space):
                encoders[key] = models[image_torso].build(hp, space)
            else:
                encoders[key] = mlp(math.prod(space.shape), hp.hidden_sizes, hp.activation)
        width = sum(e.out_dim for e in encoders.values())
        return cls(encoders, one_hot, mlp(width, hp.hidden_sizes[-1:] or [width], hp.activation))

    def forward(self, obs) -> torch.Tensor:
        feats = []
        for key, encoder in zip(self.keys, self.encoders):
            x = obs[key]
            if key in self.one_hot:
                n, start = self.one_hot[key]
                x = F.one_hot(x.long() - start, n)
            feats.append(encoder.forward(x).float())
        return self.fusion.forward(torch.cat(feats, -1))


def observation_torso(hp, obs_space) -> nn.Module:
    """The torso for a Dict or Tuple observation space (see the module docstring)."""
    if "normalize_obs" in hp and hp.normalize_obs:
        raise ConfigError(f"normalize_obs standardises one observation array, the env's are {describe(obs_space)}: "
                          f"set normalize_obs=false")
    encoded = entries(obs_space)
    if len(encoded) == 1:
        (key, space), = encoded.items()
        if not isinstance(space, gym.spaces.Discrete):
            return EntryTorso(key, models[hp.torso].build(hp, space))
    return MultiInput.build(hp, obs_space)
