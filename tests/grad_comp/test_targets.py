"""The shared one-step target: its values, its float order, and that every bootstrapping loss builds its targets with
it."""

import torch

from rl.grad_comp import actor_critic_losses, c51, td
from rl.grad_comp.targets import td_target
from rl.memory.replay import Transitions


def test_terminated_rows_stop_bootstrapping_and_the_discount_comes_from_the_batch():
    """Bug caught: bootstrapping through terminations (a missing `1 - terminated`) or a gamma applied twice."""
    rewards, discounts = torch.tensor([1.0, 1.0, -2.0]), torch.tensor([0.5, 0.5, 0.25])
    target = td_target(rewards, discounts, torch.tensor([0.0, 1.0, 0.0]), torch.tensor([4.0, 4.0, 8.0]))
    assert target.tolist() == [3.0, 1.0, 0.0]


def test_the_floats_are_those_of_the_plain_expression():
    """Bug caught: a fused multiply-add (torch.addcmul), float64 or an expanded form such as
    r + d * v - d * terminated * v, each of which rounds differently and so changes every seeded run's numbers."""
    g = torch.Generator().manual_seed(0)
    r, d, v = (torch.randn(4096, generator=g) * 7 for _ in range(3))
    t = (torch.rand(4096, generator=g) < 0.3).float()
    assert torch.equal(td_target(r, d, t, v), r + d * (1.0 - t) * v)


def test_every_bootstrapping_loss_calls_the_shared_target(monkeypatch):
    """Bug caught: a loss that writes the formula again (its own copy then drifts from the others unseen)."""
    calls = []

    def recording(*args):
        calls.append(args)
        return td_target(*args)

    for module in (td, actor_critic_losses, c51):
        monkeypatch.setattr(module, "td_target", recording)
    batch = Transitions(obs=torch.zeros(2, 1), actions=torch.zeros(2), rewards=torch.ones(2), next_obs=torch.ones(2, 1),
                        terminated=torch.tensor([0.0, 1.0]), truncated=torch.zeros(2), discounts=torch.full((2,), 0.5),
                        weights=None, indices=torch.arange(2))
    td.td_targets(lambda obs: obs.repeat(1, 3), batch)
    assert len(calls) == 1
    critics = lambda obs, actions, **_: (obs + actions).sum(-1).unsqueeze(0)  # noqa: E731
    actor_critic_losses.td3(lambda obs: obs, critics, lambda obs: obs, critics, batch, update_actor=False)
    assert len(calls) == 2
    policy = lambda obs: (obs, obs.sum(-1))  # noqa: E731
    actor_critic_losses.sac(policy, critics, critics, torch.zeros(()), batch, target_entropy=-1.0, update_actor=False)
    assert len(calls) == 3
    c51.project(torch.full((2, 5), 0.2), batch.rewards, batch.discounts, batch.terminated, torch.arange(5.0))
    assert len(calls) == 4
