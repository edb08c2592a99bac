import numpy as np
import torch

from rl.memory.replay import ReplayMemory
from rl.registry import memory


def filled(capacity: int, n_items: int, num_envs: int = 1) -> ReplayMemory:
    mem = ReplayMemory(capacity, (2,), np.float32, (), np.int64, gamma=0.9, seed=0)
    for start in range(0, n_items, num_envs):
        ids = np.arange(start, start + num_envs)
        obs = np.stack([ids, ids], 1).astype(np.float32)
        mem.add(obs, ids, ids.astype(np.float32), obs + 0.5, ids % 2 == 0, ids % 3 == 0)
    return mem


def test_registered():
    assert memory["replay"] is ReplayMemory


def test_wrap_around_overwrites_oldest():
    mem = filled(capacity=5, n_items=7)
    assert len(mem) == 5 and mem.pos == 2
    assert sorted(mem.rewards.tolist()) == [2, 3, 4, 5, 6]  # 0 and 1 were overwritten
    assert mem.rewards[0] == 5 and mem.rewards[1] == 6


def test_wrap_around_with_a_batch_crossing_the_end():
    mem = filled(capacity=5, n_items=6, num_envs=3)  # second batch writes slots 3, 4, 0
    assert mem.rewards.tolist() == [5, 1, 2, 3, 4] and mem.pos == 1


def test_terminated_and_truncated_stored_separately_and_consistently():
    mem = filled(capacity=8, n_items=8)
    batch = mem.sample(256)
    ids = batch.rewards.long()
    assert torch.equal(batch.terminated, (ids % 2 == 0).float())
    assert torch.equal(batch.truncated, (ids % 3 == 0).float())
    assert torch.equal(batch.obs[:, 0], ids.float()) and torch.equal(batch.next_obs[:, 0], ids.float() + 0.5)
    assert torch.equal(batch.actions, ids)
    assert torch.allclose(batch.discounts, torch.full((256,), 0.9)) and batch.weights is None  # uniform


def test_sampling_is_uniform_over_stored_items_only():
    mem = filled(capacity=100, n_items=10)
    counts = np.bincount(mem.sample(20_000).rewards.long().numpy(), minlength=10)
    assert len(counts) == 10  # nothing beyond what was stored
    assert counts.min() > 1700 and counts.max() < 2300


def test_state_dict_round_trip_resumes_sampling():
    a = filled(capacity=6, n_items=9)
    a.sample(3)
    b = ReplayMemory(6, (2,), np.float32, (), np.int64, gamma=0.9, seed=123)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(32).obs, b.sample(32).obs)
    assert (a.pos, a.size) == (b.pos, b.size)
