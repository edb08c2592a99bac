"""A checkpoint round-trip (through the real file format, weights_only) continues identically: the restored agent
takes the same actions and computes the same losses as the one that never stopped."""

import numpy as np
import pytest
import torch

from rl.checkpoint import load_newest, restore, save, snapshot
from rl.collector import Collector
from rl.envs import make_env
from rl.registry import hparams as sets
from rl.trainer import build_agent

SETTINGS = "learning_starts=200,train_freq=50,gradient_steps=5,target_update_interval=20,exploration_fraction=0.5"


class Lockstep:
    """Agents that a Collector drives as one: the first one's actions step the env, every other one must choose the
    same actions from the same observations, and all of them observe every transition."""

    def __init__(self, *agents):
        self.agents = list(agents)

    def act(self, obs):
        actions = self.agents[0].act(obs)
        for other in self.agents[1:]:
            assert np.array_equal(actions, other.act(obs))
        return actions

    def observe(self, *transition):
        for agent in self.agents:
            agent.observe(*transition)

    def reset_episodes(self, dones):
        for agent in self.agents:
            agent.reset_episodes(dones)


@pytest.mark.parametrize("name", ["dqn_cartpole", "ddqn_cartpole", "dueling_dqn_cartpole"])
def test_restored_agent_continues_identically(tmp_path, name):
    hp = sets[name]().parse(SETTINGS + ",train_steps=2000")
    env = make_env(hp)
    torch.manual_seed(0)
    original = build_agent(hp, env, seed=0)
    lockstep = Lockstep(original)
    collector = Collector(env, lockstep, seed=0)
    for _ in range(420):
        collector.step()
        original.update()
    save(tmp_path, original.env_steps, snapshot(original))

    torch.manual_seed(99)  # different initial weights and RNG: everything must come from the checkpoint
    restored = build_agent(hp, env, seed=99)
    restore(restored, load_newest(tmp_path)[0])
    assert restored.env_steps == original.env_steps == 420

    lockstep.agents.append(restored)
    losses = []
    for _ in range(300):  # both see the same observations; the env follows the original's actions
        collector.step()
        a, b = original.update(), restored.update()
        assert a.keys() == b.keys()
        if a:
            assert float(a["losses/td_loss"]) == float(b["losses/td_loss"])
            losses.append(float(a["losses/td_loss"]))
    assert len(losses) == 6  # training phases happened after the restore
    for p, q in zip(original.q.parameters(), restored.q.parameters()):
        assert torch.equal(p, q)
