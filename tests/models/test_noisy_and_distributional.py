"""Noisy linear layers (shapes of the factorised noise, learned scale, deterministic evaluation) and the C51 network
(probabilities over the support, Q as their expectation)."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hparams.dqn import dqn_cartpole, rainbow_cartpole
from rl.models.distributional import C51Network
from rl.models.noisy import NoisyLinear
from rl.models.q_network import QNetwork

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
ACT = gym.spaces.Discrete(3)


def test_factorised_noise_shapes_and_initial_scale():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3, sigma0=0.5)
    assert layer.eps_in.shape == (5,) and layer.eps_out.shape == (3,)  # p + q draws, not p * q
    assert layer.weight_mu.shape == layer.weight_sigma.shape == (3, 5)
    assert layer.bias_mu.shape == layer.bias_sigma.shape == (3,)
    assert torch.allclose(layer.weight_sigma, torch.full((3, 5), 0.5 / 5 ** 0.5))
    x = torch.randn(7, 5)
    noise_w = torch.outer(layer.eps_out, layer.eps_in)
    expected = x @ (layer.weight_mu + layer.weight_sigma * noise_w).T + layer.bias_mu + layer.bias_sigma * layer.eps_out
    assert torch.allclose(layer(x), expected, atol=1e-6)
    torch.manual_seed(1)
    layer.reset_noise()
    torch.manual_seed(1)
    e_in, e_out = torch.randn(5), torch.randn(3)
    assert torch.equal(layer.eps_in, e_in.sign() * e_in.abs().sqrt())  # f(e) = sign(e) sqrt(|e|)
    assert torch.equal(layer.eps_out, e_out.sign() * e_out.abs().sqrt())


def test_noise_is_fixed_between_resets_and_changes_on_reset():
    torch.manual_seed(0)
    layer = NoisyLinear(4, 2)
    x = torch.randn(3, 4)
    a, b = layer(x), layer(x)
    assert torch.equal(a, b)
    layer.reset_noise()
    assert not torch.equal(layer(x), a)


def test_eval_mode_uses_the_mean_weights_deterministically():
    layer = NoisyLinear(4, 2)
    x = torch.randn(3, 4)
    layer.eval()
    first = layer(x)
    layer.reset_noise()
    assert torch.equal(layer(x), first)
    assert torch.allclose(first, x @ layer.weight_mu.T + layer.bias_mu)


def test_sigma_receives_gradients():
    layer = NoisyLinear(4, 2)
    layer(torch.randn(3, 4)).sum().backward()
    assert layer.weight_sigma.grad.abs().sum() > 0 and layer.bias_sigma.grad.abs().sum() > 0


@pytest.mark.parametrize("dueling", [False, True])
def test_noisy_q_network_resets_every_layer_and_survives_deepcopy(dueling):
    import copy

    hp = dqn_cartpole()
    hp.noisy, hp.dueling = True, dueling
    net = QNetwork.build(hp, OBS, ACT)
    assert net.noisy and len(net.noisy_layers()) == (2 if dueling else 1)
    target = copy.deepcopy(net)
    assert all(a is not b for a, b in zip(net.noisy_layers(), target.noisy_layers()))
    before = [layer.eps_in.clone() for layer in target.noisy_layers()]
    net.reset_noise()
    assert all(torch.equal(b, layer.eps_in) for b, layer in zip(before, target.noisy_layers()))
    hp.noisy = False
    assert not QNetwork.build(hp, OBS, ACT).noisy


def test_c51_network_outputs_distributions_and_their_expectation():
    hp = rainbow_cartpole()
    hp.num_atoms, hp.v_min, hp.v_max = 11, -5.0, 5.0
    net = C51Network.build(hp, OBS, ACT)
    obs = torch.randn(6, 4)
    log_p = net.log_probs(obs)
    assert log_p.shape == (6, 3, 11)
    assert torch.allclose(log_p.exp().sum(-1), torch.ones(6, 3), atol=1e-5)
    assert torch.allclose(net.support, torch.linspace(-5, 5, 11))
    assert torch.allclose(net(obs), (log_p.exp() * net.support).sum(-1), atol=1e-5)
    assert net.noisy and net.head.value is not None  # rainbow: dueling and noisy
