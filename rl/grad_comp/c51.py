"""The C51 loss (Bellemare, Dabney and Munos 2017, Algorithm 1) and its double-Q form used by Rainbow (Hessel et al.
2018).

The target distribution is the next state's distribution for action a*, shifted and shrunk by the Bellman operator,
T z_i = r + discount (1 - terminated) z_i (discount = gamma^k for k-step returns; targets.py's `td_target`), clipped
to [v_min, v_max] and projected back onto the fixed support by splitting each atom's mass between its two neighbours
in proportion to closeness. The loss is the cross-entropy -sum_i m_i log p_i(s, a), weighted by the importance
weights; the per-item cross-entropy is also returned as `td_error`, Rainbow's priority for prioritized replay.
`c51` picks a* by the target network's expected values; `double_c51` by the online network's (double Q).
The networks must be distributional (rl/models/distributional.py: `log_probs` and a `support` buffer): both losses are
registered `distributional=True`, and the DQN agent refuses any other network when it is built.
"""

from __future__ import annotations

import torch

from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions
from rl.models.multi_input import legal_values
from rl.registry import grad_comp


def project(next_probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, terminated: torch.Tensor,
            support: torch.Tensor) -> torch.Tensor:
    """Project the distribution of r + discount * (1 - terminated) * Z (Z on `support` with `next_probs` [B, atoms];
    `rewards`, `discounts`, `terminated` [B]) onto `support`. Mass at T z = b (in atom units) goes to floor(b) with
    weight ceil(b) - b and to ceil(b) with weight b - floor(b); when b is an integer it all goes to that atom."""
    num_atoms = support.numel()
    v_min, v_max = support[0].item(), support[-1].item()
    delta = (v_max - v_min) / (num_atoms - 1)
    shifted = td_target(rewards.unsqueeze(1), discounts.unsqueeze(1), terminated.unsqueeze(1), support.unsqueeze(0))
    tz = shifted.clamp(v_min, v_max)
    b = ((tz - v_min) / delta).clamp(0, num_atoms - 1)  # rounding must not leave the support
    lower, upper = b.floor().long(), b.ceil().long()
    lower_w = upper.float() - b + (lower == upper).float()  # exact hits keep all their mass on one atom
    upper_w = b - lower.float()
    target = torch.zeros_like(next_probs)
    target.scatter_add_(1, lower, next_probs * lower_w)
    target.scatter_add_(1, upper, next_probs * upper_w)
    return target


def _c51(q_net, target_net, batch: Transitions, double: bool):
    log_p = q_net.log_probs(batch.obs)
    actions = batch.actions.long().view(-1, 1, 1).expand(-1, 1, log_p.shape[-1])
    log_p_a = log_p.gather(1, actions).squeeze(1)  # [B, atoms]
    with torch.no_grad():
        next_probs_all = target_net.log_probs(batch.next_obs).exp()  # [B, A, atoms]
        if double:
            best = q_net(batch.next_obs).argmax(dim=1)
        else:
            next_q = legal_values(target_net, (next_probs_all * target_net.support).sum(-1), batch.next_obs)
            best = next_q.argmax(dim=1)  # among the legal actions, where the observation has an action mask
        next_probs = next_probs_all[torch.arange(len(best)), best]
        target = project(next_probs, batch.rewards, batch.discounts, batch.terminated, target_net.support)
    cross_entropy = -(target * log_p_a).sum(-1)
    value = cross_entropy.mean() if batch.weights is None else (batch.weights * cross_entropy).mean()
    q = (log_p_a.detach().exp() * q_net.support).sum(-1)
    return value, {"losses/c51_loss": value.detach(), "losses/q_values": q.mean(),
                   "td_error": cross_entropy.detach()}


@grad_comp.register("c51", kind="td", per_sample_error=True, distributional=True)
def c51(q_net, target_net, batch: Transitions, loss: str = "cross_entropy", diagnostics: bool = True):
    """C51: the target network picks and evaluates the next action. `loss` is ignored (always cross-entropy), and
    so is `diagnostics` (the info is always returned)."""
    return _c51(q_net, target_net, batch, double=False)


@grad_comp.register("double_c51", kind="td", per_sample_error=True, distributional=True)
def double_c51(q_net, target_net, batch: Transitions, loss: str = "cross_entropy", diagnostics: bool = True):
    """Rainbow's C51: the online network picks the next action by its expected value, the target evaluates it."""
    return _c51(q_net, target_net, batch, double=True)
