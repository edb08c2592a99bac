"""elite_buffer_vtrace's published experiment through train.py: its sets on Seaquest (elite, counter and uniform
replay), with 2 workers and the fill-in lowered to 100 sequences (5,000 agent steps), learn a few batches and log the
volatility measures as progress.csv columns (about 12 s a set). Their Breakout twins differ only in the game and the
replay's 0.5/0.5 split: that split trains on Breakout in tests/test_elite_replay_runs.py (queue + standard through
--env, and elite + queue with 2 workers on Pong), and each twin trains and evaluates in tests/test_eval_every_set.py."""

from __future__ import annotations

import csv

import pytest
import torch

OVERRIDE = "training_fill_in_factor=0,log_interval=500,eval_interval=0,checkpoint_interval=6000,max_episode_steps=200"
RANKED = {"elite_impala_seaquest": True, "counter_impala_seaquest": False, "uniform_impala_seaquest": False}


@pytest.mark.parametrize("name", RANKED)
def test_experiment_set_learns_and_logs_its_volatility(tmp_path, train_cli, name):
    out = tmp_path / name
    res = train_cli("--hparams", name, "--output_dir", str(out), "--num_workers", "2", "--train_steps", "6000",
                    "--eval_episodes", "1", "--hparam_override", OVERRIDE, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    with (out / "progress.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("volatility_policy_kl")]
    assert rows, "no update logged"
    last = rows[-1]
    assert float(last["volatility_policy_kl"]) > 0 and float(last["volatility_replay_kl"]) >= 0
    assert float(last["learning_rate"]) < 8e-4  # the power-2 decay has begun
    if name.startswith(("elite", "counter")):
        assert 5.9 < float(last["replay_lambda"]) < 6.0  # annealing over 2 x 70,000 batches
    assert bool(last.get("replay_selected_distance")) == RANKED[name]  # only real distances are logged
    state = torch.load(out / "checkpoints" / f"ckpt_{6000:012d}.pt", weights_only=True)["agent"]
    assert state["probe"]["obs"].shape == (256, 4, 84, 84)  # the fixed probe set is checkpointed
    assert state["counters"]["updates"] >= 1
