"""PyBullet robots (Coumans and Bai, pybullet; the `pybullet-envs-gymnasium` port) and headless MuJoCo rendering.

Importing this module registers the PyBullet ids (`HalfCheetahBulletEnv-v0`, `AntBulletEnv-v0`, `HopperBulletEnv-v0`,
`Walker2DBulletEnv-v0`, `InvertedPendulumBulletEnv-v0`, ...) with gymnasium, so `check_env_id` and the `gym` env
family find them like any other id; the package only registers ids on import (pybullet itself loads on the first
`make`). Without the package, the five ids above are registered with an entry point that says how to install it.
MuJoCo ids (`HalfCheetah-v5` ...) come with gymnasium[mujoco]; with no display, MuJoCo renders `rgb_array` frames
through EGL (MUJOCO_GL=egl, unless already set, or no libEGL is installed).
"""

from __future__ import annotations

import ctypes.util
import os

import gymnasium as gym

from rl.errors import ConfigError

BULLET_IDS = ("HalfCheetahBulletEnv-v0", "AntBulletEnv-v0", "HopperBulletEnv-v0", "Walker2DBulletEnv-v0",
              "InvertedPendulumBulletEnv-v0")


def headless_gl(environ, find_library=ctypes.util.find_library) -> str | None:
    """The MUJOCO_GL to set: "egl" with no display and a libEGL to load, else None (the user's setting, a display's
    GLFW, or MuJoCo's own default). Where libEGL is absent (a slim container image), asking for EGL would make
    `import mujoco` fail with a traceback even for runs that never render."""
    if "MUJOCO_GL" in environ or environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"):
        return None
    return "egl" if find_library("EGL") else None


if (_gl := headless_gl(os.environ)) is not None:
    os.environ["MUJOCO_GL"] = _gl  # read by mujoco when it is first imported, i.e. at gym.make


def missing_pybullet(**kwargs):
    raise ConfigError("PyBullet envs need the pybullet and pybullet-envs-gymnasium packages: "
                      "`.venv/bin/pip install pybullet pybullet-envs-gymnasium` (they are in requirements.txt)")


try:
    import pybullet_envs_gymnasium  # noqa: F401  (registers the PyBullet ids)
except ImportError:
    for _id in BULLET_IDS:
        if _id not in gym.registry:
            gym.register(_id, entry_point=missing_pybullet)
