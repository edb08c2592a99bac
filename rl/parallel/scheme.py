"""The learner side of the Scheme: `--num_workers N` collection workers, and async gradient workers (A3C).

Any agent, unchanged: the learner hands worker data to the agent the way one process would.
- On-policy agents (vpg, a2c, ppo): a worker fills a slot with a rollout (num_steps x worker envs) of the behaviour
  policy's actions, log-probabilities and values; the learner copies slots into the columns of its own rollout
  (`batch_rollouts` env trajectories) and calls `agent.update()`: PPO's ratio is taken against the behaviour policy
  (APPO); with V-trace (`vtrace`, or IMPALA's `vtrace` loss) the targets are corrected for the policy lag.
- Replay agents (dqn, ddpg, td3, sac, every memory): a slot holds `worker_steps` vector steps; the learner observes
  them step by step into the replay memory (worker w's envs are its rows w*N..w*N+N-1) and calls `agent.update()`
  after each, so the replay ratio is the single-process one (Ape-X).
- Async gradient workers (A3C): a slot holds a gradient; the learner clips and applies it as it arrives.

`col_communication=sync` has the learner wait for one shipment of every worker, learn, then publish; the workers wait
for those weights (DPPO/A2C-style, lag 0). `async` lets workers act on with the weights they have; each shipment
carries its policy version, the lag (learner version minus it) is logged, and `max_policy_lag` drops older data.

A worker that dies is restarted, one that stops stepping for `worker_timeout` seconds is killed and restarted; its
unfinished shipment is lost (logged). `close()` stops every worker and reaps it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from multiprocessing.connection import wait

import numpy as np
import torch

from rl.errors import ConfigError
from rl.memory.rollout import RolloutMemory
from rl.parallel.shared import GradientSlot, SharedWeights, TransitionSlot
from rl.parallel.worker import run_worker

SLOTS_PER_WORKER = 2  # double buffering: a worker fills one slot while the learner reads the other
COMMUNICATIONS = ("sync", "async")


def worker_envs(hp) -> int:
    return hp.worker_envs or hp.num_envs


def is_on_policy(agent) -> bool:
    return isinstance(agent.memory, RolloutMemory)


def learner_envs(hp, on_policy: bool) -> int:
    """The env columns (on-policy: trajectories per update) or env rows (replay) of the learner's agent."""
    n = worker_envs(hp)
    if hp.num_workers == 0 or hp.num_grad_workers > 1 and hp.grad_communication == "async":
        return n  # the learner of async gradient workers never fills a rollout of its own
    if on_policy:
        return hp.batch_rollouts or hp.num_workers * n
    return hp.num_workers * n


def learner_hparams(hp, inner: bool = False):
    """The learner agent's settings: as many env columns/rows as the workers feed it. `inner`: an async gradient
    worker's own (async RAPID), which learns from its collection workers like a learner but ships its gradients."""
    from rl.agents.on_policy import OnPolicyAgent
    from rl.registry import agents

    on_policy = issubclass(agents[hp.agent], OnPolicyAgent)
    check_settings(hp, on_policy)
    learner = hp.copy()
    if inner:
        learner.num_grad_workers, learner.device, learner.torch_threads = 1, "cpu", 1
    learner.num_envs = learner_envs(learner, on_policy)
    return learner


def check_settings(hp, on_policy: bool) -> None:
    for name in ("col_communication", "grad_communication"):
        if getattr(hp, name) not in COMMUNICATIONS:
            raise ConfigError(f"unknown {name} {getattr(hp, name)!r}: valid: sync, async")
    n = worker_envs(hp)
    if on_policy and hp.num_workers:
        columns = learner_envs(hp, True)
        if columns % n:
            raise ConfigError(f"batch_rollouts ({columns}) must be a multiple of the envs per worker ({n})")
        if hp.col_communication == "sync" and columns != hp.num_workers * n:
            raise ConfigError(f"col_communication=sync learns from one rollout of every worker: batch_rollouts must "
                              f"be num_workers x worker envs = {hp.num_workers * n} (or 0), got {columns}")
    if hp.num_grad_workers > 1 and hp.grad_communication == "async":
        if not on_policy:
            raise ConfigError("grad_communication=async (A3C) needs an on-policy agent (vpg, a2c, ppo)")


def worker_hparams(hp):
    """A worker's settings: its own envs, the CPU, one thread (the cores are shared out between processes)."""
    w = hp.copy()
    w.num_envs, w.device, w.torch_threads = worker_envs(hp), "cpu", 1
    if w.env_type == "atari":
        w.env_threads = 1
    if "buffer_size" in w:  # a replay worker's own memory is never used: keep it small
        w.buffer_size = max(1000, w.num_envs * 8)
    return w


class WorkerHandle:
    """One worker process, the pipe to it, and its slots."""

    def __init__(self, index: int, slots: list[int]):
        self.index, self.slots = index, slots
        self.process = None
        self.conn = None
        self.started = 0.0
        self.restarts = 0
        self.failures = 0  # consecutive failures without a shipment in between
        self.last_error = ""


class Scheme:
    """The trainer for num_workers > 0 or async gradient workers: `step()` takes one shipment (or waits a little),
    `close()` ends every worker."""

    def __init__(self, hp, env, agent, stats, seed: int):
        self.hp, self.agent, self.stats, self.seed = hp, agent, stats, seed
        self.on_policy = is_on_policy(agent)
        check_settings(hp, self.on_policy)
        self.grad_mode = hp.num_grad_workers > 1 and hp.grad_communication == "async"
        self.mode = "gradients" if self.grad_mode else ("rollouts" if self.on_policy else "transitions")
        count = hp.num_grad_workers if self.grad_mode else hp.num_workers
        obs_space, action_space = env.single_observation_space, env.single_action_space
        env.close()  # the learner needs only the spaces: workers step envs of their own
        self.worker_hp = worker_hparams(hp)
        n = worker_envs(hp)
        self.workers = [WorkerHandle(i, list(range(i * SLOTS_PER_WORKER, (i + 1) * SLOTS_PER_WORKER)))
                        for i in range(count)]
        if self.mode == "rollouts":
            hidden = agent.model.hidden_shape
            self.slots = [RolloutMemory(hp.num_steps, n, obs_space.shape, obs_space.dtype, action_space.shape,
                                        action_space.dtype, hidden_shape=hidden).share_memory_()
                          for _ in range(count * SLOTS_PER_WORKER)]
        elif self.mode == "transitions":
            self.slots = [TransitionSlot(hp.worker_steps, n, obs_space, action_space)
                          for _ in range(count * SLOTS_PER_WORKER)]
        else:
            self.slots = [GradientSlot(agent.optimizer.grad.numel()) for _ in range(count * SLOTS_PER_WORKER)]
        self.weights = SharedWeights(agent)
        self.heartbeats = torch.zeros(count, dtype=torch.float64).share_memory_()
        self.version = self.weights.publish(agent)
        self.context = mp.get_context("fork")  # children inherit the registries (a script's own registrations too)
        self.columns_filled = 0
        self.batch_lags: list[int] = []
        self.round: set[int] = set()
        self.pending: deque = deque()
        self.lags: deque[int] = deque(maxlen=100)
        self.clock = {"perf/wait_s": 0.0, "perf/learn_s": 0.0, "perf/copy_s": 0.0, "scheme/policy_lag": 0.0,
                      "scheme/version": self.version, "scheme/dropped": 0, "scheme/restarts": 0,
                      "scheme/workers": count}
        for w in self.workers:
            self._start(w)

    # ------------------------------------------------------------------ the workers' lives
    @property
    def stopping(self) -> bool:
        return self.weights.stopping

    def _start(self, w: WorkerHandle) -> None:
        ours, theirs = self.context.Pipe()
        seed = self.seed + 1000 * (w.index + 1) + 100_003 * w.restarts
        self.heartbeats[w.index] = time.time()
        w.process = self.context.Process(target=run_worker, name=f"rl-worker-{w.index}", daemon=False,
                                         args=(w.index, self.worker_hp, self, self.slots, theirs, seed, os.getpid(),
                                               self.mode))
        w.process.start()
        theirs.close()
        w.conn, w.started = ours, time.time()
        for slot in w.slots:
            w.conn.send(slot)

    def _restart(self, w: WorkerHandle, why: str) -> None:
        if w.process.is_alive():
            w.process.kill()
        w.process.join()
        w.conn.close()
        self.pending = deque(m for m in self.pending if m[0] is not w)  # its undelivered shipments go too
        self.round.discard(w.index)
        w.failures += 1
        if w.failures >= 3:
            detail = f": {w.last_error}" if w.last_error else ""
            raise ConfigError(f"collection worker {w.index} failed {w.failures} times in a row{detail}")
        w.restarts += 1
        self.clock["scheme/restarts"] += 1
        print(f"worker {w.index} {why}; restarted (its unfinished shipment is dropped)", flush=True)
        self._start(w)

    def _check_health(self) -> None:
        now = time.time()
        for w in self.workers:
            if not w.process.is_alive():
                self._restart(w, f"exited (code {w.process.exitcode})")
            elif now - float(self.heartbeats[w.index]) > self.hp.worker_timeout:
                self._restart(w, f"made no step for {self.hp.worker_timeout:g} s (hung)")

    def _receive(self, timeout: float = 0.5) -> None:
        """Move every message that has arrived into `pending`."""
        by_conn = {w.conn: w for w in self.workers}
        for conn in wait(list(by_conn), timeout):
            w = by_conn[conn]
            try:
                while conn.poll():
                    message = conn.recv()
                    if message[0] == "error":
                        w.last_error = message[1]
                        print(f"worker {w.index}: {message[1]}", flush=True)
                        continue
                    self.pending.append((w, *message))
            except (EOFError, OSError):  # it died: the health check restarts it
                pass

    # ------------------------------------------------------------------ the learner's step
    def step(self) -> dict:
        t0 = time.perf_counter()
        if not self.pending:
            self._receive()
            self._check_health()
        self.clock["perf/wait_s"] += time.perf_counter() - t0
        if not self.pending:
            return {}
        w, kind, slot, version, steps, episodes, extra = self.pending.popleft()
        w.failures = 0
        self._record_episodes(episodes)
        if "obs_norm" in extra and getattr(self.agent, "obs_norm", None) is not None:
            self.agent.obs_norm.load_state_dict(extra["obs_norm"])  # evaluation and checkpoints see the workers'
        lag = self.version - version
        self.lags.append(lag)
        self.clock["scheme/policy_lag"] = float(np.mean(self.lags))
        if self.hp.max_policy_lag and lag > self.hp.max_policy_lag:
            self.clock["scheme/dropped"] += 1
            self._give_back(w, slot)
            return {}
        t1 = time.perf_counter()
        if kind == "gradient":
            diagnostics = self._apply_gradient(w, slot, steps)
        elif self.on_policy:
            diagnostics = self._take_rollout(w, slot, lag)
        else:
            diagnostics = self._take_transitions(w, slot)
        self.clock["perf/learn_s"] += time.perf_counter() - t1
        return diagnostics

    def _give_back(self, w: WorkerHandle, slot: int) -> None:
        try:
            w.conn.send(slot)
        except (OSError, ValueError, BrokenPipeError):  # it died meanwhile: restarted with all its slots
            pass

    def _record_episodes(self, episodes: dict) -> None:
        s = self.stats
        s.recent_returns.extend(episodes["returns"])
        s.recent_lengths.extend(episodes["lengths"])
        s.episodes += len(episodes["returns"])
        s.recent_scores.extend(episodes["scores"])
        s.recent_game_lengths.extend(episodes["game_lengths"])
        s.games += len(episodes["scores"])

    def _publish(self) -> None:
        self.version = self.weights.publish(self.agent)
        self.clock["scheme/version"] = self.version

    def _round_done(self, w: WorkerHandle) -> bool:
        """Sync collection: True once every worker's shipment of this round is in."""
        self.round.add(w.index)
        if len(self.round) < len(self.workers):
            return False
        self.round.clear()
        return True

    def _take_rollout(self, w: WorkerHandle, slot: int, lag: int) -> dict:
        agent, mem, src = self.agent, self.agent.memory, self.slots[slot]
        t0 = time.perf_counter()
        c, n = self.columns_filled, src.num_envs
        for f in mem._fields():
            getattr(mem, f)[:, c:c + n] = getattr(src, f)
        self._give_back(w, slot)
        self.clock["perf/copy_s"] += time.perf_counter() - t0
        self.columns_filled += n
        self.batch_lags.append(lag)
        agent.env_steps += src.num_steps * n
        if self.columns_filled < mem.num_envs:
            return {}
        mem.pos = mem.num_steps
        agent.stale = any(self.batch_lags)  # V-trace rescoring is needed only where the behaviour policy is older
        diagnostics = agent.update()
        self.columns_filled, self.batch_lags = 0, []
        self._publish()
        return diagnostics

    def _take_transitions(self, w: WorkerHandle, slot: int) -> dict:
        agent, src = self.agent, self.slots[slot]
        offset = w.index * src.num_envs
        diagnostics: dict = {}
        for t in range(src.steps):
            transition, rows = src.step(t, offset)
            if len(rows):
                agent.observe(*transition, rows=rows)
                diagnostics = agent.update() or diagnostics
        self._give_back(w, slot)
        if self.hp.col_communication == "sync":
            if self._round_done(w):
                self._publish()
        else:
            self._publish()  # new weights, and the step count that drives the workers' exploration schedules
        return diagnostics

    def _apply_gradient(self, w: WorkerHandle, slot: int, steps: int) -> dict:
        agent, opt = self.agent, self.agent.optimizer
        opt.zero_grad()
        opt.grad.copy_(self.slots[slot].grad)
        self._give_back(w, slot)
        if self.hp.max_grad_norm > 0:
            opt.clip_grad_norm(self.hp.max_grad_norm)
        opt.lr, _ = agent._schedule()
        opt.step()
        agent.grad_steps += 1
        agent.env_steps += steps
        self._publish()
        return {"charts/learning_rate": opt.lr}

    def finished(self, signum: int) -> bool:
        return bool(signum) or self.agent.env_steps >= self.hp.train_steps

    # ------------------------------------------------------------------ the end
    def close(self) -> None:
        """Stop every worker (asked first, killed after 5 s) and reap it: no process outlives the run."""
        self.weights.stop()
        for w in self.workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.time() + 5.0
        for w in self.workers:
            w.process.join(max(0.0, deadline - time.time()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        self.pending.clear()
