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


def _td(q_net: Net, target_net: Net, batch: Transitions, loss: str, double: bool):
    q_all = q_net(batch.obs)
    q = q_all.gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
    with torch.no_grad():
        next_target = target_net(batch.next_obs)
        if double:
            best = q_net(batch.next_obs).argmax(dim=1, keepdim=True)
            next_q = next_target.gather(1, best).squeeze(1)
        else:
            next_q = next_target.max(dim=1).values
        target = batch.rewards + batch.discounts * (1.0 - batch.terminated) * next_q
    td_error = target - q
    value = (batch.weights * elementwise_loss(q, target, loss)).mean()
    return value, {"losses/td_loss": value.detach(), "losses/q_values": q.detach().mean(),
                   "td_error": td_error.detach()}


@grad_comp.register("td")
def td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber"):
    """DQN's loss: the target network both picks and evaluates the next action."""
    return _td(q_net, target_net, batch, loss, double=False)


@grad_comp.register("double_td")
def double_td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber"):
    """Double DQN's loss: the online network picks the next action, the target network evaluates it."""
    return _td(q_net, target_net, batch, loss, double=True)
