"""QR-DQN's loss (Dabney, Rowland, Bellemare and Munos 2018, "Distributional Reinforcement Learning with Quantile
Regression", AAAI), and the quantile Huber loss that TQC's critics share (rl/grad_comp/tqc.py).

The network gives N atoms theta_0..theta_{N-1} per action (rl/models/quantile.py), atom i standing for the quantile of
fraction tau_i = (2i + 1) / 2N (i = 0..N-1: the midpoints of N equal slices of [0, 1], the fractions whose quantiles
are the closest N-atom distribution in the 1-Wasserstein distance, the paper's Lemma 2). The target distribution is
the next state's atoms for action a*, shifted by the Bellman operator, T theta_j = r + discount (1 - terminated)
theta_j(s', a*) (targets.py's `td_target`: gamma^k for k-step returns, bootstrapping through truncations only). Each
atom i regresses on every target atom j with the quantile Huber loss of u = T theta_j - theta_i,

    rho_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa,
    L_kappa(u) = u^2 / 2 if |u| <= kappa, else kappa (|u| - kappa / 2),

with kappa = 1 (the paper's QR-DQN-1): an atom whose fraction is tau is pushed up by tau of the targets above it and
down by 1 - tau of those below, so it settles at their tau-quantile. The per-sample loss sums over i and averages
over j (the paper's Algorithm 1, and sb3-contrib's QRDQN); it is weighted by prioritized replay's importance weights,
and returned as `td_error` for the priorities (as Rainbow uses C51's cross-entropy).

`qrdqn` picks a* by the target network's mean atoms; `double_qrdqn` by the online network's (double Q). The TD
call's `loss` setting (huber, mse) is ignored: the loss is always the quantile Huber loss. Both are registered
`distributional="quantiles"`, so the DQN agent refuses, at assembly, a network without `quantiles`.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions
from rl.models.multi_input import legal_values
from rl.registry import grad_comp

KAPPA = 1.0  # the Huber threshold of QR-DQN-1, also TQC's


def quantile_fractions(num_quantiles: int, device: torch.device | None = None) -> torch.Tensor:
    """tau_i = (2i + 1) / 2N for i = 0..N-1: [N], increasing, the fraction atom i stands for."""
    return (torch.arange(num_quantiles, device=device, dtype=torch.float32) + 0.5) / num_quantiles


def quantile_huber(atoms: torch.Tensor, target: torch.Tensor, kappa: float = KAPPA) -> torch.Tensor:
    """rho_tau_i(target_j - atoms_i) for every pair: `atoms` [..., N] in the order of their fractions tau_i (leading
    dimensions broadcast with `target`'s), `target` [..., M]; the result is [..., N, M]. Differentiable in `atoms`;
    the target is taken as given (compute it without gradient).

    Written with torch's fused Huber loss on expanded views, and the weight |tau - 1{u < 0}| picked by one `where`:
    the pairs are TQC's largest tensor ([K, B, N, K (N - d)], 590k floats for Pendulum's set), and this form takes
    a quarter of the time of the formula's elementwise ops, forward and backward (1 CPU thread)."""
    tau = quantile_fractions(atoms.shape[-1], atoms.device).unsqueeze(-1)  # [N, 1]
    shape = (*torch.broadcast_shapes(atoms.shape[:-1], target.shape[:-1]), atoms.shape[-1], target.shape[-1])
    theta, targets = atoms.unsqueeze(-1).expand(shape), target.unsqueeze(-2).expand(shape)
    huber = F.huber_loss(theta, targets, reduction="none", delta=kappa)  # L_kappa(u), u = target - atom
    return torch.where(targets < theta, (1 - tau) / kappa, tau / kappa) * huber  # u < 0: weight 1 - tau


def weighted_mean(per_sample: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The batch's loss: a plain mean, or weighted by prioritized replay's importance weights."""
    return per_sample.mean() if weights is None else (weights * per_sample).mean()


def _qrdqn(q_net, target_net, batch: Transitions, double: bool, diagnostics: bool):
    all_atoms = q_net.quantiles(batch.obs)  # [B, A, N]
    taken = batch.actions.long().view(-1, 1, 1).expand(-1, 1, all_atoms.shape[-1])
    atoms = all_atoms.gather(1, taken).squeeze(1)  # [B, N]
    with torch.no_grad():
        next_atoms = target_net.quantiles(batch.next_obs)  # [B, A, N]
        # the online network's values (double Q) or the target's mean atoms, among the legal actions where the
        # observation has an action mask
        next_q = q_net(batch.next_obs) if double else legal_values(target_net, next_atoms.mean(-1), batch.next_obs)
        best = next_q.argmax(dim=1)
        next_best = next_atoms[torch.arange(len(best), device=best.device), best]  # [B, N]
        target = td_target(batch.rewards.unsqueeze(1), batch.discounts.unsqueeze(1), batch.terminated.unsqueeze(1),
                           next_best)
    per_sample = quantile_huber(atoms, target).sum(-2).mean(-1)  # sum over the atoms i, mean over the targets j
    value = weighted_mean(per_sample, batch.weights)
    if not diagnostics:
        return value, {}
    return value, {"losses/qrdqn_loss": value.detach(), "losses/q_values": atoms.detach().mean(),
                   "td_error": per_sample.detach()}


@grad_comp.register("qrdqn", kind="td", per_sample_error=True, distributional="quantiles")
def qrdqn(q_net, target_net, batch: Transitions, loss: str = "quantile_huber", diagnostics: bool = True):
    """QR-DQN: the target network picks and evaluates the next action. `loss` is ignored."""
    return _qrdqn(q_net, target_net, batch, double=False, diagnostics=diagnostics)


@grad_comp.register("double_qrdqn", kind="td", per_sample_error=True, distributional="quantiles")
def double_qrdqn(q_net, target_net, batch: Transitions, loss: str = "quantile_huber", diagnostics: bool = True):
    """QR-DQN with double Q: the online network picks the next action by its mean atoms, the target evaluates it."""
    return _qrdqn(q_net, target_net, batch, double=True, diagnostics=diagnostics)
