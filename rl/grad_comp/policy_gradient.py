"""Policy-gradient losses as plain functions of tensors: `pg` (REINFORCE with a learned baseline, Williams 1992),
`a2c` (Mnih et al. 2016) and `ppo_clip` (Schulman et al. 2017, clipped surrogate, optional clipped value loss).

Each takes the current policy's log-probabilities, entropies and values on a minibatch (computed by the agent with
autograd on), the minibatch (old log-probabilities and values, advantages, returns) and coefficients, and returns
(loss, diagnostics). The on-policy agent (rl/agents/on_policy.py) standardises each minibatch's advantages with
`standardized_advantages` and calls the loss with `normalize_advantage=False`.
The loss is what autograd differentiates to train the agent: edit a line here and training
changes. pg and a2c are one formula, -log pi(a|s) A + vf_coef (V - R)^2 - ent_coef H; they differ in what the agent
feeds them (VPG: long rollouts and lambda-returns; A2C: short n-step rollouts).

Diagnostics, namespaced for the logger and computed without gradient: policy/value/entropy losses, approx_kl
(Schulman's (r - 1) - log r), clip_fraction and the explained variance of the rollout's values. `diagnostics=False`
skips them (they cost a few ops per step, and only the logged step reads them).
"""

from __future__ import annotations

import torch

from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Var[target - pred] / Var[target]: 1 is perfect, 0 is no better than a constant (NaN if Var[target] = 0)."""
    return 1.0 - (target - pred).var(unbiased=False) / target.var(unbiased=False)


def standardized_advantages(adv: torch.Tensor, group=None) -> torch.Tensor:
    """Advantages standardised to mean 0, standard deviation 1 (`normalize_advantage`; fewer than two are left as
    they are). `group`: a synchronous gradient group (rl/parallel/collective.py, its `mean` and `world`) whose
    minibatches are standardised over their union, so that a group step is one step on the union batch. The one
    place advantages are standardised: the on-policy agent calls it on each minibatch before the loss, and a loss
    called with `normalize_advantage=True` (outside the agent) calls it too."""
    if adv.numel() < 2:
        return adv
    if group is None:
        return (adv - adv.mean()) / (adv.std() + 1e-8)
    n = adv.numel() * group.world
    moments = group.mean(torch.stack([adv.mean(), adv.square().mean()]).float())
    mean, var = moments[0], (moments[1] - moments[0].square()).clamp(min=0) * n / (n - 1)
    return (adv - mean) / (var.sqrt() + 1e-8)


def _advantages(batch: RolloutBatch, normalize: bool) -> torch.Tensor:
    return standardized_advantages(batch.advantages) if normalize else batch.advantages


def value_loss(values: torch.Tensor, batch: RolloutBatch, clip_range_vf: float,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error to the returns; with clip_range_vf > 0, PPO's clipped value loss: the worse of the
    unclipped error and the error of the value kept within +-clip_range_vf of the old one. `mask` (0/1 per step,
    LASER's) zeroes the errors of the steps it leaves out; the mean is still over every step."""
    loss = (values - batch.returns).square()
    if clip_range_vf > 0:
        clipped = batch.old_values + (values - batch.old_values).clamp(-clip_range_vf, clip_range_vf)
        loss = torch.maximum(loss, (clipped - batch.returns).square())
    if mask is not None:
        loss = loss * mask
    return loss.mean()


def approx_kl(log_probs: torch.Tensor, old_log_probs: torch.Tensor) -> torch.Tensor:
    """KL(old || new) estimated as mean((r - 1) - log r) (Schulman's unbiased, low-variance estimator), no gradient."""
    with torch.no_grad():
        log_ratio = log_probs - old_log_probs
        return ((log_ratio.exp() - 1) - log_ratio).mean()


def _diagnostics(policy_loss, v_loss, log_probs, entropy, batch, **extra) -> dict:
    with torch.no_grad():
        info = {"losses/policy_loss": policy_loss.detach(), "losses/value_loss": v_loss.detach(),
                "losses/approx_kl": approx_kl(log_probs, batch.old_log_probs),
                "losses/explained_variance": explained_variance(batch.old_values, batch.returns), **extra}
        if entropy is not None:
            info["losses/entropy"] = entropy.detach().mean()
    return info


@grad_comp.register("pg", kind="policy_gradient")
def pg(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
       clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
       normalize_advantage: bool = False, diagnostics: bool = True, mask: torch.Tensor | None = None):
    """The vanilla policy gradient with a baseline: -mean(log pi(a|s) A); `clip_range` is ignored. `mask` leaves
    steps out of the value loss (their advantages are the caller's to zero: V-trace's LASER does)."""
    adv = _advantages(batch, normalize_advantage)
    policy_loss = -(log_probs * adv).mean()
    v_loss = value_loss(values, batch, clip_range_vf, mask)
    loss = policy_loss + vf_coef * v_loss
    if entropy is not None and ent_coef != 0:
        loss = loss - ent_coef * entropy.mean()
    return loss, (_diagnostics(policy_loss, v_loss, log_probs, entropy, batch) if diagnostics else {})


# A2C's loss is the same formula; the agent's schedule makes it advantage actor-critic
grad_comp.register("a2c", kind="policy_gradient")(pg)


@grad_comp.register("ppo_clip", kind="policy_gradient")
def ppo_clip(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
             clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
             normalize_advantage: bool = True, diagnostics: bool = True):
    """-mean(min(r A, clip(r, 1 - eps, 1 + eps) A)) with r = pi(a|s) / pi_old(a|s), plus value and entropy terms."""
    adv = _advantages(batch, normalize_advantage)
    ratio = (log_probs - batch.old_log_probs).exp()
    policy_loss = -torch.minimum(adv * ratio, adv * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)).mean()
    v_loss = value_loss(values, batch, clip_range_vf)
    loss = policy_loss + vf_coef * v_loss
    if entropy is not None and ent_coef != 0:
        loss = loss - ent_coef * entropy.mean()
    if not diagnostics:
        return loss, {}
    clip_fraction = ((ratio.detach() - 1.0).abs() > clip_range).float().mean()
    info = _diagnostics(policy_loss, v_loss, log_probs, entropy, batch, **{"losses/clip_fraction": clip_fraction})
    return loss, info
