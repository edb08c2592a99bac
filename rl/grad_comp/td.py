"""One-step TD losses for Q-learning: DQN's (Mnih et al. 2015) and double DQN's (van Hasselt et al. 2016).

target = r + discount * (1 - terminated) * Q_target(s', a*), with a* = argmax Q_target(s') for `td` and
a* = argmax Q_online(s') for `double_td`. Truncated transitions bootstrap; terminated ones do not.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from rl.errors import ConfigError
from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions
from rl.registry import grad_comp

Net = Callable[[torch.Tensor], torch.Tensor]
TARGET_CHUNK = 1024  # rows per target forward when a whole phase's targets are computed at once


def elementwise_loss(pred: torch.Tensor, target: torch.Tensor, kind: str, reduction: str = "none") -> torch.Tensor:
    if kind == "huber":
        return F.smooth_l1_loss(pred, target, reduction=reduction)
    if kind == "mse":
        return F.mse_loss(pred, target, reduction=reduction)
    raise ConfigError(f"unknown loss {kind!r}: valid: huber, mse")


def td_targets(target_net: Net, batch: Transitions, q_net: Net | None = None) -> torch.Tensor:
    """r + discount * (1 - terminated) * Q_target(s', a*), without gradient; a* = argmax Q_target(s') (DQN), or
    argmax Q_online(s') when `q_net` is given (double DQN). DQN's depend on the target network alone, so an agent
    whose target is fixed over a training phase may compute a phase's at once."""
    with torch.no_grad():
        if len(batch.next_obs) > TARGET_CHUNK:  # activations of a few thousand rows stay in cache: ~2x faster
            return torch.cat([td_targets(target_net, part, q_net) for part in batch.split(TARGET_CHUNK)])
        next_target = target_net(batch.next_obs)
        if q_net is None:
            next_q = next_target.amax(dim=1)
        else:
            next_q = next_target.gather(1, q_net(batch.next_obs).argmax(dim=1, keepdim=True)).squeeze(1)
        return td_target(batch.rewards, batch.discounts, batch.terminated, next_q)


def mean_loss(pred: torch.Tensor, target: torch.Tensor, kind: str, weights: torch.Tensor | None) -> torch.Tensor:
    """The batch's mean loss, importance-weighted where `weights` are given."""
    if weights is None:
        return elementwise_loss(pred, target, kind, reduction="mean")
    return (weights * elementwise_loss(pred, target, kind)).mean()


def _td(q_net: Net, target_net: Net, batch: Transitions, loss: str, double: bool, target: torch.Tensor | None = None,
        diagnostics: bool = True):
    q = q_net(batch.obs).gather(1, batch.actions.long().view(-1, 1)).squeeze(1)
    if target is None:
        target = td_targets(target_net, batch, q_net if double else None)
    value = mean_loss(q, target, loss, batch.weights)
    if not diagnostics:  # each op costs microseconds on these networks: skip what nobody reads
        return value, {}
    return value, {"losses/td_loss": value.detach(), "losses/q_values": q.detach().mean(),
                   "td_error": (target - q).detach()}


@grad_comp.register("td", kind="td", targets=td_targets, per_sample_error=True)
def td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber", target: torch.Tensor | None = None,
       diagnostics: bool = True):
    """DQN's loss: the target network both picks and evaluates the next action. `target`: the batch's
    `td_targets`, when the caller computed them ahead (declared at registration: the agent batches a phase's targets
    through it); `diagnostics=False` returns no info (and no td_error)."""
    return _td(q_net, target_net, batch, loss, double=False, target=target, diagnostics=diagnostics)



@grad_comp.register("double_td", kind="td", per_sample_error=True)
def double_td(q_net: Net, target_net: Net, batch: Transitions, loss: str = "huber", diagnostics: bool = True):
    """Double DQN's loss: the online network picks the next action, the target network evaluates it (the online
    network changes every step, so these targets cannot be computed ahead)."""
    return _td(q_net, target_net, batch, loss, double=True, diagnostics=diagnostics)
