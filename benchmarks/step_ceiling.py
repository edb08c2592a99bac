"""How fast can a SAC or TD3 gradient step be on this machine, and so what ratio to Stable-Baselines3 is possible?

    .venv/bin/pip install stable-baselines3 sb3-contrib      # the peer, for benchmarks only
    .venv/bin/python benchmarks/step_ceiling.py                          # both sets, 1 torch thread
    .venv/bin/python benchmarks/step_ceiling.py --algos sac --override matmul_precision=highest
    python benchmarks/step_ceiling.py --env HalfCheetah-v5              # where PyBullet is not installed

For `sac_halfcheetah_bullet` and `td3_halfcheetah_bullet` and SB3's SAC and TD3 with the same settings
(benchmarks/sb3_peer.py), on replay memories filled with `--fill` env steps, in one process:
- the matrix FLOPs of a gradient step, counted by torch's FlopCounterMode (ours: `agent.gradient_step`; SB3:
  `model.train`), averaged over a block of `--block` steps (TD3 updates its actor every second step);
- each side's step time: thread CPU time per block, median of `--repeats`, the two sides taking turns;
- each side's matmul floor: the very matrix products one block ran (recorded with their operands, strides and
  precision), replayed alone: the step's time if everything else in it cost nothing.

The ceiling is SB3's step time over our floor: no change that keeps our FLOPs and our precision makes our step
faster than that ratio of SB3's. A speed goal above the ceiling needs fewer FLOPs or lower precision (bf16 units:
`matmul_precision=medium` on a CPU with AMX), not leaner code. Whole processes also pay the env and acting, which
lowers the ratio further (benchmarks/actor_critic_speed.py measures that). Both sides share one process, so SB3 runs
under the torch settings ours makes (one thread, denormals flushed; our matmul precision only inside our steps), which
makes its step faster here than in its own process: the ceiling is, if anything, low.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import print_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.flop_counter import FlopCounterMode

import hparams  # noqa: F401  (fills the hparams registry)
from rl.agents.continuous import matmul_precision
from rl.collector import Collector
from rl.envs import make_env
from rl.registry import hparams as sets
from rl.trainer import build_agent, configure_torch, seed_everything

SETS = {"sac": "sac_halfcheetah_bullet", "td3": "td3_halfcheetah_bullet"}
MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.baddbmm.default}


class RecordMatmuls(TorchDispatchMode):
    """Keeps every matrix product that runs inside it, with its operands, to replay them later."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in MATMULS:  # detached aliases: same storage, strides and values, no autograd history
            self.calls.append((func, tree_map_only(torch.Tensor, torch.Tensor.detach, args), kwargs))
        return func(*args, **kwargs)


def cpu_ms(fn, repeats: int) -> list[float]:
    """Thread CPU time of `fn` in ms, `repeats` times after two warm-up calls: time other processes take from this
    core is not counted (a loaded machine still slows caches and memory)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        times.append((time.thread_time() - start) * 1e3)
    return times


class Side:
    """One implementation's gradient steps: `block()` runs `n` of them."""

    def __init__(self, name: str, block, n: int, precision: str = "highest"):
        self.name, self.block, self.n, self.precision = name, block, n, precision
        with FlopCounterMode(display=False) as counter:
            block()
        self.gflop = counter.get_total_flops() / n / 1e9
        recorder = RecordMatmuls()
        with recorder:
            block()
        self.matmuls = recorder.calls
        self.times: list[float] = []
        self.floors: list[float] = []

    def replay(self) -> None:
        with torch.no_grad(), matmul_precision(self.precision):
            for func, args, kwargs in self.matmuls:
                func(*args, **kwargs)

    def measure(self, repeats: int) -> None:
        self.times += [t / self.n for t in cpu_ms(self.block, repeats)]
        self.floors += [t / self.n for t in cpu_ms(self.replay, repeats)]


def ours(algo: str, args) -> Side:
    hp = sets[SETS[algo]]()
    hp.parse(",".join(x for x in [f"env={args.env}", f"torch_threads={args.threads}", args.override] if x))
    configure_torch(hp)
    seed_everything(args.seed)
    env = make_env(hp)
    agent = build_agent(hp, env, args.seed)
    collector = Collector(env, agent, args.seed)
    for _ in range(args.fill):  # random actions: the sets wait longer than --fill before learning
        collector.step()

    def block():
        with matmul_precision(agent.precision):  # as agent.update() runs its gradient steps
            for _ in range(args.block):
                agent.gradient_step()
    return Side(f"rl {SETS[algo]} ({agent.precision})", block, args.block, agent.precision)


def sb3(algo: str, args) -> Side:
    from sb3_peer import make_env as sb3_env
    from sb3_peer import make_model

    torch.set_num_threads(args.threads)
    model = make_model(algo, sb3_env(args.env), args.seed, learning_starts=args.fill)
    model.learn(args.fill)  # fills its replay buffer with random actions, as ours
    batch = model.batch_size
    return Side(f"sb3 {algo}", lambda: model.train(gradient_steps=args.block, batch_size=batch), args.block)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--env", default="HalfCheetahBulletEnv-v0")
    p.add_argument("--threads", type=int, default=1, help="torch threads, both sides (default: %(default)s)")
    p.add_argument("--fill", type=int, default=1000, help="env steps in memory before measuring")
    p.add_argument("--block", type=int, default=8, help="gradient steps per measurement (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=10, help="measurements per round (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="the sides take turns this many times")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. matmul_precision=highest")
    args = p.parse_args()
    rows = []
    for algo in args.algos:
        sides = [ours(algo, args), sb3(algo, args)]
        for r in range(args.rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                side.measure(args.repeats)
        rl, peer = sides
        for side in sides:
            step, floor = statistics.median(side.times), statistics.median(side.floors)
            rows.append({"side": side.name, "GFLOP/step": f"{side.gflop:.3f}", "step ms": f"{step:.2f}",
                         "matmul floor ms": f"{floor:.2f}", "GFLOP/s": f"{side.gflop / step * 1e3:.1f}",
                         "matmul GFLOP/s": f"{side.gflop / floor * 1e3:.1f}",
                         "rest ms": f"{step - floor:.2f}"})
        ratio = statistics.median(peer.times) / statistics.median(rl.times)
        ceiling = statistics.median(peer.times) / statistics.median(rl.floors)
        rows.append({"side": f"{algo}: step ratio {ratio:.2f}x, ceiling {ceiling:.2f}x"})
    print(f"\n{args.env}, {args.threads} torch thread(s), {torch.__version__}; thread CPU time per gradient step, "
          f"median of {args.rounds} x {args.repeats} blocks of {args.block}")
    print_table(rows, list(rows[0]))


if __name__ == "__main__":
    main()
