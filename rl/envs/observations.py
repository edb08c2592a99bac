"""Structured observations (gymnasium Dict and Tuple spaces) as the agents, memories and networks hold them.

A vector env gives a Dict space's observations as a dict of batched arrays and a Tuple space's as a tuple of them.
Here both become a `DictObs`: one array (numpy or torch) per key, a Tuple's keys being "0", "1", ... Indexing by
anything but a key, assignment and the few array methods the memories use (`to`, `flatten`, `clone`, `numpy`,
`share_memory_`, ...) apply to every key, so a memory keeps one array per key and the code that fills and samples it
reads the same for plain and structured observations; a plain array passes through every helper untouched, so envs
with Box observations pay nothing. Checkpoints hold a DictObs as a plain dict of tensors (`plain`): they load with
`weights_only=True`.

An action mask travels as the key `action_mask` of the observation (RLlib's convention; an env that gives it as
`info["action_mask"]`, gymnasium's, is wrapped into it where it is made, rl/envs/action_masks.py), so it is stored
with each transition and read again at update time by whatever reads the observation (rl/models/multi_input.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rl.errors import ConfigError

MASK_KEY = "action_mask"


class DictObs:
    """A batch of structured observations: arrays with the same leading dimensions, by key."""

    __slots__ = ("data",)

    def __init__(self, data):
        if isinstance(data, DictObs):
            data = data.data
        elif isinstance(data, (tuple, list)):
            data = {str(i): v for i, v in enumerate(data)}
        self.data = dict(data)

    def __getitem__(self, index):
        if isinstance(index, str):
            return self.data[index]
        return DictObs({k: v[index] for k, v in self.data.items()})

    def __setitem__(self, index, value) -> None:
        if isinstance(index, str):
            self.data[index] = value
            return
        if isinstance(value, (DictObs, dict, tuple, list)):
            value = DictObs(value).data
            for k, v in self.data.items():
                v[index] = value[k]
        else:  # one value for every key (a scalar)
            for v in self.data.values():
                v[index] = value

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(next(iter(self.data.values())))

    def __repr__(self) -> str:
        return f"DictObs({', '.join(f'{k}: {type(v).__name__}{tuple(v.shape)}' for k, v in self.data.items())})"

    def keys(self):
        return self.data.keys()

    def items(self):
        return self.data.items()

    def map(self, fn: Callable) -> DictObs:
        return DictObs({k: fn(v) for k, v in self.data.items()})

    # the array methods the memories and networks call, key by key
    def to(self, *args, **kwargs) -> DictObs:
        return self.map(lambda v: v.to(*args, **kwargs))

    def flatten(self, *args) -> DictObs:
        return self.map(lambda v: v.flatten(*args))

    def split(self, size: int) -> list[DictObs]:
        """Consecutive batches of `size` rows (torch views), as `Tensor.split`."""
        return [DictObs(dict(zip(self.data, parts))) for parts in zip(*(v.split(size) for v in self.data.values()))]

    def clone(self) -> DictObs:
        return self.map(lambda v: v.clone())

    def copy(self) -> DictObs:
        return self.map(lambda v: v.copy())

    def numpy(self) -> DictObs:
        return self.map(lambda v: v.numpy())

    def share_memory_(self) -> DictObs:
        for v in self.data.values():
            v.share_memory_()
        return self

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.data.values())


def as_obs(obs):
    """A vector env's observations as this code holds them: a dict or tuple becomes a DictObs, an array stays."""
    return DictObs(obs) if isinstance(obs, (dict, tuple)) else obs


def obs_map(fn: Callable, obs):
    """`fn` applied to every array of `obs` (an array, a DictObs, or a checkpoint's plain dict)."""
    if isinstance(obs, DictObs):
        return obs.map(fn)
    if isinstance(obs, dict):
        return {k: fn(v) for k, v in obs.items()}
    return fn(obs)


def plain(obs):
    """A DictObs as a plain dict (what a checkpoint stores); an array as it is."""
    return dict(obs.data) if isinstance(obs, DictObs) else obs


def cat(parts: list):
    """Batches concatenated along the first dimension (torch), key by key for DictObs."""
    if isinstance(parts[0], DictObs):
        return DictObs({k: torch.cat([p[k] for p in parts]) for k in parts[0].keys()})
    return torch.cat(parts)


def to_tensor(obs, device) -> torch.Tensor | DictObs:
    """A batch of observations (an array, a DictObs, or a vector env's dict or tuple) as tensors on `device`."""
    return obs_map(lambda a: torch.from_numpy(np.asarray(a)).to(device), as_obs(obs))


def num_rows(obs) -> int:
    """The batch size of a batch of observations (a dict's length is its number of keys, not of rows)."""
    return len(as_obs(obs))


def action_mask(obs, key: str | None) -> np.ndarray | None:
    """The legal actions [B, A] (bool) of a batch of observations, or None where `key` is None (no mask)."""
    if key is None:
        return None
    mask = as_obs(obs)[key]
    return mask.cpu().numpy().astype(bool) if isinstance(mask, torch.Tensor) else np.asarray(mask, bool)


def fields(space) -> tuple:
    """(shape, dtype) of one observation of `space`: a plain space's, or for a Dict or Tuple space dicts of them by
    key (rl/envs/spaces.py has checked that every key holds an array space or a Discrete)."""
    subspaces = leaves(space)
    if subspaces is None:
        return tuple(space.shape), space.dtype
    return ({k: tuple(s.shape) for k, s in subspaces.items()},
            {k: np.dtype(np.int64) if s.dtype is None else s.dtype for k, s in subspaces.items()})


def leaves(space) -> dict | None:
    """The subspaces of a Dict or Tuple space by key (a Tuple's keys "0", "1", ...), None for any other space."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return dict(space.spaces)
    if isinstance(space, gym.spaces.Tuple):
        return {str(i): s for i, s in enumerate(space.spaces)}
    return None


def zeros(lead: tuple, shape, dtype, make: Callable):
    """Storage for observations of `fields`' (shape, dtype) with leading dimensions `lead`: `make(full_shape, dtype)`
    once for a plain space, once per key for a structured one."""
    if shape is None:  # a caller that took `space.shape` of a Dict or Tuple space, which gymnasium leaves None
        raise ConfigError("structured observations (a Dict or Tuple space) reached a store of one array per "
                          "observation: this agent or memory takes Box observations only")
    if isinstance(shape, dict):
        return DictObs({k: make((*lead, *shape[k]), dtype[k]) for k in shape})
    return make((*lead, *shape), dtype)
