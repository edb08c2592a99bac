"""Every registered hparams set builds its agent on its env, acts, and round-trips its state."""

import numpy as np
import pytest

from rl.envs import make_env
from rl.registry import hparams as sets
from rl.trainer import build_agent


@pytest.mark.parametrize("name", sets.names())
def test_set_builds_agent(name):
    hp = sets[name]()
    env = make_env(hp)
    try:
        agent = build_agent(hp, env, seed=0)
        obs, _ = env.reset(seed=0)
        actions = agent.act(obs)
        assert env.action_space.contains(np.asarray(actions, dtype=env.action_space.dtype).reshape(
            env.action_space.shape))
        state = agent.state_dict()
        agent.load_state_dict(state)
    finally:
        env.close()
