"""Envs that the code must refuse or survive, as a module that a test writes into its tmp_path and passes by the
`module:EnvId` form (so worker processes and train.py subprocesses import it too): observations of spaces that no
model takes, and an env whose `step` raises at its 50th step, as a simulator that diverges."""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

FAIL_AT = 50  # the step of an env's life at which the diverging env raises

SOURCE = '''
import gymnasium as gym
import numpy as np

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
OBSERVATIONS = {
    "Box": BOX,
    "Dict": gym.spaces.Dict({"position": BOX, "goal": gym.spaces.Discrete(4)}),
    "Tuple": gym.spaces.Tuple((BOX, gym.spaces.Discrete(4))),
    "Text": gym.spaces.Text(8),
    "Graph": gym.spaces.Graph(node_space=BOX, edge_space=None),
    "Discrete": gym.spaces.Discrete(16),
}


class SimulatorError(RuntimeError):
    pass


class LineEnv(gym.Env):
    """Episodes of 10 steps, +1 for action 1; observations drawn from the space named; with `fail_at` > 0, `step`
    raises at the env's fail_at-th step (counted over its life, across resets)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, observation="Box", fail_at=0, render_mode=None):
        self.observation_space = OBSERVATIONS[observation]
        self.fail_at, self.lived, self.t = fail_at, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.lived += 1
        self.t += 1
        if self.fail_at and self.lived >= self.fail_at:
            raise SimulatorError(f"the simulation diverged at step {self.lived}\\nits state: nan nan nan")
        return self.observation_space.sample(), float(int(action) == 1), self.t >= 10, False, {}


for name in OBSERVATIONS:
    gym.register(f"{name}Obs{TAG}-v0", entry_point=LineEnv, kwargs={"observation": name}, max_episode_steps=100)
gym.register(f"Diverging{TAG}-v0", entry_point=LineEnv, kwargs={"fail_at": FAIL_AT}, max_episode_steps=100)
'''


@dataclass
class FaultyEnvs:
    folder: Path
    module: str
    tag: str

    def observing(self, space: str) -> str:
        """The `module:EnvId` of the env whose observations are of gymnasium space `space` (Box, Dict, Tuple, Text,
        Graph, Discrete)."""
        return f"{self.module}:{space}Obs{self.tag}-v0"

    @property
    def diverging(self) -> str:
        """The `module:EnvId` of the env whose `step` raises SimulatorError at its FAIL_AT-th step."""
        return f"{self.module}:Diverging{self.tag}-v0"

    def environ(self) -> dict:
        """os.environ for a train.py subprocess that must import the module."""
        path = os.pathsep.join(filter(None, [str(self.folder), os.environ.get("PYTHONPATH")]))
        return {**os.environ, "PYTHONPATH": path}


def write_faulty_envs(folder: Path) -> FaultyEnvs:
    """The module in `folder`, with names of its own (gymnasium's registry and sys.modules live for the whole test
    session); the caller puts `folder` on sys.path and pops the module from sys.modules after."""
    tag = uuid.uuid4().hex[:8]
    module = f"faulty_envs_{tag}"
    (folder / f"{module}.py").write_text(f"TAG = {tag!r}\nFAIL_AT = {FAIL_AT}\n{SOURCE}")
    return FaultyEnvs(folder, module, tag)


def forget(envs: FaultyEnvs) -> None:
    sys.modules.pop(envs.module, None)
