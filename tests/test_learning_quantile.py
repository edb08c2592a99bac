"""Learning test: QR-DQN with rl-baselines3-zoo's CartPole settings (`qrdqn_cartpole`) learns CartPole-v1 within
20k of its 50k steps, judged by its best periodic evaluation (the one `--checkpoint best` restores).

Measured (best greedy evaluation of 5 episodes, every 5k steps, over 20k steps): seeds 0-4 reached 257 / 428 / 375 /
229 / 223; a random policy scores about 22. The threshold 150 holds for all five, with room for another CPU's
rounding.
"""

import json

import pytest


@pytest.mark.learning
@pytest.mark.slow
def test_qrdqn_cartpole_learns(tmp_path, train_cli):
    out = tmp_path / "qrdqn"
    res = train_cli("--hparams", "qrdqn_cartpole", "--output_dir", str(out), "--seed", "0", "--train_steps", "20000",
                    "--eval_episodes", "5", "--hparam_override", "eval_interval=5000", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == 20_000
    assert final["best"]["mean_return"] >= 150, final
