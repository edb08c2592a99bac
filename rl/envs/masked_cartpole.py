"""CartPole with its velocities masked (`CartPoleNoVel-v1`): only cart position and pole angle are observed, so a
policy must infer the velocities from its history (rl-baselines3-zoo's recurrent-policy benchmark; the
partially-observed CartPole of Wierstra et al. 2007, "Solving deep memory POMDPs with recurrent policy gradients").

Importing this module registers the id with gymnasium (500-step limit, like CartPole-v1).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

ENV_ID = "CartPoleNoVel-v1"
KEEP = np.array([0, 2])  # x, theta; drop x_dot, theta_dot


class MaskVelocity(gym.ObservationWrapper):
    """Keep the position entries of CartPole's observation."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = gym.spaces.Box(box.low[KEEP], box.high[KEEP], dtype=box.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[KEEP]


def make_masked_cartpole(**kwargs) -> gym.Env:
    return MaskVelocity(CartPoleEnv(**kwargs))


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point="rl.envs.masked_cartpole:make_masked_cartpole", max_episode_steps=500,
                 reward_threshold=475.0)
