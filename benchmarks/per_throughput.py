"""Prioritized replay throughput: our `prioritized` memory (numpy sum tree) against TorchRL's PrioritizedReplayBuffer
(C++ segment trees, LazyTensorStorage), each in its own process, and what PER adds to `dqn_cartpole`'s wall time.

    .venv/bin/pip install --no-deps torchrl tensordict pyvers hoptorch   # the peer, for benchmarks only;
                                                                        # --no-deps keeps torch 2.13.0
    .venv/bin/python benchmarks/per_throughput.py                        # 1M capacity, 20 s per side, + dqn runs
    .venv/bin/python benchmarks/per_throughput.py --capacity 100000 --seconds 2 --dqn_steps 2000   # a quick check

One iteration = add(a batch of `--add_batch` transitions) + sample(256) + update_priorities(256), on a memory filled to
`--capacity` with CartPole-sized transitions (4 float32 observation values). Printed: iterations/s for both and their
ratio, fill rate, and resident memory per stored transition (RSS growth from before creating the memory to after
filling it, divided by the capacity). The dqn part trains `dqn_cartpole` with memory=replay and memory=prioritized
(whole processes) and prints the wall-time ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import last_json_line, print_table, run_process

WORKER = r"""
import json, sys, time
import numpy as np, torch

impl, capacity, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
add_batch, batch_size, obs_dim = map(int, sys.argv[4:7])
torch.set_num_threads(1)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


rng = np.random.default_rng(0)
chunk = 10_000
if impl == "rl":
    sys.path.insert(0, ".")
    from rl.memory.prioritized import PrioritizedMemory
else:
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer
base = rss_mib()  # after the imports: only the memory's own arrays count
if impl == "rl":
    mem = PrioritizedMemory(capacity, (obs_dim,), np.float32, (), np.int64, gamma=0.99, seed=0, alpha=0.6, beta=0.4,
                            eps=1e-6)

    def add(n):
        obs = rng.standard_normal((n, obs_dim), np.float32)
        mem.add(obs, rng.integers(0, 2, n), np.ones(n, np.float32), obs, np.zeros(n, bool), np.zeros(n, bool))

    def step(td):
        batch = mem.sample(batch_size)
        mem.update_priorities(batch.indices, td)
        return batch
else:
    try:
        mem = PrioritizedReplayBuffer(alpha=0.6, beta=0.4, eps=1e-6, storage=LazyTensorStorage(capacity))
    except RuntimeError as exc:  # its C++ extension does not load (built for another torch)
        print(json.dumps({"error": str(exc)}))
        sys.exit(0)

    def add(n):
        obs = torch.from_numpy(rng.standard_normal((n, obs_dim), np.float32))
        mem.extend(TensorDict({"obs": obs, "action": torch.from_numpy(rng.integers(0, 2, n)),
                               "reward": torch.ones(n), "next_obs": obs, "terminated": torch.zeros(n, dtype=torch.bool),
                               "truncated": torch.zeros(n, dtype=torch.bool)}, batch_size=[n]))

    def step(td):
        batch, info = mem.sample(batch_size, return_info=True)
        mem.update_priority(info["index"], td.abs() + 1e-6)
        return batch

start = time.perf_counter()
for _ in range(capacity // chunk):
    add(chunk)
add(capacity % chunk) if capacity % chunk else None
fill_s = time.perf_counter() - start
per_item = (rss_mib() - base) * 2**20 / capacity
td = torch.rand(batch_size)
for _ in range(20):  # warm up
    add(add_batch)
    step(td)
iters, start = 0, time.perf_counter()
while time.perf_counter() - start < seconds:
    add(add_batch)
    step(torch.rand(batch_size))
    iters += 1
elapsed = time.perf_counter() - start
print(json.dumps({"iters_per_s": iters / elapsed, "fill_items_per_s": capacity / fill_s,
                  "bytes_per_item": per_item}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=20.0, help="timed duration of the add+sample+update loop")
    p.add_argument("--add_batch", type=int, default=4, help="transitions added per iteration (e.g. num_envs)")
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--obs_dim", type=int, default=4)
    p.add_argument("--dqn_steps", type=int, default=50_000, help="dqn_cartpole steps per run (0: skip that part)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--skip_peer", action="store_true", help="run only ours")
    args = p.parse_args()
    py = sys.executable
    rows = []
    for impl in ["rl"] + ([] if args.skip_peer else ["torchrl"]):
        res = run_process([py, "-c", WORKER, impl, str(args.capacity), str(args.seconds), str(args.add_batch),
                           str(args.batch_size), str(args.obs_dim)])
        out = last_json_line(res["stdout"])
        if "error" in out:
            print(f"{impl} could not run: {out['error']}\n(TorchRL's wheels are built for one torch version; its "
                  f"segment trees are C++ only, so a mismatch leaves no peer to compare with)", file=sys.stderr)
            continue
        rows.append({"impl": impl, "iters_per_s": out["iters_per_s"], "fill_items_per_s": out["fill_items_per_s"],
                     "bytes_per_item": out["bytes_per_item"], "peak_mib": res["peak_rss_mib"]})
    print(f"\nPER add({args.add_batch}) + sample({args.batch_size}) + update_priorities({args.batch_size}), "
          f"capacity {args.capacity:,}, obs dim {args.obs_dim}")
    print_table(rows, list(rows[0]))
    if len(rows) == 2:
        print(f"\nthroughput ratio (rl / torchrl): {rows[0]['iters_per_s'] / rows[1]['iters_per_s']:.2f}x")

    if args.dqn_steps > 0:
        dqn_rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for seed in args.seeds:
                for mem in ("replay", "prioritized"):
                    out = Path(tmp) / f"{mem}_{seed}"
                    res = run_process([py, "train.py", "--hparams", "dqn_cartpole", "--output_dir", str(out),
                                       "--seed", str(seed), "--train_steps", str(args.dqn_steps),
                                       "--eval_episodes", "10", "--hparam_override", f"memory={mem}"])
                    ev = json.loads((out / "eval.json").read_text())
                    dqn_rows.append({"memory": mem, "seed": seed, "wall_s": res["wall_s"],
                                     "peak_mib": res["peak_rss_mib"], "eval_return": ev["mean_return"]})
        print(f"\ndqn_cartpole, {args.dqn_steps} steps, whole processes")
        print_table(dqn_rows, list(dqn_rows[0]))
        wall = {m: sum(r["wall_s"] for r in dqn_rows if r["memory"] == m) for m in ("replay", "prioritized")}
        print(f"\nPER wall-time overhead on dqn_cartpole: {100 * (wall['prioritized'] / wall['replay'] - 1):+.1f}%")


if __name__ == "__main__":
    main()
