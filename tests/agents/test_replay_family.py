"""DQN with the replay family plugged in by settings only: every memory trains, checkpoints continue exactly,
noisy nets explore while evaluation is deterministic; learning tests for noisy_dqn_cartpole and rainbow_cartpole."""

import csv
import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from hparams.dqn import dqn_cartpole, noisy_dqn_cartpole, rainbow_cartpole
from rl.errors import ConfigError
from rl.registry import agents

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SMALL = dict(learning_starts=40, train_freq=4, gradient_steps=2, batch_size=16, hidden_sizes=[16], buffer_size=500,
             train_steps=400, target_update_interval=20)


@pytest.fixture(autouse=True)
def one_thread():
    """As run.py does (torch_threads=1): small networks on a shared machine are much slower with more threads."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def make(hp_fn=dqn_cartpole, **settings):
    hp = hp_fn()
    for k, v in {**SMALL, **settings}.items():
        setattr(hp, k, v)
    return agents[hp.agent](hp, OBS, ACT, num_envs=2, seed=0)


def drive(agent, steps, seed):
    """Feed `steps` batched steps of synthetic CartPole-shaped transitions; return the actions taken."""
    rng = np.random.default_rng(seed)
    taken = []
    obs = rng.standard_normal((2, 4)).astype(np.float32)
    for _ in range(steps):
        actions = agent.act(obs)
        taken.append(actions.copy())
        next_obs = rng.standard_normal((2, 4)).astype(np.float32)
        done = rng.random(2) < 0.1
        agent.observe(obs, actions, rng.random(2).astype(np.float32), next_obs, done & (rng.random(2) < 0.5),
                      done & (rng.random(2) < 0.5))
        agent.update()
        obs = next_obs
    return np.concatenate(taken)


MEMORIES = [
    dict(memory="prioritized"),
    dict(memory="attentive"),
    dict(memory="attentive", attentive_features="model"),
    dict(memory="queue", buffer_size=8),
    dict(memory="mixed", replay_parameters='[{"type": "queue", "capacity": 4, "sample_ratio": 0.25}, '
                                           '{"type": "prioritized", "capacity": 300, "sample_ratio": 0.75}]'),
    dict(memory="replay", n_step=3),
    dict(memory="prioritized", n_step=3),
]


@pytest.mark.parametrize("settings", MEMORIES, ids=lambda s: "-".join(f"{v}" for v in s.values())[:40])
def test_dqn_trains_with_every_memory(settings):
    agent = make(**settings)
    before = [p.detach().clone() for p in agent.q.parameters()]
    drive(agent, 60, seed=1)
    assert agent.grad_steps > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.q.parameters()))


# n-step windows in flight end as truncated when a memory is loaded (a resumed run restarts its envs), so exact
# continuation is checked with n_step=1; tests/memory/test_n_step.py checks that flush.
@pytest.mark.parametrize("hp_fn, settings", [(rainbow_cartpole, dict(n_step=1)), (noisy_dqn_cartpole, {}),
                                             (dqn_cartpole, dict(memory="attentive")),
                                             (dqn_cartpole, MEMORIES[4])], ids=["rainbow", "noisy", "aer", "mixed"])
def test_checkpoint_continues_exactly(hp_fn, settings):
    a = make(hp_fn, **settings)
    drive(a, 40, seed=2)
    buf = io.BytesIO()
    torch.save({"agent": a.state_dict(), "torch_rng": torch.get_rng_state()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)  # what run.py's checkpoints allow
    b = make(hp_fn, **settings)
    b.load_state_dict(state["agent"])
    torch.set_rng_state(state["torch_rng"])
    actions_a = drive(a, 30, seed=3)
    torch.set_rng_state(state["torch_rng"])
    actions_b = drive(b, 30, seed=3)
    assert np.array_equal(actions_a, actions_b)
    assert all(torch.equal(x, y) for x, y in zip(a.q.parameters(), b.q.parameters()))


def test_noisy_dqn_explores_with_noise_and_evaluates_deterministically():
    agent = make(noisy_dqn_cartpole)
    assert agent.noisy and agent.hp.act_select == "greedy"
    obs = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    train_q = []
    for _ in range(5):
        agent.q.reset_noise()
        with torch.no_grad():
            train_q.append(agent.q(torch.from_numpy(obs)))
    assert not all(torch.equal(train_q[0], q) for q in train_q[1:])  # the training policy varies with the noise
    evals = [agent.act(obs, deterministic=True) for _ in range(5)]
    agent.q.reset_noise()
    evals.append(agent.act(obs, deterministic=True))
    assert all(np.array_equal(evals[0], e) for e in evals)
    assert agent.q.training  # evaluation restored training mode


def test_c51_loss_needs_the_c51_network():
    with pytest.raises(ConfigError, match="c51_network"):
        make(rainbow_cartpole, model="q_network")


# ---------------------------------------------------------------------------------------------------- learning
# (set, seed, steps, threshold on the best periodic greedy evaluation, every 2500 steps). Measured on this project's
# 2-core machine over seeds 0-5: noisy_dqn_cartpole at 25k reached 374 / 500 / 183 / 500 / 254 / 342 (noisy DQN with
# the zoo's DQN settings learns CartPole but is unstable: its final evaluations were 148 / 500 / 141 / 135 / 250 /
# 342) and rainbow_cartpole at 12k 463 / 500 / 474 / 349 / 500 / 499. Each threshold holds for 4 of the 5 seeds
# besides the one the test uses; a random policy scores about 22.
LEARNING = [("noisy_dqn_cartpole", 1, 25_000, 200), ("rainbow_cartpole", 0, 12_000, 400)]


@pytest.mark.learning
@pytest.mark.parametrize("name, seed, steps, threshold", LEARNING, ids=[n for n, *_ in LEARNING])
def test_learns_cartpole(tmp_path, train_cli, name, seed, steps, threshold):
    out = tmp_path / name
    res = train_cli("--hparams", name, "--output_dir", str(out), "--seed", str(seed), "--train_steps", str(steps),
                    "--eval_episodes", "10", "--hparam_override", "eval_interval=2500,checkpoint_interval=100000")
    assert res.returncode == 0, res.stderr[-2000:]
    with open(out / "progress.csv", newline="") as f:
        evals = [float(r["eval_return_mean"]) for r in csv.DictReader(f) if r.get("eval_return_mean")]
    assert len(evals) == steps // 2500 + (steps % 2500 > 0)  # the periodic evaluations and the final one
    assert max(evals) >= threshold, evals


@pytest.mark.parametrize("settings, batched", [
    (dict(), True),
    (dict(grad_comp="double_td"), False),
    (dict(memory="prioritized"), False),
    (dict(memory="queue"), False),
    (dict(noisy=True, act_select="greedy"), False),
])
def test_a_phase_draws_and_targets_once_only_when_nothing_the_phase_changes_affects_them(settings, batched):
    agent = make(**settings)
    drive(agent, 30, seed=0)  # fills the memory past learning_starts
    phase = list(agent._phase(batch_size=8, steps=3))
    assert len(phase) == 3 and all(len(b.obs) == 8 for b, _ in phase)
    assert all((t is not None) == batched for _, t in phase)
    if batched:  # the targets are the target network's for each minibatch, as computing them per step would give
        for b, t in phase:
            assert torch.allclose(t, agent.loss_targets(agent.target, b))


def test_actions_are_uniform_before_learning_starts_whatever_epsilon_says():
    agent = make(exploration_initial_eps=0.0, exploration_final_eps=0.0, learning_starts=1000)  # greedy after
    obs = np.zeros((2, 4), np.float32)
    warmup = np.concatenate([agent.act(obs) for _ in range(200)])
    assert 0.4 < warmup.mean() < 0.6  # both actions, about equally often
    agent.env_steps = 1000
    greedy = np.concatenate([agent.act(obs) for _ in range(20)])
    assert len(set(greedy.tolist())) == 1  # epsilon 0: the same greedy action for the same observation
