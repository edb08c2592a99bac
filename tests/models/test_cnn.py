"""Convolutional torsos (rl/models/cnn.py): shapes and parameter counts at 4x84x84, scaling of uint8 frames inside the
model, every head built on them through the registry, Fixup's identity blocks, channels-last layout, gradients."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from rl.models.mlp import init_orthogonal
from rl.registry import hparams as sets
from rl.registry import models

OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACT = gym.spaces.Discrete(6)
TORSOS = ["nature_cnn", "impala_cnn"]
TOL = dict(rtol=1e-4, atol=1e-5)


def frames(*batch: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (*batch, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def hparams(family: str, torso: str, **overrides):
    return sets[family]().update({"torso": torso, **overrides})


def build(family: str, torso: str, model: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return models[model].build(hparams(family, torso, **overrides), OBS, ACT)


@pytest.mark.parametrize("torso, out_dim", [("nature_cnn", 512), ("impala_cnn", 256)])
def test_output_shape(torso, out_dim):
    net = models[torso].build(hparams("ppo", torso), OBS)
    features = net(frames(3))
    assert net.out_dim == out_dim
    assert features.shape == (3, out_dim) and features.dtype == torch.float32


@pytest.mark.parametrize("torso, fixup, count", [("nature_cnn", False, 1_684_128), ("impala_cnn", False, 1_089_232),
                                                 ("impala_cnn", True, 1_088_942)])
def test_parameter_count(torso, fixup, count):
    net = models[torso].build(hparams("ppo", torso, fixup_init=fixup), OBS)
    assert sum(p.numel() for p in net.parameters()) == count  # Fixup: 320 conv biases out, 6 x 5 scalars in


def scaled_by_hand(net, obs: torch.Tensor) -> torch.Tensor:
    """The torso's output with the frames scaled to [0, 1] before its first conv, written out here."""
    x = obs.float() / 255
    if hasattr(net, "convs"):  # nature_cnn
        for conv in net.convs:
            x = F.relu(conv(x))
        return F.relu(net.fc(x.flatten(1)))
    for stage in net.stages:
        x = stage(x)
    return F.relu(net.fc(F.relu(x).flatten(1)))


@pytest.mark.parametrize("torso", TORSOS)
def test_uint8_frames_are_scaled_inside(torso):
    net = models[torso].build(hparams("ppo", torso), OBS)
    obs = frames(2)
    features = net(obs)
    assert torch.allclose(features, scaled_by_hand(net, obs), **TOL)
    as_float = obs.float()
    assert torch.allclose(net(as_float), features, **TOL)  # a float frame in [0, 255] is scaled the same way
    assert torch.equal(as_float, obs.float())  # and left as it was


@pytest.mark.parametrize("torso", TORSOS)
def test_frames_take_the_autocast_dtype(torso):
    """Under bfloat16 autocast the frames go straight to bfloat16 (exact for uint8) and the features stay those of
    the float32 pass, to bfloat16's precision."""
    net = models[torso].build(hparams("ppo", torso), OBS)
    obs = frames(4)
    assert net.frames(obs).dtype == torch.float32 and torch.equal(net.frames(obs), obs.float())
    with torch.autocast("cpu", torch.bfloat16):
        assert net.frames(obs).dtype == torch.bfloat16 and torch.equal(net.frames(obs).float(), obs.float())
        low = net(obs).float()
    high = net(obs)
    assert (low - high).norm() / high.norm() < 0.05


@pytest.mark.parametrize("torso", TORSOS)
@pytest.mark.parametrize("family, model, overrides, shape", [
    ("dqn", "q_network", {}, (2, 6)),
    ("dqn", "q_network", {"dueling": True}, (2, 6)),
    ("dqn", "c51_network", {}, (2, 6)),
])
def test_q_heads(torso, family, model, overrides, shape):
    net = build(family, torso, model, **overrides)
    assert net(frames(2)).shape == shape
    if model == "c51_network":
        assert net.log_probs(frames(2)).shape == (2, 6, net.head.num_atoms)


@pytest.mark.parametrize("torso", TORSOS)
@pytest.mark.parametrize("shared", [True, False])
def test_actor_critic(torso, shared):
    net = build("ppo", torso, "actor_critic", shared_torso=shared)
    assert len(net.torsos) == (1 if shared else 2)
    logits, value, hidden = net(frames(2))
    assert logits.shape == (2, 6) and value.shape == (2,) and hidden is None


@pytest.mark.parametrize("torso", TORSOS)
def test_recurrent_actor_critic_replays_sequences(torso):
    net = build("ppo", torso, "actor_critic", recurrent=True, recurrent_hidden_size=32, shared_torso=False)
    T, n = 3, 2
    hidden = net.initial_state(n)
    logits, value, step_hidden = net(frames(n), hidden)
    assert logits.shape == (n, 6) and value.shape == (n,) and step_hidden.shape == (n, 2, 32)
    starts = torch.zeros(T, n)
    starts[0] = 1.0
    logits, value = net.forward_sequence(frames(T, n), hidden, starts)
    assert logits.shape == (T * n, 6) and value.shape == (T * n,)


def test_fixup_blocks_start_as_identity_and_survive_ortho_init():
    net = build("ppo", "impala_cnn", "actor_critic", fixup_init=True, ortho_init=True)
    torso = net.torsos[0]
    assert torso.self_initialised
    blocks = [block for stage in torso.stages for block in stage.blocks]
    assert len(blocks) == 6
    for block in blocks:
        assert not block.conv2.weight.any()  # ActorCritic's orthogonal init left the torso alone
        fan_in = block.conv1.weight[0].numel()  # He's std, scaled by L^(-1/(2m-2)) with L = 6, m = 2
        assert block.conv1.weight.std().item() == pytest.approx(math.sqrt(2 / fan_in) / math.sqrt(6), rel=0.15)
        x = torch.randn(2, block.conv1.in_channels, 11, 11)
        assert torch.equal(block(x), x)


def test_orthogonal_init_covers_conv_layers():
    net = build("ppo", "impala_cnn", "actor_critic", fixup_init=False, ortho_init=True)
    w = net.torsos[0].stages[0].conv.weight.flatten(1)  # 16 rows of 4 * 3 * 3 = 36: orthogonal rows, gain sqrt(2)
    assert torch.allclose(w @ w.T, 2 * torch.eye(16), atol=1e-4)
    assert not net.torsos[0].stages[0].conv.bias.any()


def test_init_orthogonal_skips_self_initialised_modules():
    torso = models["impala_cnn"].build(hparams("ppo", "impala_cnn", fixup_init=True), OBS)
    before = [p.clone() for p in torso.parameters()]
    init_orthogonal(torch.nn.ModuleList([torso]), math.sqrt(2))
    assert all(torch.equal(a, b) for a, b in zip(before, torso.parameters()))


@pytest.mark.parametrize("torso, fixup", [("nature_cnn", False), ("impala_cnn", False), ("impala_cnn", True)])
def test_channels_last_gives_the_same_outputs(torso, fixup):
    default = build("ppo", torso, "actor_critic", fixup_init=fixup)
    nhwc = build("ppo", torso, "actor_critic", fixup_init=fixup, channels_last=True)
    conv = next(m for m in nhwc.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    obs = frames(2)
    for a, b in zip(default(obs)[:2], nhwc(obs)[:2]):
        assert torch.allclose(a, b, **TOL)


@pytest.mark.parametrize("torso, fixup", [("nature_cnn", False), ("impala_cnn", False), ("impala_cnn", True)])
def test_gradients_reach_the_first_conv(torso, fixup):
    net = build("ppo", torso, "actor_critic", fixup_init=fixup)
    logits, value, _ = net(frames(2))
    (logits.logsumexp(-1) + value).sum().backward()
    first_conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    assert first_conv.weight.grad is not None and first_conv.weight.grad.abs().sum() > 0
