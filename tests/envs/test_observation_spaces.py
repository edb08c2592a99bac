"""Observation spaces that no model takes (rl/envs/spaces.py) are refused in one line naming the env, the space and
what is supported, at start, before any agent is built: in one process, and with workers in the learner before it
forks them. The spaces that the models do take pass."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rl.envs import make_env
from rl.envs.spaces import SHOWN, check_observation_space, describe
from rl.errors import ConfigError
from rl.registry import hparams as sets


def main(capsys, *argv: str) -> tuple[int, str, str]:
    """train.py in this process: its exit status, stdout and stderr."""
    import train

    status = train.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("space", ["Text", "Graph", "Discrete"])
def test_an_observation_space_no_model_takes_is_one_line_at_start(tmp_path, capsys, faulty, space, workers):
    """Bugs caught: a Text or Graph space reaching the MLP (a TypeError traceback from np.prod(None)), a Discrete one
    reaching its forward pass (an IndexError after the run started); with workers, the check left to the workers (the
    learner builds its agent from the spaces first, and the workers would fail three times before the run ends)."""
    env_id = faulty.observing(space)
    status, out, err = main(capsys, "--hparams", "ppo_cartpole", "--env", env_id, "--output_dir",
                            str(tmp_path / "run"), "--train_steps", "2000", "--num_workers", str(workers))
    assert status == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: env {env_id!r} has the observation space {space}("), err
    assert "supported are Box (or MultiBinary, MultiDiscrete) observations of at least one dimension" in err
    assert "restarted" not in out and "collection worker" not in err  # the learner refused it, no worker did


def test_frozen_lake_is_refused_with_the_flattening_hint(tmp_path, capsys):
    """FrozenLake's Discrete observation is one integer, which no torso one-hot encodes: the hint names the wrapper
    that does. Bugs caught: FrozenLake reaching the MLP (an IndexError traceback once the run started), the hint
    dropped."""
    status, _, err = main(capsys, "--hparams", "dqn_cartpole", "--env", "FrozenLake-v1", "--output_dir",
                          str(tmp_path / "run"), "--train_steps", "500")
    assert status == 2 and err.count("\n") == 1, err
    assert "env 'FrozenLake-v1' has the observation space Discrete(16)" in err
    assert err.rstrip().endswith("gymnasium.wrappers.FlattenObservation makes this one a Box"), err


def test_the_spaces_the_models_take_pass():
    """Bug caught: a check that refuses more than the models do (MultiBinary and MultiDiscrete train today, and so
    does any Box of one dimension or more, and a Dict or Tuple of those and of Discrete: the multi-input torso)."""
    box = gym.spaces.Box(-1, 1, (4,))
    for space in (box, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
                  gym.spaces.Box(0, 10, (3, 4), np.int64), gym.spaces.MultiBinary(5), gym.spaces.MultiBinary([2, 3]),
                  gym.spaces.MultiDiscrete([3, 4, 5]), gym.spaces.Dict({"a": box, "b": gym.spaces.Discrete(3)}),
                  gym.spaces.Tuple((box, gym.spaces.MultiBinary(2)))):
        check_observation_space("SomeEnv-v0", space)
    with pytest.raises(ConfigError, match=r"observation space Box\(-1.0, 1.0, \(\), float32\)"):
        check_observation_space("SomeEnv-v0", gym.spaces.Box(-1, 1, ()))  # a scalar: the MLP flattens from dim 1


def test_a_long_space_is_shortened_and_an_unflattenable_one_gets_no_hint():
    """Bugs caught: a Dict of many keys printed whole (a line of thousands of characters), the FlattenObservation hint
    given for a space it cannot flatten (Graph, Sequence)."""
    big = gym.spaces.Dict({f"sensor_{i}": gym.spaces.Box(-1, 1, (3,)) for i in range(40)})
    assert len(describe(big)) == SHOWN and describe(big).endswith("...")
    big = gym.spaces.Sequence(big)
    with pytest.raises(ConfigError) as info:
        check_observation_space("Big-v0", big)
    assert len(str(info.value)) < SHOWN + 300 and "\n" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_observation_space("Seq-v0", gym.spaces.Sequence(gym.spaces.Discrete(3)))
    assert "Sequence(Discrete(3)" in str(info.value) and "FlattenObservation" not in str(info.value)


def test_make_env_checks_and_closes_what_it_made(faulty, monkeypatch):
    """Every process makes its envs with make_env (workers, evaluation): the check is there, and the env it made is
    closed. Bug caught: the check moved to the trainer only, or an async env's processes left running."""
    closed = []
    original = gym.vector.SyncVectorEnv.close
    monkeypatch.setattr(gym.vector.SyncVectorEnv, "close", lambda self, **kw: (closed.append(self), original(self)))
    hp = sets["ppo_cartpole"]()
    hp.env = faulty.observing("Text")
    with pytest.raises(ConfigError, match=r"has the observation space Text\("):
        make_env(hp, num_envs=2, vector_mode="sync")
    assert len(closed) == 1
    hp.env = faulty.observing("Box")
    env = make_env(hp, num_envs=2, vector_mode="sync")
    assert env.single_observation_space.shape == (2,)
    env.close()
