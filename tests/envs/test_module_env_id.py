"""gymnasium's `module:EnvId` form (`--env mypackage.envs:MyEnv-v0`, as `gym.make` accepts it): the module is
imported wherever the id is checked or an env is made (so in worker processes too), and a module that cannot be
imported is one ConfigError line naming it."""

from __future__ import annotations

import json
import os
import sys
import uuid

import pytest

from rl.envs import check_env_id, make_env, split_env_id
from rl.errors import ConfigError
from rl.registry import hparams as sets
from rl.resolve import read_record

ENV_MODULE = '''
"""A tiny env: walk along a line; +1 a step for walking right, the episode ends 5 steps from the start."""
import gymnasium as gym
import numpy as np


class WalkEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action):
        self.pos += 1 if int(action) == 1 else -1
        return self._obs(), float(int(action) == 1), abs(self.pos) >= 5, False, {}

    def _obs(self):
        return np.array([self.pos / 5, 1.0], np.float32)


gym.register(ENV_ID, entry_point=WalkEnv, max_episode_steps=50)
'''


def write_env_module(folder, module: str, env_id: str) -> None:
    """`folder/module.py`, which registers `env_id` with gymnasium when imported."""
    (folder / f"{module}.py").write_text(f"ENV_ID = {env_id!r}\n{ENV_MODULE}")


@pytest.fixture
def env_module(tmp_path, monkeypatch):
    """(module, env id) of a fresh env module on sys.path, not imported yet (unique names: gymnasium's registry and
    sys.modules live for the whole test session)."""
    tag = uuid.uuid4().hex[:8]
    module, env_id = f"walk_env_{tag}", f"Walk{tag}-v0"
    write_env_module(tmp_path, module, env_id)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield module, env_id
    sys.modules.pop(module, None)


def test_split_env_id():
    assert split_env_id("CartPole-v1") == (None, "CartPole-v1")
    assert split_env_id("mypackage.envs:MyEnv-v0") == ("mypackage.envs", "MyEnv-v0")
    for bad in ("mymod:", ":MyEnv-v0"):
        with pytest.raises(ConfigError, match="malformed env.*module:EnvId"):
            split_env_id(bad)


def test_making_the_env_imports_its_module(env_module):
    """What a worker does that did not inherit the registration (spawned, a Ray actor): make_env alone imports."""
    module, env_id = env_module
    hp = sets["dqn_cartpole"]()
    hp.env = f"{module}:{env_id}"
    assert module not in sys.modules
    env = make_env(hp, num_envs=2)
    assert module in sys.modules and hp.env == f"{module}:{env_id}"
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2, 2)
    env.close()
    assert check_env_id(hp.env).id == env_id


def test_bad_modules_are_one_line_naming_the_module(tmp_path, monkeypatch, env_module):
    module, env_id = env_module
    with pytest.raises(ConfigError, match=r"no module named 'no_such_env_module'.*PYTHONPATH") as info:
        check_env_id("no_such_env_module:MyEnv-v0")
    assert len(str(info.value).splitlines()) == 1
    with pytest.raises(ConfigError, match=rf"module {module!r} was imported but registers no 'Nope-v0'"):
        check_env_id(f"{module}:Nope-v0")
    (tmp_path / "broken_env_module.py").write_text("import gymnasium\nraise RuntimeError('no ROMs here')\n")
    with pytest.raises(ConfigError, match=r"importing module 'broken_env_module' failed: RuntimeError: no ROMs "
                                          r"here \(.*broken_env_module.py:2\)"):
        check_env_id("broken_env_module:MyEnv-v0")
    (tmp_path / "needs_dep_env_module.py").write_text("import not_installed_dep_xyz\n")
    with pytest.raises(ConfigError, match="importing module 'needs_dep_env_module' failed: ModuleNotFoundError: "
                                          "No module named 'not_installed_dep_xyz'"):
        check_env_id("needs_dep_env_module:MyEnv-v0")
    for name in ("broken_env_module", "needs_dep_env_module"):
        sys.modules.pop(name, None)


FAST = "learning_starts=100,train_freq=50,gradient_steps=5,checkpoint_interval=200,log_interval=100,eval_interval=200"


def test_train_and_evaluate_a_module_env_through_the_cli(tmp_path, train_cli):
    write_env_module(tmp_path, "mymod", "MyEnv-v0")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "run"
    res = train_cli("--hparams", "dqn_cartpole", "--env", "mymod:MyEnv-v0", "--output_dir", str(out),
                    "--train_steps", "300", "--eval_episodes", "2", "--hparam_override", FAST, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    saved = read_record(out / "hparams.json")["hparams"]
    assert saved["env"] == "mymod:MyEnv-v0" and saved["env_type"] == "gym"  # the module travels with the run
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == 300 and len(final["returns"]) == 2
    assert all(0 <= r <= 50 for r in final["returns"])  # the walk env's returns, not CartPole's
    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
                    "--test_episodes", "2", env=env)  # a fresh process: the saved id imports the module again
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((out / "eval.json").read_text())["mode"] == "test"


def test_a_bad_module_through_the_cli_is_one_line_without_traceback(tmp_path, train_cli):
    res = train_cli("--hparams", "dqn_cartpole", "--env", "no_such_env_module:MyEnv-v0", "--output_dir",
                    str(tmp_path / "run"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "no module named 'no_such_env_module'" in res.stderr
    assert not (tmp_path / "run").exists()
