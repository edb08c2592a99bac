"""Learning test: DQN with rl-baselines3-zoo's CartPole settings solves CartPole-v1 at a fixed seed."""

import json

import pytest


@pytest.mark.learning
def test_dqn_cartpole_solves_cartpole(tmp_path, train_cli):
    out = tmp_path / "dqn"
    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--seed", "0", "--eval_episodes", "10",
                    timeout=900)
    assert res.returncode == 0, res.stderr
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == 50_000
    assert final["mean_return"] >= 475, final
