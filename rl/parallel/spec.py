"""What a worker is built from, and what it ships: small picklable records that cross any transport.

A worker (rl/parallel/roles.py) is a plain class built from a `WorkerSpec` alone: its settings, its rank and seed,
its role. It never sees the learner, the transport or another worker; whether it runs as a forked process or as a Ray
actor is the transport's business (rl/parallel/transports/).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLES = ("rollouts", "rows", "gradients")


@dataclass(frozen=True)
class WorkerSpec:
    """role: "rollouts" (on-policy collection, for a RolloutSource), "rows" (replay collection for a RowSource: Ape-X)
    or "gradients" (an async gradient worker of a GradientSource: A3C; rl/agents/scheme.py). `hp` are the worker's own
    settings, as the agent's class works them out (`worker_settings`: its envs, the CPU, one thread, ...);
    `transport` is the kind that a gradient worker uses for collection workers of its own (async RAPID)."""

    role: str
    hp: Any
    rank: int
    seed: int
    transport: str = "shm"

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown worker role {self.role!r}: valid: {', '.join(ROLES)}")


@dataclass
class Shipment:
    """One delivery from a worker: `data` (a rollout, rows, or a flat gradient) with the policy `version` that made
    it (the learner's update count when the weights were published), the env `steps` it covers, the episodes that
    ended meanwhile and the normalisation moments gathered meanwhile. `slot` names a transport's buffer (shared
    memory) when the data is not carried in the shipment itself."""

    kind: str
    worker: int
    version: int
    steps: int
    episodes: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)
    data: Any = None
    slot: int = -1
