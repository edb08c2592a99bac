"""Evaluation mode works for every registered hparams set: each trains for a tiny budget through `train.py`, then
`--training False` restores its checkpoint, records a video and writes eval.json. The training run's final evaluation
plays 2 episodes at once, so every set's evaluation runs on a vector env of 2 (recurrent states of 2 included);
evaluation mode without video on a restored checkpoint is tested on PPO in tests/test_train_e2e.py
(test_checkpoint_flag_picks_what_is_evaluated) and on IMPALA with workers in tests/test_elite_replay_runs.py.

The budgets are the smallest that make at least one update happen and write a checkpoint: the overrides below shrink
each family's warm-up, rollout, buffer and intervals (settings a set does not have are left alone), and
`max_episode_steps=25` keeps the evaluations and videos short (PyBullet's CPU renderer takes about 34 ms a frame and
HalfCheetah never terminates; an IMPALA CNN's greedy step on 2 Atari envs takes about 45 ms on one core: at 100 steps,
ppo_atari_impala's case took 200 s beside a training run, at 25 97 s), so a new set is covered by registering it. Sets
with collection workers train with 1 (evaluation does not use them, and each worker is a process of 2 s start-up;
tests/test_elite_replay_experiment_runs.py trains elite_buffer_vtrace's 7-worker sets with 2, tests/parallel the rest).
A case takes two train.py processes of about 2 s start-up each.
"""

from __future__ import annotations

import json

import imageio.v3 as iio
import pytest

import hparams  # noqa: F401  (registers the sets)
from rl.checkpoint import best_path, list_checkpoints
from rl.registry import hparams as sets

SETS = sets.names()


def tiny_budget(name: str) -> tuple[int, str]:
    """(train_steps, --hparam_override) for a few seconds of `name` that update at least once and checkpoint."""
    hp = sets[name]()
    has = hp.to_dict()
    over: dict = {"eval_interval": 0, "max_episode_steps": 25}  # evaluated once, at the end; short episodes
    if "num_steps" in has:  # on-policy: one short rollout, one epoch
        over.update(num_steps=16, epochs=1)
        if has.get("recurrent_seq_len"):  # PQN has a rollout and no recurrence
            over["recurrent_seq_len"] = 8
        if hp.num_envs > 16:  # pqn_atari's 128 Atari envs: their start-up alone would take most of a minute
            over["num_envs"] = 16
        steps = 16 * min(hp.num_envs, 16)
    else:  # off-policy: a short warm-up, then a few training phases of a few gradient steps
        over.update(learning_starts=100, buffer_size=1000, train_freq=25, gradient_steps=2)
        if has.get("update_every"):
            over["update_every"] = 25
        if has.get("num_updates"):
            over["num_updates"] = 2
        steps = 200
        if has.get("num_workers"):  # worker shipments of 25 vector steps: the budget is a whole number of them
            over["worker_steps"] = 25
    if has.get("num_workers", 0) > 1:
        over["num_workers"] = 1
    over.update(checkpoint_interval=steps // 2, log_interval=steps // 2)
    return steps, ",".join(f"{k}={v}" for k, v in over.items())


def test_every_set_is_covered():
    assert len(SETS) >= 24 and {"ppo_cartpole", "sac_ant_bullet", "rainbow_cartpole"} <= set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_train_then_evaluate_with_video(tmp_path, train_cli, name):
    out = tmp_path / name
    steps, override = tiny_budget(name)
    res = train_cli("--hparams", name, "--output_dir", str(out), "--train_steps", str(steps), "--eval_episodes", "2",
                    "--hparam_override", override)
    assert res.returncode == 0, res.stderr[-3000:]
    assert [s for s, _ in list_checkpoints(out)][-1] == steps
    assert best_path(out).is_file()
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == steps and final["best"]["step"] <= steps and len(final["returns"]) == 2

    res = train_cli("--hparams", name, "--output_dir", str(out), "--training", "False", "--test_episodes", "1",
                    "--record_video", "True")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    ev = json.loads((out / "eval.json").read_text())
    assert ev["mode"] == "test" and ev["checkpoint"] == "latest" and ev["env_steps"] == steps
    assert ev["checkpoint_path"].endswith(f"ckpt_{steps:012d}.pt") and len(ev["returns"]) == 1
    (video,) = ev["videos"]
    assert video == str(out / "videos" / "episode_000.mp4")
    frames = iio.imread(video)
    assert frames.ndim == 4 and frames.shape[0] >= 1 and frames.shape[-1] == 3 and frames.max() > frames.min()
    if sets[name]().env.startswith("CartPole"):  # reward 1 per step: one frame per step of the episode
        assert frames.shape[0] == int(ev["returns"][0])
