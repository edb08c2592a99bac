"""PPO on CartPole-v1: our `ppo_cartpole` against Stable-Baselines3's PPO with the same rl-baselines3-zoo settings
(8 envs, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, ent_coef 0, lr and clip range linear from
1e-3 and 0.2) and seeds, one after the other in one run, each as a whole process.

    .venv/bin/pip install stable-baselines3      # the peer, for benchmarks only
    .venv/bin/python benchmarks/ppo_cartpole.py --seeds 0 1 2

Prints whole-process wall time, the training loop's time (train_s: after the agent is built, before the final
evaluation), steps/s, peak memory and the final greedy evaluation (10 episodes) for both, and the speed ratios
SB3 / ours. The goal: the whole process at least 3x faster, with a greedy evaluation of 500.
"""

from __future__ import annotations

from common import benchmark_parser, compare_with_sb3

SB3_SCRIPT = """
import json, sys, time
import numpy as np, torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
import gymnasium as gym
seed, steps, episodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def linear(start):
    return lambda progress_remaining: progress_remaining * start
env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
            learning_rate=linear(1e-3), clip_range=linear(0.2), seed=seed, device="cpu", verbose=0)
start = time.perf_counter()  # like ours (eval.json's wall_time_s): the training loop, after construction
model.learn(steps)
train_s = time.perf_counter() - start
mean, std = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=episodes, deterministic=True)
print(json.dumps({"mean_return": float(mean), "std_return": float(std), "train_s": train_s}))
"""


def main() -> None:
    args = benchmark_parser(__doc__, steps=100_000).parse_args()
    compare_with_sb3("ppo_cartpole", SB3_SCRIPT, "PPO CartPole-v1", args.seeds, args.steps, args.episodes,
                     args.skip_peer)


if __name__ == "__main__":
    main()
