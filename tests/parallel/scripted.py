"""A learner of the Scheme fed by a test: a transport that hands over the shipments a test queued, and the shipments
an Ape-X rows worker would make (tests/parallel/test_learner.py and test_scheme_bugs.py)."""

from __future__ import annotations

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
