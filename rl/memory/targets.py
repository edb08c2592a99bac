"""A full rollout's learning targets, filled into its `advantages` and `returns` before the update's epochs: the
bootstrap values V(real_next_obs) of every stored step, then GAE(lambda) (`RolloutMemory.compute_advantages`) or
V-trace (`fill_vtrace`).

The value head belongs to the agent: it is handed in as `value_of(next_obs, next_hidden) -> values [n]` in return
units on the CPU, so this module knows the rollout's layout and nothing of the model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rl.grad_comp.vtrace import vtrace_targets
from rl.memory.rollout import RolloutMemory


def bootstrap_values(memory: RolloutMemory, values: torch.Tensor,
                     value_of: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]) -> torch.Tensor:
    """V(real_next_obs) of every stored step, [T, N], given `values` [T, N] of the stored observations. Inside an
    episode the next observation is the next step's observation (and, recurrent, the next hidden state its state),
    valued already; only the steps that ended an episode (their final observation) and the rollout's last step need
    `value_of`, in one call."""
    T = memory.pos
    next_values = torch.empty(T, memory.num_envs)
    next_values[:-1] = values[1:T]
    need = memory.dones[:T].bool()
    need[-1] = True
    where = need.nonzero(as_tuple=True)
    hidden = memory.next_hidden[where] if memory.recurrent else None
    next_values[where] = value_of(memory.next_obs[where], hidden)
    return next_values


def fill_vtrace(memory: RolloutMemory, log_rhos: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor,
                gamma: float, rho_bar: float, c_bar: float, pg_rho_bar: float) -> None:
    """Fill `advantages` (V-trace's policy-gradient advantages) and `returns` (vs) of the stored steps
    (rl/grad_comp/vtrace.py), from log pi - log mu of the taken actions and the values [T, N] the targets start
    from."""
    T = memory.pos
    vs, advantages = vtrace_targets(log_rhos, values, next_values, memory.rewards[:T], memory.terminated[:T],
                                    memory.dones[:T], gamma, rho_bar, c_bar, pg_rho_bar)
    memory.advantages[:T], memory.returns[:T] = advantages, vs
