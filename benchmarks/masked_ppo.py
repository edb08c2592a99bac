"""Masked PPO on PickItems-v0 (rl/envs/pick_items.py: the offer of legal items is told only by the action mask): our
`ppo_masked_pick_items` against sb3-contrib's MaskablePPO with the same settings (8 envs, n_steps 64, batch 128, 10
epochs, gamma 0.95, gae_lambda 0.95, lr 1e-3 constant, ent_coef 0.01, clip 0.2, two 64-unit tanh MLPs for policy and
value, max_grad_norm 0.5, Adam eps 1e-5, one torch thread) and seeds, one after the other in one run, each as a whole
process. Ours reads the mask from `info["action_mask"]` (made into the observation's `action_mask` entry where the
env is made), MaskablePPO from the env's `action_masks()`: the same flags. Our periodic evaluations are off (the peer
has none).

    .venv/bin/pip install stable-baselines3 sb3-contrib      # the peer, for benchmarks only
    .venv/bin/python benchmarks/masked_ppo.py --seeds 0 --steps 40000

Prints whole-process wall time, the training loop's time (train_s), steps/s, peak memory and the final greedy
evaluation (masked, 50 episodes) for both, and the speed ratios peer / ours. A random legal policy scores 4.0 and the
best one 5.6; ignoring the mask scores under 1.
"""

from __future__ import annotations

from common import benchmark_parser, compare_with_sb3

SB3_SCRIPT = """
import json, sys, time
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from stable_baselines3.common.env_util import make_vec_env
import gymnasium as gym
import rl.envs.pick_items  # noqa: F401  (registers PickItems-v0 with gymnasium)
seed, steps, episodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)  # as ours (torch_threads=1)
env = make_vec_env("PickItems-v0", n_envs=8, seed=seed)
model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=128, n_epochs=10, gamma=0.95, gae_lambda=0.95,
                    learning_rate=1e-3, ent_coef=0.01, clip_range=0.2, max_grad_norm=0.5, seed=seed, device="cpu",
                    policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64])),
                    verbose=0)
start = time.perf_counter()  # like ours (eval.json's wall_time_s): the training loop, after construction
model.learn(steps)
train_s = time.perf_counter() - start
mean, std = evaluate_policy(model, make_vec_env("PickItems-v0", n_envs=1, seed=seed + 20_000),
                            n_eval_episodes=episodes, deterministic=True, use_masking=True)
print(json.dumps({"mean_return": float(mean), "std_return": float(std), "train_s": train_s}))
"""


def main() -> None:
    args = benchmark_parser(__doc__, steps=40_000, episodes=50).parse_args()
    compare_with_sb3("ppo_masked_pick_items", SB3_SCRIPT, "Masked PPO PickItems-v0", args.seeds, args.steps,
                     args.episodes, args.skip_peer, ours_args=("--hparam_override", "eval_interval=0"))


if __name__ == "__main__":
    main()
