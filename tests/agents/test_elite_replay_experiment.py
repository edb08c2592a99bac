"""The settings of elite_buffer_vtrace's experiment: the power-2 learning-rate decay and lambda's annealing
as the published code computes them."""

import copy
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import hparams  # noqa: F401  (fills the hparams registry)
from hparams.scheme import SAMPLINGS
from rl.agents.impala import ImpalaAgent
from rl.collector import Collector
from rl.envs import make_env
from rl.grad_comp.vtrace import categorical_kl
from rl.memory.replay_parameters import parse_replay_parameters
from rl.memory.sequence_buffers import build_buffers
from rl.memory.sequences import Sequences
from rl.registry import hparams as sets

OBS, ACT = gym.spaces.Box(-1, 1, (8,), np.float32), gym.spaces.Discrete(6)
REPLAY = ('[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
          '{"type": "standard", "capacity": 100, "sample_ratio": 0.5}]')


def agent(**overrides) -> ImpalaAgent:
    hp = sets["impala_cartpole"]().update({"agent": "impala", "replay_parameters": REPLAY, **overrides})
    return ImpalaAgent(hp, OBS, ACT, num_envs=2)


def test_power_2_decay_from_8e4_to_1e5_at_start_half_and_end():
    a = agent(lr=8e-4, lr_end_value=1e-5, lr_decay=True, lr_decay_power=2.0, lr_scheduler_steps=70_000)
    values = {}
    for n in (0, 35_000, 70_000, 90_000):
        a.updates = n
        values[n] = a._lr()
    # elite_buffer_vtrace's PolynomialLRDecay: (lr - end) (1 - n / N)^2 + end
    assert values[0] == pytest.approx(8e-4)
    assert values[35_000] == pytest.approx((8e-4 - 1e-5) * 0.25 + 1e-5)  # 2.075e-4; power 1 would give 4.05e-4
    assert values[70_000] == pytest.approx(1e-5) and values[90_000] == pytest.approx(1e-5)
    a = agent(lr=8e-4, lr_end_value=1e-5, lr_decay=True, lr_scheduler_steps=70_000)  # power 1 stays available
    a.updates = 35_000
    assert a._lr() == pytest.approx((8e-4 + 1e-5) / 2)


# ------------------------------------------------------------------ the sets

GAMES = {"seaquest": ("elite_impala_seaquest", "uniform_impala_seaquest", "counter_impala_seaquest"),
         "breakout": ("elite_impala_breakout", "uniform_impala_breakout")}


@pytest.mark.parametrize("game", GAMES)
def test_a_games_sets_differ_only_in_the_sampling(game):
    hps = [sets[name]().to_dict() for name in GAMES[game]]
    elite = hps[0]
    for other in hps[1:]:
        assert {k for k in elite if elite[k] != other[k]} <= {"replay_parameters", "feature_head"}
    assert elite["torso"] == "elite_cnn" and elite["num_steps"] == 50 and elite["batch_rollouts"] == 10
    assert (elite["num_workers"], elite["worker_envs"], elite["lr_scheduler_steps"]) == (7, 5, 70_000)
    assert elite["replay_caching"] and elite["lr_decay_power"] == 2.0 and elite["eval_deterministic"]
    buffers = [parse_replay_parameters(h["replay_parameters"]) for h in hps]
    assert [b[1].type for b in buffers] == ["custom", "standard", "custom"][: len(hps)]
    assert all(b[1].capacity == 10_000 and b[0].type == "queue" for b in buffers)


def elite_buffer_vtrace_lambda(draws: int, lam: float = 6.0, steps: int = 70_000, alfa: float = 2.0) -> float:
    """elite_buffer_vtrace's EliteSampleStrategy.sample: lambda -= (lambda0 - 1) / (steps * alfa) at every draw,
    floored at 1."""
    delta = (lam - 1) / (steps * alfa)
    for _ in range(draws):
        lam = max(1.0, lam - delta)
    return lam


@pytest.mark.parametrize("name, fresh_per_batch", [("counter_impala_seaquest", 8), ("elite_impala_breakout", 5)])
def test_lambda_after_n_draws_is_elite_buffer_vtraces_and_stays_near_6_over_2m_agent_steps(name, fresh_per_batch):
    hp = sets[name]()
    specs = parse_replay_parameters(hp.replay_parameters)
    buf = build_buffers(specs, gym.spaces.Box(-1, 1, (2,), np.float32), 2, hp.batch_rollouts, feature_dim=0,
                        lr_scheduler_steps=hp.lr_scheduler_steps)[1]
    for r in range(3):  # T = 2 here: the buffer's T does not enter lambda
        buf.add(Sequences(np.full((2, 2), r, np.float32), np.full((2, 2), r, np.float32), np.zeros(2, np.int64),
                          *np.zeros((5, 2), np.float32), np.zeros((2, 0), np.float32)))
    draws = 2_000_000 // (fresh_per_batch * hp.num_steps)  # one batch per queue share of fresh sequences
    rng = np.random.default_rng(0)
    for n in range(1, draws + 1):
        if buf.spec.dist_function == "random":
            buf.sample(buf.share, rng)  # the whole path: pool, random ranking, counters
        else:
            buf.sampler.pool(buf.size)
        if n in (1, 1000, draws):
            assert buf.sampler.lam == pytest.approx(elite_buffer_vtrace_lambda(n), abs=1e-9)
    assert buf.sampler.lam > 5.5  # the point: lambda does not anneal out inside the measured window
    assert buf.sampler.lam == pytest.approx(6 - 5 * draws / 140_000)


# ------------------------------------------------------------------ the ablation: random distances

def counter_buffer(capacity: int = 40, share: int = 4):
    spec = parse_replay_parameters(json.dumps([{**SAMPLINGS["counter"], "capacity": capacity, "sample_ratio": 1.0}]))
    buf = build_buffers(spec, gym.spaces.Box(-1, 1, (2,), np.float32), 2, share, feature_dim=3,
                        lr_scheduler_steps=1000)[0]
    for r in range(capacity):
        buf.add(Sequences(np.full((2, 2), r, np.float32), np.full((2, 2), r, np.float32), np.zeros(2, np.int64),
                          *np.zeros((5, 2), np.float32), np.full((2, 3), r, np.float32)))
    return buf


def test_random_distance_ablation_ranks_by_the_sampling_counter_only():
    def no_features(obs):
        raise AssertionError("the ablation reads no features")

    picks = set()
    for seed in range(20):
        buf = counter_buffer()
        buf.counters[:] = 1 + np.arange(40) % 3  # counters 1, 2, 3, 1, 2, 3, ...
        pool = np.random.default_rng(seed).choice(40, int((6 - 5 / 2000) * 4))  # the draw to come: lambda annealed
        before = buf.counters.copy()
        idx = buf.sample(4, np.random.default_rng(seed), features_for=no_features)
        assert set(idx) <= set(pool)
        # strategy3: the least-replayed first; with random distances nothing else orders them
        lowest = np.sort(before[np.unique(pool)])[:4]
        assert sorted(before[idx].tolist()) == lowest.tolist()
        picks.add(tuple(sorted(idx)))
        assert buf.diagnostics == {}  # random distances are not logged as distances
    assert len(picks) > 10  # ties broken at random, not by a fixed order (stored features rise with the slot)


# ------------------------------------------------------------------ the volatility measures

class Keeping(ImpalaAgent):
    """Keeps each batch and the weights it was learned with."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kept = []

    def learn(self, batch):
        self.kept.append((batch, copy.deepcopy(self.model.state_dict())))
        return super().learn(batch)


def trained(steps: int = 60, **overrides) -> tuple[Keeping, dict]:
    hp = sets["impala_cartpole"]().update({"agent": "impala", "num_workers": 0, "num_envs": 2, "num_steps": 5,
                                           "batch_rollouts": 4, "replay_parameters": REPLAY.replace("100", "20"),
                                           "clear_policy_coef": 0.05, "probe_size": 16, "lr": 1e-2, **overrides})
    env = make_env(hp)
    agent = Keeping(hp, env.single_observation_space, env.single_action_space, hp.num_envs, seed=0)
    collector, info = Collector(env, agent, seed=0), {}
    for _ in range(steps):
        collector.step()
        info = agent.update() or info
    env.close()
    return agent, info


def test_probe_kl_is_zero_for_an_unchanged_policy_and_positive_after_one_step():
    agent, info = trained()
    assert agent.updates > 1 and agent.probe.shape == (16, 4)
    batch, weights = agent.kept[0]
    flat = batch.obs[:-1].flatten(0, 1)
    assert torch.equal(agent.probe, flat[np.linspace(0, len(flat) - 1, 16).round().astype(int)])  # the first batch's
    before = agent._probe_before(batch.obs[:-1])
    assert agent._volatility(before, None)["volatility/policy_kl"] == 0.0  # no step in between: the same policy
    kl = info["volatility/policy_kl"]
    batch, weights = agent.kept[-1]
    model = copy.deepcopy(agent.model)
    model.load_state_dict(weights)
    with torch.no_grad():
        expected = categorical_kl(agent.model(agent.probe)[0], model(agent.probe)[0]).mean()
    assert kl > 0 and kl == pytest.approx(float(expected), rel=1e-5)  # KL(after || before) of the last update


def test_replay_kl_is_the_target_behaviour_kl_over_the_replayed_columns_only():
    agent, info = trained()
    batch, weights = agent.kept[-1]
    model = copy.deepcopy(agent.model)
    model.load_state_dict(weights)  # the target policy the batch was scored with
    with torch.no_grad():
        logits = model(batch.obs[:-1].flatten(0, 1))[0].view(*batch.logits.shape)
    kl = categorical_kl(logits, batch.logits)
    assert agent.replayed.tolist() == [False, False, True, True]  # queue 0.5 then standard 0.5 of 4
    assert info["volatility/replay_kl"] == pytest.approx(float(kl[:, 2:].mean()), rel=1e-5)
    assert info["volatility/fresh_kl"] == pytest.approx(float(kl[:, :2].mean()), rel=1e-5)
    assert info["volatility/replay_kl"] != pytest.approx(info["volatility/fresh_kl"])


def test_elite_draws_log_the_selected_and_the_pool_mean_distance():
    elite = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                        {**SAMPLINGS["elite"], "capacity": 20, "sample_ratio": 0.5, "elite_sampling_strategy":
                         "strategy1"}])
    agent, info = trained(replay_parameters=elite, feature_head=True, feature_scaling_layer=False)
    assert info["replay/lambda"] > 1
    # strategy1 takes the most on-policy sequences of the pool: their mean distance is below the pool's
    assert 0 < info["replay/selected_distance"] < info["replay/pool_distance"]
