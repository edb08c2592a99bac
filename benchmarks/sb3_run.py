"""Stable-Baselines3's SAC, or sb3-contrib's TQC (`--algo tqc`), with our `sac_halfcheetah_bullet` /
`tqc_halfcheetah_bullet` settings (rl-baselines3-zoo's sac.yml and tqc.yml: gSDE, the TimeFeatureWrapper, 400x300,
batch 256, 8 gradient steps every 8 env steps; TQC's 2 critics of 25 quantiles, 2 dropped per critic) as a run
folder `python -m rl.report` reads beside ours: hparams.json, progress.csv (env_steps, wall_time_s, the mean return
of the last 100 training episodes, and a greedy evaluation every `--eval_interval` steps, as train.py evaluates) and
eval.json at the end.

It resumes: every `--save_interval` steps it saves the model, its replay buffer and its log's state (each written
beside, then renamed into place), and the same command continues from there (SB3 resets the env on load, so one training
episode is cut there, and the generators start afresh). For the equal-budget comparison (docs/results.md), run it beside
ours, one process a core:

    .venv/bin/pip install stable-baselines3 sb3-contrib     # the peer, for benchmarks only
    .venv/bin/python train.py --hparams sac_halfcheetah_bullet --seed 0 --train_steps 300000 --output_dir runs/ours_s0 &
    .venv/bin/python benchmarks/sb3_run.py --seed 0 --steps 300000 --output_dir runs/sb3_s0 &
    wait; .venv/bin/python -m rl.report runs/ours_s0 runs/sb3_s0 --output runs/sac_300k_report

The same with `--hparams tqc_halfcheetah_bullet` and `--algo tqc` compares TQC.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from sb3_peer import ALGOS, SAC_SETTINGS, make_env, make_model
from stable_baselines3.common.evaluation import evaluate_policy

TQC_DEFAULTS = {"n_critics": 2, "n_quantiles": 25, "top_quantiles_to_drop_per_net": 2}  # sb3-contrib's, unchanged
COLUMNS = ["env_steps", "wall_time_s", "episode_return_mean", "eval_return_mean", "eval_return_std"]


def save(model, out: Path) -> None:
    """The model and its replay buffer, each written beside and renamed into place."""
    for path, write in ((out / "model.zip", model.save), (out / "replay.pkl", model.save_replay_buffer)):
        tmp = path.with_name(path.stem + ".tmp" + path.suffix)
        write(tmp)
        os.replace(tmp, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", default="sac", choices=["sac", "tqc"], help="SB3's SAC or sb3-contrib's TQC")
    p.add_argument("--env", default="HalfCheetahBulletEnv-v0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--eval_interval", type=int, default=50_000)
    p.add_argument("--eval_episodes", type=int, default=10)
    p.add_argument("--save_interval", type=int, default=10_000, help="steps between saves (what a kill can lose)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (ours runs 1: its torch_threads)")
    p.add_argument("--output_dir", required=True)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {"hparams_set": f"sb3_{args.algo} ({args.env})",
              "hparams": {"env": args.env, "seed": args.seed, "train_steps": args.steps,
                          "agent": f"sb3 {args.algo.upper()}",
                          "time_feature": True, **{k: v for k, v in SAC_SETTINGS.items() if k != "policy_kwargs"},
                          **(TQC_DEFAULTS if args.algo == "tqc" else {})},
              "flags": vars(args)}
    (out / "hparams.json").write_text(json.dumps(record, indent=1))
    env, eval_env = make_env(args.env), make_env(args.env)
    state_path, progress = out / "state.json", out / "progress.csv"
    if (out / "model.zip").is_file() and state_path.is_file():
        model = ALGOS[args.algo].load(out / "model.zip", env=env, device="cpu")
        model.load_replay_buffer(out / "replay.pkl")
        state = json.loads(state_path.read_text())
        print(f"resuming from step {model.num_timesteps}", flush=True)
    else:
        model = make_model(args.algo, env, args.seed)
        state = {"wall_time_s": 0.0, "returns": []}
        with progress.open("w", newline="") as f:
            csv.writer(f).writerow(COLUMNS)
    while model.num_timesteps < args.steps:
        start = time.perf_counter()
        step = model.num_timesteps
        chunk = min(args.save_interval - step % args.save_interval, args.eval_interval - step % args.eval_interval,
                    args.steps - step)
        model.learn(chunk, reset_num_timesteps=False)  # SB3 ends on a multiple of train_freq: may pass the chunk
        state["returns"] = (state["returns"] + [ep["r"] for ep in model.ep_info_buffer])[-100:]
        model.ep_info_buffer.clear()
        if model.num_timesteps // args.eval_interval > step // args.eval_interval or model.num_timesteps >= args.steps:
            mean, std = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
            state["wall_time_s"] += time.perf_counter() - start
            with progress.open("a", newline="") as f:
                csv.writer(f).writerow([model.num_timesteps, f"{state['wall_time_s']:.3f}",
                                        np.mean(state["returns"]) if state["returns"] else "", mean, std])
            print(f"step {model.num_timesteps}: eval {mean:.1f} +- {std:.1f}, {state['wall_time_s']:.0f} s", flush=True)
        else:
            state["wall_time_s"] += time.perf_counter() - start
        save(model, out)
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, state_path)
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True,
                                 return_episode_rewards=True)
    (out / "eval.json").write_text(json.dumps({
        "mode": "final_training_evaluation", "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)), "episodes": len(returns), "returns": [float(r) for r in returns],
        "env_steps": int(model.num_timesteps), "wall_time_s": round(state["wall_time_s"], 3)}, indent=1))


if __name__ == "__main__":
    main()
