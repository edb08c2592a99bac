"""What an agent does for the Scheme's workers and learner (rl/parallel), declared as mixins: an agent that takes
part in a role inherits its source, and the learner asks only agents that declare it (`isinstance`).

    RowSource         replay rows (DQN, DDPG/TD3/SAC: Ape-X): the learner's agent observes a collection worker's
                      rows step by step (take_rows) and ends the episodes of a lost worker's rows (close_rows)
    RolloutSource     on-policy rollouts: a collection worker's agent fills a rollout (rollout_ready) and ships it
                      (ship_rollout); the learner's agent says what a worker's buffer must hold (rollout_layout) and
                      takes the workers' rollouts (take_rollout)
    GradientSource    gradient workers (A3C): a worker's agent yields its rollout's minibatch gradients
                      (minibatch_gradients, gradient_size), the learner's applies each (apply_gradients)

Each source also works out, from the settings alone and before anything is built, what its family needs of the
Scheme (`SchemeSettings`): the envs of the learner's agent, the checks of the worker settings, and each worker's own
settings. The learner calls them on the agent's class and names no family. Env steps counted elsewhere
(count_env_steps) and a synchronous gradient group (join_collective) are every agent's (rl/agents/base.py).
"""

from __future__ import annotations

import abc

import numpy as np
import torch

from rl.errors import ConfigError


def worker_envs(hp) -> int:
    """The envs each worker steps: `worker_envs`, or num_envs."""
    return hp.worker_envs or hp.num_envs


class SchemeSettings:
    """The settings of a family's learner and workers, worked out by the agent's class (classmethods: the learner
    asks before any agent is built). A family overrides those that differ."""

    @classmethod
    def learner_envs(cls, hp) -> int:
        """The env rows (replay) or columns (on-policy) of the learner's agent, fed by `num_workers` collection
        workers: by default every worker's envs side by side."""
        return hp.num_workers * worker_envs(hp)

    @classmethod
    def check_workers(cls, hp, learner_envs: int) -> None:  # noqa: B027 - optional hook: nothing to refuse by default
        """One ConfigError line where this family cannot learn from `num_workers` collection workers with these
        settings (`learner_envs`: the envs its learner's agent will have)."""

    @classmethod
    def worker_settings(cls, hp, rank: int, count: int):
        """Worker `rank` of `count`'s settings: its own envs, the CPU and one thread (the cores are shared out between
        processes), and one thread for an Atari vector env."""
        w = hp.copy()
        w.num_envs, w.device, w.torch_threads = worker_envs(hp), "cpu", 1
        if w.env_type == "atari":
            w.env_threads = 1
        return w


class RowSource(SchemeSettings, abc.ABC):
    """An agent that learns from replay rows, its own or collection workers' (Ape-X): rl/agents/dqn.py,
    rl/agents/continuous.py."""

    def take_rows(self, transitions) -> dict:
        """A collection worker's replay rows: (transition, env rows) pairs, one per vector step, each observed into
        those rows of this agent's memory and followed by `update()`, so the replay ratio is one process's (Ape-X).
        The last update's diagnostics."""
        diagnostics: dict = {}
        for transition, rows in transitions:
            if len(rows):
                self.observe(*transition, rows=rows)
                diagnostics = self.update() or diagnostics
        return diagnostics

    @abc.abstractmethod
    def close_rows(self, rows: np.ndarray) -> None:
        """The next transitions of env `rows` continue no episode of their last ones (their worker was restarted, or
        a shipment of theirs dropped): a memory that joins steps (n-step windows) ends those rows' as truncated."""

    @classmethod
    def worker_settings(cls, hp, rank: int, count: int):
        """A replay worker's own memory is never used (it ships its rows): keep it small."""
        w = super().worker_settings(hp, rank, count)
        if "buffer_size" in w:
            w.buffer_size = max(1000, w.num_envs * 8)
        return w


class RolloutSource(SchemeSettings, abc.ABC):
    """An agent that learns from on-policy rollouts, its own or collection workers' (rl/agents/on_policy.py)."""

    @classmethod
    def learner_envs(cls, hp) -> int:
        """A batch of `batch_rollouts` worker env columns (0: one rollout of every worker)."""
        return hp.batch_rollouts or hp.num_workers * worker_envs(hp)

    @classmethod
    def check_workers(cls, hp, learner_envs: int) -> None:
        """The batch is whole worker rollouts; with col_communication=sync, one of every worker."""
        n = worker_envs(hp)
        if learner_envs % n:
            raise ConfigError(f"batch_rollouts ({learner_envs}) must be a multiple of the envs per worker ({n})")
        if hp.col_communication == "sync" and learner_envs != hp.num_workers * n:
            raise ConfigError(f"col_communication=sync learns from one rollout of every worker: batch_rollouts must "
                              f"be num_workers x worker envs = {hp.num_workers * n} (or 0), got {learner_envs}")

    @abc.abstractmethod
    def take_rollout(self, rollout, lag: int, steps: int) -> bool:
        """A collection worker's rollout (its env columns, `steps` env steps, acted by weights `lag` updates old)
        goes in beside the columns already taken; True once a batch is ready for `update()`."""

    @abc.abstractmethod
    def rollout_ready(self) -> bool:
        """A worker's agent: its rollout is full, to be shipped."""

    @abc.abstractmethod
    def ship_rollout(self, buffer) -> None:
        """A worker's agent: its full rollout copied into `buffer` (rl/parallel/buffers.py), and a new one begun."""

    @abc.abstractmethod
    def rollout_layout(self) -> tuple[tuple | None, dict[str, int]]:
        """The learner's agent: the recurrent state's shape (None: feed-forward) and the behaviour vectors a worker's
        rollout buffer must hold."""


class GradientSource(SchemeSettings, abc.ABC):
    """An agent whose gradient steps can be split between gradient workers and a learner. A gradient worker
    (rl/parallel/roles.py) ships each gradient its full rollout yields (minibatch_gradients) and ends the rollout's
    update with finish_update."""

    @abc.abstractmethod
    def minibatch_gradients(self):
        """A generator: a full rollout's targets filled, then the flat gradient of the loss on each minibatch, epoch
        by epoch, ending early where the agent's own rule stops its epochs (PPO's target_kl). Each is yielded in the
        optimizer's buffer: ship it before asking for the next."""

    @abc.abstractmethod
    def finish_update(self) -> dict:
        """After the last minibatch: the rollout is spent; one update's diagnostics."""

    @abc.abstractmethod
    def gradient_size(self) -> int:
        """The length of `minibatch_gradients`' flat gradients (a transport preallocates its buffers)."""

    @abc.abstractmethod
    def apply_gradients(self, grad: torch.Tensor, steps: int = 0) -> dict:
        """The learner's half: clip and apply a shipped gradient, computed from `steps` env steps; one learner
        update."""
