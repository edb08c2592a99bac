"""Orchestration: settings, the trainer (one process or the Scheme's workers), the training loop's checkpoints,
evaluations and logging, evaluation mode and independent copies. The stepping is the Collector's (rl/collector.py),
the evaluation loops are rl/evaluation.py's, the checkpoint helpers rl/checkpoint.py's and settings resolution
rl/hparams.py's; their names are re-exported here for scripts and tests.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch

from rl.agents.base import resolve_device
from rl.checkpoint import BestKeeper, load_newest, restore, restore_checked, save, snapshot  # noqa: F401
from rl.collector import Collector, true_next_obs  # noqa: F401 - true_next_obs: re-exported for scripts
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats
from rl.errors import ConfigError
from rl.evaluation import evaluate, has_display, record_videos, summarize, test  # noqa: F401
from rl.hparams import FLAG_SETTINGS, resolve_hparams  # noqa: F401
from rl.registry import agents
from rl.threads import limit_threads


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def configure_torch(hp) -> None:
    """Pick the device, the thread count (torch, BLAS, OpenCV: rl/threads.py) and flush denormal floats to zero.
    Adam's moment estimates of parameters whose gradient is zero (dead ReLU units) decay into denormals, and CPU
    arithmetic on denormals is tens of times slower: without flushing, the optimizer step dominates a small
    network's update."""
    hp.device = resolve_device(hp.device)
    limit_threads(hp.torch_threads)
    torch.set_flush_denormal(True)


def build_agent(hp, env, seed: int):
    """The agent named by `hp.agent`, sized from the env's spaces."""
    return agents[hp.agent](hp, env.single_observation_space, env.single_action_space, env.num_envs, seed=seed)


class StopFlag:
    """SIGINT/SIGTERM set a flag; the loop checkpoints and exits at the next step."""

    def __init__(self):
        self.signum = 0
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame):
        self.signum = signum

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


class SingleProcess:
    """`--num_workers 0`: this process collects (the Collector) and learns, one vector step at a time."""

    def __init__(self, hp, env, agent, stats: EpisodeStats, seed: int):
        self.hp, self.agent = hp, agent
        self.collector = Collector(env, agent, seed, stats=stats)
        self.stats = stats
        self.clock = {**self.collector.clock, "perf/learn_s": 0.0}

    def step(self) -> dict:
        self.collector.step()
        t0 = time.perf_counter()
        diagnostics = self.agent.update()
        self.clock.update(self.collector.clock)
        self.clock["perf/learn_s"] += time.perf_counter() - t0
        return diagnostics

    def finished(self, signum: int) -> bool:
        return bool(signum) or self.agent.env_steps >= self.hp.train_steps

    def close(self) -> None:
        self.collector.close()


def uses_scheme(hp) -> bool:
    """Collection workers, or async gradient workers (A3C): the learner is fed by worker processes."""
    return hp.num_workers > 0 or (hp.num_grad_workers > 1 and hp.grad_communication == "async")


def make_trainer(hp, env, agent, stats: EpisodeStats, seed: int):
    """One process, or the Scheme's learner fed by workers: forked processes on this machine, or Ray actors with
    `ray_address` (rl/parallel is imported only when asked for, Ray only with an address)."""
    if not uses_scheme(hp):
        return SingleProcess(hp, env, agent, stats, seed)
    from rl.parallel.learner import Learner

    spaces = env.single_observation_space, env.single_action_space
    env.close()  # the learner needs only the spaces: workers step envs of their own
    return Learner(hp, spaces, agent, stats, seed, transport="ray" if hp.ray_address else "shm")


def prepare(hp, output_dir: Path, rank: int = 0):
    """The env, the agent (restored from the newest checkpoint in `output_dir`, if any) and its statistics."""
    configure_torch(hp)
    seed_everything(hp.seed)
    if uses_scheme(hp):  # workers step the envs; this process learns
        from rl.parallel.learner import learner_hparams

        env = make_env(hp, num_envs=1, vector_mode="sync")  # for the spaces
        learner_hp = learner_hparams(hp)
        agent = agents[hp.agent](learner_hp, env.single_observation_space, env.single_action_space,
                                 learner_hp.num_envs, seed=hp.seed + 7919 * rank)
    else:
        env = make_env(hp)
        agent = build_agent(hp, env, hp.seed + 7919 * rank)
    stats = EpisodeStats(env.num_envs)
    found = load_newest(output_dir)
    if found is not None:
        restore_checked(agent, found[0], found[1], stats)
        del found  # the agent holds its own copy now: keep no second one (a replay memory can be gigabytes)
        if rank == 0:
            print(f"resuming from step {agent.env_steps}", flush=True)
    return env, agent, stats


def follow(hp, output_dir: Path, rank: int, address) -> None:
    """A synchronous gradient worker of rank > 0: the training loop without evaluation, logging or checkpoints."""
    from rl.parallel.collective import GradientGroup, GroupTrainer

    env, agent, stats = prepare(hp, output_dir, rank)
    group = GradientGroup(rank, hp.num_grad_workers, address, hp.device)
    group.join(agent)
    trainer = GroupTrainer(make_trainer(hp, env, agent, stats, seed=hp.seed + agent.env_steps + 7919 * rank), agent,
                           group, hp.train_steps)
    try:
        while not trainer.finished(0):
            trainer.step()
    finally:
        trainer.close()
        group.close()


def train(hp, output_dir: Path, quiet: bool = False) -> dict:
    """Train (resuming from the newest checkpoint in `output_dir` if any); return the final evaluation."""
    from rl.logger import Logger

    group = children = None
    if hp.num_grad_workers > 1 and hp.grad_communication == "sync":  # DPPO/RAPID: fork the other ranks first
        from functools import partial

        from rl.parallel.collective import launch

        group, children = launch(hp, partial(follow, hp, output_dir))
    env, agent, stats = prepare(hp, output_dir)
    start = agent.env_steps
    logger = Logger(output_dir, hp.train_steps, start, quiet=quiet)
    best = BestKeeper(output_dir)
    trainer = make_trainer(hp, env, agent, stats, seed=hp.seed + start)  # a resumed run restarts its episodes
    if group is not None:
        from rl.parallel.collective import GroupTrainer

        group.join(agent)
        trainer = GroupTrainer(trainer, agent, group, hp.train_steps)

    def checkpoint():
        save(output_dir, agent.env_steps, snapshot(agent, hp.checkpoint_memory, stats), keep=hp.keep_checkpoints)

    diagnostics: dict = {}
    last = {"log": start, "eval": start, "ckpt": start}
    eval_row: dict = {}

    def due(kind: str, interval: int) -> bool:
        return interval > 0 and agent.env_steps // interval > last[kind] // interval

    with StopFlag() as stop:
        try:
            while not trainer.finished(stop.signum):
                diagnostics = trainer.step() or diagnostics
                if due("eval", hp.eval_interval) and agent.env_steps < hp.train_steps:
                    returns = evaluate(agent, hp, hp.eval_episodes, seed=hp.seed + 10_000)
                    best.offer(agent, returns)
                    eval_row = {"eval/return_mean": float(np.mean(returns)),
                                "eval/return_std": float(np.std(returns))}
                    last["eval"] = agent.env_steps
                    last["log"] = -1  # log this evaluation now
                if due("log", hp.log_interval) or last["log"] < 0:
                    logger.log(agent.env_steps, {**stats.summary(), **diagnostics, **eval_row, **trainer.clock})
                    eval_row, last["log"] = {}, agent.env_steps
                if due("ckpt", hp.checkpoint_interval):
                    checkpoint()
                    last["ckpt"] = agent.env_steps
        finally:
            trainer.close()  # workers stop before the last checkpoint: it is the state they last saw, or newer
            if group is not None:
                from rl.parallel.collective import reap

                group.close()
                reap(children)
        checkpoint()
        if stop.signum:
            logger.close()
            name = signal.Signals(stop.signum).name
            print(f"\n{name}: saved a checkpoint at step {agent.env_steps}; run the same command to resume.",
                  flush=True)
            raise SystemExit(128 + stop.signum)
    returns = evaluate(agent, hp, hp.eval_episodes, seed=hp.seed + 10_000)
    best.offer(agent, returns)
    result = summarize(returns, env_steps=agent.env_steps, wall_time_s=round(time.time() - logger.start_time, 2),
                       best=best.best)
    logger.log(agent.env_steps, {**stats.summary(), "eval/return_mean": result["mean_return"],
                                 "eval/return_std": result["std_return"]})
    logger.close()
    (output_dir / "eval.json").write_text(json.dumps({"mode": "final_training_evaluation", **result}, indent=2))
    if not quiet:
        print(f"final evaluation over {len(returns)} episodes: "
              f"{result['mean_return']:.2f} ± {result['std_return']:.2f}; best: {best.best['mean_return']:.2f} "
              f"at step {best.best['step']} ({best.best['path']})")
    return result


def write_run_record(hp, args, output_dir: Path) -> None:
    record = {"hparams_set": args.hparams, "hparams": hp.to_dict(),
              "flags": {k: v for k, v in vars(args).items() if k != "func"}}
    tmp = output_dir / ".hparams.json.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True))
    os.replace(tmp, output_dir / "hparams.json")


def run_one(args, output_dir: Path, seed_offset: int = 0, quiet: bool = False) -> dict:
    """Resolve settings, record them, and train or evaluate one run in `output_dir`."""
    hp = resolve_hparams(args, output_dir)
    hp.seed += seed_offset if not (output_dir / "hparams.json").exists() else 0
    if args.training:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_run_record(hp, args, output_dir)
        if not quiet:
            print(f"hparams set {args.hparams!r} -> {output_dir}\n{hp.describe()}", flush=True)
        return train(hp, output_dir, quiet=quiet)
    if not (output_dir / "hparams.json").exists():
        raise ConfigError(f"--training False needs a trained run, and {output_dir} has no hparams.json: "
                          f"train first with the same --output_dir")
    return test(hp, output_dir, render=args.render, record_video=args.record_video,
                checkpoint=getattr(args, "checkpoint", "latest"))


def _copy_worker(args, index: int) -> dict:
    out = Path(args.output_dir) / f"copy_{index}"
    return {"copy": index, **run_one(args, out, seed_offset=index, quiet=True)}


def run_copies(args) -> list[dict]:
    """`--copies N`: N independent seeds (seed + i) in `output_dir/copy_<i>`, up to one process per core.
    Forked, so the children inherit the filled registries (including the sets that train.py imported)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = min(args.copies, os.cpu_count() or 1)
    print(f"running {args.copies} copies in {out}/copy_<i> with {workers} processes", flush=True)
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        results = list(pool.map(_copy_worker, [args] * args.copies, range(args.copies)))
    means = [r["mean_return"] for r in results]
    summary = {"copies": results, "mean_of_means": float(np.mean(means)), "std_of_means": float(np.std(means))}
    (out / "copies_summary.json").write_text(json.dumps(summary, indent=2))
    for r in results:
        print(f"copy {r['copy']}: {r['mean_return']:.2f} ± {r['std_return']:.2f}")
    print(f"over {args.copies} copies: {summary['mean_of_means']:.2f} ± {summary['std_of_means']:.2f} "
          f"(written to {out / 'copies_summary.json'})")
    return results


def main(args) -> None:
    if args.sys == "k8s":
        raise ConfigError("--sys k8s is not available yet (a later issue adds cluster submission); use --sys local")
    if args.num_workers is not None and args.num_workers < 0:
        raise ConfigError(f"--num_workers must be 0 (one process) or a positive number of workers, got "
                          f"{args.num_workers}")
    if args.copies < 1:
        raise ConfigError(f"--copies must be at least 1, got {args.copies}")
    if args.training and getattr(args, "checkpoint", "latest") != "latest":
        raise ConfigError(f"--checkpoint {args.checkpoint} applies to --training False (evaluation) only; training "
                          f"always resumes from the newest checkpoint")
    if args.train_steps is not None and args.train_steps <= 0:
        raise ConfigError(f"--train_steps must be a positive integer, got {args.train_steps}")
    if args.copies > 1:
        if not args.training:
            for i in range(args.copies):
                run_one(args, Path(args.output_dir) / f"copy_{i}")
            return
        run_copies(args)
        return
    run_one(args, Path(args.output_dir))
