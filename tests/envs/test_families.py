"""Env families own their ids: `claims` (an id that selects the family whatever the set says) and `check` (a bad id is
one ConfigError line); `resolve_env` knows nothing else, so a new family needs no edit of the resolver."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest

from rl.envs import EnvFamily, make_env, resolve_env
from rl.errors import ConfigError
from rl.registry import RegistryError, envs
from rl.registry import hparams as sets


@pytest.fixture
def toy_family():
    """A family registered for one test: it claims `Toy-*` ids and accepts only `Toy-v0`."""

    class ToyFamily(EnvFamily):
        @classmethod
        def claims(cls, env_id):
            return env_id.startswith("Toy-")

        @classmethod
        def check(cls, hp):
            if hp.env != "Toy-v0":
                raise ConfigError(f"the toy family has one id, Toy-v0, not {hp.env!r}")

        @classmethod
        def make(cls, hp, num_envs, render_mode=None, vector_mode=None):  # what make_env reads of a vector env
            return SimpleNamespace(made=("toy", hp.env, num_envs), single_observation_space=gym.spaces.Box(0, 1, (3,)))

    envs.register("toy")(ToyFamily)
    yield ToyFamily
    envs.unregister("toy")


def test_an_atari_id_selects_the_atari_family_whatever_the_set():
    hp = sets["dqn_cartpole"]()
    assert hp.env_type == "gym"
    hp.env = "ALE/Pong-v5"
    resolve_env(hp)
    assert hp.env_type == "atari"
    hp.env = "PongNoFrameskip-v5"  # looks Atari-like but is no Atari id: the gym family says it is unknown
    hp.env_type = "gym"
    with pytest.raises(ConfigError, match="unknown env 'PongNoFrameskip-v5'"):
        resolve_env(hp)


def test_each_family_checks_its_own_ids():
    hp = sets["ppo_atari"]()
    hp.env = "CartPole-v1"  # an atari set keeps its family: its check says what an Atari id looks like
    with pytest.raises(ConfigError, match="env_type=atari needs an Atari id"):
        resolve_env(hp)
    hp.env = "BreakoutXNoFrameskip-v4"
    with pytest.raises(ConfigError, match="did you mean 'breakout'"):
        resolve_env(hp)
    hp = sets["dqn_cartpole"]()
    hp.env = "CartPole-v7"
    with pytest.raises(ConfigError, match="unknown env 'CartPole-v7'.*CartPole-v1"):
        resolve_env(hp)
    hp.env, hp.env_type = "CartPole-v1", "gymm"
    with pytest.raises(RegistryError, match="unknown envs 'gymm'.*'gym'"):
        resolve_env(hp)


def test_a_new_family_plugs_in_without_touching_the_resolver(toy_family):
    hp = sets["dqn_cartpole"]()
    hp.env = "Toy-v0"
    resolve_env(hp)  # claimed by the toy family, checked by it
    assert hp.env_type == "toy"
    assert make_env(hp, num_envs=3).made == ("toy", "Toy-v0", 3)
    hp.env = "Toy-v9"
    with pytest.raises(ConfigError, match="one id, Toy-v0"):
        resolve_env(hp)


def test_an_id_claimed_by_two_families_needs_env_type(toy_family):
    class Greedy(EnvFamily):
        @classmethod
        def claims(cls, env_id):
            return True

    envs.register("greedy")(Greedy)
    try:
        hp = sets["dqn_cartpole"]()
        hp.env = "Toy-v0"
        with pytest.raises(ConfigError, match="claimed by the env families greedy and toy"):
            resolve_env(hp)
        hp.env_type = "toy"  # the set's own family wins when it claims the id too
        resolve_env(hp)
        assert hp.env_type == "toy"
    finally:
        envs.unregister("greedy")
