"""Where a gradient step's time goes: time our agent's gradient steps on a set's networks and print torch's profiler
table (matrix products vs everything else). It backs docs/performance.md's account of where the time goes.

    .venv/bin/python benchmarks/profile_update.py --hparams sac_pendulum
    .venv/bin/python benchmarks/profile_update.py --hparams ppo_cartpole --threads 2
    .venv/bin/python benchmarks/profile_update.py --hparams dqn_cartpole --hparam_override batch_size=32
    .venv/bin/python benchmarks/profile_update.py --hparams dqn_cartpole --compile   # torch.compile's loss

`--compile` wraps the agent's loss (`grad_comp`: the forward pass and the loss, whose backward AOTAutograd then
compiles too) in torch.compile and reports the compile time beside the step time: whether compilation pays.

Off-policy agents (ddpg, td3, sac): one `gradient_step` per measurement, on a memory filled with `--fill` env
steps. DQN: one training phase (`gradient_steps` steps, targets included) after each `train_freq` collected steps.
On-policy agents: one `update` (all its epochs) per full rollout. Times are per gradient step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import hparams  # noqa: F401  (fills the hparams registry)
from rl.collector import Collector
from rl.envs import make_env
from rl.registry import hparams as sets
from rl.trainer import build_agent, configure_torch, seed_everything


def collect(collector: Collector, steps: int, update: bool) -> None:
    """`steps` steps of rl/run.py's loop (the Collector), each followed by the agent's update when `update`."""
    for _ in range(steps):
        collector.step()
        if update:
            collector.agent.update()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hparams", default="sac_pendulum")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default: %(default)s)")
    p.add_argument("--fill", type=int, default=1000, help="off-policy: env steps stored first (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=30, help="measured updates (default: %(default)s)")
    p.add_argument("--rows", type=int, default=12, help="profiler table rows (default: %(default)s)")
    p.add_argument("--hparam_override", default="", help="as train.py's, e.g. batch_size=32")
    p.add_argument("--compile", action="store_true", help="torch.compile the agent's loss function")
    args = p.parse_args()
    hp = sets[args.hparams]()
    if args.hparam_override:
        hp.parse(args.hparam_override)
    hp.torch_threads = args.threads
    configure_torch(hp)
    seed_everything(hp.seed)
    env = make_env(hp)
    agent = build_agent(hp, env, hp.seed)
    collector = Collector(env, agent, hp.seed)
    on_policy = hasattr(agent.memory, "compute_advantages")
    if on_policy:  # each measured update learns from a freshly collected rollout (collection is not measured)
        def prepare():
            collect(collector, hp.num_steps - agent.memory.pos, update=False)
        run = agent.update
        per_update = hp.epochs * max(1, (hp.num_steps * hp.num_envs) // (hp.batch_size or 10**9))
    elif hp.agent == "dqn":  # one training phase (gradient_steps steps) after each train_freq collected steps
        collect(collector, max(args.fill, hp.learning_starts + 1), update=False)

        def prepare():
            collect(collector, hp.train_freq, update=False)
        run, per_update = agent.update, hp.gradient_steps
    else:
        collect(collector, args.fill, update=False)
        prepare, run, per_update = (lambda: None), agent.gradient_step, 1
    if args.compile:
        agent.loss_fn = torch.compile(agent.loss_fn, dynamic=False)
        prepare()
        start = time.perf_counter()
        run()  # compiles
        print(f"first update, compiling included: {time.perf_counter() - start:.1f} s")
    times = []
    for i in range(5 + args.repeats):
        prepare()
        start = time.perf_counter()
        run()
        if i >= 5:  # the first few warm up
            times.append(time.perf_counter() - start)
    print(f"{args.hparams}: {statistics.median(times) / per_update * 1e3:.2f} ms per gradient step "
          f"(median of {args.repeats}, {args.threads} thread(s))")
    from torch.profiler import profile

    prepare()
    with profile() as prof:
        run()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))

if __name__ == "__main__":
    main()
