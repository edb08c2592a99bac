"""Rollout memory: GAE and returns against hand-computed values (termination, truncation and the rollout's last
step in one tiny rollout), recurrent sequence layout, and a checkpoint round trip."""

import numpy as np
import pytest
import torch

from rl.memory.rollout import RolloutMemory, gae


def tiny_rollout(**kwargs) -> RolloutMemory:
    """T = 3 steps, N = 2 envs. env 0 terminates at step 1 (and a new episode runs at step 2); env 1 is truncated at
    step 0. `next_values` hold V(real_next_obs): 9 and 8 are the final observations' values."""
    mem = RolloutMemory(3, 2, (1,), np.float32, **kwargs)
    rewards = [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    values = [[0.5, 2.0], [1.0, 2.5], [1.5, 3.0]]
    terminated = [[False, False], [True, False], [False, False]]
    truncated = [[False, True], [False, False], [False, False]]
    for t in range(3):
        extra = {}
        if kwargs.get("hidden_shape"):
            extra = dict(hidden=torch.full((2, 1, 1), float(t)), next_hidden=torch.full((2, 1, 1), t + 0.5),
                         starts=np.array([t == 2, t == 1], np.float32))
        mem.add(np.array([[t], [10 + t]], np.float32), np.array([0, 1]), np.array(rewards[t]),
                np.array([[t + 1], [11 + t]], np.float32), np.array(terminated[t]), np.array(truncated[t]),
                torch.tensor(values[t]), torch.tensor([-0.1 * t, -0.2 * t]), **extra)
    return mem


NEXT_VALUES = torch.tensor([[1.0, 8.0], [9.0, 3.0], [7.0, 10.0]])


def test_gae_by_hand():
    mem = tiny_rollout()
    assert mem.full and len(mem) == 6
    mem.compute_advantages(NEXT_VALUES, gamma=0.5, lam=0.5)
    # env 0: t2 (rollout end) 3 + 0.5 * 7 - 1.5 = 5; t1 (terminated: no bootstrap from 9) 2 - 1 = 1;
    #        t0 delta = 1 + 0.5 * 1 - 0.5 = 1, A = 1 + 0.25 * 1 = 1.25
    # env 1: t2 6 + 0.5 * 10 - 3 = 8; t1 5 + 0.5 * 3 - 2.5 = 4, A = 4 + 0.25 * 8 = 6;
    #        t0 (truncated: bootstrap from 8, cut the recursion) 4 + 0.5 * 8 - 2 = 6
    expected = torch.tensor([[1.25, 6.0], [1.0, 6.0], [5.0, 8.0]])
    assert torch.allclose(mem.advantages, expected)
    assert torch.allclose(mem.returns, expected + torch.tensor([[0.5, 2.0], [1.0, 2.5], [1.5, 3.0]]))


def test_gae_lambda_one_is_the_discounted_return_with_bootstrap():
    r = np.array([[1.0], [1.0], [1.0]])
    v = np.zeros((3, 1))
    nv = np.array([[0.0], [0.0], [4.0]])
    zeros = np.zeros((3, 1))
    adv = gae(r, v, nv, zeros, zeros, gamma=0.5, lam=1.0)
    assert adv[:, 0] == pytest.approx([1 + 0.5 + 0.25 + 0.125 * 4, 1 + 0.5 + 0.25 * 4, 1 + 0.5 * 4])


def test_feed_forward_minibatches_cover_the_rollout_once():
    mem = tiny_rollout()
    mem.compute_advantages(NEXT_VALUES, 0.5, 0.5)
    (whole,) = mem.minibatches(6, torch.Generator().manual_seed(0))
    assert whole.obs.shape == (6, 1) and torch.equal(whole.advantages, mem.advantages.flatten())
    parts = list(mem.minibatches(4, torch.Generator().manual_seed(0)))
    assert [len(b.returns) for b in parts] == [4, 2]
    assert sorted(torch.cat([b.obs for b in parts]).flatten().tolist()) == [0, 1, 2, 10, 11, 12]


@pytest.mark.parametrize("seq_len, lengths", [(0, [3]), (1, [1])])
def test_recurrent_minibatches_are_sequences_with_their_first_hidden_state(seq_len, lengths):
    mem = tiny_rollout(hidden_shape=(1, 1))
    mem.compute_advantages(NEXT_VALUES, 0.5, 0.5)
    batches = list(mem.minibatches(100, torch.Generator().manual_seed(0), seq_len=seq_len))
    for b in batches:
        T, n = b.starts.shape
        assert T == lengths[0] and b.obs.shape[:2] == (T, n) and b.hidden.shape == (n, 1, 1)
        for j in range(n):
            first = b.obs[0, j, 0].item()
            env, t0 = (0, first) if first < 10 else (1, first - 10)
            assert b.obs[:, j, 0].tolist() == [first + k for k in range(T)]  # consecutive steps of one env
            assert b.hidden[j].item() == t0  # the state stored when acting at the sequence's first step
            assert b.starts[:, j].tolist() == mem.starts[int(t0):int(t0) + T, env].tolist()
        flat_obs = b.obs.flatten(0, 1)[:, 0]  # flat fields are time-major in the same order
        assert torch.equal(b.returns, torch.stack([mem.returns[int(o) % 10, int(o >= 10)] for o in flat_obs]))


def test_state_dict_round_trip_and_cut():
    mem = tiny_rollout()
    state = mem.state_dict()
    other = RolloutMemory(3, 2, (1,), np.float32)
    other.load_state_dict(state)
    assert other.full and torch.equal(other.rewards, mem.rewards) and torch.equal(other.next_obs, mem.next_obs)
    other.pos = 2
    other.cut()  # the envs restart: the last stored step ends every trajectory (bootstrapped, recursion cut)
    assert other.dones[1].tolist() == [1.0, 1.0] and other.terminated[1].tolist() == [1.0, 0.0]
