"""pg / a2c / ppo_clip on hand-made tensors: values and autograd gradients against numbers worked out by hand."""

import pytest
import torch

from rl.grad_comp.policy_gradient import explained_variance
from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp

COEFS = dict(clip_range=0.2, clip_range_vf=0.0, ent_coef=0.0, vf_coef=0.5)


def batch(old_log_probs, advantages, returns, old_values):
    t = torch.tensor
    n = len(advantages)
    return RolloutBatch(torch.zeros(n, 1), torch.zeros(n), t(old_log_probs), t(old_values), t(advantages), t(returns))


def test_ppo_clip_by_hand():
    # ratios e^{0.5} = 1.649 (A = +1: clipped at 1.2), e^{-0.5} = 0.607 (A = +2: unclipped, 0.607 * 2),
    # e^{0} = 1 (A = -1: -1). Policy loss = -(1.2 + 1.2131 - 1) / 3; value loss = mean(1, 0, 4) = 5/3.
    b = batch([0.0, 0.0, 0.0], [1.0, 2.0, -1.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0])
    log_probs = torch.tensor([0.5, -0.5, 0.0], requires_grad=True)
    values = torch.tensor([0.0, 0.0, 0.0], requires_grad=True)
    loss, info = grad_comp["ppo_clip"](log_probs, None, values, b, normalize_advantage=False, **COEFS)
    expected_pg = -(1.2 + 2 * torch.exp(torch.tensor(-0.5)).item() - 1.0) / 3
    assert info["losses/policy_loss"].item() == pytest.approx(expected_pg, rel=1e-5)
    assert info["losses/value_loss"].item() == pytest.approx(5 / 3, rel=1e-5)
    assert loss.item() == pytest.approx(expected_pg + 0.5 * 5 / 3, rel=1e-5)
    assert info["losses/clip_fraction"].item() == pytest.approx(2 / 3)  # 1.649 and 0.607 are outside [0.8, 1.2]
    loss.backward()
    # the clipped sample gets no policy gradient; the others get -A r / n
    expected = torch.tensor([0.0, -2 * torch.exp(torch.tensor(-0.5)).item() / 3, 1 / 3])
    assert torch.allclose(log_probs.grad, expected, atol=1e-6)
    assert torch.allclose(values.grad, 0.5 * 2 * (values.detach() - b.returns) / 3)


def test_pg_by_hand_and_diagnostics():
    b = batch([-1.0, -1.0], [2.0, -1.0], [1.0, 1.0], [1.0, 0.0])
    log_probs = torch.tensor([-1.0, -0.5], requires_grad=True)
    entropy = torch.tensor([0.6, 0.4])
    loss, info = grad_comp["pg"](log_probs, entropy, torch.tensor([1.0, 0.0]), b, **{**COEFS, "ent_coef": 0.1})
    # policy: -((-1)(2) + (-0.5)(-1)) / 2 = 0.75; value: (0 + 1) / 2 = 0.5; entropy 0.5
    assert info["losses/policy_loss"].item() == pytest.approx(0.75)
    assert info["losses/value_loss"].item() == pytest.approx(0.5)
    assert info["losses/entropy"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.75 + 0.5 * 0.5 - 0.1 * 0.5)
    # approx KL of log-ratios (0, 0.5): mean((e^0 - 1 - 0), (e^0.5 - 1 - 0.5))
    kl = (torch.exp(torch.tensor(0.5)) - 1.5).item() / 2
    assert info["losses/approx_kl"].item() == pytest.approx(kl, rel=1e-5)
    loss.backward()
    assert torch.allclose(log_probs.grad, torch.tensor([-1.0, 0.5]))


def test_diagnostics_can_be_skipped():
    b = batch([0.0], [1.0], [1.0], [0.0])
    log_probs, values = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    loss, info = grad_comp["ppo_clip"](log_probs, None, values, b, diagnostics=False, **COEFS)
    assert info == {} and loss.requires_grad


def test_ppo_clipped_value_loss_by_hand():
    # old values 0; values 0.5 (moved past the 0.2 clip: the clipped error (0.2 - 1)^2 = 0.64 is the larger and its
    # value is constant in V, so no gradient) and -0.1 (inside: both errors are (-1.1)^2 = 1.21, gradient
    # 2 * -1.1 / 2 = -1.1); value loss (0.64 + 1.21) / 2 = 0.925
    b = batch([0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0])
    values = torch.tensor([0.5, -0.1], requires_grad=True)
    loss, info = grad_comp["ppo_clip"](torch.zeros(2), None, values, b, **{**COEFS, "clip_range_vf": 0.2},
                                       normalize_advantage=False)
    assert info["losses/value_loss"].item() == pytest.approx(0.925, rel=1e-5)
    loss.backward()
    assert torch.allclose(values.grad, torch.tensor([0.0, 0.5 * -1.1]), atol=1e-6)


def test_entropy_bonus_and_normalised_advantages_by_hand():
    # advantages (1, 3): mean 2, std sqrt(2) -> (-1/sqrt 2, 1/sqrt 2); log-probs (-1, -2) -> policy loss
    # -(0.7071 - 1.4142) / 2 = 0.35355 and d/dlogp = (0.35355, -0.35355); entropy bonus 0.1: d/dH = -0.1 / 2 each
    b = batch([-1.0, -2.0], [1.0, 3.0], [0.0, 0.0], [0.0, 0.0])
    log_probs = torch.tensor([-1.0, -2.0], requires_grad=True)
    entropy = torch.tensor([0.3, 0.7], requires_grad=True)
    loss, info = grad_comp["a2c"](log_probs, entropy, torch.zeros(2), b, **{**COEFS, "ent_coef": 0.1},
                                  normalize_advantage=True)
    assert info["losses/policy_loss"].item() == pytest.approx(0.353553, rel=1e-5)
    assert loss.item() == pytest.approx(0.353553 - 0.1 * 0.5, rel=1e-5)
    loss.backward()
    assert torch.allclose(log_probs.grad, torch.tensor([0.353553, -0.353553]), atol=1e-6)
    assert torch.allclose(entropy.grad, torch.tensor([-0.05, -0.05]))


def test_ppo_loss_has_the_true_second_derivative():
    # inside the clip range the policy term is -A r / n with r = exp(logp - logp_old): d2/dlogp2 = -A r / n,
    # which a loss that only carried a first-order surrogate would give as 0
    b = batch([0.0], [2.0], [0.0], [0.0])
    log_probs = torch.tensor([0.1], requires_grad=True)
    loss, _ = grad_comp["ppo_clip"](log_probs, None, torch.zeros(1), b, **COEFS, normalize_advantage=False)
    (first,) = torch.autograd.grad(loss, log_probs, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), log_probs)
    expected = -2.0 * torch.exp(torch.tensor(0.1))
    assert torch.allclose(first, expected.view(1)) and torch.allclose(second, expected.view(1))


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(target, target).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), target).item() == pytest.approx(0.0)
    assert explained_variance(target + 1.0, target).item() == pytest.approx(1.0)  # a constant offset is not variance
