"""Agent registry: an Agent is a model + an algorithm (act_select + grad_comp + update rule) + a memory."""

from rl.agents import (
    continuous,  # noqa: F401
    dqn,  # noqa: F401  (registers members)
    impala,  # noqa: F401
    on_policy,  # noqa: F401
    pqn,  # noqa: F401
)
from rl.agents.base import Agent  # noqa: F401
from rl.registry import agents


def make_agent(hp, obs_space, action_space, num_envs: int, seed: int) -> Agent:
    """The agent named by `hp.agent`, sized from the spaces and the number of envs it acts in: the one place an agent
    is built from the registry (a run, an evaluation, a worker, a learner)."""
    return agents[hp.agent](hp, obs_space, action_space, num_envs, seed=seed)
