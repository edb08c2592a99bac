"""Learning tests of the Scheme's sets, each with 2 asynchronous collection workers, judged by the best periodic
evaluation (checkpoints/best.pt). Asynchronous runs are not bitwise reproducible (which weights a worker acts with
depends on timing), so the thresholds leave room.

Measured on this 2-core machine (best evaluation, 10 episodes):
- impala_cartpole, 60k steps: with evaluations every 20k steps, seed 7 peaked at 186.7 here and seed 0 at 188.6 on
  CI's machine (its policy still swings: no entropy bonus, no decay); evaluated every 10k steps, seeds 0-7 peak at
  500 x8 on both cores and 496-500 on one core (`taskset -c 0`). Under load (two training runs and other tests on
  the 2 cores) its evaluations swing between about 100 and 500: of 15 runs (seeds 0 x3, 1-12) 14 peaked at 500 and
  seed 8 at 328.1 (257.9, 192.4, 270.9, 328.1, 87.7, 281.2), and a full suite's seed 0 once at 383.8. Threshold 300:
  every run reached it, a random policy scores about 22.
- apex_dqn_cartpole (dqn_cartpole + prioritized + 3-step, 2 workers with Ape-X's fixed epsilons 0.4 and 0.4^8), seeds
  0-4: 500 at 10k, 10k, 10k, 30k and 20k steps (with the learner's schedule instead, over 50k steps: 20k, 20k, 20k,
  10k and 30k); here 30k steps, threshold 300.
"""

import json

import pytest


@pytest.mark.learning
@pytest.mark.parametrize("name, steps, threshold", [("impala_cartpole", 60_000, 300),
                                                    ("apex_dqn_cartpole", 30_000, 300)])
def test_scheme_set_learns_cartpole_with_two_workers(tmp_path, train_cli, name, steps, threshold):
    out = tmp_path / name
    res = train_cli("--hparams", name, "--output_dir", str(out), "--seed", "0", "--train_steps", str(steps),
                    "--eval_episodes", "10", timeout=900)
    assert res.returncode == 0, res.stderr
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] >= steps
    assert final["best"]["mean_return"] >= threshold, final  # a random policy scores about 22
    assert "; restarted (" not in res.stdout  # no worker was lost on the way
