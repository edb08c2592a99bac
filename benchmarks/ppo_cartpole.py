"""PPO on CartPole-v1: our `ppo_cartpole` against Stable-Baselines3's PPO with the same rl-baselines3-zoo settings
(8 envs, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, ent_coef 0, lr and clip range linear from
1e-3 and 0.2) and seeds, one after the other in one run, each as a whole process.

    .venv/bin/pip install stable-baselines3      # the peer, for benchmarks only
    .venv/bin/python benchmarks/ppo_cartpole.py --seeds 0 1 2

Prints whole-process wall time, the training loop's time (train_s: after the agent is built, before the final
evaluation), steps/s, peak memory and the final greedy evaluation (10 episodes) for both, and the speed ratios
SB3 / ours. The issue's goal: the whole process at least 3x faster, with a greedy evaluation of 500.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from common import last_json_line, print_table, run_process

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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--skip_peer", action="store_true", help="run only ours")
    args = p.parse_args()
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            out = Path(tmp) / f"ours_{seed}"
            ours = run_process([py, "train.py", "--hparams", "ppo_cartpole", "--output_dir", str(out), "--seed",
                                str(seed), "--train_steps", str(args.steps), "--eval_episodes", str(args.episodes)])
            ev = json.loads((out / "eval.json").read_text())
            rows.append({"impl": "rl", "seed": seed, "wall_s": ours["wall_s"], "train_s": ev["wall_time_s"],
                         "steps_per_s": args.steps / ours["wall_s"], "peak_mib": ours["peak_rss_mib"],
                         "eval_return": ev["mean_return"]})
            if not args.skip_peer:
                sb3 = run_process([py, "-c", SB3_SCRIPT, str(seed), str(args.steps), str(args.episodes)])
                res = last_json_line(sb3["stdout"])
                rows.append({"impl": "sb3", "seed": seed, "wall_s": sb3["wall_s"], "train_s": res["train_s"],
                             "steps_per_s": args.steps / sb3["wall_s"], "peak_mib": sb3["peak_rss_mib"],
                             "eval_return": res["mean_return"]})
            print_table(rows[-2:], list(rows[0]))
    print(f"\nPPO CartPole-v1, {args.steps} steps, whole processes")
    print_table(rows, list(rows[0]))
    ours = [r for r in rows if r["impl"] == "rl"]
    peer = [r for r in rows if r["impl"] == "sb3"]
    print(f"\nrl : mean wall {np.mean([r['wall_s'] for r in ours]):.1f} s, "
          f"evals {[round(r['eval_return']) for r in ours]}")
    if peer:
        print(f"sb3: mean wall {np.mean([r['wall_s'] for r in peer]):.1f} s, "
              f"evals {[round(r['eval_return']) for r in peer]}")
        print(f"speed ratio (sb3 wall / rl wall): "
              f"{np.mean([r['wall_s'] for r in peer]) / np.mean([r['wall_s'] for r in ours]):.2f}x")
        print(f"training-time ratio (sb3 train_s / rl train_s): "
              f"{np.mean([r['train_s'] for r in peer]) / np.mean([r['train_s'] for r in ours]):.2f}x")


if __name__ == "__main__":
    main()
