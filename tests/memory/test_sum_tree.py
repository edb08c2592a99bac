"""Sum tree: invariants against a brute-force reference under random batched updates, search, edge cases."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl.memory.sum_tree import SumTree, next_power_of_two


def brute_find(priorities: np.ndarray, value: float) -> int:
    """The leaf whose prefix-sum interval holds `value`, skipping zero-priority leaves."""
    cumulative = np.cumsum(priorities)
    return int(np.searchsorted(cumulative, value, side="right"))


@pytest.mark.parametrize("n, size", [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (1000, 1024), (1025, 2048)])
def test_size_is_next_power_of_two_and_storage_is_linear(n, size):
    tree = SumTree(n)
    assert tree.size == size == next_power_of_two(n)
    assert tree.sums.shape == (2 * size,) and tree.mins.shape == (2 * size,)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 37),
       updates=st.lists(st.tuples(st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
                                  st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 100)), min_size=1, max_size=8)),
                        min_size=1, max_size=12),
       scalar=st.booleans())
def test_matches_brute_force_under_random_batched_updates(capacity, updates, scalar):
    tree = SumTree(capacity)
    tree.SCALAR_BELOW = 8 if scalar else 0  # both the scalar and the vectorised update paths
    ref = np.zeros(capacity)
    was_set = np.zeros(capacity, bool)
    for raw_idx, raw_p in updates:
        k = min(len(raw_idx), len(raw_p))
        idx = np.array(raw_idx[:k]) % capacity
        p = np.array(raw_p[:k])
        tree.update(idx, p)
        for i, v in zip(idx, p):  # sequential semantics: a later duplicate wins
            ref[i] = v
            was_set[i] = True
        assert tree.total == pytest.approx(ref.sum(), rel=1e-12, abs=1e-12)
        assert tree.min == (ref[was_set].min() if was_set.any() else np.inf)
        assert np.array_equal(tree.get(np.arange(capacity)), ref)
        # every internal node is the sum of its children
        internal = np.arange(1, tree.size)
        assert np.allclose(tree.sums[internal], tree.sums[2 * internal] + tree.sums[2 * internal + 1])
    if ref.sum() > 0:
        edges = np.cumsum(ref)[:-1]  # values exactly on interval boundaries
        values = np.concatenate([np.linspace(0, ref.sum(), 50, endpoint=False), edges[edges < ref.sum()]])
        found = tree.find(values)
        assert np.all(ref[found] > 0)  # never a zero-priority leaf
        prefix = np.concatenate([[0.0], np.cumsum(ref)])
        tol = 1e-9 * ref.sum()
        assert np.all(prefix[found] - tol <= values) and np.all(values < prefix[found + 1] + tol)
        away = np.min(np.abs(values[:, None] - prefix[None, :]), axis=1) > tol  # off the boundaries: exact
        assert found[away].tolist() == [brute_find(ref, v) for v in values[away]]


def test_capacity_not_a_power_of_two_never_returns_padding_leaves():
    tree = SumTree(5)  # leaves 5..7 are padding
    tree.update(np.arange(5), [1.0, 0.0, 2.0, 0.0, 3.0])
    found = tree.find(np.linspace(0, tree.total, 1000, endpoint=False))
    assert set(found.tolist()) == {0, 2, 4}
    assert tree.find([tree.total * (1 + 1e-12)]).item() == 4  # rounding past the total stays on a real leaf
    with pytest.raises(IndexError):
        tree.update([5], [1.0])


def test_all_zero_priorities():
    tree = SumTree(6)
    assert tree.total == 0.0 and tree.min == np.inf
    tree.update(np.arange(6), np.zeros(6))
    assert tree.total == 0.0 and tree.min == 0.0
    assert tree.find([0.0, 0.5]).tolist() == [0, 0]  # defined and in range, even with nothing to prefer


def test_negative_or_nan_priorities_are_rejected():
    tree = SumTree(4)
    with pytest.raises(ValueError):
        tree.update([0], [-1.0])
    with pytest.raises(ValueError):
        tree.update([0], [np.nan])


def test_stratified_sampling_frequencies_follow_priorities():
    tree = SumTree(4)
    p = np.array([1.0, 2.0, 3.0, 4.0])
    tree.update(np.arange(4), p)
    rng = np.random.default_rng(0)
    counts = np.bincount(np.concatenate([tree.sample(100, rng) for _ in range(200)]), minlength=4)
    assert np.allclose(counts / counts.sum(), p / p.sum(), atol=0.01)


def test_state_dict_round_trip():
    tree = SumTree(10)
    tree.update([0, 3, 7], [0.5, 2.0, 0.0])
    other = SumTree(10)
    other.load_state_dict(tree.state_dict(used=8))
    assert np.array_equal(other.sums, tree.sums) and np.array_equal(other.mins, tree.mins)
