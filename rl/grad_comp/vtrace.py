"""V-trace (Espeholt et al. 2018, IMPALA): off-policy corrected value targets and policy-gradient advantages for
learning from rollouts acted by an older policy mu, and the `vtrace` loss that trains on them.

The agent computes the targets with `vtrace_targets` (for any loss registered with kind `vtrace`) and stores them in
the batch's `returns` (vs) and `advantages` (pg advantages); the loss itself is pg's formula, plus, as
elite_buffer_vtrace (its agent/algorithms/v_trace.py) adds them when learning from replayed sequences:
- LASER's trust-region mask (Schmitt et al. 2019): a step whose KL(pi || mu) reaches a threshold carries no trace,
  no policy gradient and no value error (`mask`, from `laser_mask`);
- CLEAR's behaviour cloning (Rolnick et al. 2019): + clear_policy_coef x mean KL(pi || mu) and
  + clear_value_coef x ||V_mu - V||_2 / n over the (masked) steps.
The loss is a mean over the batch's n steps where elite_buffer_vtrace sums: its coefficients apply unchanged to the
mean (the whole loss, and with it the optimizer's epsilon and clip, is elite_buffer_vtrace's divided by n;
hparams/scheme.py).
"""

from __future__ import annotations

import torch

from rl.grad_comp.policy_gradient import pg
from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp


def vtrace_targets(log_rhos: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, rewards: torch.Tensor,
                   terminated: torch.Tensor, dones: torch.Tensor, gamma: float, rho_bar: float = 1.0,
                   c_bar: float = 1.0, pg_rho_bar: float = 1.0, mask: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets (vs, pg_advantages), all [T, N] time-major, without gradient.

    IMPALA's off-policy correction: truncated importance ratios rho = pi/mu weight each TD error, and c = min(c_bar,
    rho) cuts the trace where the target policy would not have acted as mu did. `log_rhos` = log pi - log mu of the
    taken actions; `next_values` = V(real_next_obs_t), as for `gae`. Unlike the reference (which treats time limits as
    terminal), a truncation bootstraps from the final observation's value; the trace never crosses an episode end.
    `mask` (LASER, 0/1): a masked step cuts the trace and has no pg advantage.
    """
    with torch.no_grad():
        log_rhos, values, next_values, rewards = (x.detach() for x in (log_rhos, values, next_values, rewards))
        ended = dones.detach().bool()
        discount = gamma * (1.0 - terminated.detach().to(values.dtype))
        continuation = gamma * (~ended).to(values.dtype)
        if mask is not None:
            continuation = continuation * mask.detach().to(values.dtype)
        rhos = log_rhos.exp()
        clipped_rhos, cs = rhos.clamp(max=rho_bar), rhos.clamp(max=c_bar)
        deltas = clipped_rhos * (rewards + discount * next_values - values)
        acc = torch.empty_like(deltas)
        last = torch.zeros_like(deltas[0])
        for t in range(len(deltas) - 1, -1, -1):
            last = deltas[t] + continuation[t] * cs[t] * last
            acc[t] = last
        vs = values + acc
        # vs_{t+1} within an episode; V(real_next_obs_t) at an episode end and at the rollout's last step
        vs_next = torch.where(ended, next_values, torch.cat([vs[1:], next_values[-1:]]))
        pg_advantages = rhos.clamp(max=pg_rho_bar) * (rewards + discount * vs_next - values)
        if mask is not None:
            pg_advantages = pg_advantages * mask.detach().to(values.dtype)
    return vs, pg_advantages


def categorical_kl(logits: torch.Tensor, behaviour_logits: torch.Tensor) -> torch.Tensor:
    """KL(pi || mu) per step [...], pi = softmax(logits) (with gradient), mu = softmax(behaviour_logits)."""
    log_pi, log_mu = torch.log_softmax(logits, -1), torch.log_softmax(behaviour_logits, -1)
    return (log_pi.exp() * (log_pi - log_mu)).sum(-1)


def laser_mask(kl: torch.Tensor, threshold: float) -> torch.Tensor | None:
    """LASER's trust region: 1 where KL(pi || mu) < threshold, else 0 (None: no mask, threshold 0)."""
    return (kl.detach() < threshold).float() if threshold > 0 else None


@grad_comp.register("vtrace", kind="vtrace")
def vtrace(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
           clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
           normalize_advantage: bool = False, diagnostics: bool = True, mask: torch.Tensor | None = None,
           policy_kl: torch.Tensor | None = None, clear_policy_coef: float = 0.0, clear_value_coef: float = 0.0):
    """IMPALA's loss: -mean(log pi(a|s) A_pg) + vf_coef mean((V - vs)^2) - ent_coef H, i.e. pg's formula on V-trace
    targets. The agent fills `batch.advantages` (pg advantages) and `batch.returns` (vs) with `vtrace_targets`
    before the update; this loss does not recompute them. `clip_range` is ignored.

    elite_buffer_vtrace's additions, all off by default: `mask` [n] (LASER; the advantages carry it already) drops
    masked steps' value errors; `policy_kl` [n] = KL(pi || mu) with gradient (`categorical_kl`) for CLEAR's policy
    cloning; CLEAR's value cloning pulls V towards the behaviour values `batch.old_values`."""
    loss, info = pg(log_probs, entropy, values, batch, clip_range=clip_range, clip_range_vf=clip_range_vf,
                    ent_coef=ent_coef, vf_coef=vf_coef, normalize_advantage=normalize_advantage,
                    diagnostics=diagnostics, mask=mask)
    keep = torch.ones_like(values) if mask is None else mask
    extra = {}
    if clear_policy_coef:
        policy_clone = (policy_kl * keep).mean()
        loss, extra["losses/clear_policy"] = loss + clear_policy_coef * policy_clone, policy_clone.detach()
    if clear_value_coef:
        value_clone = torch.linalg.vector_norm((batch.old_values - values) * keep) / values.numel()
        loss, extra["losses/clear_value"] = loss + clear_value_coef * value_clone, value_clone.detach()
    if mask is not None:
        extra["losses/laser_kept"] = keep.mean().detach()
    return loss, ({**info, **extra} if diagnostics else {})

