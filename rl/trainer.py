"""Building a run and picking its trainer: torch's settings, seeding, the agent (restored from the newest checkpoint),
and the one factory that chooses between this process stepping its envs (`SingleProcess`) and the Scheme's learner fed
by workers (rl/parallel, imported only then). A synchronous gradient rank > 0 runs rl/parallel/follower.py's
`follow`, built from the same `prepare` and `make_trainer`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from rl.agents import make_agent
from rl.agents.base import resolve_device
from rl.checkpoint import load_checkpoint, load_newest, restore_checked
from rl.collector import Collector
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats
from rl.settle import rank_seed, seed_everything, settle  # noqa: F401 - seed_everything: for scripts


def configure_torch(hp) -> None:
    """Pick the device and settle this process (rl/settle.py: `torch_threads` threads, denormals flushed, freed
    memory kept for reuse)."""
    requested = hp.device
    hp.device = resolve_device(hp.device)
    check_cuda_expected(requested, hp.device)
    settle(hp.torch_threads)


def check_cuda_expected(requested: str, device: str, environ=os.environ) -> None:
    """A pod that asked Kubernetes for a GPU says so (RL_EXPECT_CUDA=1, set by the k8s/ manifests): a run there that
    finds no CUDA device (the rl:cpu image, a node without its driver) is one line and exit 2, not a silent CPU run on
    a GPU node. `device=cpu` set on purpose is left alone."""
    if environ.get("RL_EXPECT_CUDA") != "1" or requested == "cpu" or str(device).startswith("cuda") and \
            torch.cuda.is_available():
        return
    from rl.errors import ConfigError

    raise ConfigError(f"this pod asked for a GPU (RL_EXPECT_CUDA=1) but torch {torch.__version__} finds no CUDA "
                      f"device (built for CUDA {torch.version.cuda or 'none'}): run the rl:cuda image on a node whose "
                      f"NVIDIA driver and device plugin work, or set device=cpu")


def evaluation_agent(hp, output_dir: Path, checkpoint: str = "latest"):
    """The agent of a checkpoint, for evaluation or inference (`checkpoint`: latest, best or a file's path), and the
    checkpoint's path. Built for one env and restored without its memory: evaluation uses none, and an on-policy
    rollout is sized by the envs it was collected with."""
    state, path = load_checkpoint(output_dir, checkpoint)
    configure_torch(hp)
    seed_everything(hp.seed)
    env = make_env(hp, num_envs=1, vector_mode="sync")  # for the spaces
    try:
        agent = build_agent(hp, env, hp.seed)
    finally:
        env.close()
    restore_checked(agent, state, path, include_memory=False)
    return agent, path


def build_agent(hp, env, seed: int):
    """The agent named by `hp.agent`, sized from the env's spaces."""
    return make_agent(hp, env.single_observation_space, env.single_action_space, env.num_envs, seed)


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
    from rl.parallel.roles import make_worker

    spaces = env.single_observation_space, env.single_action_space
    env.close()  # the learner needs only the spaces: workers step envs of their own
    return Learner(hp, spaces, agent, stats, seed, make_worker, transport="ray" if hp.ray_address else "shm")


def prepare(hp, output_dir: Path, rank: int = 0, source: Path | None = None, quiet: bool = False):
    """The env, the agent (restored from the newest checkpoint in `output_dir`, or in `source` for a run forked from
    another, if any) and its statistics. A checkpoint that does not fit the agent is a ConfigError."""
    configure_torch(hp)
    seed_everything(hp.seed)
    if uses_scheme(hp):  # workers step the envs; this process learns
        from rl.parallel.learner import learner_hparams

        env = make_env(hp, num_envs=1, vector_mode="sync")  # for the spaces
        learner_hp = learner_hparams(hp)
        agent = make_agent(learner_hp, env.single_observation_space, env.single_action_space, learner_hp.num_envs,
                           rank_seed(hp.seed, rank))
    else:
        env = make_env(hp)
        agent = build_agent(hp, env, rank_seed(hp.seed, rank))
    stats = EpisodeStats(env.num_envs)
    try:
        found = load_newest(source or output_dir)
        if found is not None:
            restore_checked(agent, found[0], found[1], stats)
            del found  # the agent holds its own copy now: keep no second one (a replay memory can be gigabytes)
            if rank == 0 and not quiet:
                print(f"resuming from step {agent.env_steps}", flush=True)
    except BaseException:
        env.close()
        raise
    return env, agent, stats
