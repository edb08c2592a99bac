"""Is FlatAdam worth keeping? Times a whole DQN gradient step (forward, Huber loss, backward, global-norm clipping,
Adam) on dqn_cartpole's network (4-256-256-2, batch 64, one thread) with FlatAdam and with torch.optim.Adam
(fused=True and foreach=True, clipping with torch.nn.utils.clip_grad_norm_), in alternating rounds.

    .venv/bin/python benchmarks/optimizer_step.py --rounds 3

Prints each optimizer's microseconds per step (the median over rounds of 2000 steps, and the spread) and the time its
construction took (the first torch.optim optimizer imports torch._dynamo).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from rl.agents.flat_adam import FlatAdam


def network() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))


def make_step(kind: str):
    """(one gradient step, construction time in s) for `kind`: flat, fused or foreach."""
    net = network()
    start = time.perf_counter()
    if kind == "flat":
        opt = FlatAdam(net, 1e-3)
        zero, clip, step = opt.zero_grad, (lambda: opt.clip_grad_norm(10.0)), opt.step
    else:
        opt = torch.optim.Adam(net.parameters(), 1e-3, **{kind: True})
        params = list(net.parameters())
        zero, step = opt.zero_grad, opt.step
        clip = lambda: torch.nn.utils.clip_grad_norm_(params, 10.0, foreach=True)  # noqa: E731
    built = time.perf_counter() - start
    x, actions, target = torch.randn(64, 4), torch.randint(0, 2, (64, 1)), torch.randn(64)

    def one() -> None:
        loss = F.smooth_l1_loss(net(x).gather(1, actions).squeeze(1), target)
        zero()
        loss.backward()
        clip()
        step()

    return one, built


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2000)
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    kinds = ("flat", "fused", "foreach")
    steps, times = {}, {k: [] for k in kinds}
    for kind in kinds:
        steps[kind], built = make_step(kind)
        print(f"{kind}: constructed in {built:.3f} s")
        for _ in range(200):  # warm up
            steps[kind]()
    for _ in range(args.rounds):
        for kind in kinds:
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[kind]()
            times[kind].append((time.perf_counter() - start) / args.steps * 1e6)
    for kind in kinds:
        t = times[kind]
        print(f"{kind:8s} median {statistics.median(t):7.0f} us per step (min {min(t):.0f}, max {max(t):.0f})")


if __name__ == "__main__":
    main()
