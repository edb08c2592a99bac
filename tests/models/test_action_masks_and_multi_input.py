"""The networks' reading of structured observations (rl/models/multi_input.py): masked logits and Q-values, the
multi-input torso chosen from a Dict or Tuple space, and sampling that never draws a masked action
(rl/act_select/policy.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl.envs.observations import DictObs
from rl.models.multi_input import EntryTorso, MultiInput
from rl.registry import act_select, models
from rl.registry import hparams as sets

A = 6
MASKED = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (4,), np.float32),
                          "action_mask": gym.spaces.MultiBinary(A)})
ACTIONS = gym.spaces.Discrete(A)
MASK = torch.tensor([[0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1]], dtype=torch.int8)


def masked_obs(mask: torch.Tensor = MASK) -> DictObs:
    return DictObs({"observation": torch.randn(len(mask), 4), "action_mask": mask})


def build(name: str, space=MASKED, action_space=ACTIONS, **overrides):
    hp = sets[name]()
    hp.update(overrides)
    torch.manual_seed(0)
    return hp, models[hp.model].build(hp, space, action_space)


def test_masked_logits_give_illegal_actions_probability_zero_and_legal_log_probs_and_entropy():
    """Log-probabilities and entropy are those of the distribution over the legal actions alone. Bugs caught: the
    mask not applied to the logits (illegal actions keep their probability), -inf logits (entropy NaN: 0 x -inf)."""
    _, model = build("ppo_masked_pick_items", pi_init_gain=1.0)
    obs = masked_obs()
    logits, _, _ = model(obs)
    policy = act_select["categorical"].build(sets["ppo_masked_pick_items"](), gym.spaces.Discrete(A))
    probs = torch.softmax(logits, -1)
    assert (probs[MASK == 0] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(3))
    unmasked, _, _ = build("ppo_masked_pick_items", pi_init_gain=1.0, mask_actions=False)[1](obs)
    for row in range(3):
        legal = MASK[row].bool()
        expected = torch.distributions.Categorical(logits=unmasked[row, legal])
        actions = torch.arange(A)[legal]
        torch.testing.assert_close(policy.log_prob(logits[row:row + 1].expand(len(actions), A), actions),
                                   expected.log_prob(torch.arange(len(actions))))
        torch.testing.assert_close(policy.entropy(logits[row:row + 1])[0], expected.entropy())
    assert policy.entropy(logits)[1] == 0  # one legal action: no uncertainty left
    assert torch.isfinite(policy.entropy(logits)).all()


def test_sampling_never_draws_a_masked_action_even_at_the_ends_of_the_uniform(monkeypatch):
    """Inverse-CDF sampling at u = 0 and u just below 1 (the total probability rounds below 1): with the mask's first
    and last actions illegal neither is drawn. Bug caught: searching the cumulative sum for u unscaled, left side (u =
    0 gives action 0, which has probability 0; u above the rounded total gives the last action)."""
    logits = torch.tensor([[-3.4e38, 0.3, -0.2, 0.1, -3.4e38]] * 2)
    cat = act_select["categorical"].build(sets["ppo_masked_pick_items"](), gym.spaces.Discrete(5), seed=0)
    draws = cat(logits.repeat(20_000, 1)).actions
    assert set(draws.tolist()) == {1, 2, 3}
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.tensor([[0.0], [1.0 - 2 ** -24]]))
    assert cat(logits).actions.tolist() == [1, 3]


def test_q_networks_rank_illegal_actions_last_and_a_set_can_turn_masks_off():
    """Bugs caught: the Q network's mask dropped (greedy picks an illegal action), `mask_actions=false` still
    masking (the demonstration set would not show what the mask does), the mask read as an input feature."""
    hp, q = build("dqn_masked_pick_items")
    obs = masked_obs()
    values = q(obs)
    assert (values[MASK == 0] == torch.finfo(values.dtype).min).all()
    assert (MASK.gather(1, values.argmax(1, keepdim=True)) == 1).all()
    _, raw = build("dqn_masked_pick_items", mask_actions=False)
    torch.testing.assert_close(raw(obs)[MASK == 1], values[MASK == 1])
    assert (raw(obs)[MASK == 0] > -1e30).all()
    flipped = DictObs({"observation": obs["observation"], "action_mask": torch.ones_like(MASK)})
    torch.testing.assert_close(raw(flipped), raw(obs))  # with masks off, the mask is not an input either
    assert isinstance(q.torso, EntryTorso) and q.torso.key == "observation"


def test_c51_expected_values_obey_the_mask():
    """Bug caught: C51's expected values (acting, and the double-C51 bootstrap) left unmasked."""
    _, net = build("rainbow_cartpole")
    values = net(masked_obs())
    assert (values[MASK == 0] == torch.finfo(values.dtype).min).all()


def test_the_multi_input_torso_encodes_every_entry_and_reaches_them_all_with_its_gradient():
    """A Dict of a vector, an image, a Discrete and a mask: a CNN for the image, an MLP for the others (the Discrete
    one-hot), one fusion layer; changing any entry but the mask changes the features, and every encoder gets a
    gradient. Bugs caught: an entry dropped or encoded by the wrong torso, the mask encoded as a feature, a Discrete
    fed as one integer."""
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,), np.float32),
                             "frames": gym.spaces.Box(0, 255, (2, 36, 36), np.uint8),
                             "level": gym.spaces.Discrete(5), "action_mask": gym.spaces.MultiBinary(4)})
    hp, model = build("ppo_masked_pick_items", space=space, action_space=gym.spaces.Discrete(4))
    torso = model.torsos[0]
    assert isinstance(torso, MultiInput) and torso.out_dim == 64 and sorted(torso.keys) == ["frames", "level", "pos"]
    assert type(torso.encoders[torso.keys.index("frames")]).__name__ == "NatureCNN"
    obs = DictObs({"pos": torch.randn(2, 3), "frames": torch.randint(0, 255, (2, 2, 36, 36), dtype=torch.uint8),
                   "level": torch.tensor([0, 4]), "action_mask": torch.ones(2, 4, dtype=torch.int8)})
    base = torso(obs)
    assert base.shape == (2, 64)
    for key, change in (("pos", lambda x: x + 1), ("frames", lambda x: 255 - x), ("level", lambda x: (x + 1) % 5)):
        other = DictObs(obs.data)
        other[key] = change(obs[key])
        assert not torch.allclose(torso(other), base), key
    other = DictObs(obs.data)
    other["action_mask"] = torch.zeros(2, 4, dtype=torch.int8)
    torch.testing.assert_close(torso(other), base)
    torso(obs).square().sum().backward()
    for key, encoder in zip(torso.keys, torso.encoders):
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters()), key


def test_a_tuple_space_and_a_cnn_set_pick_their_torsos_from_the_space():
    """A Tuple's entries are "0", "1", ...; a set whose torso is a CNN gives that CNN the image entries. Bug caught:
    the torso taken from the set alone (the nature_cnn of an Atari set given a Dict: a shape error)."""
    space = gym.spaces.Tuple((gym.spaces.Box(0, 255, (4, 36, 36), np.uint8), gym.spaces.MultiBinary(7)))
    _, q = build("dqn_atari", space=space, action_space=gym.spaces.Discrete(3))
    assert isinstance(q.torso, MultiInput) and sorted(q.torso.keys) == ["0", "1"]
    obs = DictObs((torch.zeros(5, 4, 36, 36, dtype=torch.uint8), torch.ones(5, 7, dtype=torch.int8)))
    assert q(obs).shape == (5, 3)


def test_normalize_obs_with_a_dict_space_is_one_line():
    """Bug caught: the observation normaliser given a dict (a TypeError when the first step is acted)."""
    from rl.errors import ConfigError

    with pytest.raises(ConfigError, match="normalize_obs standardises one observation array.*normalize_obs=false"):
        build("ppo_masked_pick_items", normalize_obs=True)
