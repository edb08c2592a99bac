"""A checkpoint round-trip (through the real file format, weights_only) continues identically: the restored agent
takes the same actions and computes the same losses as the one that never stopped."""

import numpy as np
import pytest
import torch

from rl.checkpoint import load_newest, save
from rl.envs import make_env
from rl.registry import hparams as sets
from rl.run import build_agent, restore, snapshot, true_next_obs

SETTINGS = "learning_starts=200,train_freq=50,gradient_steps=5,target_update_interval=20,exploration_fraction=0.5"


def step(env, agent, obs):
    actions = agent.act(obs)
    next_obs, rewards, terminated, truncated, info = env.step(actions)
    dones = terminated | truncated
    agent.observe(obs, actions, rewards, true_next_obs(next_obs, dones, info), terminated, truncated)
    return next_obs, actions, agent.update()


@pytest.mark.parametrize("name", ["dqn_cartpole", "ddqn_cartpole", "dueling_dqn_cartpole"])
def test_restored_agent_continues_identically(tmp_path, name):
    hp = sets[name]().parse(SETTINGS + ",train_steps=2000")
    env = make_env(hp)
    torch.manual_seed(0)
    original = build_agent(hp, env, seed=0)
    obs, _ = env.reset(seed=0)
    for _ in range(420):
        obs, _, _ = step(env, original, obs)
    save(tmp_path, original.env_steps, snapshot(original))

    torch.manual_seed(99)  # different initial weights and RNG: everything must come from the checkpoint
    restored = build_agent(hp, env, seed=99)
    restore(restored, load_newest(tmp_path)[0])
    assert restored.env_steps == original.env_steps == 420

    losses = []
    for _ in range(300):  # both see the same observations; the env follows the original's actions
        actions = original.act(obs)
        assert np.array_equal(actions, restored.act(obs))
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        real_next = true_next_obs(next_obs, terminated | truncated, info)
        for agent in (original, restored):
            agent.observe(obs, actions, rewards, real_next, terminated, truncated)
        a, b = original.update(), restored.update()
        assert a.keys() == b.keys()
        if a:
            assert float(a["losses/td_loss"]) == float(b["losses/td_loss"])
            losses.append(float(a["losses/td_loss"]))
        obs = next_obs
    assert len(losses) == 6  # training phases happened after the restore
    for p, q in zip(original.q.parameters(), restored.q.parameters()):
        assert torch.equal(p, q)
