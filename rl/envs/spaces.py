"""Which observation spaces the models can take, checked when an env is made, before any agent is built.

Every torso reads fixed-shape numeric arrays: the MLP flattens each observation (any shape of one dimension or more),
the CNN torsos take images [channels, height, width] (and check that shape themselves). So an observation space is
taken when it is a Box, MultiBinary or MultiDiscrete of at least one dimension, or a Dict or Tuple whose every entry
is one of those or a Discrete (the multi-input torso, rl/models/multi_input.py, gives each entry its own encoder and
one-hot encodes a Discrete). A Dict entry `action_mask` is the action mask (RLlib's convention): a MultiBinary(n) or
a Box of shape (n,) for a Discrete(n) action space, read by the networks and never encoded. Everything else (Text,
Graph, Sequence, OneOf, a Dict inside a Dict, a scalar Box or Discrete) is refused in one line naming the env and the
space, instead of a TypeError or IndexError deep inside a model, a replay memory or a worker process. The check runs
wherever an env is made (`make_env`): the single process, the learner that reads the spaces before forking its
workers, the workers themselves and evaluation.
"""

from __future__ import annotations

import gymnasium as gym

from rl.envs.observations import MASK_KEY, leaves
from rl.errors import ConfigError

ARRAY_SPACES = (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
SHOWN = 120  # characters of a space's description in the error
SUPPORTED = ("supported are Box (or MultiBinary, MultiDiscrete) observations of at least one dimension (vectors for "
             "the mlp torso, images [channels, height, width] for the CNN torsos), and Dict or Tuple observations of "
             "those and of Discrete")


def describe(space, limit: int = SHOWN) -> str:
    """A space as gymnasium prints it, shortened to `limit` characters."""
    text = " ".join(str(space).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_array(space) -> bool:
    """A space whose observations are arrays of at least one dimension."""
    return isinstance(space, ARRAY_SPACES) and space.shape is not None and len(space.shape) >= 1


def check_observation_space(env_id: str, space, action_space=None) -> None:
    """A one-line ConfigError unless the models can take observations of `space` (see the module docstring); with
    `action_space`, an `action_mask` entry must fit it."""
    if is_array(space):
        return
    entries = leaves(space)
    if entries is not None:
        _check_entries(env_id, space, entries, action_space)
        return
    flattenable = getattr(space, "is_np_flattenable", False)
    hint = "; gymnasium.wrappers.FlattenObservation makes this one a Box" if flattenable else ""
    raise ConfigError(f"env {env_id!r} has the observation space {describe(space)}, which no model takes: "
                      f"{SUPPORTED}{hint}")


def _check_entries(env_id: str, space, entries: dict, action_space) -> None:
    if isinstance(space, gym.spaces.Dict) and MASK_KEY in entries:
        check_mask_space(env_id, entries.pop(MASK_KEY), action_space)
    if not entries:
        raise ConfigError(f"env {env_id!r} has the observation space {describe(space)}, which holds an action mask "
                          f"and nothing to observe: {SUPPORTED}")
    for key, sub in entries.items():
        if not (is_array(sub) or isinstance(sub, gym.spaces.Discrete)):
            raise ConfigError(f"env {env_id!r} has a {type(space).__name__} observation space whose entry {key!r} "
                              f"is {describe(sub, 60)}, which no model takes: {SUPPORTED}")


def check_mask_space(env_id: str, mask_space, action_space) -> None:
    """An action mask is one flag per action of a Discrete action space."""
    shape = getattr(mask_space, "shape", None)
    if not isinstance(mask_space, (gym.spaces.MultiBinary, gym.spaces.Box)) or shape is None or len(shape) != 1:
        raise ConfigError(f"env {env_id!r}: the observation's {MASK_KEY!r} is {describe(mask_space, 60)}; an action "
                          f"mask is a MultiBinary(n) or a Box of shape (n,), one flag per action")
    if action_space is None:
        return
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ConfigError(f"env {env_id!r} gives an action mask for the action space {describe(action_space, 60)}: "
                          f"masks are honoured for Discrete action spaces")
    if shape[0] != action_space.n:
        raise ConfigError(f"env {env_id!r}: the action mask has {shape[0]} flags for {action_space.n} actions")
