"""rl: registry-based reinforcement learning in PyTorch (a port of the for-ai/rl layout).

Importing the package fills the registries with every env family, model, memory, act_select, grad_comp and agent.
`rl.make` and `rl.load` use it from Python (docs/python.md); `rl.Run` is what they return (imported when first used:
a worker process that imports rl for its registries does not load the run's machinery).
"""

from rl import act_select, agents, envs, grad_comp, memory, models  # noqa: F401  (fill the registries)
from rl.registry import ALL as REGISTRIES  # noqa: F401

__version__ = "0.1.0"
__all__ = ["REGISTRIES", "Run", "load", "make"]


def __getattr__(name: str):
    if name in ("make", "load"):
        from rl import api

        return getattr(api, name)
    if name == "Run":
        from rl.run import Run

        return Run
    raise AttributeError(f"module 'rl' has no attribute {name!r}")
