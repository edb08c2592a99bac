"""PQN against PPO on Pong, same machine, same invocation: agent steps/s of `train.py --hparams pqn_atari` (128 envs
x 32 steps, 2 epochs of 32 minibatches, LayerNorm Nature CNN) beside `train.py --hparams ppo_atari` (8 envs x 128
steps, 3 epochs of 4 minibatches, Nature CNN), one whole process after the other, each with its set's 2 torch threads
and bf16 where the CPU has it, on PongNoFrameskip-v4.

PQN keeps no replay and its 128 envs act in one batched forward pass (PPO's 8 in one of 8); per agent step it
learns from 2 passes over the data against PPO's 3, but in minibatches of 128 (PPO: 256) through a network whose
LayerNorms stay in fp32 under bf16 autocast. This measures speed only, not how fast either learns Pong (that takes
millions of steps: see docs/results.md).

"steady steps/s" is the rate between the first and the last logged row (every `--log_every` steps): the creation
and reset of 128 emulators, the first update's warm-up and the final evaluation are outside it; "train steps/s"
divides the whole budget by the training time logged at the end (env resets included, the final evaluation not).
Collection is acting + env stepping + storing, learning the updates (perf/*_s in progress.csv).

    python benchmarks/pqn_pong.py --steps 12288 --rounds 1
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import benchmark_parser, print_table, run_process  # noqa: E402

SETS = ("pqn_atari", "ppo_atari")


def run_set(name: str, steps: int, seed: int, log_every: int, extra: list[str]) -> dict:
    """One whole `train.py` process of set `name` for `steps` agent steps; its rates and times from progress.csv."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        proc = run_process([sys.executable, "train.py", "--hparams", name, "--output_dir", str(out), "--seed",
                            str(seed), "--train_steps", str(steps), "--eval_episodes", "1", "--hparam_override",
                            ",".join([f"log_interval={log_every}", "eval_interval=0",
                                      "checkpoint_interval=1000000000", *extra])])
        with (out / "progress.csv").open() as f:
            logged = [r for r in csv.DictReader(f) if int(r["env_steps"]) <= steps]
    first, end = logged[0], [r for r in logged if int(r["env_steps"]) == steps][0]  # before the final evaluation
    steady_s = float(end["wall_time_s"]) - float(first["wall_time_s"])
    steady = (int(end["env_steps"]) - int(first["env_steps"])) / steady_s
    return {"set": name, "seed": seed, "wall_s": proc["wall_s"], "train_s": float(end["wall_time_s"]),
            "steady_steps_per_s": steady, "train_steps_per_s": steps / float(end["wall_time_s"]),
            "collect_s": float(end["perf_act_s"]) + float(end["perf_env_s"]), "learn_s": float(end["perf_learn_s"]),
            "peak_mib": proc["peak_rss_mib"]}


def main() -> None:
    p = benchmark_parser(__doc__, steps=12_288, episodes=None)
    p.add_argument("--rounds", type=int, default=1, help="alternating runs of each set (seed = round)")
    p.add_argument("--log_every", type=int, default=4096, help="agent steps between logged rows (one PQN update)")
    p.add_argument("--override", default="", help="extra --hparam_override for both sets, e.g. precision=fp32")
    args = p.parse_args()
    if args.steps % args.log_every or args.steps < 2 * args.log_every:
        p.error(f"--steps must be a multiple of --log_every ({args.log_every}), at least two of them")
    extra = [x for x in args.override.split(",") if x]
    rows = []
    for r in range(args.rounds):
        for name in SETS:
            rows.append(run_set(name, args.steps, r, args.log_every, extra))
            print_table(rows, list(rows[0]))
            print(flush=True)
    print(f"\npqn_atari vs ppo_atari on PongNoFrameskip-v4, {args.steps} agent steps, {args.rounds} round(s)"
          + (f", both with {args.override}" if args.override else ""))
    print_table(rows, list(rows[0]))
    median = {}
    for name in SETS:
        group = [r for r in rows if r["set"] == name]
        mid = {k: float(np.median([r[k] for r in group])) for k in group[0] if k != "set"}
        median[name] = mid["steady_steps_per_s"]
        print(f"{name}: steady agent steps/s median {median[name]:.0f}; train steps/s {mid['train_steps_per_s']:.0f}; "
              f"collect {mid['collect_s']:.1f} s, learn {mid['learn_s']:.1f} s, peak {mid['peak_mib']:.0f} MiB")
    print(f"speed ratio (pqn_atari / ppo_atari steady steps/s, medians): "
          f"{median['pqn_atari'] / median['ppo_atari']:.2f}x")
    print(json.dumps({"rounds": rows}))


if __name__ == "__main__":
    main()
