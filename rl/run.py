"""The loops: train (with periodic evaluation, checkpoints, logging), evaluate/test, and independent copies.

Everything is batched over a gymnasium vector env:
    obs -> agent.act -> env.step -> agent.observe(true next_obs) -> agent.update
With same-step autoreset (sync/async envs) the final observation of an ending episode comes from
`info["final_obs"]`; with next-step autoreset (native vector envs) the step that resets an env is not a transition
and is dropped. Either way no transition spans two episodes and truncations bootstrap.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from rl.agents.base import resolve_device
from rl.checkpoint import load_checkpoint, load_newest, read_best, save, save_best
from rl.collector import Collector, true_next_obs  # noqa: F401 - true_next_obs: re-exported for scripts
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats, game_over, game_rewards
from rl.errors import ConfigError
from rl.registry import agents
from rl.threads import limit_threads
from rl.video import env_fps, write_mp4


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


def snapshot(agent, include_memory: bool = True, stats: EpisodeStats | None = None) -> dict:
    """What a checkpoint holds: the agent's state, torch's global RNG and the recent episode statistics."""
    state = {"agent": agent.state_dict(include_memory=include_memory), "torch_rng": torch.get_rng_state()}
    if stats is not None:
        state["episode_stats"] = stats.state_dict()
    return state


def restore(agent, state: dict, stats: EpisodeStats | None = None, include_memory: bool = True) -> None:
    """Load what `snapshot` saved; `include_memory=False` leaves the memory out (evaluation needs none, and an
    on-policy rollout is sized by the number of envs it was collected with)."""
    agent_state = state["agent"]
    if not include_memory:
        agent_state = {k: v for k, v in agent_state.items() if k != "memory"}
    agent.load_state_dict(agent_state)
    torch.set_rng_state(state["torch_rng"])
    if stats is not None and "episode_stats" in state:
        stats.load_state_dict(state["episode_stats"])


def restore_checked(agent, state: dict, path, stats: EpisodeStats | None = None, include_memory: bool = True) -> None:
    """`restore`, with a checkpoint that does not fit the agent (other sizes or settings) as a ConfigError."""
    try:
        restore(agent, state, stats, include_memory)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ConfigError(f"checkpoint {path} does not fit this run's agent ({type(exc).__name__}: {detail}); it was "
                          f"written with other settings (env, sizes, model): use those, or another --output_dir "
                          f"or --checkpoint") from None


# ---------------------------------------------------------------------------------------------------- evaluation
def evaluate(agent, hp, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` evaluation episodes (greedy unless `eval_deterministic` is off), one per env of a fresh
    vector env; on envs that report games (Atari) an episode is a whole game and its return the unclipped score."""
    returns: list[float] = []
    while len(returns) < episodes:
        n = min(episodes - len(returns), 32)
        env = make_env(hp, num_envs=n, vector_mode="sync")
        obs, _ = env.reset(seed=seed + len(returns))
        state = agent.eval_state(n)
        total, running = np.zeros(n), np.ones(n, bool)
        while running.any():
            actions, state = agent.act_eval(obs, state)
            obs, rewards, terminated, truncated, info = env.step(actions)
            total += game_rewards(rewards, info) * running
            running &= ~game_over(terminated, truncated, info)
        env.close()
        returns += total.tolist()
    return returns


def record_videos(agent, hp, episodes: int, folder: Path, seed: int, human: bool = False) -> tuple[list[float], list]:
    """Play `episodes` greedy episodes in one env, rendering to mp4 files (or to a window when `human`)."""
    env = make_env(hp, num_envs=1, render_mode="human" if human else "rgb_array", vector_mode="sync")
    returns, paths = [], []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        state, done, total, frames = agent.eval_state(1), False, 0.0, []
        while not done:
            if not human:
                frames.append(env.call("render")[0])
            actions, state = agent.act_eval(obs, state)
            obs, reward, terminated, truncated, info = env.step(actions)
            total += float(game_rewards(reward, info)[0])
            done = bool(game_over(terminated, truncated, info)[0])
        returns.append(total)
        if not human:
            paths.append(write_mp4(folder / f"episode_{ep:03d}.mp4", frames, env_fps(env)))
    env.close()
    return returns, paths


def summarize(returns: list[float], **extra) -> dict:
    return {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
            "episodes": len(returns), "returns": [float(r) for r in returns], **extra}


# ---------------------------------------------------------------------------------------------------- training
class BestKeeper:
    """Keeps `checkpoints/best.pt`: the agent of the evaluation with the highest mean return so far. A resumed run
    reads the previous best's score back from best.pt, so only a strictly better evaluation replaces it."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self.best = read_best(output_dir)  # {"step", "mean_return", "path"} or None

    def offer(self, agent, returns: list[float]) -> bool:
        mean = float(np.mean(returns))
        if self.best is not None and not mean > self.best["mean_return"]:
            return False
        path = save_best(self.output_dir, agent.env_steps, mean, snapshot(agent, include_memory=False),
                         std_return=float(np.std(returns)), episodes=len(returns))
        self.best = {"step": agent.env_steps, "mean_return": mean, "path": str(path)}
        return True


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
    """One process, or the Scheme's workers (imported only when asked for)."""
    if not uses_scheme(hp):
        return SingleProcess(hp, env, agent, stats, seed)
    from rl.parallel.scheme import Scheme

    return Scheme(hp, env, agent, stats, seed)


def prepare(hp, output_dir: Path, rank: int = 0):
    """The env, the agent (restored from the newest checkpoint in `output_dir`, if any) and its statistics."""
    configure_torch(hp)
    seed_everything(hp.seed)
    if uses_scheme(hp):  # workers step the envs; this process learns
        from rl.parallel.scheme import learner_hparams

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


def follow(hp, output_dir: Path, rank: int, port: int) -> None:
    """A synchronous gradient worker of rank > 0: the training loop without evaluation, logging or checkpoints."""
    from rl.parallel.grad_workers import GradientGroup, GroupTrainer

    env, agent, stats = prepare(hp, output_dir, rank)
    group = GradientGroup(rank, hp.num_grad_workers, port, hp.device)
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

        from rl.parallel.grad_workers import launch

        group, children = launch(hp, partial(follow, hp, output_dir))
    env, agent, stats = prepare(hp, output_dir)
    start = agent.env_steps
    logger = Logger(output_dir, hp.train_steps, start, quiet=quiet)
    best = BestKeeper(output_dir)
    trainer = make_trainer(hp, env, agent, stats, seed=hp.seed + start)  # a resumed run restarts its episodes
    if group is not None:
        from rl.parallel.grad_workers import GroupTrainer

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
                from rl.parallel.grad_workers import reap

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


# ---------------------------------------------------------------------------------------------------- evaluation mode
def test(hp, output_dir: Path, render: bool = False, record_video: bool = False, checkpoint: str = "latest") -> dict:
    """Restore a checkpoint (`checkpoint`: "latest", "best" or a file path), play `hp.test_episodes` greedy
    episodes, write `eval.json`. The memory is not restored: evaluation does not use it."""
    state, path = load_checkpoint(output_dir, checkpoint)
    configure_torch(hp)
    seed_everything(hp.seed)
    env = make_env(hp, num_envs=1, vector_mode="sync")
    agent = build_agent(hp, env, hp.seed)
    env.close()
    restore_checked(agent, state, path, include_memory=False)
    videos: list = []
    human = render and has_display()
    if render and not human:
        print("--render: no display found (DISPLAY/WAYLAND_DISPLAY unset); use --record_video True to write mp4 "
              "files instead", file=sys.stderr)
    if human or record_video:
        returns, videos = record_videos(agent, hp, hp.test_episodes, output_dir / "videos", hp.seed + 20_000, human)
    else:
        returns = evaluate(agent, hp, hp.test_episodes, seed=hp.seed + 20_000)
    result = summarize(returns, checkpoint=checkpoint, checkpoint_path=str(path), env_steps=agent.env_steps,
                       videos=[str(p) for p in videos])
    (output_dir / "eval.json").write_text(json.dumps({"mode": "test", **result}, indent=2))
    print(f"evaluation of step {agent.env_steps} over {len(returns)} episodes: "
          f"{result['mean_return']:.2f} ± {result['std_return']:.2f} ({checkpoint} checkpoint: {path})")
    if videos:
        print(f"videos: {output_dir / 'videos'}")
    return result


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


# ---------------------------------------------------------------------------------------------------- the CLI's entry
FLAG_SETTINGS = ("env", "seed", "train_steps", "eval_episodes", "test_episodes", "num_workers")


def resolve_hparams(args, output_dir: Path):
    """The set, then the `hparams.json` of a resumed run, then `--hparam_override`, then flags."""
    from rl.registry import hparams as sets

    hp = sets[args.hparams]()
    saved_path = output_dir / "hparams.json"
    if saved_path.exists():
        try:
            saved = json.loads(saved_path.read_text())
            saved_set, saved_values = saved["hparams_set"], saved["hparams"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{saved_path} is corrupt ({exc}); fix or delete it, "
                              f"or use another --output_dir") from None
        if saved_set != args.hparams or saved_values.get("agent") != hp.agent:
            raise ConfigError(f"{output_dir} holds a run of hparams set {saved_set!r} (agent "
                              f"{saved_values.get('agent')!r}); refusing to mix it with {args.hparams!r}. "
                              f"Use another --output_dir")
        hp.update(saved_values)
    if args.hparam_override:
        hp.parse(args.hparam_override)
    for name in FLAG_SETTINGS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(hp, name, value)
    for name in ("train_steps", "eval_episodes", "test_episodes", "num_envs"):
        if getattr(hp, name) <= 0:
            raise ConfigError(f"{name} must be a positive integer, got {getattr(hp, name)}")
    from rl.envs import check_env_id
    from rl.envs.atari import check_atari_id, is_atari_id
    from rl.registry import agents as agent_registry
    from rl.registry import envs as env_registry

    if is_atari_id(hp.env):  # PongNoFrameskip-v4, ALE/Pong-v5: ale-py's vector env, whatever the set's family
        hp.env_type = "atari"
    agent_registry[hp.agent], env_registry[hp.env_type]  # fail early on unknown names
    if hp.env_type == "gym":
        check_env_id(hp.env)
    elif hp.env_type == "atari":
        check_atari_id(hp.env)
    return hp


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
