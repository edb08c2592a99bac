"""An agent as a policy for scripts (`Run.agent`), and an agent that evaluates by sampling (`Run.evaluate`)."""

from __future__ import annotations

import numpy as np

from rl.envs.observations import DictObs, as_obs, leaves, obs_map


class AgentView:
    """An agent as a policy for scripts: `act(obs, deterministic=True)` on one observation (returns one action) or
    a batch (returns a batch); a recurrent agent's evaluation state is carried between calls of one batch size
    (`reset` starts new episodes). Every other attribute is the agent's own."""

    def __init__(self, agent):
        self._agent = agent
        self._state, self._batch = None, None

    def act(self, obs, deterministic: bool = True):
        obs, space = as_obs(obs), self._agent.obs_space
        if isinstance(obs, DictObs):  # a Dict or Tuple space's: one observation where its first entry is one
            key = next(iter(obs.keys()))
            obs = obs.map(np.asarray)
            single = obs[key].shape == tuple(leaves(space)[key].shape)
        else:
            obs = np.asarray(obs)
            single = obs.shape == tuple(getattr(space, "shape", None) or ())
        batch = obs_map(lambda a: a[None], obs) if single else obs
        if deterministic:
            if self._batch != len(batch):
                self._state, self._batch = self._agent.eval_state(len(batch)), len(batch)
            actions, self._state = self._agent.act_eval(batch, self._state)
        else:
            actions = self._agent.act(batch, deterministic=False)
        return actions[0] if single else actions

    def reset(self) -> None:
        self._state, self._batch = None, None

    def __getattr__(self, name: str):
        return getattr(self._agent, name)


class Sampling:
    """An agent that evaluates by sampling its policy (`Run.evaluate(deterministic=False)`)."""

    def __init__(self, agent):
        self._agent = agent

    def eval_state(self, num_envs: int):
        return None

    def act_eval(self, obs, state):
        return self._agent.act(obs, deterministic=False), state
