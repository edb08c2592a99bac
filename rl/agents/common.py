"""Helpers shared by agents: Polyak (soft) target updates and the linear decay of a rate over the run."""

from __future__ import annotations

import torch


def polyak_update(online: torch.nn.Module | list, target: torch.nn.Module | list, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target; tau = 1 is a hard copy. Takes modules, or lists of their
    parameters (cache the lists in hot loops: one foreach kernel per call, no per-call list building)."""
    with torch.no_grad():
        t_params = target if isinstance(target, list) else list(target.parameters())
        o_params = online if isinstance(online, list) else list(online.parameters())
        if tau >= 1.0:
            torch._foreach_copy_(t_params, o_params)
        else:
            torch._foreach_lerp_(t_params, o_params, tau)


def linear_decay(env_steps: int, train_steps: int) -> float:
    """The fraction of the run left, 1 at the start and 0 from `train_steps` on: the factor of a rate that decays
    linearly to 0 over the run (SB3's and rl-baselines3-zoo's `lin_` schedules; PyTorchRL's)."""
    return max(0.0, 1.0 - env_steps / train_steps)
