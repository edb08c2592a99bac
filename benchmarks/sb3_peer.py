"""Stable-Baselines3's SAC and TD3, and sb3-contrib's TQC, with our continuous sets' settings: the peer that
benchmarks/actor_critic_speed.py, step_ceiling.py, quantile_vs_sb3contrib.py and sb3_run.py run beside ours.
Installed for benchmarks only:

    .venv/bin/pip install stable-baselines3 sb3-contrib

SAC as rl-baselines3-zoo's sac.yml (pybullet defaults: gSDE, log_std_init -3, 8 gradient steps every 8 env steps,
batch 256, 400x300), TD3 as the zoo's scored agent (rl-trained-agents td3/HalfCheetahBulletEnv-v0_1/config.yml: N(0,
0.1) action noise, one training phase of as many gradient steps as the episode had env steps, batch 100), both behind
the TimeFeatureWrapper, as `sac_halfcheetah_bullet` and `td3_halfcheetah_bullet` are. TQC as the zoo's tqc.yml (its
pybullet defaults are the SAC ones above, with TQC's 2 critics of 25 quantiles, 2 dropped per critic), as
`tqc_halfcheetah_bullet`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from sb3_contrib import TQC
from sb3_contrib.common.wrappers import TimeFeatureWrapper
from stable_baselines3 import SAC, TD3
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.noise import NormalActionNoise

SAC_SETTINGS = dict(learning_rate=7.3e-4, buffer_size=300_000, learning_starts=10_000, batch_size=256, tau=0.02,
                    gamma=0.98, train_freq=8, gradient_steps=8, use_sde=True,
                    policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300]))
TD3_SETTINGS = dict(learning_rate=1e-3, buffer_size=200_000, learning_starts=10_000, batch_size=100, gamma=0.98,
                    train_freq=(1, "episode"), gradient_steps=-1, policy_kwargs=dict(net_arch=[400, 300]))


ALGOS = {"sac": SAC, "td3": TD3, "tqc": TQC}  # the peer's class of each algorithm, for making and for loading


def make_env(env_id: str) -> gym.Env:
    if "Bullet" in env_id:
        import pybullet_envs_gymnasium  # noqa: F401  (registers the PyBullet ids)
    return TimeFeatureWrapper(Monitor(gym.make(env_id)))


def make_model(algo: str, env: gym.Env, seed: int, learning_starts: int | None = None, device: str = "cpu"):
    """SB3's SAC or TD3, or sb3-contrib's TQC, on `env` with the settings above (`learning_starts` overridden when
    given)."""
    starts = {} if learning_starts is None else {"learning_starts": learning_starts}
    if algo in ("sac", "tqc"):
        return ALGOS[algo]("MlpPolicy", env, seed=seed, device=device, verbose=0, **{**SAC_SETTINGS, **starts})
    dims = env.action_space.shape[0]
    noise = NormalActionNoise(np.zeros(dims), 0.1 * np.ones(dims))
    return TD3("MlpPolicy", env, action_noise=noise, seed=seed, device=device, verbose=0,
               **{**TD3_SETTINGS, **starts})
