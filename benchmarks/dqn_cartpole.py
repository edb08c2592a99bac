"""DQN on CartPole-v1: our `dqn_cartpole` against Stable-Baselines3's DQN with the same rl-baselines3-zoo settings
and seeds, one after the other in one run, each as a whole process.

    .venv/bin/pip install stable-baselines3      # the peer, for benchmarks only
    .venv/bin/python benchmarks/dqn_cartpole.py --seeds 0 1 2

Prints whole-process wall time, steps/s, peak memory and the final greedy evaluation (10 episodes) for both, and the
speed ratio SB3 time / our time.
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
import gymnasium as gym, numpy as np, torch
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy
seed, steps, episodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
model = DQN("MlpPolicy", "CartPole-v1", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
            learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
            exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]),
            seed=seed, device="cpu", verbose=0)
model.learn(steps)
train_s = time.perf_counter() - start
env = gym.make("CartPole-v1")
mean, std = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True)
print(json.dumps({"mean_return": float(mean), "std_return": float(std), "train_s": train_s}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--skip_peer", action="store_true", help="run only ours")
    args = p.parse_args()
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            out = Path(tmp) / f"ours_{seed}"
            ours = run_process([py, "train.py", "--hparams", "dqn_cartpole", "--output_dir", str(out), "--seed",
                                str(seed), "--train_steps", str(args.steps), "--eval_episodes", str(args.episodes)])
            ev = json.loads((out / "eval.json").read_text())
            rows.append({"impl": "rl", "seed": seed, "wall_s": ours["wall_s"], "steps_per_s": args.steps / ours["wall_s"],
                         "peak_mib": ours["peak_rss_mib"], "eval_return": ev["mean_return"]})
            if not args.skip_peer:
                sb3 = run_process([py, "-c", SB3_SCRIPT, str(seed), str(args.steps), str(args.episodes)])
                res = last_json_line(sb3["stdout"])
                rows.append({"impl": "sb3", "seed": seed, "wall_s": sb3["wall_s"],
                             "steps_per_s": args.steps / sb3["wall_s"], "peak_mib": sb3["peak_rss_mib"],
                             "eval_return": res["mean_return"]})
            print_table(rows[-2:], list(rows[0]))
    print("\nDQN CartPole-v1, %d steps, whole processes" % args.steps)
    print_table(rows, list(rows[0]))
    ours = [r for r in rows if r["impl"] == "rl"]
    peer = [r for r in rows if r["impl"] == "sb3"]
    print(f"\nrl : mean wall {np.mean([r['wall_s'] for r in ours]):.1f} s, "
          f"evals {[round(r['eval_return']) for r in ours]}")
    if peer:
        print(f"sb3: mean wall {np.mean([r['wall_s'] for r in peer]):.1f} s, "
              f"evals {[round(r['eval_return']) for r in peer]}")
        print(f"speed ratio (sb3 wall / rl wall): {np.mean([r['wall_s'] for r in peer]) / np.mean([r['wall_s'] for r in ours]):.2f}x")


if __name__ == "__main__":
    main()
