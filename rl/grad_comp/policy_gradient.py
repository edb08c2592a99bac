"""Policy-gradient losses as plain functions of tensors: `pg` (REINFORCE with a learned baseline, Williams 1992),
`a2c` (Mnih et al. 2016) and `ppo_clip` (Schulman et al. 2017, clipped surrogate, optional clipped value loss).

Each takes the current policy's log-probabilities, entropies and values on a minibatch (computed by the agent), the
minibatch (old log-probabilities and values, advantages, returns) and coefficients, and returns (loss, diagnostics).
pg and a2c are one formula, -log pi(a|s) A + vf_coef (V - R)^2 - ent_coef H; they differ in what the agent feeds
them (VPG: long rollouts and lambda-returns; A2C: short n-step rollouts).

Speed: these losses are elementwise in (log_probs, values), so their gradients with respect to those two vectors have
closed forms (PPO: d/dlogp of -min(rA, clip(r)A) is -rA where the unclipped term is the minimum, else 0). The
returned loss has the true value and the true gradient but reaches the network through one dot product per input
(`linearised`) instead of a dozen autograd nodes: on small networks the backward pass costs per node, not per flop.
The diagnostics also carry those two gradients (`grad_log_probs`, `grad_values`), so an agent whose network has an
analytic backward pass can skip autograd altogether; such an agent (numpy on the CPU) calls each loss's
`grads_numpy` on the steps where it wants no diagnostics: the same two gradients, in numpy.
tests/grad_comp/test_policy_gradient.py checks values and gradients against the plain autograd formulas.

Diagnostics, namespaced for the logger: policy/value/entropy losses, approx_kl (Schulman's (r - 1) - log r),
clip_fraction and the explained variance of the rollout's values. `diagnostics=False` skips them.
"""

from __future__ import annotations

import numpy as np
import torch

from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - Var[target - pred] / Var[target]: 1 is perfect, 0 is no better than a constant (NaN if Var[target] = 0)."""
    return 1.0 - (target - pred).var(unbiased=False) / target.var(unbiased=False)


def linearised(value: torch.Tensor, *pairs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A scalar equal to `value` whose gradient is sum_i grad_i . d(x_i), for pairs (x_i, grad_i = dvalue/dx_i)."""
    surrogate = torch.dot(*pairs[0])
    for x, g in pairs[1:]:
        surrogate = surrogate + torch.dot(x, g)
    return surrogate + (value - surrogate.detach())


def normalized_advantages(batch: RolloutBatch, normalize: bool) -> torch.Tensor:
    adv = batch.advantages
    if normalize and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return adv


def _value_loss(values: torch.Tensor, batch: RolloutBatch, clip_range_vf: float):
    """(loss, dloss/dvalues) of the squared error, or of PPO's clipped value loss (the worse of the clipped and
    unclipped errors, with values kept within +-clip_range_vf of the old ones)."""
    v, n = values.detach(), values.numel()
    err = v - batch.returns
    if clip_range_vf <= 0:
        return err.square().mean(), err * (2.0 / n)
    delta = v - batch.old_values
    clipped_err = batch.old_values + delta.clamp(-clip_range_vf, clip_range_vf) - batch.returns
    use_clipped = clipped_err.square() > err.square()
    grad = torch.where(use_clipped, clipped_err * (delta.abs() <= clip_range_vf), err) * (2.0 / n)
    return torch.maximum(err.square(), clipped_err.square()).mean(), grad


def _combine(policy_loss, grad_log_probs, log_probs, values, entropy, batch, ent_coef, vf_coef, clip_range_vf,
             diagnostics, log_ratio, extra=None):
    """Policy + vf_coef * value (linearised) - ent_coef * entropy (through autograd); collect diagnostics."""
    with torch.no_grad():
        value_loss, grad_values = _value_loss(values, batch, clip_range_vf)
        total = policy_loss + vf_coef * value_loss
    grad_values = grad_values * vf_coef
    if log_probs.requires_grad or values.requires_grad:  # autograd will differentiate the loss
        loss = linearised(total, (log_probs, grad_log_probs), (values, grad_values))
    else:  # computed without a graph, for an agent that backpropagates the returned gradients itself
        loss = total
    if entropy is not None and ent_coef != 0:
        loss = loss - ent_coef * entropy.mean()
    # the closed-form gradients, for agents that backpropagate without autograd (entropy's is the policy's to add)
    grads = {"grad_log_probs": grad_log_probs, "grad_values": grad_values}
    if not diagnostics:
        return loss, grads
    with torch.no_grad():
        info = {"losses/policy_loss": policy_loss, "losses/value_loss": value_loss,
                "losses/approx_kl": ((log_ratio.exp() - 1) - log_ratio).mean(),
                "losses/explained_variance": explained_variance(batch.old_values, batch.returns), **(extra or {})}
        if entropy is not None:
            info["losses/entropy"] = entropy.detach().mean()
    return loss, {**info, **grads}


@grad_comp.register("pg")
def pg(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
       clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
       normalize_advantage: bool = False, diagnostics: bool = True):
    """The vanilla policy gradient with a baseline: -mean(log pi(a|s) A); `clip_range` is ignored."""
    with torch.no_grad():
        adv = normalized_advantages(batch, normalize_advantage)
        logp = log_probs.detach()
        policy_loss = -(logp * adv).mean()
        log_ratio = logp - batch.old_log_probs
    return _combine(policy_loss, adv * (-1.0 / adv.numel()), log_probs, values, entropy, batch, ent_coef, vf_coef,
                    clip_range_vf, diagnostics, log_ratio)


grad_comp.register("a2c")(pg)  # A2C's loss is the same formula; the agent's schedule makes it advantage actor-critic


@grad_comp.register("ppo_clip")
def ppo_clip(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
             clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
             normalize_advantage: bool = True, diagnostics: bool = True):
    """-mean(min(r A, clip(r, 1 - eps, 1 + eps) A)) with r = pi(a|s) / pi_old(a|s), plus value and entropy terms."""
    with torch.no_grad():
        adv = normalized_advantages(batch, normalize_advantage)
        log_ratio = log_probs.detach() - batch.old_log_probs
        ratio = log_ratio.exp()
        surr = adv * ratio
        clipped = adv * ratio.clamp(1.0 - clip_range, 1.0 + clip_range)
        policy_loss = -torch.minimum(surr, clipped).mean()
        # where the unclipped term is the minimum it carries the gradient -r A dlogp / n; elsewhere the ratio left
        # the trust region in the direction the advantage pushes it and the clipped term is constant (ties agree)
        grad_log_probs = surr * (surr <= clipped) * (-1.0 / adv.numel())
        extra = {"losses/clip_fraction": ((ratio - 1.0).abs() > clip_range).float().mean()} if diagnostics else None
    return _combine(policy_loss, grad_log_probs, log_probs, values, entropy, batch, ent_coef, vf_coef, clip_range_vf,
                    diagnostics, log_ratio, extra)


# ---------------------------------------------------------------------------------------------------- numpy gradients
# (d loss / d log_probs, d loss / d values) alone, for the agents' analytic path on steps without diagnostics; `batch`
# holds numpy arrays. The same formulas as above (tests/grad_comp/test_policy_gradient.py compares them).
def _advantages_numpy(batch: RolloutBatch, normalize: bool) -> np.ndarray:
    adv = batch.advantages
    if normalize and adv.size > 1:
        adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    return adv


def _value_grad_numpy(values: np.ndarray, batch: RolloutBatch, clip_range_vf: float, vf_coef: float) -> np.ndarray:
    scale = 2.0 * vf_coef / values.size
    err = values - batch.returns
    if clip_range_vf <= 0:
        return err * scale
    delta = values - batch.old_values
    clipped_err = batch.old_values + np.clip(delta, -clip_range_vf, clip_range_vf) - batch.returns
    use_clipped = clipped_err * clipped_err > err * err
    return np.where(use_clipped, clipped_err * (np.abs(delta) <= clip_range_vf), err) * scale


def pg_grads_numpy(log_probs: np.ndarray, values: np.ndarray, batch: RolloutBatch, *, clip_range_vf: float = 0.0,
                   vf_coef: float = 0.5, normalize_advantage: bool = False, **_) -> tuple[np.ndarray, np.ndarray]:
    adv = _advantages_numpy(batch, normalize_advantage)
    return adv * (-1.0 / adv.size), _value_grad_numpy(values, batch, clip_range_vf, vf_coef)


def ppo_clip_grads_numpy(log_probs: np.ndarray, values: np.ndarray, batch: RolloutBatch, *, clip_range: float = 0.2,
                         clip_range_vf: float = 0.0, vf_coef: float = 0.5, normalize_advantage: bool = True,
                         **_) -> tuple[np.ndarray, np.ndarray]:
    adv = _advantages_numpy(batch, normalize_advantage)
    ratio = np.exp(log_probs - batch.old_log_probs)
    surr = adv * ratio
    clipped = adv * np.clip(ratio, 1.0 - clip_range, 1.0 + clip_range)
    grad_log_probs = np.where(surr <= clipped, surr * (-1.0 / adv.size), 0.0).astype(np.float32, copy=False)
    return grad_log_probs, _value_grad_numpy(values, batch, clip_range_vf, vf_coef)


pg.grads_numpy = pg_grads_numpy  # also a2c's: the same function object
ppo_clip.grads_numpy = ppo_clip_grads_numpy
