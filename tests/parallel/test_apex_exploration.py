"""Ape-X's exploration (Horgan et al. 2018): collection worker i of N acts with its own fixed epsilon
0.4 ** (1 + 7 i / (N - 1)) where `worker_epsilon` asks for it (the Ape-X sets); otherwise every worker follows the
learner's linear schedule (DQN's). The workers are built from the specs the learner hands a transport, in this
process; evaluation stays greedy."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import hparams  # noqa: F401 - registers the sets
from rl.act_select.epsilon_greedy import apex_epsilon
from rl.errors import ConfigError
from rl.parallel.learner import learner_hparams, worker_specs
from rl.parallel.roles import make_worker
from rl.registry import agents
from rl.registry import hparams as sets

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
STEP = 40_000  # past learning_starts (no more uniform warm-up) and past the learner's schedule's decay


def settings(name: str, overrides: str = ""):
    hp = sets[name]()
    hp.parse(overrides)
    return hp


def learner_state(hp, env_steps: int) -> dict:
    """The acting state a learner at `env_steps` publishes (its weights, its step count)."""
    lhp = learner_hparams(hp)
    agent = agents[hp.agent](lhp, OBS, ACTIONS, lhp.num_envs, seed=0)
    agent.env_steps = env_steps
    return agent.acting_state()


def built(specs, state: dict) -> list:
    workers = [make_worker(s) for s in specs]
    for w in workers:
        w.load(state, 0)
    return workers


def explored(worker, n: int = 20_000) -> float:
    """The fraction of `n` acts that are not the greedy action (epsilon / 2 with 2 actions)."""
    obs = np.random.default_rng(1).normal(0, 0.5, (n, 4)).astype(np.float32)
    return float(np.mean(worker.agent.act(obs) != worker.agent.act(obs, deterministic=True)))


def test_apex_epsilons_follow_the_paper():
    assert apex_epsilon(0.4, 7, 0, 1) == 0.4  # one actor: epsilon itself
    assert [apex_epsilon(0.4, 7, i, 3) for i in range(3)] == pytest.approx([0.4, 0.4 ** 4.5, 0.4 ** 8])
    assert apex_epsilon(0.4, 0, 5, 8) == 0.4  # alpha 0: every actor the same


def test_each_apex_worker_acts_with_its_own_epsilon():
    """Bug caught: every worker given worker 0's epsilon (the spec's settings made once for all ranks), or the
    learner's schedule."""
    hp = settings("apex_dqn_cartpole", "num_workers=3")
    expected = [0.4, 0.4 ** 4.5, 0.4 ** 8]
    workers = built(worker_specs(hp, seed=0, transport="shm"), learner_state(hp, STEP))
    try:
        for w, eps in zip(workers, expected, strict=True):
            assert w.agent.explore.epsilon(0) == pytest.approx(eps)  # fixed: the same at any step
            assert w.agent.explore.epsilon(STEP) == pytest.approx(eps)
            n = 20_000
            assert abs(explored(w, n) - eps / 2) < 4 * np.sqrt(eps / 2 * (1 - eps / 2) / n) + 1e-4
    finally:
        for w in workers:
            w.close()


def test_workers_with_the_same_seed_explore_by_their_rank():
    """Bug caught: the epsilon taken from the seed's stream, not the rank (workers given one seed would explore
    alike). With DQN's schedule the same two workers act alike."""
    for name, alike in (("apex_dqn_cartpole", False), ("dqn_cartpole", True)):
        hp = settings(name, "num_workers=2")
        specs = [replace(s, seed=7) for s in worker_specs(hp, seed=0, transport="shm")]
        workers = built(specs, learner_state(hp, STEP))
        try:
            obs = np.random.default_rng(2).normal(0, 0.5, (2000, 4)).astype(np.float32)
            acts = [w.agent.act(obs) for w in workers]
            epsilons = [w.agent.explore.epsilon(STEP) for w in workers]
            assert np.array_equal(acts[0], acts[1]) == alike
            assert (epsilons[0] == epsilons[1]) == alike
        finally:
            for w in workers:
                w.close()


def test_dqn_workers_keep_the_learners_schedule():
    hp = settings("dqn_cartpole", "num_workers=2")
    assert hp.worker_epsilon == 0
    lhp = learner_hparams(hp)
    learner = agents[hp.agent](lhp, OBS, ACTIONS, lhp.num_envs, seed=0)
    for spec in worker_specs(hp, seed=0, transport="shm"):
        worker = agents[hp.agent](spec.hp, OBS, ACTIONS, 1, seed=spec.seed)
        for step in (0, 2_000, 4_000, 10_000):
            assert worker.explore.epsilon(step) == learner.explore.epsilon(step)
    assert learner.explore.epsilon(0) == 1.0 and learner.explore.epsilon(10_000) == pytest.approx(0.04)


def test_the_apex_learner_evaluates_greedily_on_its_own_schedule():
    """The per-worker epsilons are the workers' alone: the learner's settings, its schedule and its evaluation are
    DQN's."""
    hp = settings("apex_dqn_cartpole")
    lhp = learner_hparams(hp)
    assert (lhp.exploration_initial_eps, lhp.exploration_final_eps) == (1.0, hp.exploration_final_eps)
    agent = agents[hp.agent](lhp, OBS, ACTIONS, lhp.num_envs, seed=0)
    agent.env_steps = STEP
    obs = np.random.default_rng(3).normal(0, 0.5, (500, 4)).astype(np.float32)
    greedy = agent.q(agent.to_tensor(obs)).argmax(-1).numpy()
    assert np.array_equal(agent.act(obs, deterministic=True), greedy)


def test_worker_epsilon_needs_epsilon_greedy():
    hp = settings("apex_dqn_cartpole", "act_select=greedy,noisy=true")
    with pytest.raises(ConfigError) as err:
        worker_specs(hp, seed=0, transport="shm")
    assert "\n" not in str(err.value) and "act_select=epsilon_greedy" in str(err.value)
    hp.worker_epsilon = 0  # the noisy nets explore: no epsilon at all
    assert len(worker_specs(hp, seed=0, transport="shm")) == 2
