"""Env registry: families of gymnasium vector envs, built from hparams.

Every env is a gymnasium vector env; a single env is a vector of one. `vector_mode` picks the engine:
`sync` / `async` (gymnasium's Sync/AsyncVectorEnv with same-step autoreset, one seed per env), `native` (the env's own
vectorised entry point, e.g. CartPole's numpy implementation: same-step where `cartpole_vector` gives it one,
next-step autoreset otherwise) or `auto` (a same-step native env where there is one, sync otherwise: always
same-step autoreset).

Each family is an `EnvFamily` (rl/envs/family.py) that checks its own ids; `resolve_env(hp)` picks the family and
lets it check `hp.env`. `make_env` refuses an observation space that no model takes (rl/envs/spaces.py), whichever
family made the env. The gym family accepts gymnasium's `module:EnvId` form (`mypackage.envs:MyEnv-v0`, as
`gym.make` does): the module is imported, which registers `EnvId`, wherever the id is checked or an env is made, so
worker processes that did not inherit the registration (spawned, Ray actors) import it too. `hp.env` keeps the
module form, so the run's hparams.json resumes and evaluates the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import traceback
import warnings
from functools import partial

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from rl.envs import (
    atari,  # noqa: F401  (registers the atari family)
    bullet,  # noqa: F401  (registers the PyBullet ids with gymnasium)
    masked_cartpole,  # noqa: F401  (registers CartPoleNoVel-v1)
    pick_items,  # noqa: F401  (registers PickItems-v0, PickItemsDict-v0)
)
from rl.envs.action_masks import InfoActionMask, gives_info_mask
from rl.envs.cartpole_vector import SAME_STEP_NATIVE
from rl.envs.family import EnvFamily, resolve_env  # noqa: F401  (resolve_env: the settings resolver's entry)
from rl.envs.spaces import check_observation_space
from rl.envs.time_feature import TimeFeature
from rl.errors import ConfigError
from rl.registry import envs

VECTOR_MODES = ("auto", "sync", "async", "native")


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """(module, id) of gymnasium's `module:EnvId` form, (None, id) of a plain id."""
    module, colon, name = env_id.partition(":")
    if not colon:
        return None, env_id
    if not module.strip() or not name.strip():
        raise ConfigError(f"malformed env {env_id!r}: the module form is module:EnvId, e.g. "
                          f"'mypackage.envs:MyEnv-v0'")
    return module.strip(), name.strip()


def import_env_module(env_id: str) -> str:
    """Import the module of a `module:EnvId` id (importing it registers EnvId with gymnasium) and return the bare
    id; a plain id is returned as it is. A module that fails to import is a one-line ConfigError naming it."""
    module, name = split_env_id(env_id)
    if module is None:
        return name
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            raise ConfigError(f"env {env_id!r}: no module named {module!r} (install it, or put the folder that "
                              f"holds it on PYTHONPATH)") from None
        raise ConfigError(f"env {env_id!r}: importing module {module!r} failed: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the module raises: one line naming it and where
        raise ConfigError(f"env {env_id!r}: importing module {module!r} failed: {_one_line(exc)}") from None
    return name


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message (file:line)`, the frame being the innermost one that raised it."""
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}{': ' + text if text else ''}{where}"


def check_env_id(env_id: str) -> gym.envs.registration.EnvSpec:
    """The spec of a registered gymnasium id (importing the module of a `module:EnvId` id first), or a ConfigError
    naming the closest ids."""
    module, _ = split_env_id(env_id)
    name = import_env_module(env_id)
    try:
        return gym.spec(name)
    except gym.error.Error:
        valid = list(gym.registry)
        close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else "see gymnasium.pprint_registry() for ids"
        where = f" (module {module!r} was imported but registers no {name!r})" if module else ""
        raise ConfigError(f"unknown env {env_id!r}{where}: {hint}") from None


def make_gym_vec(env_id: str, num_envs: int, vector_mode: str = "sync", render_mode: str | None = None,
                 wrappers=None, **env_kwargs) -> gym.vector.VectorEnv:
    """Make a vector of `num_envs` copies of `env_id` with the requested engine."""
    if vector_mode not in VECTOR_MODES:
        raise ConfigError(f"unknown vector_mode {vector_mode!r}: valid: {', '.join(VECTOR_MODES)}")
    spec = check_env_id(env_id)
    env_id = spec.id  # without the module of a `module:EnvId` id: imported, it is registered
    if vector_mode == "auto":
        vector_mode = "native" if env_id in SAME_STEP_NATIVE and not wrappers else "sync"
    if vector_mode == "native":
        if not spec.vector_entry_point:
            raise ConfigError(f"env {env_id!r} has no native vector entry point: use vector_mode=sync or async")
        if env_id in SAME_STEP_NATIVE:  # the same numpy code, resetting finished envs in the same step
            spec = dataclasses.replace(spec, vector_entry_point=SAME_STEP_NATIVE[env_id])
        return gym.make_vec(spec, num_envs, vectorization_mode="vector_entry_point", render_mode=render_mode,
                            **env_kwargs)
    kwargs = {"autoreset_mode": AutoresetMode.SAME_STEP}
    env = gym.make_vec(env_id, num_envs, vectorization_mode=vector_mode, vector_kwargs=kwargs,
                       wrappers=wrappers, render_mode=render_mode, **env_kwargs)
    return quiet_worker_errors(env) if vector_mode == "async" else env


def quiet_worker_errors(env: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """gymnasium's AsyncVectorEnv logs an exception raised in one of its env processes as warnings (its traceback,
    several lines on stderr) before raising it again here: they would spoil the one line that the run makes of an
    env's error (rl/collector.py). The exception is raised the same, the logged lines kept as a note on it (shown in
    its traceback, where a developer looks)."""
    raise_if_errors = getattr(env, "_raise_if_errors", None)
    if raise_if_errors is None:  # another gymnasium: its errors are its own
        return env

    def raise_quietly(successes) -> None:
        successes = list(successes)
        if all(successes):
            return
        with warnings.catch_warnings(record=True) as logged:
            warnings.simplefilter("always")
            try:
                raise_if_errors(successes)
            except Exception as exc:
                exc.add_note(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(str(w.message) for w in logged)))
                raise

    env._raise_if_errors = raise_quietly
    return env


@envs.register("gym")
class GymFamily(EnvFamily):
    """Any registered gymnasium id, unwrapped (classic control, Box2D, MuJoCo, PyBullet ...), or `module:EnvId`;
    `max_episode_steps` > 0 replaces the id's time limit; `time_feature` appends the time left
    (rl/envs/time_feature.py)."""

    @classmethod
    def check(cls, hp) -> None:
        check_env_id(hp.env)

    @classmethod
    def make(cls, hp, num_envs: int, render_mode: str | None = None, vector_mode: str | None = None):
        limit = {"max_episode_steps": hp.max_episode_steps} if hp.max_episode_steps > 0 else {}
        wrappers = [partial(TimeFeature, max_steps=hp.max_episode_steps)] if hp.time_feature else []
        make = partial(make_gym_vec, hp.env, num_envs, vector_mode or hp.vector_mode, render_mode, **limit)
        masked = gives_info_mask(hp.env)  # info["action_mask"] goes into the observation (rl/envs/action_masks.py)
        env = make(wrappers=[*wrappers, InfoActionMask] if masked else wrappers or None)
        if masked is None and gives_info_mask(hp.env, env):  # found out just now: made again, with the mask
            env.close()
            env = make(wrappers=[*wrappers, InfoActionMask])
        return env


def make_env(hp, num_envs: int | None = None, render_mode: str | None = None, vector_mode: str | None = None):
    """The vector env that the hparams describe (`env_type` picks the family, `env` the id); an observation space that
    no model takes is a one-line ConfigError (rl/envs/spaces.py), here where every process makes its envs."""
    family = envs[hp.env_type]
    env = family.make(hp, hp.num_envs if num_envs is None else num_envs, render_mode=render_mode,
                      vector_mode=vector_mode)
    try:
        check_observation_space(hp.env, env.single_observation_space, getattr(env, "single_action_space", None))
    except ConfigError:
        env.close()
        raise
    return env


def has_same_step_native(env_id: str) -> bool:
    """True when `vector_mode=native` gives `env_id` a vector env with same-step autoreset."""
    return split_env_id(env_id)[1] in SAME_STEP_NATIVE


def is_same_step(env: gym.vector.VectorEnv) -> bool:
    """True when the env reports an episode's final observation in the step that ends it."""
    return env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP) == AutoresetMode.SAME_STEP
