"""PyBullet robots (Coumans and Bai, pybullet; the `pybullet-envs-gymnasium` port) and headless MuJoCo rendering.

Importing this module registers the PyBullet ids (`HalfCheetahBulletEnv-v0`, `AntBulletEnv-v0`, `HopperBulletEnv-v0`,
`Walker2DBulletEnv-v0`, `InvertedPendulumBulletEnv-v0`, ...) with gymnasium, so `check_env_id` and the `gym` env
family find them like any other id; the package only registers ids on import (pybullet itself loads on the first
`make`). Without the package, the five ids above are registered with an entry point that says how to install it.
MuJoCo ids (`HalfCheetah-v5` ...) come with gymnasium[mujoco]; with no display, MuJoCo renders `rgb_array` frames
through EGL (MUJOCO_GL=egl, unless already set).
"""

from __future__ import annotations

import os

import gymnasium as gym

from rl.errors import ConfigError

BULLET_IDS = ("HalfCheetahBulletEnv-v0", "AntBulletEnv-v0", "HopperBulletEnv-v0", "Walker2DBulletEnv-v0",
              "InvertedPendulumBulletEnv-v0")

if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("MUJOCO_GL", "egl")  # read by mujoco when it is first imported, i.e. at gym.make


def missing_pybullet(**kwargs):
    raise ConfigError("PyBullet envs need the pybullet and pybullet-envs-gymnasium packages: "
                      "`.venv/bin/pip install pybullet pybullet-envs-gymnasium` (they are in requirements.txt)")


try:
    import pybullet_envs_gymnasium  # noqa: F401  (registers the PyBullet ids)
except ImportError:
    for _id in BULLET_IDS:
        if _id not in gym.registry:
            gym.register(_id, entry_point=missing_pybullet)
