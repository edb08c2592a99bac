"""Dict and Tuple observations end to end through train.py: PPO on PickItemsDict-v0 (the multi-input torso and a
mask inside the observation) in one process and with collection workers, checkpointed and resumed; DQN's replay
rows from workers with n-step windows; a Tuple observation on a set written for CartPole."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from rl.checkpoint import load_checkpoint


def rows(folder) -> list[dict]:
    with open(folder / "progress.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_dict_observation_env_trains_checkpoints_and_resumes(train_cli, tmp_path, workers):
    """Bugs caught: a DictObs that a worker's rollout buffer, the learner's rollout or a checkpoint cannot hold (a
    crash, or a checkpoint that weights_only loading refuses), a resumed run that starts over (its memory or
    counters lost)."""
    folder = tmp_path / "run"
    args = ("--hparams", "ppo_masked_pick_items_dict", "--output_dir", str(folder), "--num_workers", str(workers),
            "--hparam_override", "checkpoint_interval=1024,eval_episodes=20")
    first = train_cli(*args, "--train_steps", "2048", timeout=240)
    assert first.returncode == 0, first.stderr[-2000:]
    state = load_checkpoint(folder, "latest")[0]["agent"]
    assert state["counters"]["env_steps"] == 2048
    assert any(k.startswith("torsos.0.encoders.") for k in state["networks"]["model"])  # the multi-input torso
    second = train_cli(*args, "--train_steps", "4096", timeout=240)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "resuming from step 2048" in second.stdout
    assert int(rows(folder)[-1]["env_steps"]) == 4096
    assert json.loads((folder / "eval.json").read_text())["mean_return"] > 4.0  # a random legal policy's 4.0


def test_dqn_takes_dict_observation_rows_from_workers(train_cli, tmp_path):
    """Replay rows of Dict observations shipped by two collection workers (Ape-X's path), through 3-step windows
    into prioritized replay. Bug caught: rows of a Dict observation (one array per entry) lost or refused between
    the worker's buffer and the learner's memory."""
    folder = tmp_path / "run"
    result = train_cli("--hparams", "dqn_masked_pick_items", "--env", "PickItemsDict-v0", "--output_dir",
                       str(folder), "--num_workers", "2", "--train_steps", "3000", "--hparam_override",
                       "n_step=3,memory=prioritized,eval_episodes=20", timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((folder / "eval.json").read_text())["mean_return"] > 3.0


def test_a_tuple_observation_trains_on_a_cartpole_set(train_cli, tmp_path, faulty):
    """A Tuple (a Box and a Discrete) through the multi-input torso with a set that names the mlp torso: the torso
    is chosen from the space. Bug caught: the Tuple refused, or read as one array."""
    folder = tmp_path / "run"
    result = train_cli("--hparams", "ppo_cartpole", "--env", faulty.observing("Tuple"), "--output_dir", str(folder),
                       "--train_steps", "512", "--hparam_override", "eval_episodes=2", env=faulty.environ(),
                       timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    weights = torch.load(folder / "checkpoints" / "best.pt", weights_only=True)["agent"]["networks"]["model"]
    assert {"torsos.0.encoders.0.layers.0.weight", "torsos.0.encoders.1.layers.0.weight"} <= set(weights)
