"""Continuous-control networks: squashed-Gaussian log-probabilities against a direct computation, the stacked
critics against independent MLPs, detached critic evaluation, and sizes taken from the settings."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hparams.continuous import sac, td3
from rl.errors import ConfigError
from rl.models.continuous import LOG_STD_MAX, QCritics, squash
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


def test_detached_critics_pass_gradients_to_actions_only():
    critics = QCritics(3, 2, [8], num_critics=2)
    act = torch.zeros(4, 2, requires_grad=True)
    critics(torch.randn(4, 3), act, detach=True).sum().backward()
    assert act.grad is not None and act.grad.abs().sum() > 0
    assert all(p.grad is None for p in critics.parameters())


def test_discrete_action_space_is_a_config_error():
    with pytest.raises(ConfigError, match="Box"):
        models["twin_q"].build(sac(), OBS, gym.spaces.Discrete(3))
