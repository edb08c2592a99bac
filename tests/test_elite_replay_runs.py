"""elite_buffer_vtrace's commands through train.py: `elite_impala_pong` with 2 workers trains from its elite and fresh
buffers, checkpoints them, resumes and evaluates; `impala_pong` runs on Breakout through --env; a bad
--replay_parameters is one line."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from rl.resolve import read_record

# small buffers so that training starts within the run: custom 30 (fill-in max(6, 10 x 4) = 30), batches of 4
ELITE = ('replay_parameters=[{"type":"custom","capacity":30,"sample_ratio":0.5,"dist_function":"ln_norm",'
         '"sample_strategy":"elite_sampling","lambda_batch_multiplier":6,"alfa_annealing_factor":2.0},'
         '{"type":"queue","capacity":1,"sample_ratio":0.5}]')
SMALL = "batch_rollouts=4,eval_interval=0,checkpoint_interval=400,log_interval=200,max_episode_steps=200"


def rows(out):
    with (out / "progress.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_elite_impala_pong_with_two_workers_trains_checkpoints_resumes_and_evaluates(tmp_path, train_cli):
    out = tmp_path / "elite"
    args = ("--hparams", "elite_impala_pong", "--output_dir", str(out), "--num_workers", "2", "--eval_episodes", "1",
            "--hparam_override", f"{SMALL},lr_scheduler_steps=20,{ELITE}")
    res = train_cli(*args, "--train_steps", "800", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    state = torch.load(out / "checkpoints" / f"ckpt_{800:012d}.pt", weights_only=True)
    agent = state["agent"]
    replay = agent["sequence_replay"]
    custom, queue = replay["buffers"]
    assert custom["type"] == "custom" and custom["size"] == 30 and queue["type"] == "queue"
    assert int(custom["counters"].max()) > 1  # sequences were sampled (counters start at 1)
    assert custom["sampler_calls"] > 0 and custom["store"]["features"].shape[-1] == 512  # elite draws, 512 features
    updates = agent["counters"]["updates"]
    assert updates > 0
    res = train_cli(*args, "--train_steps", "1200", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming from step" in res.stdout
    resumed = torch.load(out / "checkpoints" / f"ckpt_{1200:012d}.pt", weights_only=True)["agent"]
    assert resumed["counters"]["updates"] > updates  # learning went on from the restored buffers
    assert resumed["sequence_replay"]["buffers"][0]["sampler_calls"] > custom["sampler_calls"]
    logged = [r for r in rows(out) if r.get("replay_lambda")]
    assert logged and float(logged[-1]["replay_lambda"]) < 6.0  # lambda anneals towards 1 (over 2 x 20 batches)
    res = train_cli(*args, "--train_steps", "1200", "--training", "False", "--test_episodes", "2", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    final = json.loads((out / "eval.json").read_text())
    assert len(final["returns"]) == 2 and all(-21 <= r <= 21 for r in final["returns"])


@pytest.mark.slow
def test_impala_pong_runs_on_breakout_through_env(tmp_path, train_cli):
    out = tmp_path / "breakout"
    replay = ('replay_parameters=[{"type":"queue","capacity":1,"sample_ratio":0.5},'
              '{"type":"standard","capacity":30,"sample_ratio":0.5}]')
    res = train_cli("--hparams", "impala_pong", "--env", "BreakoutNoFrameskip-v4", "--output_dir", str(out),
                    "--num_workers", "0", "--train_steps", "600", "--eval_episodes", "1",
                    "--hparam_override", f"{SMALL},{replay}", timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    saved = read_record(out / "hparams.json")["hparams"]
    assert saved["env"] == "BreakoutNoFrameskip-v4" and saved["agent"] == "impala"
    assert any(r.get("losses_clear_policy") for r in rows(out))  # CLEAR's terms are on in elite_buffer_vtrace's sets


@pytest.mark.parametrize("value, message", [
    ('[{"type":"fifo","capacity":1,"sample_ratio":1}]', "unknown type 'fifo'"),
    ('[{"type":"queue","capacity":1,"sample_ratio":1,"size":3}]', "unknown key 'size'"),
    ('[{"type":"queue","capacity":1,"sample_ratio":0.6}]', "must sum to 1"),
    ('[{"type":"standard","capacity":0,"sample_ratio":1}]', "capacity must be >= 1"),
    ('[{"type":"queue","capacity":1,"sample_ratio":0.95},{"type":"standard","capacity":9,"sample_ratio":0.05}]',
     "is 9.5 sequences: a share must be a whole number"),  # batch 10: elite_buffer_vtrace refuses it too
    ('[{"type":"queue","capacity":1,"sample_ratio":0},{"type":"standard","capacity":9,"sample_ratio":1}]',
     "is 0 sequences"),
])
def test_bad_replay_parameters_are_one_line(tmp_path, train_cli, value, message):
    res = train_cli("--hparams", "impala_pong", "--output_dir", str(tmp_path / "bad"), "--train_steps", "100",
                    "--hparam_override", f"replay_parameters={value}", timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.stderr
