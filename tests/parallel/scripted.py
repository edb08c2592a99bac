"""A learner of the Scheme fed by a test: a transport that hands over the shipments a test queued, and the shipments
an Ape-X rows worker would make (tests/parallel/test_learner.py and test_scheme_bugs.py); and the checks of a
transport's shipments and publishes that the shared-memory and Ray transports share (test_scheme_bugs.py,
test_ray.py)."""

from __future__ import annotations

import time
from collections import deque

import gymnasium as gym
import numpy as np
import torch

import hparams  # noqa: F401 - registers the sets
from rl.envs.episode_stats import EpisodeStats
from rl.parallel.buffers import Rows
from rl.parallel.learner import Learner, learner_hparams
from rl.parallel.roles import make_worker
from rl.parallel.spec import Shipment
from rl.registry import agents
from rl.registry import hparams as sets

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
EPISODES = {"returns": [], "lengths": [], "scores": [], "game_lengths": []}


class ScriptedTransport:
    """Hands the learner the shipments a test queued (the methods of rl/parallel/transports' transports); records
    what the learner published and released."""

    def __init__(self):
        self.queue: deque = deque()
        self.lost: list[int] = []
        self.published: list[tuple[dict, int]] = []
        self.released: list[Shipment] = []
        self.restarts = 0

    def start(self, specs, make_worker, make_buffer, acting_state, version, sync):
        self.specs, self.make_buffer = specs, make_buffer
        self.published.append((acting_state, version))

    def publish(self, acting_state, version):
        self.published.append((acting_state, version))

    def receive(self, timeout=0.5):
        return self.queue.popleft() if self.queue else None

    def take_lost(self):
        lost, self.lost = self.lost, []
        return lost

    def release(self, shipment):
        self.released.append(shipment)

    def close(self):
        pass


def make_learner(name: str, overrides: str, learns: bool = True):
    """A learner of set `name` (with `overrides`) on CartPole's spaces, its agent and its scripted transport."""
    hp = sets[name]()
    hp.parse(overrides)
    lhp = learner_hparams(hp)
    torch.manual_seed(0)
    agent = agents[hp.agent](lhp, OBS, ACTIONS, lhp.num_envs, seed=0)
    transport = ScriptedTransport()
    learner = Learner(hp, (OBS, ACTIONS), agent, EpisodeStats(1), seed=0, make_worker=make_worker, transport=transport,
                      learns=learns)
    return learner, agent, transport


def rows_shipment(worker: int, steps: int, n: int, reward: float, version: int = 0) -> Shipment:
    """`steps` steps of `n` env rows, none ending an episode: row r's obs at step t is worker * 100 + t."""
    rows = Rows(steps, n, OBS, ACTIONS)
    for t in range(steps):
        obs = np.full((n, 4), worker * 100 + t, np.float32)
        rows.add(t, np.ones(n, bool), obs, np.zeros(n, np.int64), np.full(n, reward, np.float32), obs + 1,
                 np.zeros(n, bool), np.zeros(n, bool))
    return Shipment("rows", worker, version, steps * n, EPISODES, {}, data=rows)


def marked_state(agent, mark: float) -> dict:
    """The agent's acting state with a value head that says `mark` whatever it sees: the values a worker ships
    tell which weights acted."""
    state = dict(agent.acting_state())
    state["net.model.v_head.weight"] = torch.zeros_like(state["net.model.v_head.weight"])
    state["net.model.v_head.bias"] = torch.full_like(state["net.model.v_head.bias"], mark)
    return state


def next_shipment(transport, deadline: float):
    while True:
        shipment = transport.receive(timeout=0.5)
        if shipment is not None:
            return shipment
        assert time.monotonic() < deadline, "no shipment: the worker is stuck"  # only keeps a broken run from hanging


def check_every_publish_reaches_the_worker(transport, agent, spec, make_buffer) -> None:
    """Publish versions 1, 2, 3 with weights of their own: within a few shipments each, the worker ships one acted
    by that version, and its data was acted by that version's weights (a worker may finish what it started with the
    weights it held: two slots or calls in flight)."""
    deadline = time.monotonic() + 120
    transport.start([spec], make_worker, make_buffer, marked_state(agent, 100.0), 0, False)
    try:
        for version in (1, 2, 3):
            transport.publish(marked_state(agent, 100.0 + version), version)
            versions = []
            for _ in range(6):
                shipment = next_shipment(transport, deadline)
                versions.append(shipment.version)
                values = shipment.data.values.clone()
                transport.release(shipment)
                assert torch.all(values == 100.0 + shipment.version), "a shipment's version is not its weights'"
                if shipment.version == version:
                    break
            assert versions[-1] == version, f"publish {version} never reached the worker: shipped {versions}"
    finally:
        transport.close()


def shipments_continue(shipments) -> int:
    """How many consecutive pairs of one worker's rollouts were checked to continue each other (a rollout's first
    observation is the last one's next observation, unless an episode ended there); fails at a gap."""
    checked = 0
    for previous, current in zip(shipments, shipments[1:]):
        if previous.dones[-1].any():
            continue  # the final observation is followed by a reset one
        assert torch.equal(current.obs[0], previous.next_obs[-1]), "a shipment is missing between two delivered"
        checked += 1
    return checked
