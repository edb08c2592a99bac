"""Memory registry: storage plus a sampler. Off-policy memories return `Transitions` batches."""

from rl.memory import replay  # noqa: F401  (registers members)
from rl.memory.replay import ReplayMemory, Transitions  # noqa: F401
from rl.memory import rollout  # noqa: F401
from rl.memory import attentive, mixed, prioritized, queue  # noqa: F401  (replay family, issue 5)
