"""rl: registry-based reinforcement learning in PyTorch (a port of the for-ai/rl layout).

Importing the package fills the registries with every env family, model, memory, act_select, grad_comp and agent.
"""

from rl import act_select, agents, envs, grad_comp, memory, models  # noqa: F401  (fill the registries)
from rl.registry import ALL as REGISTRIES  # noqa: F401

__version__ = "0.1.0"
