"""Continuous-control networks: squashed-Gaussian and gSDE log-probabilities against a direct computation, the
stacked critics against independent MLPs (outputs and gradients), the first critic alone, detached critic evaluation,
and sizes taken from the settings."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hparams.continuous import sac, td3
from rl.errors import ConfigError
from rl.models.continuous import LOG_STD_MAX, GSDEActor, QCritics, squash
from rl.models.mlp import MLP
from rl.registry import models

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def test_squash_log_prob_matches_change_of_variables():
    torch.manual_seed(0)
    mean, log_std, noise = torch.randn(64, 2), torch.randn(64, 2).clamp(-2, 1), torch.randn(64, 2)
    action, log_prob = squash(mean, log_std, noise)
    mean, log_std, noise = mean.double(), log_std.double(), noise.double()  # the direct formula needs float64
    u = mean + log_std.exp() * noise
    base = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
    direct = base - torch.log(1 - torch.tanh(u).pow(2)).sum(-1)  # log |det d tanh(u)/du|
    assert torch.allclose(action.double(), torch.tanh(u), atol=1e-6)
    assert torch.allclose(log_prob.double(), direct, atol=1e-4)


def test_squash_log_prob_is_finite_where_tanh_saturates():
    _, log_prob = squash(torch.full((1, 1), 30.0), torch.zeros(1, 1), torch.zeros(1, 1))
    assert torch.isfinite(log_prob).all() and log_prob.item() > 50  # a near-point mass at the box edge


def test_squashed_gaussian_actor_shapes_and_clamped_log_std():
    hp = sac()
    actor = models["squashed_gaussian_actor"].build(hp, OBS, ACT)
    with torch.no_grad():
        actor.out.bias[2:] = 100.0  # log std far above the clamp
    mean, log_std = actor(torch.randn(5, 3))
    assert mean.shape == log_std.shape == (5, 2) and torch.all(log_std == LOG_STD_MAX)
    action, log_prob = actor.sample(torch.randn(5, 3))
    assert action.shape == (5, 2) and log_prob.shape == (5,) and action.abs().max() <= 1


def test_sizes_come_from_settings():
    hp = td3()
    hp.hidden_sizes = [32, 16]
    actor = models["deterministic_actor"].build(hp, OBS, ACT)
    critic = models["twin_q"].build(hp, OBS, ACT)
    single = models["q_critic"].build(hp, OBS, ACT)
    assert [tuple(p.shape) for p in actor.parameters()] == [(32, 3), (32,), (16, 32), (16,), (2, 16), (2,)]
    assert [tuple(w.shape) for w in critic.weights] == [(2, 5, 32), (2, 32, 16), (2, 16, 1)]
    assert single.num_critics == 1 and single(torch.zeros(4, 3), torch.zeros(4, 2)).shape == (1, 4)
    out = actor(torch.randn(7, 3))
    assert out.shape == (7, 2) and out.abs().max() <= 1


def test_stacked_critics_equal_independent_mlps():
    torch.manual_seed(0)
    critics = QCritics(3, 2, [8, 8], num_critics=2)
    obs, act = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1
    q = critics(obs, act)
    assert q.shape == (2, 6)
    x0 = torch.cat([obs, act], -1)
    for k in range(2):
        x = x0
        for i, (w, b) in enumerate(zip(critics.weights, critics.biases)):
            x = F.linear(x, w[k].t(), b[k, 0])
            x = F.relu(x) if i < 2 else x
        assert torch.allclose(q[k], x.squeeze(-1), atol=1e-6)
    assert not torch.equal(q[0], q[1])  # independently initialised


def independent_critic(critics: QCritics, k: int, obs, act) -> torch.Tensor:
    """Critic k of the stack as its own MLP of nn.Linear layers holding copies of its weights."""
    layers = [torch.nn.Linear(w.shape[1], w.shape[2]) for w in critics.weights]
    with torch.no_grad():
        for lin, w, b in zip(layers, critics.weights, critics.biases):
            lin.weight.copy_(w[k].t())
            lin.bias.copy_(b[k, 0])
    x = torch.cat([obs, act], -1)
    for i, lin in enumerate(layers):
        x = lin(x)
        x = torch.relu(x) if i < len(layers) - 1 else x
    return x.squeeze(-1), layers


def test_stacked_critics_give_each_critic_the_gradient_of_its_own_mlp():
    """The batched twin critic trains as two separate critics: a loss on both stacked outputs gives each critic's
    slice of the stacked weights exactly the gradient its own MLP gets from its own term."""
    torch.manual_seed(1)
    critics = QCritics(3, 2, [8, 8], num_critics=2)
    obs, act, target = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1, torch.randn(6)
    ((critics(obs, act) - target) ** 2).mean(-1).sum().backward()
    for k in range(2):
        q, layers = independent_critic(critics, k, obs, act)
        ((q - target) ** 2).mean().backward()
        for lin, w, b in zip(layers, critics.weights, critics.biases):
            assert torch.allclose(w.grad[k], lin.weight.grad.t(), atol=1e-5)
            assert torch.allclose(b.grad[k, 0], lin.bias.grad, atol=1e-5)


def test_first_critic_alone_is_the_stack_s_first_row():
    torch.manual_seed(2)
    critics = QCritics(3, 2, [8, 8], num_critics=2)
    obs, act = torch.randn(5, 3), torch.rand(5, 2) * 2 - 1
    first = critics(obs, act, first=True)
    assert first.shape == (1, 5) and torch.allclose(first[0], critics(obs, act)[0], atol=1e-6)
    assert torch.allclose(first[0], independent_critic(critics, 0, obs, act)[0], atol=1e-5)


def gsde_actor(log_std_init=-1.0, clip_mean=2.0):
    torch.manual_seed(3)
    return GSDEActor(MLP(3, [8, 8]), 2, log_std_init=log_std_init, clip_mean=clip_mean)


def test_gsde_log_prob_matches_a_direct_computation():
    """u = mean + z @ E is Gaussian given z, with variance (z^2) @ exp(log_std)^2 (+ SB3's 1e-6) per action;
    log pi(tanh u) = log N(u) - sum log(1 - tanh(u)^2)."""
    actor = gsde_actor()
    with torch.no_grad():
        actor.log_std.copy_(torch.randn_like(actor.log_std) * 0.5 - 1.0)
    obs, exploration = torch.randn(7, 3), torch.randn(8, 2) * 0.3
    actions, log_prob = actor.sample(obs, exploration)
    mean, z, log_std = actor(obs)
    u = mean + z @ exploration
    std = torch.sqrt(z.pow(2) @ log_std.exp().pow(2) + 1e-6)
    direct = torch.distributions.Normal(mean, std).log_prob(u).sum(-1) - torch.log(1 - torch.tanh(u) ** 2).sum(-1)
    assert torch.allclose(actions, torch.tanh(u)) and torch.allclose(log_prob, direct, atol=1e-4)


def test_gsde_mean_is_clipped_and_the_noise_is_a_function_of_the_state():
    actor = gsde_actor(clip_mean=0.01)
    mean, z, _ = actor(torch.randn(9, 3) * 50)
    assert mean.abs().max() <= 0.01 + 1e-7
    sampler = actor.sampler()  # one matrix for the whole batch: the same state gets the same action
    obs = torch.randn(1, 3).expand(4, 3)
    a, _ = sampler(obs)
    assert torch.allclose(a, a[:1].expand(4, 2))
    assert torch.allclose(sampler(obs)[0], a)  # and for every call of one gradient step (target and actor terms)
    b, _ = actor.sampler()(obs)  # a new matrix: another action
    assert not torch.allclose(a, b)


def test_gsde_loss_reaches_log_std_through_the_noise_and_the_variance():
    actor = gsde_actor()
    actions, log_prob = actor.sampler()(torch.randn(5, 3))
    actions.sum().backward()  # through E = exp(log_std) * N(0, 1) only
    assert actor.log_std.grad is not None and actor.log_std.grad.abs().sum() > 0
    actor.zero_grad()
    _, log_prob = actor.sampler()(torch.randn(5, 3))
    log_prob.sum().backward()
    assert actor.log_std.grad.abs().sum() > 0 and actor.torso.layers[0].weight.grad.abs().sum() > 0


def test_detached_critics_pass_gradients_to_actions_only():
    critics = QCritics(3, 2, [8], num_critics=2)
    act = torch.zeros(4, 2, requires_grad=True)
    critics(torch.randn(4, 3), act, detach=True).sum().backward()
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert all(p.grad is None for p in critics.parameters())


def test_discrete_action_space_is_a_config_error():
    with pytest.raises(ConfigError, match="Box"):
        models["twin_q"].build(sac(), OBS, gym.spaces.Discrete(3))
