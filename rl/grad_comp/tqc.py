"""TQC's loss (Kuznetsov, Shvechikov, Grishin and Vetrov 2020, "Controlling Overestimation Bias with Truncated
Mixture of Continuous Distributional Quantile Critics", ICML): SAC (Haarnoja et al. 2018) with K distributional
critics of N atoms each (rl/models/quantile.py's `quantile_critics`), called as SAC's loss is (kind
`soft_actor_critic`), with one setting more, `top_quantiles_to_drop_per_net`, which the `tqc` agent passes.

The target: at s' with a' ~ pi(s'), the K N atoms of the target critics are pooled into one mixture and sorted, and
the largest d K of them are dropped (d = `top_quantiles_to_drop_per_net`): the truncation is what controls the
overestimation that SAC's clipped double Q controls with a minimum. Each kept atom z becomes a target atom
r + discount (1 - terminated) (z - alpha log pi(a'|s')). Every atom of every critic regresses on all the target atoms
with the quantile Huber loss (kappa = 1, rl/grad_comp/quantile.py), averaged over the critics, their atoms and the
targets (sb3-contrib's TQC; the paper gives each critic its own mean, a factor K that Adam's steps do not see, the
critics having an optimizer of their own). The actor maximises
the mean of all the critics' atoms (no truncation), less alpha log pi; the temperature is learned as in SAC.

Returns ONE scalar, the critics' loss plus, on `update_actor` steps, the actor's and the temperature's; `td_error` is
the per-sample quantile loss, for prioritized replay.
"""

from __future__ import annotations

import torch

from rl.grad_comp.actor_critic_losses import soft_actor_terms
from rl.grad_comp.quantile import quantile_huber, weighted_mean
from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions
from rl.registry import grad_comp


def truncated_mixture(atoms: torch.Tensor, drop_per_net: int) -> torch.Tensor:
    """The K critics' atoms [K, B, N] pooled per sample and sorted, less the largest `drop_per_net` * K: [B, K (N - d)].
    """
    num_critics, batch, num_quantiles = atoms.shape
    pooled = atoms.transpose(0, 1).reshape(batch, num_critics * num_quantiles)
    return pooled.sort(dim=-1).values[:, :num_critics * (num_quantiles - drop_per_net)]


@grad_comp.register("tqc", kind="soft_actor_critic", per_sample_error=True)
def tqc(policy, critics, target_critics, log_alpha: torch.Tensor, batch: Transitions, target_entropy: float,
        update_actor: bool = True, tune_alpha: bool = True, top_quantiles_to_drop_per_net: int = 2):
    """TQC: `critics` and `target_critics` give atoms [K, B, N]; `policy` draws reparameterised actions with their
    log-probabilities (the actor's `sampler()`, as for SAC)."""
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_actions, next_log_prob = policy(batch.next_obs)
        kept = truncated_mixture(target_critics(batch.next_obs, next_actions), top_quantiles_to_drop_per_net)
        target = td_target(batch.rewards.unsqueeze(1), batch.discounts.unsqueeze(1), batch.terminated.unsqueeze(1),
                           kept - alpha * next_log_prob.unsqueeze(1))  # [B, K (N - d)]
    atoms = critics(batch.obs, batch.actions)  # [K, B, N]
    per_sample = quantile_huber(atoms, target.unsqueeze(0)).mean(dim=(0, 2, 3))  # [K, B, N, K (N - d)] -> [B]
    loss = weighted_mean(per_sample, batch.weights)
    info = {"losses/critic_loss": loss.detach(), "losses/q_values": atoms.detach().mean(), "charts/alpha": alpha,
            "td_error": per_sample.detach()}
    if update_actor:  # the actor's value: every critic's every atom, [B]
        loss = soft_actor_terms(loss, info, policy, lambda a: critics(batch.obs, a, detach=True).mean(dim=(0, 2)),
                                log_alpha, batch.obs, target_entropy, tune_alpha)
    return loss, info
