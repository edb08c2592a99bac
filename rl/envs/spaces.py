"""Which observation spaces the models can take, checked when an env is made, before any agent is built.

Every torso reads a batch of fixed-shape numeric arrays: the MLP flattens each observation (any shape of one dimension
or more), the CNN torsos take images [channels, height, width] (and check that shape themselves). So an observation
space is taken when it is a Box, MultiBinary or MultiDiscrete of at least one dimension. Structured spaces (Dict,
Tuple, Text, Graph, Sequence, OneOf) and scalar ones (Discrete, a 0-d Box) are refused in one line naming the env and
the space, instead of a TypeError or IndexError deep inside a model, a replay memory or a worker process. The check
runs wherever an env is made (`make_env`): the single process, the learner that reads the spaces before forking its
workers, the workers themselves and evaluation.
"""

from __future__ import annotations

import gymnasium as gym

from rl.errors import ConfigError

ARRAY_SPACES = (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)
SHOWN = 120  # characters of a space's description in the error


def describe(space, limit: int = SHOWN) -> str:
    """A space as gymnasium prints it, shortened to `limit` characters."""
    text = " ".join(str(space).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_observation_space(env_id: str, space) -> None:
    """A one-line ConfigError unless the models can take observations of `space` (see the module docstring)."""
    if isinstance(space, ARRAY_SPACES) and space.shape is not None and len(space.shape) >= 1:
        return
    flattenable = getattr(space, "is_np_flattenable", False)
    hint = "; gymnasium.wrappers.FlattenObservation makes this one a Box" if flattenable else ""
    raise ConfigError(f"env {env_id!r} has the observation space {describe(space)}, which no model takes: supported "
                      f"are Box (or MultiBinary, MultiDiscrete) observations of at least one dimension, vectors for "
                      f"the mlp torso and images [channels, height, width] for the CNN torsos{hint}")
