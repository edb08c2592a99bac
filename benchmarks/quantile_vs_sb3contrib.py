"""QR-DQN and TQC, agent steps/s: our `qrdqn_cartpole` and `tqc_pendulum` (or `tqc_halfcheetah_bullet`) against
sb3-contrib's QRDQN and TQC with the same settings, as whole processes taking turns, at the same torch thread count
and on the same device.

    .venv/bin/pip install stable-baselines3 sb3-contrib      # the peer, for benchmarks only
    .venv/bin/python benchmarks/quantile_vs_sb3contrib.py --rounds 3
    .venv/bin/python benchmarks/quantile_vs_sb3contrib.py --algos tqc --tqc_env HalfCheetahBulletEnv-v0 --steps 3000

Settings, both sides: QR-DQN as rl-baselines3-zoo's qrdqn.yml CartPole-v1 entry (10 quantiles, 256x256, 128
gradient steps every 256 env steps, batch 64, Adam's epsilon 0.01 / 64, no clipping); TQC as the zoo's tqc.yml
(Pendulum-v1: sb3-contrib's defaults with lr 1e-3, 2 critics of 25 atoms, 2 dropped per critic, 256x256, one
gradient step per env step; HalfCheetahBulletEnv-v0: gSDE, 400x300, 8 gradient steps every 8 env steps, behind the
TimeFeatureWrapper). Both start learning at `--learning_starts` (default: each set's own, 1000 and 100; PyBullet's set
waits 10000, so give it a smaller one). Reported per algorithm, over the rounds: the training loop's agent steps/s
(ours: progress.csv's last wall time; the peer: `learn()`), whole-process steps/s (imports, construction and our final
1-episode evaluation included), and the ratio ours / peer of each round, median [min-max]. Ours runs its sets as they
are (TQC: float32 matmuls on bf16 units where the CPU has them, `matmul_precision=medium`); `--tqc_override
matmul_precision=highest` runs it in fp32.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import last_json_line, median_range, print_table, run_ours, run_process

SETS = {"qrdqn": "qrdqn_cartpole", "tqc": "tqc_pendulum"}
DEFAULT_STEPS = {"qrdqn": 10_000, "tqc": 3_000}
DEFAULT_STARTS = {"qrdqn": 1_000, "tqc": 100}

PEER_SCRIPT = """
import json, sys, time
sys.path.insert(0, "benchmarks")
import gymnasium as gym, torch
from sb3_contrib import QRDQN, TQC
algo, seed, steps, starts, threads, env_id, device = sys.argv[1:8]
seed, steps, starts, threads = int(seed), int(steps), int(starts), int(threads)
torch.set_num_threads(threads)
common = dict(seed=seed, device=device, verbose=0, learning_starts=starts)
if algo == "qrdqn":
    model = QRDQN("MlpPolicy", gym.make(env_id), learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, gamma=0.99,
                  target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                  exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10), **common)
elif "Bullet" in env_id:
    from sb3_peer import make_env
    model = TQC("MlpPolicy", make_env(env_id), learning_rate=7.3e-4, buffer_size=300_000, batch_size=256, tau=0.02,
                gamma=0.98, train_freq=8, gradient_steps=8, use_sde=True,
                policy_kwargs=dict(log_std_init=-3, net_arch=[400, 300]), **common)
else:
    model = TQC("MlpPolicy", gym.make(env_id), learning_rate=1e-3, **common)
start = time.perf_counter()
model.learn(steps)
print(json.dumps({"train_s": time.perf_counter() - start}))
"""


def peer(algo: str, seed: int, steps: int, starts: int, threads: int, env_id: str, device: str) -> dict:
    res = run_process([sys.executable, "-c", PEER_SCRIPT, algo, str(seed), str(steps), str(starts), str(threads),
                       env_id, device])
    return {"train_s": last_json_line(res["stdout"])["train_s"], "wall_s": res["wall_s"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="env steps per process (default: qrdqn 10000, tqc 3000)")
    p.add_argument("--learning_starts", type=int, default=None, help="default: each set's own (1000, 100)")
    p.add_argument("--tqc_env", default="Pendulum-v1", choices=["Pendulum-v1", "HalfCheetahBulletEnv-v0"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--qrdqn_override", default="", help="extra --hparam_override for our QR-DQN")
    p.add_argument("--tqc_override", default="", help="extra --hparam_override for our TQC, e.g. "
                   "matmul_precision=highest")
    p.add_argument("--device", default="cpu", help="torch device of both sides")
    args = p.parse_args()
    sets = {**SETS, "tqc": "tqc_halfcheetah_bullet" if "Bullet" in args.tqc_env else "tqc_pendulum"}
    envs = {"qrdqn": "CartPole-v1", "tqc": args.tqc_env}
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for algo in args.algos:
                steps = args.steps or DEFAULT_STEPS[algo]
                starts = DEFAULT_STARTS[algo] if args.learning_starts is None else args.learning_starts
                pair = {}
                for impl in ("rl", "sb3_contrib") if r % 2 == 0 else ("sb3_contrib", "rl"):  # take turns going first
                    if impl == "rl":
                        override = args.tqc_override if algo == "tqc" else args.qrdqn_override
                        pair[impl] = run_ours(sets[algo], args.seed, steps, starts, args.threads, override,
                                          Path(tmp) / f"{algo}_{r}", envs[algo], args.device)
                    else:
                        pair[impl] = peer(algo, args.seed, steps, starts, args.threads, envs[algo], args.device)
                pair["steps"] = steps
                results.setdefault(algo, []).append(pair)
                print(f"round {r} {algo}: " + ", ".join(f"{k} {steps / pair[k]['train_s']:.1f} steps/s"
                                                         for k in ("rl", "sb3_contrib")), flush=True)
    rows = []
    for algo, pairs in results.items():
        rate = {k: [p["steps"] / p[k]["train_s"] for p in pairs] for k in ("rl", "sb3_contrib")}
        whole = {k: [p["steps"] / p[k]["wall_s"] for p in pairs] for k in ("rl", "sb3_contrib")}
        rows.append({"set": sets[algo], "env": envs[algo], "steps": pairs[0]["steps"], "rounds": len(pairs),
                     "rl steps/s": median_range(rate["rl"]), "sb3-contrib steps/s": median_range(rate["sb3_contrib"]),
                     "ratio": median_range([a / b for a, b in zip(rate["rl"], rate["sb3_contrib"])]),
                     "whole-process ratio": median_range([a / b for a, b in zip(whole["rl"], whole["sb3_contrib"])])})
    overrides = "".join(f", {k} {v}" for k, v in (("qrdqn", args.qrdqn_override), ("tqc", args.tqc_override)) if v)
    print(f"\non {args.device}, {args.threads} torch thread(s); ours as set{overrides}; ratio = ours / "
          f"sb3-contrib, median [min-max] over rounds")
    print_table(rows, list(rows[0]))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
