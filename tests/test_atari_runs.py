"""Atari runs through train.py: ids pick the atari family by themselves, scores are whole games, runs resume.
(Every Atari set also trains, evaluates and records a video in tests/test_eval_every_set.py.)"""

from __future__ import annotations

import csv
import json

import torch

from rl.resolve import read_record

TINY_PPO = "num_steps=16,epochs=1,eval_interval=0,max_episode_steps=40,checkpoint_interval=128,log_interval=128"


def rows(out):
    with (out / "progress.csv").open() as f:
        return list(csv.DictReader(f))


def test_ppo_atari_resumes_and_reports_whole_game_scores(tmp_path, train_cli):
    """40-step games (max_episode_steps) end within the run: their scores are logged apart from the clipped
    per-life returns, and a second command with a larger budget continues from the checkpoint."""
    out = tmp_path / "ppo"
    args = ("--hparams", "ppo_atari", "--output_dir", str(out), "--eval_episodes", "2", "--hparam_override", TINY_PPO)
    res = train_cli(*args, "--train_steps", "256")
    assert res.returncode == 0, res.stderr[-3000:]
    res = train_cli(*args, "--train_steps", "1024")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step 256" in res.stdout
    final = json.loads((out / "eval.json").read_text())
    assert final["env_steps"] == 1024 and len(final["returns"]) == 2
    assert all(-21 <= r <= 21 and r == int(r) for r in final["returns"]), "Pong scores are whole points"
    logged = rows(out)
    assert [int(r["env_steps"]) for r in logged][:2] == [128, 256]
    scores = [r for r in logged if r.get("game_score_mean")]
    assert scores and all(float(r["games"]) >= 1 for r in scores)
    assert all(float(r["perf_learn_s"]) > 0 for r in logged if r.get("perf_learn_s"))


def test_any_atari_id_selects_the_atari_family_and_bad_ids_get_one_line(tmp_path, train_cli):
    out = tmp_path / "breakout"
    res = train_cli("--hparams", "ppo_atari_impala", "--env", "ALE/Breakout-v5", "--output_dir", str(out),
                    "--train_steps", "128", "--eval_episodes", "1", "--hparam_override", TINY_PPO)
    assert res.returncode == 0, res.stderr[-3000:]
    saved = read_record(out / "hparams.json")["hparams"]
    assert saved["env"] == "ALE/Breakout-v5" and saved["env_type"] == "atari" and saved["torso"] == "impala_cnn"
    res = train_cli("--hparams", "ppo_atari", "--env", "PongNoFrameskip-v5", "--output_dir", str(tmp_path / "x"))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "PongNoFrameskip-v4" in res.stderr


def test_dqn_atari_resumes_with_its_frame_memory(tmp_path, train_cli):
    """The checkpoint holds the frame-efficient replay memory; the resumed run continues learning from it."""
    out = tmp_path / "dqn"
    args = ("--hparams", "dqn_atari", "--env", "BreakoutNoFrameskip-v4", "--output_dir", str(out),
            "--eval_episodes", "1", "--hparam_override",
            "buffer_size=2000,learning_starts=200,train_freq=4,eval_interval=0,max_episode_steps=100,"
            "checkpoint_interval=300,log_interval=100,exploration_fraction=0.5")
    res = train_cli(*args, "--train_steps", "300")
    assert res.returncode == 0, res.stderr[-3000:]
    state = torch.load(out / "checkpoints" / f"ckpt_{300:012d}.pt", weights_only=True)
    assert state["agent"]["memory"]["size"] == 300
    grad_steps = state["agent"]["counters"]["grad_steps"]
    res = train_cli(*args, "--train_steps", "400")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step 300" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 400
    state = torch.load(out / "checkpoints" / f"ckpt_{400:012d}.pt", weights_only=True)
    assert state["agent"]["memory"]["size"] == 400  # the 300 frames restored and 100 new (without them: 100)
    assert state["agent"]["counters"]["grad_steps"] == grad_steps + 100 // 4  # one every 4 steps, resumed
