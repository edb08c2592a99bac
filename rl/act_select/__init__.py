"""act_select registry: turn a model's output into actions (explore while training, act greedily to evaluate)."""

from rl.act_select import epsilon_greedy  # noqa: F401  (registers members)
from rl.act_select import continuous  # noqa: F401
from rl.act_select import policy  # noqa: F401
