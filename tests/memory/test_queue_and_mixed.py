"""The queue (freshest items) and the mixed memory: validation of replay_parameters, batch composition by ratio,
priority routing, per-buffer settings, and checkpoint round trips."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from hparams.dqn import dqn_cartpole
from rl.errors import ConfigError
from rl.memory.mixed import MixedMemory, shares
from rl.memory.queue import QueueMemory
from rl.memory.replay_parameters import parse_replay_parameters
from rl.registry import memory

OBS = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
ACT = gym.spaces.Discrete(2)


def add_items(mem, start, count, num_envs=1):
    for i in range(start, start + count, num_envs):
        ids = np.arange(i, i + num_envs)
        mem.add(ids.reshape(-1, 1).astype(np.float32), ids % 2, ids.astype(np.float32),
                ids.reshape(-1, 1).astype(np.float32) + 0.5, np.zeros(num_envs, bool), np.zeros(num_envs, bool))


def mixed(params: str, **settings) -> MixedMemory:
    hp = dqn_cartpole()
    hp.replay_parameters = params
    for k, v in settings.items():
        setattr(hp, k, v)
    return MixedMemory.build(hp, OBS, ACT, seed=0)


def test_queue_returns_the_freshest_items_newest_first():
    q = QueueMemory(3, (1,), np.float32)
    add_items(q, 0, 5)
    assert q.sample(3).rewards.tolist() == [4, 3, 2]
    assert q.sample(5).rewards.tolist() == [4, 3, 2, 4, 3]  # cycles through what it holds
    q1 = QueueMemory(1, (1,), np.float32)
    add_items(q1, 0, 4, num_envs=2)
    assert q1.sample(4).rewards.tolist() == [3, 3, 3, 3]


@pytest.mark.parametrize("text, message", [
    ("not json", "not valid JSON"),
    ("{}", "must be a list of buffers, got dict"),
    ("[]", "at least one buffer"),
    ('[{"type": "queue", "capacity": 1}]', r"\[0\] \(queue\): missing key 'sample_ratio'"),
    ('[{"type": "heap", "capacity": 1, "sample_ratio": 1}]',
     r"unknown type 'heap': valid: attentive, prioritized, queue, replay \(transition buffers; standard means replay"),
    ('[{"type": "custom", "capacity": 1, "sample_ratio": 1}]', "unknown type 'custom'"),  # a sequence buffer's type
    ('[{"type": "replay", "capacity": 0, "sample_ratio": 1}]', "capacity must be >= 1, got 0"),
    ('[{"type": "replay", "capacity": 1.5, "sample_ratio": 1}]', "capacity must be an integer, got 1.5"),
    ('[{"type": "replay", "capacity": 10, "sample_ratio": 0.7}, {"type": "queue", "capacity": 1, '
     '"sample_ratio": 0.2}]', r"must sum to 1, got 0.7 \+ 0.2 = 0.9"),
    ('[{"type": "replay", "capacity": 10, "sample_ratio": 1.5}]', "sample_ratio must be <= 1"),
    ('[{"type": "replay", "capacity": 10, "sample_ratio": 1, "alpha": 3}]',
     r"\(replay\): unknown key 'alpha': valid: type, capacity, sample_ratio, or a setting"),
])
def test_bad_replay_parameters_give_one_clear_error(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_replay_parameters(text, "transitions", dqn_cartpole())
    assert "\n" not in str(info.value)


def test_bad_replay_parameters_through_train_exit_2(tmp_path, capsys):
    import train

    bad = 'replay_parameters=[{"type": "queue", "capacity": 1, "sample_ratio": 0.3}],memory=mixed'
    code = train.main(["--hparams", "dqn_cartpole", "--output_dir", str(tmp_path / "run"), "--hparam_override", bad])
    err = capsys.readouterr().err
    assert code == 2 and "sample_ratios must sum to 1" in err and len(err.strip().splitlines()) == 1


def test_platform_alias_and_shares():
    spec, = parse_replay_parameters('[{"type": "standard", "capacity": 5, "sample_ratio": 1, "per_alpha": 0.7}]',
                                    "transitions", dqn_cartpole())
    assert (spec.type, spec.capacity, spec.sample_ratio, spec.settings) == ("replay", 5, 1.0, {"per_alpha": 0.7})
    assert shares(64, [0.5, 0.5]) == [32, 32]
    assert shares(10, [1 / 3, 1 / 3, 1 / 3]) == [4, 3, 3] and sum(shares(7, [0.25, 0.25, 0.5])) == 7
    assert shares(5, [0.0, 1.0]) == [0, 5]


def test_batch_composition_follows_the_ratios():
    mem = mixed('[{"type": "queue", "capacity": 4, "sample_ratio": 0.25}, '
                '{"type": "replay", "capacity": 1000, "sample_ratio": 0.75}]')
    add_items(mem, 0, 200, num_envs=4)
    assert len(mem) == 4
    batch = mem.sample(64)
    assert len(batch.rewards) == 64
    fresh, replayed = batch.rewards[:16], batch.rewards[16:]
    assert set(fresh.tolist()) == {196, 197, 198, 199}  # the queue's share: the newest items, listed first
    assert replayed.min() < 150  # the replay's share reaches back into the past
    assert torch.equal(batch.obs[:, 0], batch.rewards)  # fields stay aligned across the concatenation


def test_priorities_are_routed_to_the_prioritized_buffer_with_its_own_settings():
    mem = mixed('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                '{"type": "prioritized", "capacity": 100, "sample_ratio": 0.5, "per_alpha": 1.0, "per_eps": 0.0}]',
                per_alpha=0.6)
    queue, per = mem.buffers
    assert per.alpha == 1.0 and per.eps == 0.0  # the buffer's own settings win over the set's
    add_items(mem, 0, 10)
    batch = mem.sample(8)
    assert torch.equal(batch.weights[:4], torch.ones(4))
    td = torch.arange(8, dtype=torch.float32)
    mem.update_priorities(batch.indices, td)
    expected = {}
    for i, e in zip(batch.indices[4:].tolist(), td[4:].tolist()):
        expected[i] = e  # the last duplicate wins
    assert all(per.tree.get([i]).item() == pytest.approx(e) for i, e in expected.items())


def test_mixed_state_dict_round_trip_resumes_sampling():
    params = '[{"type": "queue", "capacity": 2, "sample_ratio": 0.5}, ' \
             '{"type": "prioritized", "capacity": 50, "sample_ratio": 0.5}]'
    a = mixed(params)
    add_items(a, 0, 30)
    a.update_priorities(a.sample(8).indices, torch.rand(8))
    b = mixed(params)
    b.load_state_dict(a.state_dict())
    x, y = a.sample(16), b.sample(16)
    assert torch.equal(x.indices, y.indices) and torch.equal(x.rewards, y.rewards)
    assert torch.equal(x.weights, y.weights)


def test_every_replay_family_memory_is_registered():
    for name in ("replay", "prioritized", "queue", "attentive", "mixed"):
        assert name in memory
