"""Action masks given through `info["action_mask"]` (gymnasium's convention: Taxi-v3, the envs of this folder), made
into the observation's `action_mask` entry (RLlib's convention), the one form the rest of the code reads.

`InfoActionMask` wraps each env of a vector: its observation becomes Dict(observation=..., action_mask=MultiBinary(n)),
so the mask rides with every observation through the vector env (a same-step autoreset's final observation carries
the final step's mask), the memories, the workers and evaluation. Whether an env gives such a mask is found once per
env id and process (`gives_info_mask`): one reset of the vector env just made, for Discrete action spaces only.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rl.envs.observations import MASK_KEY

OBSERVATION = "observation"
_FOUND: dict[str, bool] = {}  # env id -> whether its info holds an action mask


class InfoActionMask(gym.Wrapper):
    """Dict(observation=the env's observation, action_mask=info["action_mask"]); a step whose info has no mask allows
    every action."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.n = int(env.action_space.n)
        self.observation_space = gym.spaces.Dict({OBSERVATION: env.observation_space,
                                                  MASK_KEY: gym.spaces.MultiBinary(self.n)})

    def _with_mask(self, obs, info: dict) -> dict:
        mask = info.get(MASK_KEY)
        mask = np.ones(self.n, np.int8) if mask is None else np.asarray(mask, np.int8).reshape(self.n)
        return {OBSERVATION: obs, MASK_KEY: mask}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._with_mask(obs, info), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(obs, info), reward, terminated, truncated, info


def gives_info_mask(env_id: str, env: gym.vector.VectorEnv | None = None) -> bool | None:
    """Whether the envs of `env_id` give their action mask in `info` (and not already in a Dict observation): found
    by one reset of `env`, the first time this process makes the id, and remembered; without `env`, what is known
    (None: not yet)."""
    if env_id not in _FOUND and env is not None:
        found = False
        if isinstance(env.single_action_space, gym.spaces.Discrete) and not (
                isinstance(env.single_observation_space, gym.spaces.Dict)
                and MASK_KEY in env.single_observation_space.spaces):
            _, info = env.reset()
            found = MASK_KEY in info
        _FOUND[env_id] = found
    return _FOUND.get(env_id)
