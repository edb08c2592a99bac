"""What keeping freed memory for reuse (rl/malloc.py) buys a CNN learner on a CPU: each measurement runs in its own
process, with rl's setting (kept) and with glibc's own behaviour (RL_KEEP_FREED_MEMORY=0), the two taking turns.

    .venv/bin/python benchmarks/malloc_reuse.py                    # one forward and backward pass: seconds
    .venv/bin/python benchmarks/malloc_reuse.py --mode run         # whole train.py runs: minutes

`--mode pass`: `elite_cnn` (elite_buffer_vtrace's torso) and a 19-action head, forward and backward on `--frames` uint8
4x84x84 frames (500: a learner batch of elite_buffer_vtrace's experiment), one torch thread, fp32, channels-last; per
pass the thread's CPU time, the part of it spent in the kernel, and the page faults (median of `--repeats` passes after
one warm-up).
`--mode run`: `train.py --hparams SET --num_workers 2 --train_steps STEPS` (SET uniform_impala_seaquest, fill-in 0,
no evaluations); agent steps/s over the run, kernel time and peak memory of the run's processes.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from pathlib import Path

from common import last_json_line, print_table, run_process

PASS = """
import json, resource, statistics, sys, time
import torch
import rl  # noqa: F401
from rl.malloc import reuse_freed_memory
from rl.models.cnn import EliteCNN
frames, repeats = int(sys.argv[1]), int(sys.argv[2])
kept = reuse_freed_memory()
torch.set_num_threads(1)
torch.set_flush_denormal(True)
torso, head = EliteCNN((4, 84, 84), channels_last=True), torch.nn.Linear(512, 19)
obs = torch.randint(0, 255, (frames, 4, 84, 84), dtype=torch.uint8)
def step():
    head(torso(obs)).sum().backward()
step()
cpu, kernel, faults = [], [], []
for _ in range(repeats):
    before, start = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
    step()
    after = resource.getrusage(resource.RUSAGE_THREAD)
    cpu.append(time.thread_time() - start)
    kernel.append(after.ru_stime - before.ru_stime)
    faults.append(after.ru_minflt - before.ru_minflt)
print(json.dumps({"kept": kept, "cpu_s": statistics.median(cpu), "kernel_s": statistics.median(kernel),
                  "faults": statistics.median(faults)}))
"""
RUN_OVERRIDE = "training_fill_in_factor=0,log_interval=2000,eval_interval=0,checkpoint_interval=100000000"
MODES = {"kept": {}, "glibc": {"RL_KEEP_FREED_MEMORY": "0"}}


def one_pass(env: dict, args) -> dict:
    res = run_process([sys.executable, "-c", PASS, str(args.frames), str(args.repeats)], env=env)
    return last_json_line(res["stdout"])


def one_run(env: dict, args, out: Path) -> dict:
    res = run_process([sys.executable, "train.py", "--hparams", args.set, "--output_dir", str(out), "--num_workers",
                       "2", "--train_steps", str(args.steps), "--eval_episodes", "1", "--hparam_override",
                       RUN_OVERRIDE], env=env)
    with (out / "progress.csv").open() as f:
        last = list(csv.DictReader(f))[-1]
    return {"steps_per_s": int(last["env_steps"]) / float(last["wall_time_s"]), "kernel_s": res["kernel_s"],
            "peak_mib": res["peak_rss_mib"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("pass", "run"), default="pass")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--frames", type=int, default=500)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--set", default="uniform_impala_seaquest")
    p.add_argument("--steps", type=int, default=30_000)
    args = p.parse_args()
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in list(MODES) if r % 2 == 0 else list(MODES)[::-1]:
                if args.mode == "pass":
                    res = one_pass(MODES[mode], args)
                else:
                    res = one_run(MODES[mode], args, Path(tmp) / f"{mode}_{r}")
                results[mode].append(res)
                print(f"round {r} {mode}: {json.dumps(res)}", flush=True)
    rows = [{"memory": m, **{k: statistics.median(x[k] for x in v) for k in v[0] if k != "kept"}}
            for m, v in results.items()]
    print(f"\nmode {args.mode}, medians of {args.rounds} rounds")
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
