"""TD and double-TD losses on hand-made tensors with answers computed by hand."""

import pytest
import torch

from rl.memory.replay import Transitions
from rl.registry import grad_comp

# Q_online(s) and next-state values: the obs value selects a row of a fixed table.
ONLINE = torch.tensor([[1.0, 2.0], [0.0, 0.5], [3.0, -1.0]])  # rows 0, 1 are s; row 2 is s'
TARGET = torch.tensor([[0.0, 0.0], [0.0, 0.0], [10.0, 4.0]])
ONLINE_NEXT_PREFERS_1 = torch.tensor([[1.0, 2.0], [0.0, 0.5], [-1.0, 3.0]])


def table(values):
    return lambda obs: values[obs.long().squeeze(1)]


def batch(terminated):
    n = len(terminated)
    return Transitions(
        obs=torch.tensor([[0.0], [1.0]]), actions=torch.tensor([1, 0]), rewards=torch.tensor([1.0, -1.0]),
        next_obs=torch.tensor([[2.0], [2.0]]), terminated=torch.tensor(terminated),
        truncated=torch.zeros(n), discounts=torch.full((n,), 0.5), weights=torch.ones(n), indices=torch.arange(n))


def test_td_bootstraps_with_target_max_unless_terminated():
    loss, info = grad_comp["td"](table(ONLINE), table(TARGET), batch([0.0, 1.0]), loss="mse")
    # item 0: q = 2, target = 1 + 0.5 * max(10, 4) = 6 -> err 4; item 1: q = 0, target = -1 (terminated) -> err -1
    assert torch.allclose(info["td_error"], torch.tensor([4.0, -1.0]))
    assert loss.item() == pytest.approx((16 + 1) / 2)


def test_td_huber():
    loss, _ = grad_comp["td"](table(ONLINE), table(TARGET), batch([0.0, 1.0]), loss="huber")
    # huber(4) = 4 - 0.5 = 3.5; huber(1) = 0.5
    assert loss.item() == pytest.approx((3.5 + 0.5) / 2)


def test_double_td_uses_online_argmax_and_target_value():
    loss, info = grad_comp["double_td"](table(ONLINE_NEXT_PREFERS_1), table(TARGET), batch([0.0, 0.0]), loss="mse")
    # online picks action 1 at s' -> target value 4: item 0: 1 + 2 = 3, q = 2 -> 1; item 1: -1 + 2 = 1, q = 0 -> 1
    assert torch.allclose(info["td_error"], torch.tensor([1.0, 1.0]))
    assert loss.item() == pytest.approx(1.0)
    td_loss, _ = grad_comp["td"](table(ONLINE_NEXT_PREFERS_1), table(TARGET), batch([0.0, 0.0]), loss="mse")
    assert td_loss.item() != pytest.approx(loss.item())  # plain TD would have used the target's max (10)


def test_importance_weights_scale_the_loss():
    b = batch([0.0, 1.0])._replace(weights=torch.tensor([0.0, 2.0]))
    loss, _ = grad_comp["td"](table(ONLINE), table(TARGET), b, loss="mse")
    assert loss.item() == pytest.approx((0 * 16 + 2 * 1) / 2)


def test_gradient_flows_only_through_the_online_q():
    q = torch.nn.Linear(1, 2)
    target = torch.nn.Linear(1, 2).requires_grad_(False)
    loss, _ = grad_comp["td"](q, target, batch([0.0, 0.0]))
    loss.backward()
    assert q.weight.grad is not None and target.weight.grad is None


def test_precomputed_targets_give_the_same_loss_and_td_targets_match():
    b = batch([0.0, 1.0])
    plain, plain_info = grad_comp["td"](table(ONLINE), table(TARGET), b, loss="huber")
    ahead = grad_comp.declared("td")["targets"](table(TARGET), b)
    assert torch.allclose(ahead, torch.tensor([6.0, -1.0]))
    given, given_info = grad_comp["td"](table(ONLINE), table(TARGET), b, loss="huber", target=ahead)
    assert given.item() == pytest.approx(plain.item())
    assert torch.equal(given_info["td_error"], plain_info["td_error"])
    assert "targets" not in grad_comp.declared("double_td")  # the online net picks a*: never computed ahead


@pytest.mark.parametrize("kind", ["huber", "mse"])
def test_uniform_batches_without_diagnostics_give_the_same_loss_and_gradient(kind):
    w = torch.tensor([[0.5], [2.0]], requires_grad=True)
    net = lambda obs: torch.cat([obs * w[0], obs * w[1]], 1)  # noqa: E731  Q(s) = (0.5 s, 2 s), differentiable
    b = batch([0.0, 1.0])._replace(obs=torch.tensor([[1.0], [3.0]]))
    full, info = grad_comp["td"](net, table(TARGET), b, loss=kind)
    (g_full,) = torch.autograd.grad(full, w)
    lean, lean_info = grad_comp["td"](net, table(TARGET), b._replace(weights=None), loss=kind, diagnostics=False)
    (g_lean,) = torch.autograd.grad(lean, w)
    assert lean_info == {} and "td_error" in info
    assert lean.item() == pytest.approx(full.item()) and torch.allclose(g_lean, g_full)
