"""DQN on CartPole-v1: our `dqn_cartpole` against Stable-Baselines3's DQN with the same rl-baselines3-zoo settings
and seeds, one after the other in one run, each as a whole process.

    .venv/bin/pip install stable-baselines3      # the peer, for benchmarks only
    .venv/bin/python benchmarks/dqn_cartpole.py --seeds 0 1 2

Prints whole-process wall time, steps/s, peak memory and the final greedy evaluation (10 episodes) for both (and our
best periodic one, every eval_interval = 10000 steps, from progress.csv), and the speed ratio SB3 time / our time.
"""

from __future__ import annotations

from common import benchmark_parser, compare_with_sb3

SB3_SCRIPT = """
import json, sys, time
import gymnasium as gym, numpy as np, torch
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy
seed, steps, episodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
model = DQN("MlpPolicy", "CartPole-v1", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
            learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
            exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed, device="cpu", verbose=0)
start = time.perf_counter()  # like ours (eval.json's wall_time_s): the training loop, after construction
model.learn(steps)
train_s = time.perf_counter() - start
env = gym.make("CartPole-v1")
mean, std = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True)
print(json.dumps({"mean_return": float(mean), "std_return": float(std), "train_s": train_s}))
"""


def main() -> None:
    args = benchmark_parser(__doc__, steps=50_000).parse_args()
    compare_with_sb3("dqn_cartpole", SB3_SCRIPT, "DQN CartPole-v1", args.seeds, args.steps, args.episodes,
                     args.skip_peer)


if __name__ == "__main__":
    main()
