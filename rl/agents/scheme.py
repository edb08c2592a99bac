"""What an agent does for the Scheme's workers and learner (rl/parallel), declared as mixins: an agent that takes
part in a role inherits its source, and the learner asks only agents that declare it.

    RolloutSource     on-policy rollouts (`EXPERIENCE = "rollouts"`): a collection worker's agent fills a rollout
                      (rollout_ready) and ships it (ship_rollout); the learner's agent says what a worker's buffer must
                      hold (rollout_layout) and takes the workers' rollouts (take_rollout)
    GradientSource    gradient workers (A3C, synchronous groups): a worker's agent computes a minibatch's flat gradient
                      (compute_gradients, gradient_size), the learner's applies it (apply_gradients)

Replay rows (take_rows, close_rows), env steps counted elsewhere (count_env_steps) and a synchronous gradient group
(join_collective: every optimizer averages its gradient across the group) are every agent's (rl/agents/base.py): a
replay agent learns from shipped rows with its own observe and update.
"""

from __future__ import annotations

import abc

import torch


class RolloutSource(abc.ABC):
    """An agent that learns from on-policy rollouts, its own or collection workers' (rl/agents/on_policy.py)."""

    EXPERIENCE = "rollouts"  # the learner gives such an agent collection workers of role "rollouts"

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


class GradientSource(abc.ABC):
    """An agent whose gradient steps can be split between gradient workers and a learner. A gradient worker
    (rl/parallel/roles.py) walks one rollout's minibatches (learning_batches), computing and shipping a gradient for
    each, and ends the rollout's update with finish_update."""

    @abc.abstractmethod
    def learning_batches(self):
        """A generator: a full rollout's targets filled, then its minibatches epoch by epoch (ending early where
        `compute_gradients` skipped a step)."""

    @abc.abstractmethod
    def finish_update(self) -> dict:
        """After the last minibatch: the rollout is spent; one update's diagnostics."""

    @abc.abstractmethod
    def compute_gradients(self, batch) -> torch.Tensor | None:
        """A gradient worker's half of a gradient step: the flat gradient of the loss on `batch` (None: the step is
        skipped, e.g. PPO's target_kl)."""

    @abc.abstractmethod
    def gradient_size(self) -> int:
        """The length of `compute_gradients`' flat gradient (a transport preallocates its buffers)."""

    @abc.abstractmethod
    def apply_gradients(self, grad: torch.Tensor, steps: int = 0) -> dict:
        """The learner's half: clip and apply a shipped gradient, computed from `steps` env steps; one learner
        update."""
