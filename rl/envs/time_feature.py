"""The time feature (Pardo et al. 2018, "Time Limits in Reinforcement Learning"; sb3-contrib's TimeFeatureWrapper,
which rl-baselines3-zoo puts on every PyBullet env): the observation gets one more entry, 1 - t / max_steps, 1.0 at
reset and 0.0 at the time limit, so a policy and its critics can tell how much of the episode is left. With the
remaining time observed, a truncation is a state the value can see coming, not an unobservable cut."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rl.errors import ConfigError


class TimeFeature(gym.Wrapper):
    """Appends 1 - t / max_steps to a flat Box observation, t being the steps taken since reset."""

    def __init__(self, env: gym.Env, max_steps: int = 0):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"time_feature needs a flat Box observation space, the env has {space}")
        self.max_steps = max_steps or (env.spec.max_episode_steps if env.spec else None) or 0
        if self.max_steps < 1:
            raise ConfigError("time_feature needs a time limit: the env id has none, set max_episode_steps")
        self.observation_space = gym.spaces.Box(np.append(space.low, 0.0).astype(space.dtype),
                                                np.append(space.high, 1.0).astype(space.dtype), dtype=space.dtype)
        self.t = 0

    def reset(self, **kwargs):
        self.t = 0
        obs, info = self.env.reset(**kwargs)
        return self._with_time(obs), info

    def step(self, action):
        self.t += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._with_time(obs), reward, terminated, truncated, info

    def _with_time(self, obs: np.ndarray) -> np.ndarray:
        return np.append(obs, 1.0 - self.t / self.max_steps).astype(self.observation_space.dtype)
