"""Elite sampling (elite_buffer_vtrace's published code): the distances against a per-sequence computation, each
strategy on hand-made pools, the small-pool guard, lambda's annealing to uniform, elite insertion's choice and the state
round trip."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Categorical, kl_divergence

from rl.errors import ConfigError
from rl.memory.elite_sampling import (
    DISTANCES,
    EliteSampler,
    distance_fn,
    eviction_index,
    insertion_candidates,
)


def features(seed=0, b=5, t=4, f=6):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, f, generator=gen), torch.randn(b, t, f, generator=gen)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_ln_norm_is_torch_dist_per_sequence(p):
    behaviour, target = features()
    direct = torch.stack([torch.dist(target[i], behaviour[i], p=p) for i in range(len(target))])
    torch.testing.assert_close(distance_fn("ln_norm", p)(behaviour, target), direct)


def test_cos_dist_is_the_cosine_similarity_of_the_flattened_sequences():
    behaviour, target = features()
    direct = torch.stack([F.cosine_similarity(target[i].flatten(), behaviour[i].flatten(), dim=0, eps=1e-6)
                          for i in range(len(target))])
    torch.testing.assert_close(DISTANCES["cos_dist"](behaviour, target), direct)


def test_kl_div_sums_kl_target_to_behaviour_over_steps():
    behaviour, target = features()
    direct = torch.stack([kl_divergence(Categorical(logits=target[i]), Categorical(logits=behaviour[i])).sum()
                          for i in range(len(target))])
    torch.testing.assert_close(DISTANCES["kl_div"](behaviour, target), direct)


def test_unknown_distance_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="ln_norm, cos_dist, kl_div"):
        distance_fn("l2")


# A pool of 6 draws over 5 unique slots (7 twice). Ranked by ascending distance: 3 9 7 2 5.
POOL = np.array([7, 3, 7, 5, 9, 2])
DIST = {7: 0.5, 3: 0.1, 5: 0.9, 9: 0.3, 2: 0.7}
COUNT = {7: 2, 3: 3, 5: 1, 9: 2, 2: 1}


def select(strategy, k, pool=POOL, dist=DIST, count=COUNT):
    sampler = EliteSampler(k, 6, 2.0, 100, strategy, np.random.default_rng(0))
    return sampler.select(pool, [dist[i] for i in pool], [count[i] for i in pool]).tolist()


def test_strategy1_takes_the_lowest_distances_with_duplicates():
    assert select("strategy1", 2) == [3, 9]
    assert select("strategy1", 4) == [3, 9, 7, 7]  # 7 was drawn twice


def test_strategy2_takes_every_gth_of_the_ranking():
    assert select("strategy2", 2) == [3, 7]  # g = int(5 / 2) = 2: ranks 0 and 2
    assert select("strategy2", 1) == [3]  # g = 5
    wide = np.arange(10, 17)  # 7 unique, ranked 10..16
    dist, count = {i: float(i) for i in wide}, {i: 1 for i in wide}
    assert select("strategy2", 2, pool=wide, dist=dist, count=count) == [10, 13]  # g = 3
    assert select("strategy2", 3, pool=wide, dist=dist, count=count) == [10, 12, 14]  # g = 2


def test_strategy3_takes_the_least_replayed_first_ties_to_lower_distance():
    assert select("strategy3", 3) == [2, 5, 9]  # counter 1: 2 (0.7), 5 (0.9); then counter 2: 9 (0.3)
    assert select("strategy3", 5) == [2, 5, 9, 7, 3]  # each unique index once


def test_strategy4_takes_the_least_replayed_of_each_group():
    assert select("strategy4", 2) == [9, 2]  # g = 2: {3: 3, 9: 2} -> 9, {7: 2, 2: 1} -> 2; 5 is left over
    tie = {7: 1, 3: 1, 5: 1, 9: 1, 2: 1}
    assert select("strategy4", 2, count=tie) == [3, 7]  # equal counters: the lower distance of each group


def test_equal_distances_rank_in_order_of_first_draw():
    pool = np.array([4, 1, 4])
    assert select("strategy1", 1, pool=pool, dist={4: 0.2, 1: 0.2}, count={4: 1, 1: 1}) == [4]


@pytest.mark.parametrize("strategy", ["strategy1", "strategy2", "strategy3", "strategy4"])
def test_a_pool_of_fewer_unique_indices_than_k_still_gives_k(strategy):
    pool = np.array([1, 2, 1, 2, 1, 1])  # 2 unique, k = 4: the published strategy3 never returns
    picks = select(strategy, 4, pool=pool, dist={1: 0.5, 2: 0.1}, count={1: 1, 2: 2})
    assert len(picks) == 4 and set(picks) <= {1, 2}
    if strategy == "strategy3":
        assert picks == [1, 2, 1, 2]  # its picks, repeated in order


def test_lambda_anneals_to_one_after_alfa_times_steps_calls_then_draws_uniformly():
    sampler = EliteSampler(4, 6, 2.0, 10, rng=np.random.default_rng(0))
    first = sampler.pool(1000)
    assert len(first.indices) == int(5.75 * 4) and not first.uniform  # lambda is annealed before the first draw
    for _ in range(18):
        assert not sampler.pool(1000).uniform
    last = sampler.pool(1000)  # call 20 = alfa * lr_scheduler_steps
    assert sampler.lam == 1.0 and last.uniform and len(last.indices) == 4
    assert sampler.pool(1000).uniform and sampler.lam == 1.0


def test_lambda_one_is_a_plain_uniform_draw_of_k():
    draw = EliteSampler(5, 1, 2.0, 10, rng=np.random.default_rng(3)).pool(7)
    assert draw.uniform and len(draw.indices) == 5
    assert draw.indices.tolist() == np.random.default_rng(3).choice(7, 5).tolist()


def test_state_round_trip_continues_identically():
    a = EliteSampler(3, 6, 2.0, 10, rng=np.random.default_rng(1))
    for _ in range(5):
        a.pool(50)
    b = EliteSampler(3, 6, 2.0, 10, rng=np.random.default_rng(99))
    b.load_state_dict(a.state_dict())
    assert b.lam == a.lam
    for _ in range(3):
        assert b.pool(50).indices.tolist() == a.pool(50).indices.tolist()


def test_eviction_overwrites_the_largest_distance():
    assert eviction_index(np.array([8, 2, 5, 1]), torch.tensor([0.3, 1.7, 0.2, 1.1])) == 2


def test_insertion_candidates_are_distinct_and_capped_at_what_is_held():
    rng = np.random.default_rng(0)
    candidates = insertion_candidates(rng, 100, 20)
    assert len(candidates) == 20 == len(set(candidates.tolist()))
    assert sorted(insertion_candidates(rng, 5, 20).tolist()) == [0, 1, 2, 3, 4]


def test_bad_settings_raise_config_errors():
    with pytest.raises(ConfigError, match="strategy1, strategy2"):
        EliteSampler(2, 6, 2.0, 10, "strategy5")
    with pytest.raises(ConfigError, match="lambda_batch_multiplier"):
        EliteSampler(2, 0.5, 2.0, 10)
