"""pg / a2c / ppo_clip on hand-made tensors: hand-computed values, and values and gradients equal to the plain
autograd formulas (the losses hand their gradient to autograd in closed form; these tests pin it down)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rl.grad_comp.policy_gradient import explained_variance
from rl.memory.rollout import RolloutBatch
from rl.registry import grad_comp

COEFS = dict(clip_range=0.2, clip_range_vf=0.0, ent_coef=0.0, vf_coef=0.5)


def batch(old_log_probs, advantages, returns, old_values):
    t = torch.tensor
    n = len(advantages)
    return RolloutBatch(torch.zeros(n, 1), torch.zeros(n), t(old_log_probs), t(old_values), t(advantages), t(returns))


def reference_ppo(log_probs, entropy, values, b, clip_range, clip_range_vf, ent_coef, vf_coef, normalize_advantage):
    """PPO's loss written the direct way (CleanRL's lines), differentiated by autograd."""
    adv = b.advantages
    if normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (log_probs - b.old_log_probs).exp()
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_range, 1 + clip_range)).mean()
    if clip_range_vf > 0:
        clipped = b.old_values + (values - b.old_values).clamp(-clip_range_vf, clip_range_vf)
        v_loss = torch.max((values - b.returns) ** 2, (clipped - b.returns) ** 2).mean()
    else:
        v_loss = ((values - b.returns) ** 2).mean()
    return pg_loss + vf_coef * v_loss - ent_coef * entropy.mean()


def reference_pg(log_probs, entropy, values, b, vf_coef, ent_coef, normalize_advantage, **_):
    adv = b.advantages
    if normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return -(log_probs * adv).mean() + vf_coef * F.mse_loss(values, b.returns) - ent_coef * entropy.mean()


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


@pytest.mark.parametrize("clip_range_vf", [0.0, 0.3])
@pytest.mark.parametrize("normalize_advantage", [False, True])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_ppo_clip_matches_autograd_formula(clip_range_vf, normalize_advantage, ent_coef):
    g = torch.Generator().manual_seed(0)
    n = 64
    b = RolloutBatch(torch.zeros(n, 1), torch.zeros(n), torch.randn(n, generator=g), torch.randn(n, generator=g),
                     torch.randn(n, generator=g), torch.randn(n, generator=g))
    base_lp = b.old_log_probs + 0.4 * torch.randn(n, generator=g)  # ratios both inside and outside the clip range
    base_v = b.old_values + 0.5 * torch.randn(n, generator=g)
    base_ent = torch.rand(n, generator=g)
    coefs = dict(COEFS, clip_range_vf=clip_range_vf, ent_coef=ent_coef, normalize_advantage=normalize_advantage)
    grads = []
    for fn in (grad_comp["ppo_clip"], reference_ppo):
        lp, v, ent = (x.clone().requires_grad_() for x in (base_lp, base_v, base_ent))
        out = fn(lp, ent, v, b, **coefs)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        grads.append((loss.detach(), lp.grad, v.grad, torch.zeros(n) if ent.grad is None else ent.grad))
    (l1, *g1), (l2, *g2) = grads
    assert torch.allclose(l1, l2, atol=1e-6)
    for a, b_ in zip(g1, g2):
        assert torch.allclose(a, b_, atol=1e-6)


@pytest.mark.parametrize("name", ["pg", "a2c"])
@pytest.mark.parametrize("normalize_advantage", [False, True])
def test_pg_matches_autograd_formula(name, normalize_advantage):
    g = torch.Generator().manual_seed(1)
    n = 32
    b = RolloutBatch(torch.zeros(n, 1), torch.zeros(n), torch.randn(n, generator=g), torch.randn(n, generator=g),
                     torch.randn(n, generator=g), torch.randn(n, generator=g))
    coefs = dict(COEFS, ent_coef=0.01, normalize_advantage=normalize_advantage)
    inputs = (torch.randn(n, generator=g), b.old_values + 0.1, torch.rand(n, generator=g))
    results = []
    for fn in (grad_comp[name], reference_pg):
        lp, v, ent = (x.clone().requires_grad_() for x in inputs)
        out = fn(lp, ent, v, b, **coefs)
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
        results.append((loss.detach(), lp.grad, v.grad))
    for a, b_ in zip(*results):
        assert torch.allclose(a, b_, atol=1e-6)


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


def test_diagnostics_can_be_skipped_but_the_closed_form_gradients_come_back():
    b = batch([0.0], [1.0], [1.0], [0.0])
    log_probs, values = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    loss, info = grad_comp["ppo_clip"](log_probs, None, values, b, diagnostics=False, **COEFS)
    assert set(info) == {"grad_log_probs", "grad_values"} and loss.requires_grad
    loss.backward()  # the gradients handed back are the ones autograd finds through the loss
    assert torch.allclose(info["grad_log_probs"], log_probs.grad) and torch.allclose(info["grad_values"], values.grad)


def test_explained_variance():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(target, target).item() == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), target).item() == pytest.approx(0.0)
    assert explained_variance(target + 1.0, target).item() == pytest.approx(1.0)  # a constant offset is not variance


@pytest.mark.parametrize("name", ["pg", "a2c", "ppo_clip"])
@pytest.mark.parametrize("clip_range_vf, normalize", [(0.0, False), (0.1, True)])
def test_numpy_gradients_equal_the_torch_losses(name, clip_range_vf, normalize):
    """`grads_numpy` (the analytic path's steps without diagnostics) gives the torch loss's closed-form gradients."""
    g = torch.Generator().manual_seed(3)
    n = 64
    b = RolloutBatch(torch.zeros(n, 1), torch.zeros(n), -torch.rand(n, generator=g), torch.randn(n, generator=g),
                     torch.randn(n, generator=g), torch.randn(n, generator=g))
    log_probs = b.old_log_probs + 0.3 * torch.randn(n, generator=g)  # ratios inside and outside the clip range
    values = b.old_values + 0.2 * torch.randn(n, generator=g)  # value changes inside and outside clip_range_vf
    coefs = {**COEFS, "clip_range_vf": clip_range_vf, "normalize_advantage": normalize}
    _, info = grad_comp[name](log_probs, None, values, b, diagnostics=False, **coefs)
    b_np = RolloutBatch(*(x.numpy() for x in b[:6]))
    grad_log_probs, grad_values = grad_comp[name].grads_numpy(log_probs.numpy(), values.numpy(), b_np, **coefs)
    assert grad_log_probs.dtype == grad_values.dtype == np.float32
    np.testing.assert_allclose(grad_log_probs, info["grad_log_probs"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad_values, info["grad_values"].numpy(), rtol=1e-5, atol=1e-7)
    assert (grad_log_probs == 0).any() == (name == "ppo_clip")  # clipped samples carry no policy gradient
