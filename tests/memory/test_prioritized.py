"""Proportional prioritized replay: sampling frequencies, importance weights, beta annealing, new items at max
priority, zero priorities, Box actions, and checkpoint round trips."""

import io

import numpy as np
import pytest
import torch

from rl.memory.prioritized import PrioritizedMemory
from rl.registry import memory


def make(capacity=8, n_items=8, alpha=1.0, beta=0.5, eps=0.0, total_steps=0, action_shape=(), action_dtype=np.int64):
    mem = PrioritizedMemory(capacity, (1,), np.float32, action_shape, action_dtype, gamma=0.9, seed=0,
                            total_steps=total_steps, alpha=alpha, beta=beta, eps=eps)
    for i in range(n_items):
        action = np.zeros((1, *action_shape), np.float32) if action_shape else np.array([i])
        mem.add(np.array([[i]], np.float32), action, np.array([float(i)]), np.array([[i + 0.5]], np.float32),
                np.array([False]), np.array([False]))
    return mem


def test_registered():
    assert memory["prioritized"] is PrioritizedMemory


def test_new_items_get_the_max_priority_so_far():
    mem = make(n_items=4)
    assert np.allclose(mem.tree.get(np.arange(4)), 1.0)
    mem.update_priorities(np.array([0, 1]), np.array([3.0, 0.5]))
    mem.add(np.array([[9]], np.float32), np.array([9]), np.array([9.0]), np.array([[9]], np.float32),
            np.array([False]), np.array([False]))
    assert mem.tree.get([4]).item() == 3.0


def test_sampling_frequencies_are_proportional_to_priorities():
    mem = make(capacity=8, n_items=5, alpha=0.5, eps=0.01)
    td = np.array([0.0, 1.0, 4.0, 9.0, 16.0])
    mem.update_priorities(np.arange(5), td)
    p = (np.abs(td) + 0.01) ** 0.5
    counts = np.bincount(np.concatenate([mem.sample(64).indices.numpy() for _ in range(400)]), minlength=8)
    assert counts[5:].sum() == 0  # never the unfilled slots
    assert np.allclose(counts[:5] / counts.sum(), p / p.sum(), atol=0.01)


def test_importance_weights_match_the_definition():
    mem = make(capacity=4, n_items=4, alpha=1.0, beta=0.5, eps=0.0)
    mem.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    batch = mem.sample(256)
    probs = np.array([1.0, 2.0, 3.0, 4.0]) / 10.0
    w = (4 * probs) ** -0.5
    w /= w.max()  # the largest weight belongs to the smallest priority, over the whole memory
    assert np.allclose(batch.weights.numpy(), w[batch.indices.numpy()], rtol=1e-6)
    assert batch.weights.max().item() <= 1.0


def test_beta_anneals_to_one_over_the_run():
    mem = make(n_items=0, beta=0.4, total_steps=100)
    assert mem.beta == pytest.approx(0.4)
    for _ in range(50):
        mem.add(np.zeros((1, 1), np.float32), np.array([0]), np.ones(1), np.zeros((1, 1), np.float32),
                np.array([False]), np.array([False]))
    assert mem.beta == pytest.approx(0.7)
    mem.added = 500
    assert mem.beta == 1.0
    assert make(n_items=3, beta=0.4, total_steps=0).beta == pytest.approx(0.4)  # run length unknown: no annealing


def test_all_zero_priorities_fall_back_to_uniform_with_unit_weights():
    mem = make(capacity=8, n_items=4, eps=0.0)
    mem.update_priorities(np.arange(4), np.zeros(4))
    batch = mem.sample(4000)
    counts = np.bincount(batch.indices.numpy(), minlength=8)
    assert counts[4:].sum() == 0 and counts[:4].min() > 850
    assert batch.weights is None  # uniform: no importance weights


def test_wraparound_keeps_tree_and_data_aligned():
    mem = make(capacity=4, n_items=6)  # items 4, 5 overwrote slots 0, 1
    mem.update_priorities(np.array([0]), np.array([100.0]))  # slot 0 now holds item 4
    batch = mem.sample(64)
    top = batch.indices == 0
    assert top.float().mean() > 0.9 and torch.all(batch.rewards[top] == 4.0)


def test_box_actions_and_torch_inputs():
    mem = make(n_items=5, action_shape=(2,), action_dtype=np.float32)
    batch = mem.sample(8)
    assert batch.actions.shape == (8, 2) and batch.actions.dtype == torch.float32
    mem.update_priorities(batch.indices, torch.linspace(-1, 1, 8))  # tensors, negative errors: |td| is used


def test_state_dict_round_trip_resumes_sampling():
    a = make(capacity=8, n_items=11, alpha=0.7, eps=1e-3)
    a.update_priorities(np.arange(8), np.arange(8.0))
    a.sample(5)
    b = make(capacity=8, n_items=0, alpha=0.7, eps=1e-3)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.sample(32).indices, b.sample(32).indices)
    assert a.max_priority == b.max_priority and a.tree.total == b.tree.total and a.tree.min == b.tree.min
    state = a.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    torch.load(buf, weights_only=True)  # plain containers and tensors only
