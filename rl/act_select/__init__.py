"""act_select registry: turn a model's output into actions (explore while training, act greedily to evaluate)."""

from rl.act_select import (
    continuous,  # noqa: F401
    epsilon_greedy,  # noqa: F401  (registers members)
    policy,  # noqa: F401
)
