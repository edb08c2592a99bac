"""Helpers shared by agents: Polyak (soft) target updates, the linear decay of a rate over the run, policy parameters
in fp32, and the rollout agents' need of same-step autoreset."""

from __future__ import annotations

import torch

from rl.envs import has_same_step_native
from rl.errors import ConfigError


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


def fp32_params(params):
    """Policy parameters (logits, or a Gaussian's mean and log-std) in fp32."""
    return tuple(p.float() for p in params) if isinstance(params, tuple) else params.float()


def check_same_step_autoreset(hp) -> None:
    """The rollout stores every env at every step: that needs same-step autoreset (sync, async, auto, or a native
    vector env that resets in the same step, like CartPole's)."""
    if hp.vector_mode == "native" and not has_same_step_native(hp.env):
        raise ConfigError(f"agent {hp.agent!r} needs same-step autoreset: use vector_mode=auto, sync or async "
                          f"({hp.env!r}'s native vector env resets on the next step)")
