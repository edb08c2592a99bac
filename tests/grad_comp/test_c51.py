"""The C51 projection on hand-made distributions, and the C51 / double C51 losses on table networks."""

import pytest
import torch

from rl.grad_comp.c51 import project
from rl.memory.replay import Transitions
from rl.registry import grad_comp

SUPPORT = torch.arange(5.0)  # atoms 0, 1, 2, 3, 4


def one_hot(i, n=5):
    return torch.eye(n)[i]


def proj(probs, r, d, terminated=0.0):
    return project(probs.view(1, -1), torch.tensor([r]), torch.tensor([d]), torch.tensor([terminated]), SUPPORT)[0]


def test_exact_hits_keep_their_mass_on_one_atom():
    assert torch.allclose(proj(one_hot(2), 0.0, 1.0), one_hot(2))
    assert torch.allclose(proj(one_hot(1), 2.0, 1.0), one_hot(3))


def test_mass_splits_between_neighbours_by_closeness():
    assert torch.allclose(proj(one_hot(1), 0.5, 1.0), torch.tensor([0, 0.5, 0.5, 0, 0]))
    assert torch.allclose(proj(one_hot(0), 2.25, 1.0), torch.tensor([0, 0, 0.75, 0.25, 0]))


def test_shrinking_a_uniform_distribution():
    # Tz = 1 + 0.5 z = [1, 1.5, 2, 2.5, 3], each with mass 0.2
    assert torch.allclose(proj(torch.full((5,), 0.2), 1.0, 0.5), torch.tensor([0, 0.3, 0.4, 0.3, 0]))


def test_values_outside_the_support_are_clipped_to_its_ends():
    assert torch.allclose(proj(one_hot(3), 10.0, 1.0), one_hot(4))
    assert torch.allclose(proj(one_hot(3), -10.0, 1.0), one_hot(0))
    assert torch.allclose(proj(torch.full((5,), 0.2), 3.5, 1.0), torch.tensor([0, 0, 0, 0.1, 0.9]))


def test_terminal_transitions_ignore_the_next_distribution():
    assert torch.allclose(proj(torch.full((5,), 0.2), 2.25, 1.0, terminated=1.0), torch.tensor([0, 0, 0.75, 0.25, 0]))
    assert torch.allclose(proj(one_hot(1), 2.0, 0.5, terminated=0.0), proj(one_hot(0), 2.5, 1.0))  # truncated


def test_projection_conserves_mass_and_the_mean_inside_the_support():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(64, 5), -1)
    r, d = torch.rand(64) * 0.5, 0.5 + torch.rand(64) * 0.3  # r + d z stays inside [0, 4]
    target = project(probs, r, d, torch.zeros(64), SUPPORT)
    assert torch.allclose(target.sum(-1), torch.ones(64), atol=1e-6)
    assert torch.allclose((target * SUPPORT).sum(-1), r + d * (probs * SUPPORT).sum(-1), atol=1e-5)


class TableC51(torch.nn.Module):
    """log p(z | s, a) from a fixed table indexed by the observation's value; Q is its expectation."""

    def __init__(self, table):
        super().__init__()
        self.logits = torch.nn.Parameter(table.log())
        self.register_buffer("support", SUPPORT.clone())

    def log_probs(self, obs):
        return torch.log_softmax(self.logits[obs.long().squeeze(1)], -1)

    def forward(self, obs):
        return (self.log_probs(obs).exp() * self.support).sum(-1)


# states: row 0 = s, row 1 = s'. Two actions.
ONLINE = torch.stack([torch.stack([one_hot(1), one_hot(2)]),  # s: a0 -> atom 1, a1 -> atom 2
                      torch.stack([one_hot(0), one_hot(4)])]).clamp_min(1e-6)  # s': online prefers a1
TARGET = torch.stack([torch.stack([one_hot(0), one_hot(0)]),
                      torch.stack([one_hot(3), one_hot(1)])]).clamp_min(1e-6)  # s': target prefers a0


def batch(terminated=0.0, weights=(1.0,)):
    return Transitions(obs=torch.tensor([[0.0]]), actions=torch.tensor([0]), rewards=torch.tensor([1.0]),
                       next_obs=torch.tensor([[1.0]]), terminated=torch.tensor([terminated]),
                       truncated=torch.zeros(1), discounts=torch.tensor([1.0]), weights=torch.tensor(weights),
                       indices=torch.arange(1))


def test_c51_loss_is_the_cross_entropy_to_the_projected_target():
    q, t = TableC51(ONLINE), TableC51(TARGET)
    loss, info = grad_comp["c51"](q, t, batch())
    # target picks a0 at s' (mean 3 > 1): target dist = one-hot(3) shifted by r = 1 -> atom 4
    expected = -q.log_probs(torch.tensor([[0.0]]))[0, 0, 4]
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert info["td_error"].shape == (1,) and info["td_error"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_double_c51_lets_the_online_network_pick_the_next_action():
    q, t = TableC51(ONLINE), TableC51(TARGET)
    loss, _ = grad_comp["double_c51"](q, t, batch())
    # online picks a1 at s'; the target's a1 dist is one-hot(1), shifted by 1 -> atom 2
    assert loss.item() == pytest.approx(-q.log_probs(torch.tensor([[0.0]]))[0, 0, 2].item(), rel=1e-5)


def test_terminated_targets_and_importance_weights():
    q, t = TableC51(ONLINE), TableC51(TARGET)
    loss, _ = grad_comp["c51"](q, t, batch(terminated=1.0, weights=(0.5,)))
    assert loss.item() == pytest.approx(-0.5 * q.log_probs(torch.tensor([[0.0]]))[0, 0, 1].item(), rel=1e-5)
    loss.backward()
    assert q.logits.grad.abs().sum() > 0 and t.logits.grad is None


def test_c51_losses_are_declared_distributional():
    """The DQN agent refuses a non-distributional network at assembly from this declaration (the losses do not check
    again). Bug caught: a C51 loss registered without `distributional=True`, which would let `model=q_network` start
    and fail with an AttributeError at the first update."""
    assert all(grad_comp.declared(name).get("distributional") for name in ("c51", "double_c51"))
