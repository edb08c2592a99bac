"""V-trace targets and the vtrace loss against numbers worked out by hand, and against GAE(lambda=1) on-policy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl.grad_comp.vtrace import vtrace_targets
from rl.memory.rollout import RolloutBatch, gae
from rl.registry import grad_comp


def col(*xs) -> torch.Tensor:
    """A [T, 1] column: one environment."""
    return torch.tensor(xs, dtype=torch.float32).view(-1, 1)


def approx(t: torch.Tensor, *xs):
    assert t.view(-1).tolist() == pytest.approx(list(xs), abs=1e-5)


def test_on_policy_is_the_n_step_return():
    # gamma 0.9, no episode end, next values V(x_{t+1}) and a bootstrap value 4 after the last step:
    # vs_2 = 3 + 0.9 * 4 = 6.6; vs_1 = 2 + 0.9 * 3 + 0.81 * 4 = 7.94; vs_0 = 1 + 0.9 * 2 + 0.81 * 3 + 0.729 * 4 = 8.146
    # pg_adv_t = r_t + 0.9 vs_{t+1} - V_t: 1 + 0.9 * 7.94 - 0.5 = 7.646; 2 + 0.9 * 6.6 - 0.2 = 7.74; 3 + 3.6 + 0.1 = 6.7
    zeros = col(0, 0, 0)
    vs, adv = vtrace_targets(zeros, col(0.5, 0.2, -0.1), col(0.2, -0.1, 4.0), col(1, 2, 3), zeros, zeros, 0.9)
    approx(vs, 8.146, 7.94, 6.6)
    approx(adv, 7.646, 7.74, 6.7)


def test_on_policy_matches_gae_lambda_one_with_episode_ends():
    rng = np.random.default_rng(0)
    T, N, gamma = 7, 3, 0.95
    rewards, values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    terminated = (rng.random((T, N)) < 0.2).astype(np.float64)
    dones = np.maximum(terminated, rng.random((T, N)) < 0.2)
    assert terminated.any() and (dones > terminated).any()  # both kinds of episode end occur
    # V(real_next_obs_t): the next step's value within an episode, a final observation's value at an end
    next_values = np.where(dones > 0, rng.normal(size=(T, N)), np.concatenate([values[1:], rng.normal(size=(1, N))]))
    advantages = gae(rewards, values, next_values, terminated, dones, gamma, lam=1.0)
    to = torch.from_numpy
    vs, pg_adv = vtrace_targets(torch.zeros(T, N, dtype=torch.float64), to(values), to(next_values), to(rewards),
                                to(terminated), to(dones), gamma)
    assert torch.allclose(vs, to(advantages + values))
    assert torch.allclose(pg_adv, to(advantages))  # on-policy: r + gamma vs_next - V = vs - V
    # and pg_adv = r + gamma (1 - terminated) vs_next - V, vs_next spelt out step by step
    vs_next = np.array([[next_values[t, n] if dones[t, n] or t == T - 1 else vs[t + 1, n].item() for n in range(N)]
                        for t in range(T)])
    expected = rewards + gamma * (1 - terminated) * vs_next - values
    assert torch.allclose(pg_adv, to(expected))


def test_clipped_ratios_by_hand():
    # rho = 2 at both steps; rho_bar 1.5 -> clipped rho 1.5; c_bar 1.2 -> c 1.2 (above 1); pg_rho_bar 1.8 -> 1.8.
    # gamma 0.5, V = (1, 2), next values (2, 3), rewards (1, 1).
    # delta_1 = 1.5 (1 + 0.5 * 3 - 2) = 0.75 -> vs_1 = 2 + 0.75 = 2.75
    # delta_0 = 1.5 (1 + 0.5 * 2 - 1) = 1.5; acc_0 = 1.5 + 0.5 * 1.2 * 0.75 = 1.95 -> vs_0 = 2.95
    # pg_adv_1 = 1.8 (1 + 0.5 * 3 - 2) = 0.9; pg_adv_0 = 1.8 (1 + 0.5 * 2.75 - 1) = 2.475
    log_rhos, zeros = col(math.log(2), math.log(2)), col(0, 0)
    vs, adv = vtrace_targets(log_rhos, col(1, 2), col(2, 3), col(1, 1), zeros, zeros, 0.5,
                             rho_bar=1.5, c_bar=1.2, pg_rho_bar=1.8)
    approx(vs, 2.95, 2.75)
    approx(adv, 2.475, 0.9)


def test_small_ratio_cuts_the_trace():
    # rho = c = 0.5, gamma 1, V = next values = 0.5, rewards (0, 1): only step 1 has a TD error.
    # delta_1 = 0.5 (1 + 0.5 - 0.5) = 0.5 -> vs_1 = 1.0; delta_0 = 0.5 (0 + 0.5 - 0.5) = 0
    # acc_0 = 0 + 1 * c_0 * 0.5 = 0.25 -> vs_0 = 0.75 (on-policy: 1.5; with no trace cut: 1.0)
    # pg_adv_0 = 0.5 (0 + 1.0 - 0.5) = 0.25; pg_adv_1 = 0.5 (1 + 0.5 - 0.5) = 0.5
    zeros = col(0, 0)
    vs, adv = vtrace_targets(col(math.log(0.5), math.log(0.5)), col(0.5, 0.5), col(0.5, 0.5), col(0, 1),
                             zeros, zeros, 1.0)
    approx(vs, 0.75, 1.0)
    approx(adv, 0.25, 0.5)


# rho 0.5 everywhere, gamma 0.9, V = 1, rewards (1, 2, 3); the episode ends at step 1, whose final observation is worth
# 5; step 2 belongs to the next episode.
LOG_RHOS, VALUES, NEXT_VALUES, REWARDS = col(*[math.log(0.5)] * 3), col(1, 1, 1), col(1, 5, 1), col(1, 2, 3)
END = col(0, 1, 0)


def perturbed_next_episode():
    """The same rollout with step 2 (the next episode) changed everywhere."""
    bump = col(0, 0, 1)
    return LOG_RHOS + bump, VALUES + 3 * bump, NEXT_VALUES - 7 * bump, REWARDS + 11 * bump


def test_termination_cuts_the_trace_and_does_not_bootstrap():
    # delta_2 = 0.5 (3 + 0.9 * 1 - 1) = 1.45 -> vs_2 = 2.45
    # step 1 terminated: no bootstrap (the 5 is ignored), no trace: vs_1 = V + rho (r - V) = 1 + 0.5 (2 - 1) = 1.5
    # delta_0 = 0.5 (1 + 0.9 - 1) = 0.45; acc_0 = 0.45 + 0.9 * 0.5 * 0.5 = 0.675 -> vs_0 = 1.675
    # pg_adv_0 = 0.5 (1 + 0.9 * 1.5 - 1) = 0.675; pg_adv_1 = 0.5 (2 - 1) = 0.5; pg_adv_2 = 1.45
    vs, adv = vtrace_targets(LOG_RHOS, VALUES, NEXT_VALUES, REWARDS, END, END, 0.9)
    approx(vs, 1.675, 1.5, 2.45)
    approx(adv, 0.675, 0.5, 1.45)
    vs2, adv2 = vtrace_targets(LOG_RHOS, VALUES, NEXT_VALUES + 95 * END, REWARDS, END, END, 0.9)
    assert torch.allclose(vs2[:2], vs[:2]) and torch.allclose(adv2[:2], adv[:2])  # a terminal's next value is unused
    vs3, adv3 = vtrace_targets(*perturbed_next_episode(), END, END, 0.9)
    assert torch.allclose(vs3[:2], vs[:2]) and torch.allclose(adv3[:2], adv[:2])


def test_truncation_bootstraps_from_the_final_observation_without_the_trace():
    # step 1 truncated: bootstrap from its final observation's value 5, no trace from step 2.
    # delta_1 = 0.5 (2 + 0.9 * 5 - 1) = 2.75 -> vs_1 = 3.75
    # delta_0 = 0.45; acc_0 = 0.45 + 0.9 * 0.5 * 2.75 = 1.6875 -> vs_0 = 2.6875
    # pg_adv_1 = 0.5 (2 + 0.9 * 5 - 1) = 2.75 (vs_next is the final value, not vs_2)
    # pg_adv_0 = 0.5 (1 + 0.9 * 3.75 - 1) = 1.6875
    no_term = col(0, 0, 0)
    vs, adv = vtrace_targets(LOG_RHOS, VALUES, NEXT_VALUES, REWARDS, no_term, END, 0.9)
    approx(vs, 2.6875, 3.75, 2.45)
    approx(adv, 1.6875, 2.75, 1.45)
    vs2, adv2 = vtrace_targets(*perturbed_next_episode(), no_term, END, 0.9)
    assert torch.allclose(vs2[:2], vs[:2]) and torch.allclose(adv2[:2], adv[:2])
    assert not torch.allclose(vs2[2], vs[2])


def test_targets_carry_no_gradient():
    x = torch.zeros(2, 1, requires_grad=True)
    vs, adv = vtrace_targets(x, x + 1, x + 2, x + 3, torch.zeros(2, 1), torch.zeros(2, 1), 0.9)
    assert not vs.requires_grad and not adv.requires_grad


def test_vtrace_loss_by_hand_and_registered():
    loss_fn = grad_comp["vtrace"]
    assert grad_comp.kind_of("vtrace") == "vtrace"  # the kind that has the agents compute V-trace targets
    t = torch.tensor
    # advantages hold the V-trace pg advantages (2, -1), returns hold vs (1, 1)
    b = RolloutBatch(torch.zeros(2, 1), torch.zeros(2), t([-1.0, -1.0]), t([0.0, 0.0]), t([2.0, -1.0]), t([1.0, 1.0]))
    log_probs = t([-1.0, -0.5], requires_grad=True)
    values = t([0.5, 1.5], requires_grad=True)
    entropy = t([0.6, 0.4], requires_grad=True)
    loss, info = loss_fn(log_probs, entropy, values, b, clip_range=0.2, clip_range_vf=0.0, ent_coef=0.1, vf_coef=0.5)
    # policy -((-1)(2) + (-0.5)(-1)) / 2 = 0.75; value ((0.5 - 1)^2 + (1.5 - 1)^2) / 2 = 0.25; entropy mean 0.5
    assert info["losses/policy_loss"].item() == pytest.approx(0.75)
    assert info["losses/value_loss"].item() == pytest.approx(0.25)
    assert loss.item() == pytest.approx(0.75 + 0.5 * 0.25 - 0.1 * 0.5)
    loss.backward()
    assert torch.allclose(log_probs.grad, t([-1.0, 0.5]))  # -A / 2
    assert torch.allclose(values.grad, t([-0.25, 0.25]))  # 0.5 * 2 (V - vs) / 2
    assert torch.allclose(entropy.grad, t([-0.05, -0.05]))  # -0.1 / 2
