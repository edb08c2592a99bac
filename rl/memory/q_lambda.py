"""Q(lambda) returns of a rollout, PQN's targets (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning";
Peng and Williams 1996's Q(lambda), as purejaxql and CleanRL's pqn.py compute it): each step's target mixes the
one-step Q-learning target with the next step's lambda-return,

    R_t = r_t + gamma * (1 - terminated_t) * [(1 - lambda) * max_a Q(s'_t, a) + lambda * R_{t+1}],

where s'_t is the step's real next observation (the final one where an episode ended). The trace is cut where an
episode ends and at the rollout's last step: there R_t is the one-step target r_t + gamma * (1 - terminated_t) *
max_a Q(s'_t, a), so a truncated episode bootstraps from its own final observation, a terminated one not at all, and
no return reaches into the next episode. Written as GAE is (rl/memory/rollout.py), one backward pass over time:

    R_t = r_t + gamma * (1 - terminated_t) * V_t + gamma * lambda * (1 - done_t) * (R_{t+1} - V_t),  V_t = max Q(s'_t)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rl.memory.rollout import RolloutMemory
from rl.memory.targets import bootstrap_values


def q_lambda_returns(rewards: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor, dones: torch.Tensor,
                     gamma: float, lam: float) -> torch.Tensor:
    """Returns [T, N] from per-step rewards, max_a Q of each step's real next observation `next_values`, and the
    0/1 flags `terminated` and `dones` (terminated or truncated), all [T, N]."""
    bootstrap = rewards + gamma * (1.0 - terminated) * next_values
    carry = gamma * lam * (1.0 - dones)
    returns = torch.empty_like(bootstrap)
    following = next_values[-1]  # past the rollout's end the trace is cut: R_T - V_{T-1} counts as 0
    for t in range(len(rewards) - 1, -1, -1):
        following = bootstrap[t] + carry[t] * (following - next_values[t])
        returns[t] = following
    return returns


def fill_q_lambda(memory: RolloutMemory, values: torch.Tensor, max_q_of: Callable[[torch.Tensor, None], torch.Tensor],
                  gamma: float, lam: float) -> None:
    """Fill `returns` with the Q(lambda) returns of the stored steps (and `advantages` with returns - values), given
    `values` [T, N], max_a Q of the stored observations, and `max_q_of(obs, None)`, max_a Q of other observations on
    the CPU: only the final observations of ended episodes and the rollout's last next observations are valued."""
    T = memory.pos
    next_values = bootstrap_values(memory, values, max_q_of)
    returns = q_lambda_returns(memory.rewards[:T], next_values, memory.terminated[:T], memory.dones[:T], gamma, lam)
    memory.returns[:T] = returns
    memory.advantages[:T] = returns - values
