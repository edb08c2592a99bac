"""What does the CPU layout and precision cost? Times one forward and backward pass of the nature_cnn actor-critic
(ppo set, shared_torso=True, 6 actions) on a batch of uint8 4x84x84 frames, for each thread count, in four modes:
fp32 in the default layout, fp32 channels-last (`channels_last=true`), and fp32 weights under bfloat16 autocast
(`precision=bf16`; fast only where the CPU has AVX512-BF16 or AMX, which the script reports) in either layout.
Modes alternate within each round, so load from other processes spreads over all of them.

    .venv/bin/python benchmarks/cnn_step.py --threads 1 2 --rounds 7

Prints, per thread count and mode, the median milliseconds per step over rounds (each round the mean of --steps
steps) and the spread (min, max). Three runs of the line above on this project's machine (AMD EPYC, AVX512-BF16, 2
cores shared with other work; 2026-11-23), batch 256, medians in ms (the runs' extremes in brackets):

    threads  fp32            fp32 channels_last  bf16 autocast  bf16 autocast channels_last
    1        237-242 (229-284)  167-194 (165-202)   91-100 (90-108)  93-95 (92-105)
    2        122-141 (116-149)   89-95  (84-109)    54-57  (51-90)   60-61 (53-68)
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

import hparams  # noqa: F401  (registers the sets)
import rl  # noqa: F401  (fills the registries)
from rl.registry import hparams as sets
from rl.registry import models
from rl.threads import limit_threads

MODES = ("fp32", "fp32 channels_last", "bf16 autocast", "bf16 autocast channels_last")


def make_step(mode: str, batch: int):
    torch.manual_seed(0)
    hp = sets["ppo"]().update({"torso": "nature_cnn", "shared_torso": True, "channels_last": "channels_last" in mode})
    net = models["actor_critic"].build(hp, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6))
    obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 6, (batch,))
    precision = torch.autocast("cpu", dtype=torch.bfloat16) if mode.startswith("bf16") else contextlib.nullcontext()

    def step() -> None:
        net.zero_grad(set_to_none=False)
        with precision:
            logits, value, _ = net(obs)
            loss = -logits.log_softmax(-1).gather(1, actions[:, None]).mean() + value.float().square().mean()
        loss.backward()

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=3, help="steps per round")
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"oneDNN bf16 {torch.ops.mkldnn._is_mkldnn_bf16_supported()}")
    for threads in args.threads:
        limit_threads(threads)
        steps = {mode: make_step(mode, args.batch) for mode in MODES}
        for step in steps.values():  # warm up: oneDNN picks and caches its kernels
            step()
            step()
        times = {mode: [] for mode in MODES}
        for _ in range(args.rounds):
            for mode, step in steps.items():
                start = time.perf_counter()
                for _ in range(args.steps):
                    step()
                times[mode].append((time.perf_counter() - start) / args.steps * 1e3)
        for mode, t in times.items():
            print(f"threads {threads}  {mode:28s} median {statistics.median(t):6.1f} ms per step "
                  f"(min {min(t):.1f}, max {max(t):.1f}; {args.rounds} rounds of {args.steps})")


if __name__ == "__main__":
    main()
