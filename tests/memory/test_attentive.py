"""Attentive Experience Replay: samples prefer states near the agent's current state, lambda anneals to uniform,
model features come from the agent, and the state round-trips."""

import numpy as np
import pytest
import torch

from rl.errors import ConfigError
from rl.memory.attentive import AttentiveMemory


def make(lam=4.0, total_steps=0, features="obs", capacity=1000):
    return AttentiveMemory(capacity, (2,), np.float32, gamma=0.9, seed=0, total_steps=total_steps, lam=lam,
                           features=features)


def fill(mem, n=400):
    """States spread on a line: x = i / n in [0, 1), y = 0."""
    for i in range(n):
        s = np.array([[i / n, 0.0]], np.float32)
        mem.add(s, np.array([0]), np.array([float(i)]), s, np.array([False]), np.array([False]))


def test_samples_prefer_states_similar_to_the_current_one():
    mem, uniform = make(lam=8.0), make(lam=1.0)
    fill(mem)
    fill(uniform)
    mem.set_reference(np.array([[0.9, 0.0]], np.float32))
    uniform.set_reference(np.array([[0.9, 0.0]], np.float32))
    near = np.abs(mem.sample(64).obs[:, 0].numpy() - 0.9).mean()
    far = np.abs(uniform.sample(64).obs[:, 0].numpy() - 0.9).mean()
    assert near < 0.1 < far  # uniform: about 0.4 on average
    assert mem.sample(64).weights is None  # no importance weights: uniform among the kept candidates


def test_default_reference_is_where_the_envs_are_now():
    mem = make(lam=8.0)
    fill(mem)  # the newest next_obs is x = 399/400
    assert mem.sample(32).obs[:, 0].min().item() > 0.75
    mem.set_reference(np.array([[0.0, 0.0], [0.5, 0.0]], np.float32))  # two envs: near either one
    xs = mem.sample(64).obs[:, 0].numpy()
    assert np.all(np.minimum(np.abs(xs), np.abs(xs - 0.5)) < 0.1)


def test_lambda_anneals_linearly_to_uniform():
    mem = AttentiveMemory(10, (2,), np.float32, total_steps=100, lam=5.0, anneal_fraction=0.5)
    assert mem.lam == 5.0
    mem.added = 25
    assert mem.lam == pytest.approx(3.0)
    mem.added = 50
    assert mem.lam == 1.0


def test_model_features_come_from_the_agent():
    mem = make(lam=8.0, features="model")
    fill(mem)
    with pytest.raises(ConfigError, match="set_feature_fn"):
        mem.sample(8)
    mem.set_feature_fn(lambda obs: -obs[:, :1] * 3)  # any function of the state, e.g. a torso
    mem.set_reference(np.array([[0.2, 0.0]], np.float32))
    assert np.abs(mem.sample(32).obs[:, 0].numpy() - 0.2).max() < 0.1
    with pytest.raises(ConfigError, match="attentive_features"):
        make(features="pixels")


def test_state_dict_round_trip_resumes_sampling():
    a = make(lam=4.0)
    fill(a, 50)
    a.sample(4)
    b = make(lam=4.0)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(16).indices, b.sample(16).indices)
