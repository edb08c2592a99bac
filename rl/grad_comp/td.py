"""One-step TD losses for Q-learning: DQN's (Mnih et al. 2015) and double DQN's (van Hasselt et al. 2016).

target = r + discount * (1 - terminated) * Q_target(s', a*), with a* = argmax Q_target(s') for `td` and
a* = argmax Q_online(s') for `double_td`. Truncated transitions bootstrap; terminated ones do not.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from rl.errors import ConfigError
from rl.memory.replay import Transitions
from rl.registry import grad_comp

Net = Callable[[torch.Tensor], torch.Tensor]


def elementwise_loss(pred: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "huber":
        return F.smooth_l1_loss(pred, target, reduction="none")
    if kind == "mse":
        return F.mse_loss(pred, target, reduction="none")
    raise ConfigError(f"unknown loss {kind!r}: valid: huber, mse")


def td_targets(target_net: Net, batch: Transitions) -> torch.Tensor:
    """DQN's targets r + discount * (1 - terminated) * max_a Q_target(s', a), without gradient. They depend on the
    target network alone, so an agent whose target is fixed over a training phase may compute a phase's at once."""
    with torch.no_grad():
        next_q = target_net(batch.next_obs).max(dim=1).values
        return batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q


def _td(q_net: Net, target_net: Net, batch: Transitions, loss: str, double: bool, target: torch.Tensor | None = None):
    q_all = q_net(batch.obs)
    q = q_all.gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
    if target is None and not double:
        target = td_targets(target_net, batch)
    elif target is None:
        with torch.no_grad():
            best = q_net(batch.next_obs).argmax(dim=1, keepdim=True)
            next_q = target_net(batch.next_obs).gather(1, best).squeeze(1)
            target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q
    td_error = target - q
    value = (batch.weights * elementwise_loss(q, target, loss)).mean()
    return value, {"losses/td_loss": value.detach(), "losses/q_values": q.detach().mean(),
                   "td_error": td_error.detach()}


@grad_comp.register("td")
def td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber", target: torch.Tensor | None = None):
    """DQN's loss: the target network both picks and evaluates the next action. `target`: the batch's
    `td_targets`, when the caller computed them ahead."""
    return _td(q_net, target_net, batch, loss, double=False, target=target)


td.targets = td_targets  # the agent batches a phase's targets through this (see DQN.update)


@grad_comp.register("double_td")
def double_td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber"):
    """Double DQN's loss: the online network picks the next action, the target network evaluates it (the online
    network changes every step, so these targets cannot be computed ahead)."""
    return _td(q_net, target_net, batch, loss, double=True)
