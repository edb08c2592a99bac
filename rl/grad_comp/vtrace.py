"""V-trace (Espeholt et al. 2018, IMPALA): off-policy corrected value targets and policy-gradient advantages for
learning from rollouts acted by an older policy mu, and the `vtrace` loss that trains on them.

The agent computes the targets with `vtrace_targets` (the loss exposes it as `vtrace.targets`) and stores them in
the batch's `returns` (vs) and `advantages` (pg advantages); the loss itself is pg's formula.
"""

from __future__ import annotations

import torch

from rl.grad_comp.policy_gradient import pg
from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp


def vtrace_targets(log_rhos: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, rewards: torch.Tensor,
                   terminated: torch.Tensor, dones: torch.Tensor, gamma: float, rho_bar: float = 1.0,
                   c_bar: float = 1.0, pg_rho_bar: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets (vs, pg_advantages), all [T, N] time-major, without gradient.

    IMPALA's off-policy correction: truncated importance ratios rho = pi/mu weight each TD error, and c = min(c_bar,
    rho) cuts the trace where the target policy would not have acted as mu did. `log_rhos` = log pi - log mu of the
    taken actions; `next_values` = V(real_next_obs_t), as for `gae`. Unlike the reference (which treats time limits as
    terminal), a truncation bootstraps from the final observation's value; the trace never crosses an episode end.
    """
    with torch.no_grad():
        log_rhos, values, next_values, rewards = (x.detach() for x in (log_rhos, values, next_values, rewards))
        ended = dones.detach().bool()
        discount = gamma * (1.0 - terminated.detach().to(values.dtype))
        continuation = gamma * (~ended).to(values.dtype)
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
    return vs, pg_advantages


@grad_comp.register("vtrace")
def vtrace(log_probs: torch.Tensor, entropy: torch.Tensor | None, values: torch.Tensor, batch: RolloutBatch, *,
           clip_range: float = 0.2, clip_range_vf: float = 0.0, ent_coef: float = 0.0, vf_coef: float = 0.5,
           normalize_advantage: bool = False, diagnostics: bool = True):
    """IMPALA's loss: -mean(log pi(a|s) A_pg) + vf_coef mean((V - vs)^2) - ent_coef H, i.e. pg's formula on V-trace
    targets. The agent fills `batch.advantages` (pg advantages) and `batch.returns` (vs) with `vtrace.targets`
    before the update; this loss does not recompute them. `clip_range` is ignored."""
    return pg(log_probs, entropy, values, batch, clip_range=clip_range, clip_range_vf=clip_range_vf,
              ent_coef=ent_coef, vf_coef=vf_coef, normalize_advantage=normalize_advantage, diagnostics=diagnostics)


vtrace.targets = vtrace_targets  # tells the agent this loss trains on V-trace targets (as td.targets does for DQN)
