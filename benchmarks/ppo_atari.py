"""PPO on Pong, ours against Stable-Baselines3, side by side: agent steps/s, peak memory, collection vs learning.

Both run PyTorchRL's Table 1 settings (8 envs x 128 steps, 4 minibatches of 256, 3 epochs, Adam 2.5e-4 and clip 0.1
decayed linearly, entropy 0.01, value coefficient 1.0, GAE 0.95, gradient norm 0.5, Nature CNN) on
PongNoFrameskip-v4 with the DeepMind preprocessing, for the same budget, one whole process after the other, each
with 2 torch threads. Ours is `train.py --hparams ppo_atari` (ale-py's vector env, its C++ threads preprocessing);
SB3's is its documented Atari pipeline (`make_atari_env` + `VecFrameStack`, `PPO("CnnPolicy")`), which needs
opencv (`pip install stable-baselines3 opencv-python-headless`, for benchmarks only).

"train steps/s" divides the budget by the time from the first env step to the last update (start-up, and our final
evaluation, are not in it); "wall s" is the whole process. Collection is acting + env stepping + storing; learning
is the updates (ours: perf/*_s in progress.csv; SB3: time inside collect_rollouts and train).

    python benchmarks/ppo_atari.py --rounds 3 --steps 20480
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import benchmark_parser, last_json_line, print_table, run_process  # noqa: E402

SB3_SCRIPT = r"""
import json, sys, time
import torch
seed, steps, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
import cv2
cv2.setNumThreads(1)
import ale_py, gymnasium as gym
gym.register_envs(ale_py)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_atari_env
from stable_baselines3.common.vec_env import VecFrameStack

env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=8, seed=seed), n_stack=4)
model = PPO("CnnPolicy", env, n_steps=128, batch_size=256, n_epochs=3, learning_rate=lambda p: 2.5e-4 * p,
            clip_range=lambda p: 0.1 * p, ent_coef=0.01, vf_coef=1.0, gae_lambda=0.95, gamma=0.99, max_grad_norm=0.5,
            seed=seed, device="cpu", verbose=0)
clock = {"collect": 0.0, "learn": 0.0}
def timed(fn, key):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            clock[key] += time.perf_counter() - t
    return wrapper
model.collect_rollouts = timed(model.collect_rollouts, "collect")
model.train = timed(model.train, "learn")
start = time.perf_counter()
model.learn(steps)
print(json.dumps({"train_s": time.perf_counter() - start, "collect_s": clock["collect"], "learn_s": clock["learn"],
                  "steps": model.num_timesteps}))
"""


def ours(steps: int, seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        proc = run_process([sys.executable, "train.py", "--hparams", "ppo_atari", "--output_dir", str(out),
                            "--seed", str(seed), "--train_steps", str(steps), "--eval_episodes", "1",
                            "--hparam_override", ",".join(["log_interval=1024", "eval_interval=0",
                                                           "checkpoint_interval=100000000", *extra])])
        with (out / "progress.csv").open() as f:
            end = next(r for r in csv.DictReader(f) if int(r["env_steps"]) >= steps)  # logged before the final eval
    collect = float(end["perf_act_s"]) + float(end["perf_env_s"])
    learn = float(end["perf_learn_s"])
    train_s = float(end["wall_time_s"])
    return {"impl": "rl", "seed": seed, "wall_s": proc["wall_s"], "train_s": train_s, "steps_per_s": steps / train_s,
            "collect_s": collect, "learn_s": learn, "peak_mib": proc["peak_rss_mib"]}


def sb3(steps: int, seed: int, threads: int) -> dict:
    proc = run_process([sys.executable, "-c", SB3_SCRIPT, str(seed), str(steps), str(threads)])
    res = last_json_line(proc["stdout"])
    return {"impl": "sb3", "seed": seed, "wall_s": proc["wall_s"], "train_s": res["train_s"],
            "steps_per_s": res["steps"] / res["train_s"], "collect_s": res["collect_s"], "learn_s": res["learn_s"],
            "peak_mib": proc["peak_rss_mib"]}


def main() -> None:
    p = benchmark_parser(__doc__, steps=20_480, episodes=None)
    p.add_argument("--rounds", type=int, default=3, help="alternating ours/SB3 runs (seed = round)")
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. precision=bf16")
    p.add_argument("--threads", type=int, default=2, help="SB3's torch threads (ours: ppo_atari's torch_threads)")
    args = p.parse_args()
    extra = [x for x in args.override.split(",") if x]
    rows = []
    for r in range(args.rounds):
        rows.append(ours(args.steps, r, extra))
        if not args.skip_peer:
            rows.append(sb3(args.steps, r, args.threads))
        print_table(rows, list(rows[0]))
        print(flush=True)
    print(f"\nppo_atari vs SB3 PPO on PongNoFrameskip-v4, {args.steps} agent steps, {args.rounds} rounds"
          + (f", ours with {args.override}" if args.override else ""))
    print_table(rows, list(rows[0]))
    med = {}
    for impl in ("rl", "sb3"):
        group = [r for r in rows if r["impl"] == impl]
        if group:
            sps = [r["steps_per_s"] for r in group]
            med[impl] = float(np.median(sps))
            print(f"{impl}: train steps/s median {med[impl]:.0f} (range {min(sps):.0f}-{max(sps):.0f}); "
                  f"collect {np.median([r['collect_s'] for r in group]):.1f} s, "
                  f"learn {np.median([r['learn_s'] for r in group]):.1f} s, "
                  f"peak {np.median([r['peak_mib'] for r in group]):.0f} MiB")
    if len(med) == 2:
        print(f"speed ratio (rl / sb3 train steps/s, medians): {med['rl'] / med['sb3']:.2f}x")
    print(json.dumps({"rounds": rows}))


if __name__ == "__main__":
    main()
