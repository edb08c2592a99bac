"""Learning test: PQN learns CartPole-v1 through train.py, judged by its final greedy evaluation.

`pqn_cartpole` is CleanRL's pqn.py, which CleanRL runs for 500k steps (495 +- 7): too long for a test, and cut short
its slow schedule learns little (best of 100k steps here: about 100, CleanRL's own script the same). The test keeps
its network, RAdam, lambda and epsilon schedule and takes four times the gradient steps per rollout (minibatches of
32), a larger rate and gamma 0.98, over 50k steps. Measured (final evaluation, 10 greedy episodes): seeds 0-6 all
scored 500, where a random policy scores about 22 and a collapsed one (one action always) 9.
"""

import json

import pytest

SETTINGS = "lr=3e-3,batch_size=32,gamma=0.98,eval_interval=0,checkpoint_interval=0"


@pytest.mark.learning
def test_pqn_cartpole_learns(tmp_path, train_cli):
    out = tmp_path / "pqn"
    res = train_cli("--hparams", "pqn_cartpole", "--output_dir", str(out), "--seed", "0", "--train_steps", "50000",
                    "--eval_episodes", "10", "--hparam_override", SETTINGS, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == 50_000
    assert final["mean_return"] >= 400, final
