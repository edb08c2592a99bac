"""elite_buffer_vtrace's network (`elite_cnn`, rl/models/cnn.py; its `model/network.py`): its shapes, parameters and
multiply-adds at 4x84x84, raw 0-255 input, and its own Glorot initialisation kept by the actor-critic."""

import gymnasium as gym
import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from rl.registry import hparams as sets
from rl.registry import models

OBS = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def torso(**overrides):
    torch.manual_seed(0)
    return models["elite_cnn"].build(sets["impala_pong"]().update({"torso": "elite_cnn", **overrides}), OBS)


def test_shapes_parameters_and_macs():
    net = torso()
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    h = net.frames(x)
    shapes = []
    for conv in net.convs:
        h = torch.relu(conv(h))
        shapes.append(tuple(h.shape[1:]))
    assert shapes == [(64, 28, 28), (64, 13, 13), (128, 6, 6)]  # 84 -> 28 (s3) -> 13 (s2) -> 6 (s2): 4608
    assert net(x).shape == (2, 512) and net.out_dim == 512
    assert sum(p.numel() for p in net.parameters()) == 2_472_960
    with FlopCounterMode(display=False) as counter:
        net(x[:1])
    # 28*28*64*36 + 13*13*64*576 + 6*6*128*576 + 4608*512 multiply-adds (a FLOP count is 2 per multiply-add)
    assert counter.get_total_flops() // 2 == 1_806_336 + 6_230_016 + 2_654_208 + 2_359_296 == 13_049_856


def test_raw_pixels_and_glorot_init_kept():
    net = torso()
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    h = x.float()  # unscaled, as elite_buffer_vtrace feeds them
    for conv in net.convs:
        h = torch.relu(conv(h))
    torch.testing.assert_close(net(x), torch.relu(net.fc(h.flatten(1))))
    torch.manual_seed(0)
    model = models["actor_critic"].build(sets["impala_pong"]().update({"torso": "elite_cnn"}), OBS,
                                         gym.spaces.Discrete(6))
    conv1 = model.torsos[0].convs[0].weight
    bound = (6 / (4 * 9 + 64 * 9)) ** 0.5  # Glorot uniform over fan_in + fan_out, not ortho_init's rescaling
    assert conv1.abs().max() <= bound and conv1.abs().max() > 0.9 * bound
    assert torch.equal(conv1, torso().convs[0].weight)


def test_experiment_sets_start_the_heads_as_elite_buffer_vtrace():
    """fc2 (policy): each action's weights a random direction of norm 0.001; fc3 (value): norm 1; zero biases."""
    torch.manual_seed(0)
    model = models["actor_critic"].build(sets["elite_impala_seaquest"](), OBS, gym.spaces.Discrete(18))
    pi, v = model.pi_head.out, model.v_head
    torch.testing.assert_close(pi.weight.norm(dim=1), torch.full((18,), 0.001))
    torch.testing.assert_close(v.weight.norm(dim=1), torch.ones(1))
    assert not pi.bias.any() and not v.bias.any()
