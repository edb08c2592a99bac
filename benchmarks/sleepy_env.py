"""A "remote simulator" for benchmarks: CartPole-v1 whose every step also waits 2 ms, sleeping (no CPU used).

Importing this module registers `SleepyCartPole-v1` with gymnasium (CartPole-v1's dynamics, reward, 500-step limit
and reward threshold; `sleep_s` kwarg, default 0.002). It stands for an env whose step is latency, not computation
(a simulator on another machine, a robot, a game server): one process stepping N of them in a sync vector env waits
N x 2 ms per vector step, and collection workers overlap those waits without competing for cores.

    PYTHONPATH=benchmarks python train.py --hparams ppo_cartpole --env sleepy_env:SleepyCartPole-v1 \\
        --num_workers 4 --hparam_override vector_mode=sync,worker_envs=2
"""

from __future__ import annotations

import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

ENV_ID = "SleepyCartPole-v1"
SLEEP_S = 0.002


class SleepyCartPoleEnv(CartPoleEnv):
    """CartPoleEnv with `time.sleep(sleep_s)` in every step (reset does not wait)."""

    def __init__(self, sleep_s: float = SLEEP_S, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.sleep_s = float(sleep_s)

    def step(self, action):
        time.sleep(self.sleep_s)
        return super().step(action)


if ENV_ID not in gym.registry:  # imported again (a worker, a second import path): registered once
    gym.register(id=ENV_ID, entry_point=SleepyCartPoleEnv, max_episode_steps=500, reward_threshold=475.0,
                 kwargs={"sleep_s": SLEEP_S})
