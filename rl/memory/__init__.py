"""Memory registry: storage plus a sampler. Off-policy memories return `Transitions` batches."""

from rl.memory import (  # noqa: F401  (imported to register their members)
    attentive,
    mixed,
    prioritized,
    queue,
    replay,  # noqa: F401  (registers members)
    rollout,  # noqa: F401
)
from rl.memory.replay import ReplayMemory, Transitions  # noqa: F401
