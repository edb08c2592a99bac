"""The stepping loop, written once: a vector env plus an agent's policy, producing transitions.

    obs -> agent.act -> env.step -> observe(obs, actions, rewards, true next_obs, terminated, truncated)

`observe` is the agent's own by default (single process: it stores into the agent's memory); a collection worker
passes its own, which writes into a shared-memory slot. With same-step autoreset (sync/async envs, ale-py) the final
observation of an ending episode comes from `info["final_obs"]`; with next-step autoreset (native vector envs) the
step that resets an env is not a transition and is dropped (the rows kept are passed as `rows`). Either way no
transition spans two episodes and truncations bootstrap. Episode statistics and where the time goes are kept here.

An exception from the env's `step` (the env's own code, whichever vector engine runs it) ends the run: it becomes
`RunStopped` in one line naming the env, the exception and the agent step it was met at (the original chained as its
cause), which the training loop reports after checkpointing the steps before it, and which a collection worker sends
to the learner as its error.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from rl.envs import is_same_step
from rl.envs.episode_stats import EpisodeStats
from rl.envs.observations import as_obs
from rl.errors import RunStopped, first_line


def true_next_obs(next_obs: np.ndarray, dones: np.ndarray, info: dict) -> np.ndarray:
    """Replace the reset observations of envs that just finished by their final observations (same-step mode); a
    Dict or Tuple space's are held as a DictObs (rl/envs/observations.py)."""
    if not dones.any():
        return next_obs
    real = as_obs(next_obs).copy()
    for i in np.flatnonzero(dones):
        real[i] = info["final_obs"][i]
    return real


def env_name(env, agent) -> str:
    """The env's id as the run was given it (`hp.env`: a `module:EnvId` keeps its module), else the vector env's
    spec id, else the type name of its first env (a SyncVectorEnv's) or its own."""
    name = getattr(getattr(agent, "hp", None), "env", None) or getattr(getattr(env, "spec", None), "id", None)
    if name:
        return str(name)
    envs = getattr(env, "envs", None)
    return type(envs[0].unwrapped if envs else env.unwrapped).__name__


def env_error(env, agent, exc: Exception, call: str = "step") -> RunStopped:
    """What an exception from the env's `step` (or `reset`) becomes: one line naming the env, the exception and the
    agent step."""
    text = str(exc).strip()
    raised = f"{type(exc).__name__}: {first_line(exc, 200)}" if text else type(exc).__name__
    during = "" if call == "step" else f" in {call}"
    steps = getattr(agent, "env_steps", None)
    at = "" if steps is None else f" at agent step {steps}"
    return RunStopped(f"the env {env_name(env, agent)!r} raised {raised}{during}{at}")


class Collector:
    """Steps `env` with `agent.act`, hands every transition to `observe` and keeps the episode statistics."""

    def __init__(self, env, agent, seed: int, observe: Callable | None = None, stats: EpisodeStats | None = None):
        self.env, self.agent = env, agent
        self.observe = observe or agent.observe
        self.same_step = is_same_step(env)
        self.stats = stats if stats is not None else EpisodeStats(env.num_envs)
        try:
            self.obs, _ = env.reset(seed=seed)
        except Exception as exc:  # noqa: BLE001 - as in `step`
            raise env_error(env, agent, exc, "reset") from exc
        self.prev_done = np.zeros(env.num_envs, bool)
        self.valid = np.ones(env.num_envs, bool)  # the env rows of the last `observe` call
        self.clock = {"perf/act_s": 0.0, "perf/env_s": 0.0}  # acting and storing; stepping the envs

    def step(self) -> int:
        """One step of every env; returns the number of transitions handed to `observe`."""
        agent = self.agent
        t0 = time.perf_counter()
        actions = agent.act(self.obs)
        t1 = time.perf_counter()
        try:
            next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        except Exception as exc:  # noqa: BLE001 - whatever the env's code raised ends the run in one line
            raise env_error(self.env, agent, exc) from exc
        t2 = time.perf_counter()
        dones = terminated | truncated
        obs = self.obs
        if self.same_step:
            self.observe(obs, actions, rewards, true_next_obs(next_obs, dones, info), terminated, truncated)
            self.stats.update(rewards, dones)
            self.stats.update_games(info)
            if dones.any():
                agent.reset_episodes(dones)
            count = len(rewards)
        else:  # next-step autoreset: envs that finished last step were just reset, not stepped
            valid = self.valid = ~self.prev_done  # `observe` gets these rows
            count = int(valid.sum())
            if count == len(valid):
                self.observe(obs, actions, rewards, next_obs, terminated, truncated)
            elif count:
                self.observe(obs[valid], actions[valid], rewards[valid], next_obs[valid], terminated[valid],
                             truncated[valid])
            agent.reset_episodes(self.prev_done)
            self.stats.update(rewards, dones, counted=valid)
            self.prev_done = dones
        self.obs = next_obs
        self.clock["perf/act_s"] += (t1 - t0) + (time.perf_counter() - t2)
        self.clock["perf/env_s"] += t2 - t1
        return count

    def close(self) -> None:
        self.env.close()
