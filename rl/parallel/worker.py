"""A collection worker: its own vector env and a copy of the agent, acting with the newest published weights.

The learner forks it after allocating the shared weights and the worker's slots. The worker's loop:
    wait for a free slot (the learner sends its index) -> load newer weights -> Collector.step() until the slot is
    full -> send (slot, policy version, steps, finished episodes) -> with col_communication=sync, wait for the
    weights that learned from it.
An on-policy worker's agent stores straight into the slot (a RolloutMemory in shared memory: the behaviour policy's
log-probabilities and values come along); a replay agent's transitions go to a TransitionSlot. A gradient worker
(A3C: num_grad_workers > 1, grad_communication=async) fills the agent's own rollout, runs the agent's update, and
ships each gradient instead of stepping its optimizer.

The worker ignores Ctrl-C (the terminal sends it to the whole process group: the learner stops the workers itself)
and dies with the learner (PR_SET_PDEATHSIG), so it never outlives the run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
import traceback

import numpy as np
import torch

from rl.collector import Collector
from rl.envs import make_env
from rl.envs.episode_stats import EpisodeStats
from rl.parallel.shared import ENV_STEPS
from rl.registry import agents
from rl.threads import limit_threads

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Linux kills this process when its parent dies, however it dies (SIGKILL included)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent-pid check in the loop still ends the worker
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


class Stopped(Exception):
    """The learner asked the workers to stop, or it is gone."""


class Worker:
    def __init__(self, index: int, hp, shared, slots, conn, seed: int, parent_pid: int, mode: str):
        self.index, self.hp, self.shared, self.slots, self.conn = index, hp, shared, slots, conn
        self.parent_pid, self.mode = parent_pid, mode
        self.env = make_env(hp)
        self.agent = agents[hp.agent](hp, self.env.single_observation_space, self.env.single_action_space,
                                      self.env.num_envs, seed=seed)
        self.version = -1
        self.slot = None
        self.t = 0
        self.heartbeat = shared.heartbeats
        self.feeders = None  # async RAPID: this gradient worker's own collection workers
        if mode == "gradients" and hp.num_workers:
            from rl.parallel.scheme import Scheme, learner_hparams

            inner = learner_hparams(hp, inner=True)
            self.agent = agents[hp.agent](inner, self.env.single_observation_space, self.env.single_action_space,
                                          inner.num_envs, seed=seed)
            self.feeders = Scheme(inner, self.env, self.agent, EpisodeStats(1), seed)
            self.collector = self.feeders  # its stats are where the episodes are
        elif mode == "transitions":
            self.collector = Collector(self.env, self.agent, seed, observe=self._store_transition)
        else:  # rollouts (into the slot) and gradients (the agent's own rollout) use the agent's observe
            self.collector = Collector(self.env, self.agent, seed)
        if mode == "gradients":
            self.agent._step = self._ship_gradient  # the agent's update computes the loss; the learner steps
        self.reported = (0, 0)  # episodes and games already sent

    # ------------------------------------------------------------------ waiting, with the learner's liveness checked
    def _beat(self) -> None:
        self.heartbeat[self.index] = time.time()
        if self.shared.stopping or os.getppid() != self.parent_pid:
            raise Stopped

    def _receive_slot(self) -> int:
        while not self.conn.poll(0.05):
            self._beat()
        message = self.conn.recv()
        if message is None:
            raise Stopped
        return message

    def _await_version(self, newer_than: int) -> None:
        while self.shared.weights.version <= newer_than:
            self._beat()
            time.sleep(0.001)

    def _refresh(self) -> None:
        self.version = self.shared.weights.load(self.agent, self.version)
        if self.mode == "transitions":  # exploration schedules (epsilon, warm-up) follow the learner's step count
            self.agent.env_steps = int(self.shared.weights.control[ENV_STEPS])

    def _episodes(self) -> dict:
        """The episodes (and games) that ended since the last shipment."""
        stats = self.collector.stats
        new_eps, new_games = stats.episodes - self.reported[0], stats.games - self.reported[1]
        self.reported = (stats.episodes, stats.games)

        def tail(window, n):
            return list(window)[len(window) - min(n, len(window)):]

        return {"returns": tail(stats.recent_returns, new_eps), "lengths": tail(stats.recent_lengths, new_eps),
                "scores": tail(stats.recent_scores, new_games),
                "game_lengths": tail(stats.recent_game_lengths, new_games)}

    def _send(self, kind: str, steps: int) -> None:
        extra = {}
        obs_norm = getattr(self.agent, "obs_norm", None)
        if obs_norm is not None:
            extra["obs_norm"] = obs_norm.state_dict()
        self.conn.send((kind, self.slot, self.version, steps, self._episodes(), extra))

    # ------------------------------------------------------------------ the three kinds of shipment
    def _store_transition(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        self.slots[self.slot].add(self.t, self.collector.valid, obs, actions, rewards, next_obs, terminated,
                                  truncated)
        self.agent.env_steps += len(rewards)

    def _collect(self, steps: int) -> int:
        count = 0
        for self.t in range(steps):
            count += self.collector.step()
            self._beat()
        return count

    def _ship_gradient(self, loss: torch.Tensor) -> None:
        opt = self.agent.optimizer
        opt.zero_grad()
        loss.backward()
        self.slot = self._receive_slot()
        self.slots[self.slot].grad.copy_(opt.grad)
        self._send("gradient", self._steps_since_gradient)
        self._steps_since_gradient = 0
        self._refresh()  # the next gradient is computed with the newest weights
        self.agent.grad_steps += 1

    def run(self) -> None:
        hp, agent = self.hp, self.agent
        self._await_version(-1)
        self._refresh()
        self._steps_since_gradient = 0
        while True:
            if self.feeders is not None:  # its collection workers fill the rollout; update() ships the gradient
                steps = agent.env_steps
                self.feeders.step()
                self._steps_since_gradient += agent.env_steps - steps
                self._beat()
                continue
            if self.mode == "gradients":
                while not agent.memory.full:
                    self._steps_since_gradient += self.collector.step()
                    self._beat()
                agent.update()  # calls _ship_gradient for each gradient step
                continue
            self.slot = self._receive_slot()
            self._refresh()
            if self.mode == "rollouts":
                agent.memory = self.slots[self.slot]
                agent.memory.reset()
                steps = self._collect(hp.num_steps)
            else:
                steps = self._collect(hp.worker_steps)
            sent = self.version
            self._send("data", steps)
            if hp.col_communication == "sync":
                self._await_version(sent)


def run_worker(index: int, hp, shared, slots, conn, seed: int, parent_pid: int, mode: str) -> None:
    """The process's entry point: one thread for torch and BLAS, Ctrl-C left to the learner, errors reported."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent_pid)
    limit_threads(1)
    torch.set_flush_denormal(True)
    np.random.seed((seed * 7919 + index) % 2**32)
    torch.manual_seed(seed * 7919 + index)
    worker = None
    try:
        worker = Worker(index, hp, shared, slots, conn, seed, parent_pid, mode)
        worker.run()
    except Stopped:
        pass
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the learner hears it in one line
        line = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        try:
            conn.send(("error", line, traceback.format_exc()[-2000:]))
        except (OSError, ValueError):
            pass
        sys.stderr.flush()
        if worker is not None and worker.feeders is not None:
            worker.feeders.close()
        os._exit(1)
    if worker is not None and worker.feeders is not None:
        worker.feeders.close()
    os._exit(0)
