"""DDPG, TD3 and SAC losses on hand-made tensors: clipped double Q, target policy smoothing, the actor's delay,
bootstrapping through truncation only, importance weights and n-step discounts, and SAC's temperature update."""

import math

import pytest
import torch

from rl.grad_comp.actor_critic_losses import critic_loss, smoothed_target_actions
from rl.memory.replay import Transitions
from rl.models.continuous import squash
from rl.registry import grad_comp


def batch(terminated=(0.0, 0.0), truncated=(0.0, 1.0), discounts=(0.5, 0.5), weights=(1.0, 1.0)):
    n = len(terminated)
    return Transitions(
        obs=torch.tensor([[0.0], [1.0]]), actions=torch.tensor([[0.5], [-0.5]]), rewards=torch.tensor([1.0, -1.0]),
        next_obs=torch.tensor([[2.0], [3.0]]), terminated=torch.tensor(terminated), truncated=torch.tensor(truncated),
        discounts=torch.tensor(discounts), weights=torch.tensor(weights), indices=torch.arange(n))


class TableCritics(torch.nn.Module):
    """Q_k(s, a) = table[k, s] + w_k * a: fixed values per state and a learnable slope in the action."""

    def __init__(self, table):
        super().__init__()
        self.table = torch.tensor(table)
        self.w = torch.nn.Parameter(torch.tensor([[1.0], [2.0]][: len(table)]))

    def forward(self, obs, actions, detach=False, first=False):
        w = self.w.detach() if detach else self.w
        q = self.table[:, obs.long().squeeze(1)] + w * actions.sum(-1)
        return q[:1] if first else q


class ConstActor(torch.nn.Module):
    def __init__(self, value):
        super().__init__()
        self.b = torch.nn.Parameter(torch.tensor(value))

    def forward(self, obs):
        return torch.tanh(self.b).expand(len(obs), 1)


# rows: critic k; columns: states 0..3 (2 and 3 are the next states)
TABLE = [[0.0, 0.0, 4.0, 10.0], [0.0, 0.0, 6.0, 2.0]]


def test_td3_target_is_the_min_of_twin_targets_and_bootstraps_through_truncation():
    target_actor = ConstActor(0.0)  # a' = 0: next Q = table entries
    critics, targets = TableCritics([[0.0] * 4, [0.0] * 4]), TableCritics(TABLE)
    loss, info = grad_comp["td3"](ConstActor(0.0), critics, target_actor, targets, batch(), update_actor=False,
                                  target_noise=0.0)
    # targets: s0 -> 1 + 0.5 * min(4, 6) = 3; s1 (truncated: still bootstraps) -> -1 + 0.5 * min(10, 2) = 0
    # Q_k(s, a) = w_k * a: critic 0 -> [0.5, -0.5], critic 1 -> [1, -1]
    errors = torch.tensor([[0.5 - 3, -0.5 - 0], [1.0 - 3, -1.0 - 0]])
    assert loss.item() == pytest.approx(0.5 * errors.pow(2).mean(1).sum().item())
    assert torch.allclose(info["td_error"], errors.abs().mean(0))
    assert "losses/actor_loss" not in info


def test_termination_stops_bootstrapping_and_discounts_come_from_the_batch():
    critics, targets = TableCritics([[0.0] * 4, [0.0] * 4]), TableCritics(TABLE)
    b = batch(terminated=(1.0, 0.0), truncated=(0.0, 0.0), discounts=(0.5, 0.25))
    _, info = grad_comp["ddpg"](ConstActor(0.0), critics, ConstActor(0.0), targets, b, update_actor=False)
    # s0 terminated -> target 1; s1 -> -1 + 0.25 * 2 = -0.5
    expected = torch.tensor([[0.5 - 1, -0.5 + 0.5], [1.0 - 1, -1.0 + 0.5]]).abs().mean(0)
    assert torch.allclose(info["td_error"], expected)


def test_importance_weights_scale_per_sample_critic_losses():
    q, target = torch.tensor([[1.0, 3.0]]), torch.tensor([0.0, 0.0])
    loss, td = critic_loss(q, target, torch.tensor([0.0, 2.0]))
    assert loss.item() == pytest.approx(0.5 * (0 + 2 * 9) / 2)
    assert torch.equal(td, torch.tensor([1.0, 3.0]))


def test_target_policy_smoothing_adds_clipped_noise_within_the_box():
    torch.manual_seed(0)
    actor = lambda obs: torch.full((len(obs), 1), 0.9)  # noqa: E731
    obs = torch.zeros(10_000, 1)
    smoothed = smoothed_target_actions(actor, obs, noise_std=0.2, noise_clip=0.5)
    assert smoothed.min() >= 0.9 - 0.5 - 1e-6 and smoothed.max() <= 1.0
    assert (smoothed == 1.0).float().mean() > 0.25  # 0.9 + noise above 0.1 is clipped to the box edge
    assert smoothed.std() > 0.05
    assert torch.equal(smoothed_target_actions(actor, obs, 0.0, 0.5), actor(obs))


def test_td3_smoothing_changes_the_target_but_ddpg_ignores_it():
    critics, targets = TableCritics([[0.0] * 4, [0.0] * 4]), TableCritics(TABLE)
    targets.w.data[:] = 5.0  # next Q now depends on a'
    args = (ConstActor(0.0), critics, ConstActor(0.0), targets, batch())
    torch.manual_seed(0)
    smooth, _ = grad_comp["td3"](*args, update_actor=False, target_noise=0.3)
    plain, _ = grad_comp["td3"](*args, update_actor=False, target_noise=0.0)
    ddpg, _ = grad_comp["ddpg"](*args, update_actor=False, target_noise=0.3)
    assert smooth.item() != pytest.approx(plain.item()) and ddpg.item() == pytest.approx(plain.item())


def test_actor_term_only_when_updating_the_actor_and_only_into_the_actor():
    actor, critics = ConstActor(0.2), TableCritics([[0.0] * 4, [0.0] * 4])
    loss, info = grad_comp["td3"](actor, critics, ConstActor(0.0), TableCritics(TABLE), batch(), update_actor=True,
                                  target_noise=0.0)
    loss.backward()
    # actor loss = -mean Q_0(s, mu(s)) = -1 * tanh(0.2): maximising Q_0 pushes b up, i.e. its gradient is negative
    assert info["losses/actor_loss"].item() == pytest.approx(-math.tanh(0.2))
    assert actor.b.grad.item() < 0
    critic_only, _ = grad_comp["td3"](actor, critics, ConstActor(0.0), TableCritics(TABLE), batch(),
                                      update_actor=False, target_noise=0.0)
    critics.w.grad = None
    critic_only.backward()
    w_grad = critics.w.grad.clone()
    critics.w.grad = None
    loss, _ = grad_comp["td3"](actor, critics, ConstActor(0.0), TableCritics(TABLE), batch(), update_actor=True,
                                  target_noise=0.0)
    loss.backward()
    assert torch.allclose(critics.w.grad, w_grad)  # the actor's term adds nothing to the critics' gradient


class GaussActor(torch.nn.Module):
    def __init__(self, mean, log_std):
        super().__init__()
        self.mean = torch.nn.Parameter(torch.tensor([float(mean)]))
        self.log_std = torch.tensor([float(log_std)])

    def forward(self, obs):
        return self.mean.expand(len(obs), 1), self.log_std.expand(len(obs), 1)

    def sampler(self):
        def sample(obs):
            mean, log_std = self(obs)
            return squash(mean, log_std, torch.randn_like(mean))
        return sample


def test_sac_soft_target_subtracts_alpha_log_prob():
    actor, critics, targets = GaussActor(0.3, -1.0), TableCritics([[0.0] * 4, [0.0] * 4]), TableCritics(TABLE)
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    b = batch()
    torch.manual_seed(0)
    _, info = grad_comp["sac"](actor.sampler(), critics, targets, log_alpha, b, target_entropy=-1.0,
                               update_actor=False)
    torch.manual_seed(0)  # the same noise the loss drew for a' ~ pi(s')
    next_a, next_logp = squash(torch.full((2, 1), 0.3), torch.full((2, 1), -1.0), torch.randn(2, 1))
    next_q = torch.minimum(torch.tensor([4.0, 10.0]) + next_a[:, 0], torch.tensor([6.0, 2.0]) + 2 * next_a[:, 0])
    target = b.rewards + 0.5 * (next_q - 0.5 * next_logp)
    q = torch.stack([b.actions[:, 0], 2 * b.actions[:, 0]])
    assert torch.allclose(info["td_error"], (q - target).abs().mean(0), atol=1e-5)
    assert info["charts/alpha"].item() == pytest.approx(0.5)


@pytest.mark.parametrize("log_std, direction", [(-4.0, 1), (0.0, -1)])
def test_sac_temperature_moves_towards_the_target_entropy(log_std, direction):
    """A narrow policy (entropy below the target -1) raises alpha; a wide one lowers it."""
    torch.manual_seed(0)
    actor, critics, targets = GaussActor(0.0, log_std), TableCritics([[0.0] * 4, [0.0] * 4]), TableCritics(TABLE)
    log_alpha = torch.nn.Parameter(torch.tensor(0.0))
    opt = torch.optim.Adam([log_alpha], lr=0.1)
    loss, info = grad_comp["sac"](actor.sampler(), critics, targets, log_alpha, batch(), target_entropy=-1.0)
    loss.backward()
    opt.step()
    assert (log_alpha.item() > 0) == (direction > 0) and log_alpha.item() != 0
    assert "losses/alpha_loss" in info


def test_sac_without_tuning_leaves_alpha_alone():
    log_alpha = torch.tensor(0.0, requires_grad=True)
    loss, info = grad_comp["sac"](GaussActor(0.0, -4.0).sampler(), TableCritics([[0.0] * 4, [0.0] * 4]),
                                  TableCritics(TABLE),
                                  log_alpha, batch(), target_entropy=-1.0, tune_alpha=False)
    loss.backward()
    assert log_alpha.grad is None and "losses/alpha_loss" not in info
