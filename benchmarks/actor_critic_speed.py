"""SAC and TD3 on HalfCheetahBulletEnv-v0, agent steps/s: our `sac_halfcheetah_bullet` and `td3_halfcheetah_bullet`
against Stable-Baselines3's SAC and TD3 with the same settings (TimeFeatureWrapper and 400x300 networks both; SAC as
rl-baselines3-zoo's sac.yml: gSDE, log_std_init -3, 8 gradient steps every 8 env steps, batch 256; TD3 as the zoo's
scored agent: N(0, 0.1) action noise, one training phase per 1000-step episode of 1000 gradient steps, batch 100),
as whole processes taking turns, at the same torch thread count and on the same device.

    .venv/bin/pip install stable-baselines3 sb3-contrib      # the peer, for benchmarks only
    .venv/bin/python benchmarks/actor_critic_speed.py --rounds 3 --threads 1 2
    .venv/bin/python benchmarks/actor_critic_speed.py --override matmul_precision=highest   # ours in fp32
    python benchmarks/actor_critic_speed.py --device cuda --env HalfCheetah-v5 --threads 1  # a GPU, MuJoCo's cheetah

Both start learning after `--learning_starts` env steps (1000 here; the sets wait 10000), so that most measured steps
are training steps, as they are for 99% of a 1M-step run. Reported per set and thread count, over the rounds: the
training loop's agent steps/s (ours: progress.csv's last wall time; SB3: `learn()`), whole-process steps/s (imports,
construction and our final 1-episode evaluation included), and the ratio ours / SB3 of each round, median [min-max].
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import last_json_line, median_range, print_table, run_ours, run_process

SETS = {"sac": "sac_halfcheetah_bullet", "td3": "td3_halfcheetah_bullet"}

SB3_SCRIPT = """
import json, sys, time
sys.path.insert(0, "benchmarks")
import torch
from sb3_peer import make_env, make_model
algo, seed, steps, starts, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
env_id, device = sys.argv[6], sys.argv[7]
torch.set_num_threads(threads)
model = make_model(algo, make_env(env_id), seed, starts, device)
start = time.perf_counter()
model.learn(steps)
print(json.dumps({"train_s": time.perf_counter() - start}))
"""


def sb3(algo: str, seed: int, steps: int, starts: int, threads: int, env_id: str, device: str) -> dict:
    res = run_process([sys.executable, "-c", SB3_SCRIPT, algo, str(seed), str(steps), str(starts), str(threads), env_id,
                       device])
    return {"train_s": last_json_line(res["stdout"])["train_s"], "wall_s": res["wall_s"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads, both sides")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=3000, help="env steps per process (default: %(default)s)")
    p.add_argument("--learning_starts", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. matmul_precision=highest")
    p.add_argument("--env", default="HalfCheetahBulletEnv-v0",
                   help="the env both sides run (another id keeps the sets' other settings, e.g. HalfCheetah-v5 where "
                        "PyBullet cannot be installed)")
    p.add_argument("--device", default="cpu", help="torch device of both sides (cuda: a GPU figure)")
    args = p.parse_args()
    results: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for algo in args.algos:
                for threads in args.threads:
                    pair = {}
                    order = ("rl", "sb3") if r % 2 == 0 else ("sb3", "rl")  # take turns going first
                    for impl in order:
                        if impl == "rl":
                            pair[impl] = run_ours(SETS[algo], args.seed, args.steps, args.learning_starts, threads,
                                              args.override, Path(tmp) / f"{algo}_{threads}_{r}", args.env,
                                              args.device)
                        else:
                            pair[impl] = sb3(algo, args.seed, args.steps, args.learning_starts, threads, args.env,
                                             args.device)
                    results.setdefault((algo, threads), []).append(pair)
                    print(f"round {r} {algo} threads {threads}: "
                          + ", ".join(f"{k} {args.steps / v['train_s']:.1f} steps/s" for k, v in pair.items()),
                          flush=True)
    rows = []
    for (algo, threads), pairs in results.items():
        rate = {k: [args.steps / p[k]["train_s"] for p in pairs] for k in ("rl", "sb3")}
        whole = {k: [args.steps / p[k]["wall_s"] for p in pairs] for k in ("rl", "sb3")}
        rows.append({"set": SETS[algo], "threads": threads, "rounds": len(pairs),
                     "rl steps/s": median_range(rate["rl"]), "sb3 steps/s": median_range(rate["sb3"]),
                     "ratio": median_range([a / b for a, b in zip(rate["rl"], rate["sb3"])]),
                     "whole-process ratio": median_range([a / b for a, b in zip(whole["rl"], whole["sb3"])])})
    print(f"\n{args.env} on {args.device}, {args.steps} env steps, learning from step {args.learning_starts}; "
          f"ours {args.override or 'as set'}; median [min-max] over rounds")
    print_table(rows, list(rows[0]))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
