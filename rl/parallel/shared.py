"""What the learner and its worker processes share: versioned weights, a control block, and the slots.

Everything is allocated by the learner before it forks the workers, as torch tensors in shared memory (torch's
file-descriptor strategy: the segments have no name in /dev/shm, so nothing is left behind whatever way a process
ends). Only slot indices and small per-shipment records travel through pipes.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

# the control block's fields
VERSION, WRITING, ENV_STEPS, STOP = range(4)


def acting_modules(agent) -> dict[str, nn.Module]:
    """The networks a worker needs to act (and, for gradient workers, to compute a loss): every module the agent
    holds. Target networks are included: they are small next to the time a worker spends acting."""
    return {name: m for name, m in vars(agent).items() if isinstance(m, nn.Module)}


class SharedWeights:
    """The learner's networks in shared memory, with a version number bumped at each publish (a seqlock: a worker
    that read while the learner wrote reads again) and the learner's env step count."""

    def __init__(self, agent):
        self.tensors = {f"{name}.{key}": t.detach().to("cpu", copy=True).share_memory_()  # workers act on the CPU
                        for name, m in acting_modules(agent).items() for key, t in m.state_dict().items()}
        self.control = torch.zeros(4, dtype=torch.int64).share_memory_()
        self.control[VERSION] = -1  # nothing published yet

    @property
    def version(self) -> int:
        return int(self.control[VERSION])

    def publish(self, agent) -> int:
        self.control[WRITING] = 1
        for name, m in acting_modules(agent).items():
            for key, t in m.state_dict().items():
                self.tensors[f"{name}.{key}"].copy_(t)
        self.control[ENV_STEPS] = agent.env_steps
        self.control[VERSION] += 1
        self.control[WRITING] = 0
        return self.version

    def load(self, agent, have: int) -> int:
        """Copy the newest weights into `agent` if they are newer than version `have`; returns the version held."""
        while True:
            version = self.version
            if version <= have:
                return have
            if self.control[WRITING]:
                time.sleep(0.0005)
                continue
            with torch.no_grad():
                for name, m in acting_modules(agent).items():
                    for key, t in m.state_dict().items():
                        t.copy_(self.tensors[f"{name}.{key}"])
            if not self.control[WRITING] and self.version == version:
                return version

    def stop(self) -> None:
        self.control[STOP] = 1

    @property
    def stopping(self) -> bool:
        return bool(self.control[STOP])


class TransitionSlot:
    """K vector steps of N envs of (obs, action, reward, next_obs, terminated, truncated) for replay agents, with a
    mask of the rows that are transitions (next-step autoreset drops an env's reset step)."""

    def __init__(self, steps: int, num_envs: int, obs_space, action_space):
        def zeros(shape, dtype):
            return torch.from_numpy(np.zeros((steps, num_envs, *shape), dtype)).share_memory_()

        self.steps, self.num_envs = steps, num_envs
        self.obs = zeros(obs_space.shape, obs_space.dtype)
        self.next_obs = zeros(obs_space.shape, obs_space.dtype)
        self.actions = zeros(action_space.shape, action_space.dtype)
        self.rewards = zeros((), np.float32)
        self.terminated = zeros((), bool)
        self.truncated = zeros((), bool)
        self.valid = zeros((), bool)
        self.views = {k: getattr(self, k).numpy() for k in ("obs", "next_obs", "actions", "rewards", "terminated",
                                                            "truncated", "valid")}
        self.pos = 0

    def add(self, t: int, valid: np.ndarray, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Write vector step `t`; the arguments hold the rows where `valid` is set."""
        v = self.views
        v["valid"][t] = valid
        for name, value in (("obs", obs), ("actions", actions), ("rewards", rewards), ("next_obs", next_obs),
                            ("terminated", terminated), ("truncated", truncated)):
            v[name][t][valid] = value

    def step(self, t: int, row_offset: int) -> tuple[tuple, np.ndarray]:
        """Step t's transitions and their env rows in the learner's memory (offset by the worker's first row)."""
        v = self.views
        valid = v["valid"][t]
        rows = np.flatnonzero(valid)
        return tuple(v[k][t][valid] for k in ("obs", "actions", "rewards", "next_obs", "terminated",
                                              "truncated")), rows + row_offset


class GradientSlot:
    """One flat gradient (an async gradient worker's shipment, A3C)."""

    def __init__(self, size: int):
        self.grad = torch.zeros(size).share_memory_()
