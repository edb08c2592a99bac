"""The workers of the Scheme: plain classes built from a WorkerSpec, with no transport code.

A transport (rl/parallel/transports/) runs each worker wherever it runs (a forked process, a Ray actor) and drives it
through three calls:
    worker.load(acting_state, version)   the learner's published weights and statistics
    shipment = worker.fill(buffer, beat) fill a buffer (rl/parallel/buffers.py) and describe it
    worker.close()
`beat()` is called at every env step: the transport's heartbeat (and its way to stop a worker: it raises).

- CollectionWorker, role "rollouts": one rollout (num_steps x its envs) of the behaviour policy, with its
  log-probabilities and values, for on-policy agents.
- CollectionWorker, role "rows": `worker_steps` vector steps of transitions for replay agents (Ape-X).
- GradientWorker, role "gradients": fills its agent's rollout (its own envs, or collection workers of its own: async
  RAPID), then ships one minibatch gradient per fill (A3C), the next of the agent's `minibatch_gradients`: the
  weights it computes the next one with are the newest.
"""

from __future__ import annotations

from collections.abc import Callable

from rl.agents import make_agent
from rl.collector import Collector
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats
from rl.parallel.learner import Learner, learner_hparams
from rl.parallel.spec import Shipment, WorkerSpec


class Worker:
    """What both roles share: the env, the agent, the episodes reported so far."""

    def __init__(self, spec: WorkerSpec):
        self.spec, self.hp = spec, spec.hp
        self.env = make_env(spec.hp)
        self.agent = make_agent(spec.hp, self.env.single_observation_space, self.env.single_action_space,
                                self.env.num_envs, spec.seed)
        self.version = -1
        self.reported = (0, 0)  # episodes and games already shipped
        self.stats: EpisodeStats | None = None

    def load(self, acting_state: dict, version: int) -> None:
        self.agent.load_acting_state(acting_state)
        self.version = version

    def _shipment(self, kind: str, steps: int) -> Shipment:
        episodes, self.reported = self.stats.since(self.reported)
        return Shipment(kind, self.spec.rank, self.version, steps, episodes, self.agent.take_statistics())

    def close(self) -> None:
        self.env.close()


class CollectionWorker(Worker):
    def __init__(self, spec: WorkerSpec):
        super().__init__(spec)
        self.rows = None  # the Rows being filled
        self.t = 0
        observe = self._store_row if spec.role == "rows" else None
        self.collector = Collector(self.env, self.agent, spec.seed, observe=observe)
        self.stats = self.collector.stats

    def _store_row(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        self.rows.add(self.t, self.collector.valid, obs, actions, rewards, next_obs, terminated, truncated)
        self.agent.count_env_steps(len(rewards))  # shipped, not observed: its exploration schedule still moves

    def fill(self, buffer, beat: Callable[[], None]) -> Shipment:
        steps = 0
        if self.spec.role == "rows":
            self.rows = buffer
            buffer.clear()
            for self.t in range(buffer.steps):
                steps += self.collector.step()
                beat()
            return self._shipment("rows", steps)
        while not self.agent.rollout_ready():
            steps += self.collector.step()
            beat()
        self.agent.ship_rollout(buffer)
        return self._shipment("rollout", steps)


class GradientWorker(Worker):
    def __init__(self, spec: WorkerSpec):
        super().__init__(spec)
        self.feeders = None
        if spec.hp.num_workers:  # async RAPID: collection workers of its own fill this worker's rollout
            inner = learner_hparams(spec.hp, inner=True)
            spaces = self.env.single_observation_space, self.env.single_action_space
            self.env.close()
            self.agent = make_agent(inner, *spaces, inner.num_envs, spec.seed)
            self.stats = EpisodeStats(1)
            self.feeders = Learner(inner, spaces, self.agent, self.stats, spec.seed, make_worker,
                                   transport=spec.transport, learns=False)
        else:
            self.collector = Collector(self.env, self.agent, spec.seed)
            self.stats = self.collector.stats
        self.gradients = None  # the minibatch gradients of the rollout being learned from
        self.steps = 0  # env steps since the last gradient

    def load(self, acting_state: dict, version: int) -> None:
        super().load(acting_state, version)
        if self.feeders is not None:
            self.feeders.publish()

    def _fill_rollout(self, beat) -> None:
        while not self.agent.rollout_ready():
            if self.feeders is not None:
                before = self.agent.env_steps
                self.feeders.step()
                self.steps += self.agent.env_steps - before
            else:
                self.steps += self.collector.step()
            beat()

    def fill(self, buffer, beat: Callable[[], None]) -> Shipment:
        while True:
            if self.gradients is None:
                self._fill_rollout(beat)
                self.gradients = self.agent.minibatch_gradients()
            grad = next(self.gradients, None)
            if grad is None:  # the rollout's epochs are done (or stopped early: PPO's target_kl)
                self.agent.finish_update()
                self.gradients = None
                continue
            buffer.copy_(grad)
            steps, self.steps = self.steps, 0
            return self._shipment("gradient", steps)

    def close(self) -> None:
        if self.feeders is not None:
            self.feeders.close()
        else:
            super().close()


def make_worker(spec: WorkerSpec) -> Worker:
    return GradientWorker(spec) if spec.role == "gradients" else CollectionWorker(spec)
