"""The actor-critic's feature head for elite replay (rl/models/actor_critic.py): feature vectors [B, F] from the policy
torso, with elite_buffer_vtrace's scaling layer or without it, from `features` and from `forward(...,
with_features=True)` alike; the layer in the state_dict and outside the optimizer; default models unchanged."""

import hashlib

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional as F

from rl.agents.flat_adam import FlatAdam
from rl.errors import ConfigError
from rl.registry import hparams as sets
from rl.registry import models

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
VEC = gym.spaces.Box(-1, 1, (4,), np.float32)
TWO, SIX = gym.spaces.Discrete(2), gym.spaces.Discrete(6)
# torso -> (observation space, actions, the torso's width)
TORSOS = {"nature_cnn": (ATARI, SIX, 512), "impala_cnn": (ATARI, SIX, 256), "mlp": (VEC, TWO, 64)}


def observations(space, batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if space is ATARI:
        return torch.randint(0, 256, (batch, *space.shape), dtype=torch.uint8, generator=g)
    return torch.randn(batch, *space.shape, generator=g)


def build(torso: str, family: str = "a2c", seed: int = 0, **overrides):
    obs_space, act_space, _ = TORSOS[torso]
    hp = sets[family]().update({"torso": torso, "activation": "relu", **overrides})
    torch.manual_seed(seed)
    return models["actor_critic"].build(hp, obs_space, act_space)


@pytest.mark.parametrize("torso", list(TORSOS))
@pytest.mark.parametrize("scaling, size", [(True, 512), (True, 48), (False, 512)])
def test_shape(torso, scaling, size):
    obs_space, _, width = TORSOS[torso]
    model = build(torso, feature_head=True, feature_scaling_layer=scaling, feature_size=size)
    features = model.features(observations(obs_space, 5))
    expected = size if scaling else width  # without the layer: the torso's own width, feature_size unused
    assert model.feature_dim == expected
    assert features.shape == (5, expected) and features.dtype == torch.float32


@pytest.mark.parametrize("torso", list(TORSOS))
@pytest.mark.parametrize("shared", [True, False])
def test_features_against_the_policy_torso(torso, shared):
    """Off: the policy torso's activation itself; on: elite_buffer_vtrace's Linear applied to it. With two torsos, the
    policy's."""
    obs = observations(TORSOS[torso][0], 4)
    off = build(torso, feature_head=True, feature_scaling_layer=False, shared_torso=shared)
    with torch.no_grad():
        assert torch.equal(off.features(obs), off.torsos[0](obs))
        if not shared:
            assert not torch.allclose(off.features(obs), off.torsos[1](obs))
    on = build(torso, feature_head=True, shared_torso=shared)
    layer = on.feature_layer
    with torch.no_grad():
        direct = F.linear(on.torsos[0](obs), layer.weight, layer.bias)
        assert torch.allclose(on.features(obs), direct, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(on.features(obs)[:, :TORSOS[torso][2]], on.torsos[0](obs))
    bound = (6 / (TORSOS[torso][2] + 512)) ** 0.5  # Glorot-uniform, zero biases (elite_buffer_vtrace's weights_init)
    assert layer.weight.abs().max() <= bound and layer.weight.std() > bound / 3 and not layer.bias.any()


@pytest.mark.parametrize("torso", list(TORSOS))
@pytest.mark.parametrize("shared, recurrent", [(True, False), (False, False), (True, True), (False, True)])
def test_forward_with_features(torso, shared, recurrent):
    """One pass gives the step's usual outputs and the same features as `features`; without the flag, three outputs
    as before."""
    model = build(torso, feature_head=True, shared_torso=shared, recurrent=recurrent, recurrent_hidden_size=16)
    obs = observations(TORSOS[torso][0], 3)
    hidden = None if not recurrent else torch.randn(3, *model.hidden_shape)
    with torch.no_grad():
        plain = model(obs, hidden)
        params, value, next_hidden, features = model(obs, hidden, with_features=True)
        assert len(plain) == 3
        assert torch.equal(params, plain[0]) and torch.equal(value, plain[1])
        assert (next_hidden is None) if not recurrent else torch.equal(next_hidden, plain[2])
        assert torch.equal(features, model.features(obs))
        assert torch.equal(features, model.features(obs, hidden))  # before the GRU: the state does not enter


def test_features_are_fp32_under_autocast():
    model = build("nature_cnn", feature_head=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.features(observations(ATARI, 2)).dtype == torch.float32
        assert model(observations(ATARI, 2), with_features=True)[3].dtype == torch.float32


def fingerprint(model) -> tuple[int, int, str]:
    sd = model.state_dict()
    text = "\n".join(f"{k}:{tuple(v.shape)}" for k, v in sd.items())
    return sum(p.numel() for p in model.parameters()), len(sd), hashlib.sha256(text.encode()).hexdigest()[:16]


# parameter count, state_dict entries and a digest of their names and shapes, taken from the model before the feature
# head existed (commit 0c6aea5): a default model that no longer loads an existing checkpoint fails here
BEFORE = {"ppo_cartpole": (VEC, TWO, 9155, 12, "97e8edef26c50983"),
          "ppo_gru_cartpole": (VEC, TWO, 27075, 8, "020e6e686a31f558"),
          "impala_pong:impala_cnn": (ATARI, SIX, 1091031, 36, "4ff06ce4904c8ab9"),
          "appo_atari": (ATARI, SIX, 1687719, 12, "0c1024ea95cf4299"),
          "ppo_pendulum": (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32), 8963, 13,
                           "1c1c7c822a7f8517")}


@pytest.mark.parametrize("name", list(BEFORE))
def test_default_model_unchanged(name):
    obs_space, act_space, count, entries, digest = BEFORE[name]
    set_name, _, torso = name.partition(":")  # "set:torso" builds the set with another torso
    hp = sets[set_name]()
    hp.torso = torso or hp.torso
    assert not hp.feature_head
    torch.manual_seed(0)
    model = models["actor_critic"].build(hp, obs_space, act_space)
    assert fingerprint(model) == (count, entries, digest)
    assert model.feature_layer is None and model.feature_dim is None
    with pytest.raises(ConfigError, match="feature_head"):
        model.features(observations(obs_space, 1))


@pytest.mark.parametrize("torso", list(TORSOS))
def test_layer_in_state_dict_not_in_parameters(torso):
    """The layer is state (checkpointed, published with the weights) but no parameter; the rest of the model is
    drawn as without the head."""
    off, on = build(torso), build(torso, feature_head=True, feature_size=40)
    sd_off, sd_on = off.state_dict(), on.state_dict()
    assert set(sd_on) - set(sd_off) == {"feature_layer.weight", "feature_layer.bias"}
    assert sd_on["feature_layer.weight"].shape == (40, TORSOS[torso][2]) and sd_on["feature_layer.bias"].shape == (40,)
    assert all(torch.equal(sd_on[k], v) for k, v in sd_off.items())
    assert fingerprint(on)[0] == fingerprint(off)[0]
    # a checkpoint round trip restores the layer: a model drawn from another seed then gives the same features
    other = build(torso, seed=7, feature_head=True, feature_size=40)
    obs = observations(TORSOS[torso][0], 2)
    with torch.no_grad():
        assert not torch.allclose(other.features(obs), on.features(obs))
        other.load_state_dict(sd_on)
        assert torch.equal(other.features(obs), on.features(obs))


def test_scaling_layer_needs_a_size():
    with pytest.raises(ConfigError, match="feature_size"):
        build("mlp", feature_head=True, feature_size=0)
    assert build("mlp", feature_head=True, feature_scaling_layer=False, feature_size=0).feature_dim == 64


@pytest.mark.parametrize("torso, kind", [("mlp", "adam"), ("mlp", "rmsprop"), ("nature_cnn", "adam")])
def test_optimizer_leaves_the_layer_alone(torso, kind):
    """Steps of FlatAdam (Adam and RMSprop) move the torso and heads, never the feature layer, not even under a loss
    that reads the features; and the flat buffer is as large as without the head."""
    model = build(torso, feature_head=True)
    opt = FlatAdam(model, lr=1e-2, kind=kind)
    assert opt.param.numel() == fingerprint(build(torso))[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    obs = observations(TORSOS[torso][0], 8)
    for _ in range(3):
        logits, value, _, features = model(obs, with_features=True)
        loss = logits.logsumexp(-1).mean() + value.square().mean() + features.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.clip_grad_norm(0.5)
        opt.step()
    after = model.state_dict()
    for key in ("feature_layer.weight", "feature_layer.bias"):
        assert torch.equal(after[key], before[key])
    assert not torch.equal(after["torsos.0.fc.weight" if torso == "nature_cnn" else "torsos.0.layers.0.weight"],
                           before["torsos.0.fc.weight" if torso == "nature_cnn" else "torsos.0.layers.0.weight"])
    assert not torch.equal(after["v_head.weight"], before["v_head.weight"])
