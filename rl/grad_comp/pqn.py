"""PQN's loss (Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning"): the squared error between the
Q-value of each taken action and its Q(lambda) return, with no target network; CleanRL's pqn.py and
pqn_atari_envpool.py take `F.mse_loss(returns, q)`, which this is.

A loss of kind `q_lambda` (rl/grad_comp/contracts.py, QLambdaLoss): the PQN agent (rl/agents/pqn.py) runs the network
on a rollout minibatch and passes its Q-values [B, A] with gradient and the minibatch, whose `returns` the rollout's
Q(lambda) recursion filled beforehand (rl/memory/q_lambda.py): nothing here computes targets.
"""

from __future__ import annotations

import torch

from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp


def taken(q_values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Q(s, a) [B] of the taken actions, from Q-values [B, A]."""
    return q_values.gather(1, actions.long().view(-1, 1)).squeeze(1)


@grad_comp.register("pqn", kind="q_lambda")
def pqn(q_values: torch.Tensor, batch: RolloutBatch, *, diagnostics: bool = True):
    """mean (R - Q(s, a))^2 over the minibatch."""
    q = taken(q_values, batch.actions)
    error = batch.returns - q
    loss = error.square().mean()
    if not diagnostics:
        return loss, {}
    return loss, {"losses/td_loss": loss.detach(), "losses/q_values": q.detach().mean()}
