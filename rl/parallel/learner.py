"""The learner of the Scheme: receives shipments through a transport, hands them to the agent through the mixin its
workers' role needs (rl/agents/scheme.py; checked with `isinstance`), publishes the new weights. Any agent, unchanged:

- RolloutMode (a RolloutSource): a worker's rollout goes to `agent.take_rollout` with its policy lag and env steps;
  once the agent has a batch, `agent.update()` learns (what it does with columns acted by older weights, e.g.
  V-trace's rescoring, is its own business).
- RowsMode (a RowSource): a worker's rows (worker w's envs are its rows w*N..w*N+N-1) go to `agent.take_rows`,
  which observes them step by step with an update after each, so the replay ratio is the single-process one
  (Ape-X). A restarted worker, or a dropped shipment, closes its rows' episodes (`agent.close_rows`).
- GradientMode (a GradientSource: A3C): a worker's gradient is applied as it arrives (`agent.apply_gradients`).

The modes only dispatch: what a shipment does to the agent's memory and counters is the agent's own business. So are
the settings: the role of the workers is the mixin the agent's class declares, and the envs of the learner's agent,
the checks and each worker's own settings are the class's (`SchemeSettings`: learner_envs, check_workers,
worker_settings); the learner names no agent family.

Policy versions count learner updates (`agent.updates`): the version of published weights is the number of updates
that made them, a shipment carries the version that acted (or computed) it, and its lag, logged as
`scheme/policy_lag` and bounded by `max_policy_lag`, is the number of updates the learner made since.
`col_communication=sync` has the learner take one shipment of every worker, learn, then publish, with the workers
waiting for those weights (lag 0); `async` lets them act on with the weights they have.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from rl.agents.scheme import GradientSource, RolloutSource, RowSource, worker_envs
from rl.errors import ConfigError
from rl.parallel.buffers import make_buffer
from rl.parallel.spec import Shipment, WorkerSpec

COMMUNICATIONS = ("sync", "async")
SOURCES = {"rollouts": RolloutSource, "rows": RowSource, "gradients": GradientSource}  # the mixin each role needs


# ---------------------------------------------------------------------------------------------------- settings
def grad_mode(hp) -> bool:
    return hp.num_grad_workers > 1 and hp.grad_communication == "async"


def agent_class(hp):
    """The run's registered agent class: it works out its learner's and workers' settings (`SchemeSettings`)."""
    from rl.registry import agents

    return agents[hp.agent]


def declaring(*sources) -> str:
    """The registered agents that declare every one of `sources`: what a refusal names as valid."""
    from rl.registry import agents

    return ", ".join(n for n in sorted(agents.names()) if all(issubclass(agents[n], s) for s in sources))


def collection_role(hp) -> str:
    """What collection workers ship to the agent: "rollouts" to a RolloutSource, "rows" to a RowSource."""
    cls = agent_class(hp)
    for role in ("rollouts", "rows"):
        if issubclass(cls, SOURCES[role]):
            return role
    raise ConfigError(f"agent {hp.agent!r} learns from no collection worker (neither a RolloutSource nor a RowSource, "
                      f"rl/agents/scheme.py): set num_workers=0, or an agent that does: "
                      f"{declaring(RolloutSource)}, {declaring(RowSource)}")


def learner_envs(hp) -> int:
    """The env columns (a RolloutSource's trajectories per update) or env rows (a RowSource's) of the learner's
    agent."""
    if hp.num_workers == 0 or grad_mode(hp):
        return worker_envs(hp)  # the learner of async gradient workers never fills a rollout of its own
    return agent_class(hp).learner_envs(hp)


def check_settings(hp) -> None:
    for name in ("col_communication", "grad_communication"):
        if getattr(hp, name) not in COMMUNICATIONS:
            raise ConfigError(f"unknown {name} {getattr(hp, name)!r}: valid: sync, async")
    cls = agent_class(hp)
    if hp.num_workers:
        collection_role(hp)
        cls.check_workers(hp, learner_envs(hp))
    if grad_mode(hp) and not (issubclass(cls, GradientSource) and issubclass(cls, RolloutSource)):
        raise ConfigError(f"grad_communication=async (A3C) needs an agent whose rollouts' gradient steps workers can "
                          f"compute (a GradientSource and RolloutSource, rl/agents/scheme.py): "
                          f"{declaring(GradientSource, RolloutSource)}")


def learner_hparams(hp, inner: bool = False):
    """The learner agent's settings: as many env columns/rows as the workers feed it. `inner`: an async gradient
    worker's own (async RAPID), which learns from its collection workers like a learner but ships its gradients."""
    check_settings(hp)
    learner = hp.copy()
    if inner:
        learner.num_grad_workers, learner.device, learner.torch_threads = 1, "cpu", 1
    learner.num_envs = learner_envs(learner)
    return learner


def worker_hparams(hp, rank: int, count: int):
    """Worker `rank` of `count`'s settings, as the agent's class works them out (its own envs, the CPU, one thread;
    and whatever its family adds)."""
    return agent_class(hp).worker_settings(hp, rank, count)


def worker_specs(hp, seed: int, transport: str) -> list[WorkerSpec]:
    role = "gradients" if grad_mode(hp) else collection_role(hp)
    count = hp.num_grad_workers if role == "gradients" else hp.num_workers
    return [WorkerSpec(role, worker_hparams(hp, rank, count), rank, seed + 1000 * (rank + 1), transport)
            for rank in range(count)]


# ---------------------------------------------------------------------------------------------------- the modes
class RolloutMode:
    def __init__(self, agent, learns: bool = True):
        self.agent, self.learns = agent, learns

    def take(self, shipment: Shipment, lag: int) -> tuple[bool, dict]:
        """(learned, diagnostics): the rollout's columns go in; a full batch is learned from."""
        ready = self.agent.take_rollout(shipment.data, lag, shipment.steps)
        if not ready or not self.learns:
            return False, {}
        return True, self.agent.update()

    def lost(self, worker: int) -> None:
        """A worker's unfinished rollout is simply not there: nothing to close."""


class RowsMode:
    def __init__(self, agent, rows_per_worker: int):
        self.agent, self.n = agent, rows_per_worker

    def take(self, shipment: Shipment, lag: int) -> tuple[bool, dict]:
        diagnostics = self.agent.take_rows(shipment.data.transitions(shipment.worker * self.n))
        return True, diagnostics  # the step count moved (exploration schedules): publish even before learning

    def lost(self, worker: int) -> None:
        """The worker's next rows continue no episode of its last ones: close their n-step windows as truncated."""
        self.agent.close_rows(np.arange(worker * self.n, (worker + 1) * self.n))


class GradientMode:
    def __init__(self, agent):
        self.agent = agent

    def take(self, shipment: Shipment, lag: int) -> tuple[bool, dict]:
        return True, self.agent.apply_gradients(shipment.data, shipment.steps)

    def lost(self, worker: int) -> None:
        pass


# ---------------------------------------------------------------------------------------------------- the learner
def make_transport(kind, hp):
    """"shm" (forked processes, the single-machine default), "ray" (actors on a Ray cluster), or a transport object
    (anything with the same methods: tests feed the learner scripted shipments this way)."""
    if not isinstance(kind, str):
        return kind
    if kind == "ray":
        from rl.parallel.transports.ray import RayTransport

        return RayTransport(hp)
    from rl.parallel.transports.shm import ShmTransport

    return ShmTransport(hp)


class Learner:
    """The trainer for num_workers > 0 or async gradient workers: `step()` takes one shipment (or waits a little),
    `close()` ends every worker. `make_worker(spec)` builds a worker where the transport runs it (rl/parallel/roles.py's
    `make_worker`, passed in: the workers are above the learner, since an async RAPID gradient worker embeds one).
    `learns=False`: fill the agent's rollout only (an async RAPID gradient worker's collection workers: it computes
    the gradients itself)."""

    def __init__(self, hp, spaces, agent, stats, seed: int, make_worker, transport="shm", learns: bool = True):
        self.hp, self.agent, self.stats = hp, agent, stats
        self.specs = worker_specs(hp, seed, transport if isinstance(transport, str) else "shm")
        role = self.specs[0].role
        if not isinstance(agent, SOURCES[role]):
            raise ConfigError(f"agent {hp.agent!r} ({type(agent).__name__}) is no {SOURCES[role].__name__} "
                              f"(rl/agents/scheme.py): its workers' role is {role!r}")
        n = worker_envs(hp)
        if role == "rollouts":
            self.mode = RolloutMode(agent, learns)
        elif role == "rows":
            self.mode = RowsMode(agent, n)
        else:
            self.mode = GradientMode(agent)
        self.sync = hp.col_communication == "sync" and role != "gradients"
        hidden, behaviour = agent.rollout_layout() if role == "rollouts" else (None, None)
        grad_size = agent.gradient_size() if role == "gradients" else 0
        self.transport = make_transport(transport, hp)
        self.round: set[int] = set()
        self.lags: deque[int] = deque(maxlen=100)
        count = len(self.specs)
        self.clock = {"perf/wait_s": 0.0, "perf/learn_s": 0.0, "scheme/policy_lag": 0.0,
                      "scheme/version": agent.updates, "scheme/dropped": 0, "scheme/restarts": 0,
                      "scheme/workers": count}
        self.transport.start(self.specs, make_worker,
                             lambda spec: make_buffer(role, spec.hp, *spaces, hidden, grad_size, behaviour),
                             agent.acting_state(), agent.updates, self.sync)

    def publish(self) -> None:
        self.transport.publish(self.agent.acting_state(), self.agent.updates)
        self.clock["scheme/version"] = self.agent.updates

    def step(self) -> dict:
        t0 = time.perf_counter()
        shipment = self.transport.receive(timeout=0.5)
        for worker in self.transport.take_lost():
            self.mode.lost(worker)
            self.round.discard(worker)
        self.clock["perf/wait_s"] += time.perf_counter() - t0
        self.clock["scheme/restarts"] = self.transport.restarts
        if shipment is None:
            return {}
        self.stats.add_finished(shipment.episodes)
        self.agent.merge_statistics(shipment.statistics)
        lag = self.agent.updates - shipment.version
        self.lags.append(lag)
        self.clock["scheme/policy_lag"] = float(np.mean(self.lags))
        if self.hp.max_policy_lag and lag > self.hp.max_policy_lag:
            self.clock["scheme/dropped"] += 1
            self.transport.release(shipment)
            self.mode.lost(shipment.worker)  # its next data does not continue this data's episodes
            return {}
        t1 = time.perf_counter()
        changed, diagnostics = self.mode.take(shipment, lag)
        self.transport.release(shipment)
        self.clock["perf/learn_s"] += time.perf_counter() - t1
        if self.sync:
            self.round.add(shipment.worker)
            if len(self.round) < len(self.specs):
                return diagnostics
            self.round.clear()
            self.publish()
        elif changed:
            self.publish()
        return diagnostics

    def finished(self, signum: int) -> bool:
        return bool(signum) or self.agent.env_steps >= self.hp.train_steps

    def close(self) -> None:
        self.transport.close()
