"""Helpers shared by agents: Polyak (soft) target updates."""

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
