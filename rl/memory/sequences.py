"""Sequence replay for V-trace agents: what is stored (`Sequences`: whole worker rollouts, as elite_buffer_vtrace
stores them) and what a batch is (`SequenceBatch`). sequence_store.py keeps the items; sequence_buffers.py holds them
in buffers, one per entry of `--replay_parameters`, and composes a batch from them by ratio.

A stored item is one env's rollout of T steps, kept with the same information as `RolloutMemory`: the T acted
observations and each step's real next observation (the final one where an episode ended), actions, rewards,
behaviour log-probabilities, values, terminated and done flags, per-step behaviour feature vectors [T, F] and
optionally behaviour logits [T, A] (for CLEAR's policy cloning). A batch (`SequenceBatch`) is time-major: `obs`
[T+1, k] holds the acted observations plus the bootstrap one (the next observation of step T-1, the final one if it
ended an episode); a step t < T-1 that ended an episode has its final observation in `final_obs`, at `final_at`
(t, b), so V-trace can bootstrap a truncation from it (`next_values`) while `dones` cuts the trace there: nothing
crosses an episode start unflagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

SCALARS = ("rewards", "log_probs", "values", "terminated", "dones")


class Sequences(NamedTuple):
    """Rollouts to store, time-major [T, N, ...] as a worker's `RolloutMemory` holds them (N envs, N items).
    `next_obs[t]` is the real next observation (the final one where step t ended an episode)."""

    obs: np.ndarray | torch.Tensor
    next_obs: np.ndarray | torch.Tensor
    actions: np.ndarray | torch.Tensor
    rewards: np.ndarray | torch.Tensor
    log_probs: np.ndarray | torch.Tensor
    values: np.ndarray | torch.Tensor
    terminated: np.ndarray | torch.Tensor
    dones: np.ndarray | torch.Tensor  # terminated | truncated
    features: np.ndarray | torch.Tensor  # [T, N, F] behaviour features of the acted observations
    logits: np.ndarray | torch.Tensor | None = None  # [T, N, A] behaviour logits (CLEAR), optional


def from_rollout(mem, features, logits=None, columns: slice = slice(None)) -> Sequences:
    """The env columns of a full `RolloutMemory` (a worker's shipment) as sequences, with the features (and logits)
    the worker recorded while acting."""
    f = {name: getattr(mem, name)[: mem.pos, columns] for name in ("obs", "next_obs", "actions", *SCALARS)}
    return Sequences(f["obs"], f["next_obs"], f["actions"], f["rewards"], f["log_probs"], f["values"],
                     f["terminated"], f["dones"], features, logits)


class SequenceBatch(NamedTuple):
    """k sequences, time-major. `final_obs` [m, ...] are the final observations of the steps t < T-1 that ended an
    episode, `final_at` [m, 2] their (t, b); the next observation of any other step t is obs[t + 1]."""

    obs: torch.Tensor  # [T+1, k, ...]
    actions: torch.Tensor  # [T, k, ...]
    rewards: torch.Tensor  # [T, k] float32
    log_probs: torch.Tensor
    values: torch.Tensor
    terminated: torch.Tensor  # float32 0/1
    dones: torch.Tensor  # float32 0/1
    features: torch.Tensor  # [T, k, F] float32
    final_obs: torch.Tensor
    final_at: torch.Tensor  # int64
    logits: torch.Tensor | None = None


def next_values(values: torch.Tensor, final_values: torch.Tensor, final_at: torch.Tensor) -> torch.Tensor:
    """V of each step's real next observation [T, k], from V(obs) [T+1, k] and V(final_obs) [m]: a truncated step
    bootstraps from its final observation, as RolloutMemory's steps do (terminated ones are masked by the loss)."""
    out = values[1:].clone()
    if len(final_at):
        out[final_at[:, 0], final_at[:, 1]] = final_values.to(out.dtype)
    return out


def concat(batches: Sequence[SequenceBatch]) -> SequenceBatch:
    """Batches joined along the batch dimension, in order (final_at's b offset by the sequences before)."""
    offsets = np.cumsum([0] + [b.obs.shape[1] for b in batches[:-1]])
    final_at = torch.cat([b.final_at + torch.tensor([0, int(o)]) for b, o in zip(batches, offsets)])
    fields = {}
    for name in SequenceBatch._fields:
        parts = [getattr(b, name) for b in batches]
        if name == "final_at":
            fields[name] = final_at
        elif name == "logits" and any(p is None for p in parts):
            fields[name] = None
        else:
            fields[name] = torch.cat(parts, 0 if name == "final_obs" else 1)
    return SequenceBatch(**fields)
