"""Agent registry: an Agent is a model + an algorithm (act_select + grad_comp + update rule) + a memory."""

from rl.agents import (
    continuous,  # noqa: F401
    dqn,  # noqa: F401  (registers members)
    impala,  # noqa: F401
    on_policy,  # noqa: F401
)
from rl.agents.base import Agent  # noqa: F401
