"""A run folder has one owner, and nothing is written to it before everything a command gives has been checked:
two writers, a refused resume, a run resumed with another seed or env, a deleted checkpoints/, a NaN reward in an
evaluation or in training."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

import train
from rl.checkpoint import list_checkpoints, read
from rl.errors import FolderBusy
from rl.folder import LOCK, FolderLock, holder

ROOT = Path(__file__).resolve().parents[1]
QUICK = "eval_interval=0,log_interval=100,checkpoint_interval=200,learning_starts=100"


def quick_args(out: Path, steps: int = 300, extra: str = "", *more: str) -> list[str]:
    return ["--hparams", "dqn_cartpole", "--output_dir", str(out), "--train_steps", str(steps),
            "--eval_episodes", "2", "--hparam_override", ",".join(p for p in (QUICK, extra) if p), *more]


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def snapshot_folder(out: Path) -> dict[str, bytes]:
    """Every file under `out` (but TensorBoard's events) with its bytes: what a refusal must leave as it was."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_second_process_on_a_folder_in_use_is_refused_and_the_first_finishes_alone(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "train.py", *quick_args(out, steps=3000, extra="log_interval=50")]
    first = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while holder(out) is None and time.time() < deadline:
            time.sleep(0.05)
        assert holder(out)["pid"] == first.pid
        second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr
        line = one_error_line(second.stderr)
        assert f"is in use by pid {first.pid} on " in line and "another --output_dir" in line
        assert "hparams set" not in second.stdout  # the settings are printed only once a run starts
    finally:
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr
    steps = [int(r["env_steps"]) for r in csv.DictReader(open(out / "progress.csv"))]
    assert all(a <= b for a, b in zip(steps, steps[1:])), steps  # one history, not two interleaved
    assert steps[-1] == 3000 and not (out / LOCK).exists()  # the owner gives the folder up when it ends


def test_the_lock_is_the_kernels_a_dead_owners_file_does_not_block(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text('{"pid": 999999, "host": "elsewhere"}')  # left by a SIGKILL: nobody holds it
    assert holder(out) is None
    with FolderLock(out):
        assert holder(out)["pid"] == os.getpid()
        with pytest.raises(FolderBusy, match=f"in use by pid {os.getpid()}"):
            FolderLock(out).acquire()  # another open file of the same folder: refused even in one process
    assert holder(out) is None and not (out / LOCK).exists()


def test_a_refused_resume_leaves_the_folder_byte_identical(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(quick_args(out)) == 0
    before = snapshot_folder(out)
    capsys.readouterr()
    refused = [
        quick_args(out, 400, "hidden_sizes=[32]"),  # the checkpoint does not fit the network
        quick_args(out, 400, "", "--seed", "1"),  # another seed: another run
        quick_args(out, 400, "", "--env", "Acrobot-v1"),  # another env
    ]
    for args in refused:
        assert train.main(args) == 2
        out_text, err = capsys.readouterr()
        one_error_line(err)
        assert "hparams set" not in out_text  # no settings dump before the error line
        assert snapshot_folder(out) == before, args
    assert train.main(quick_args(out, 400)) == 0  # the original command still resumes
    assert "resuming from step 300" in capsys.readouterr().out


def test_another_seed_is_refused_but_fork_from_starts_a_new_run_from_the_checkpoint(tmp_path, capsys):
    out, fork = tmp_path / "run", tmp_path / "fork"
    assert train.main(quick_args(out)) == 0
    assert train.main(quick_args(out, 400, "", "--seed", "1")) == 2
    assert "a run keeps its env and seed" in capsys.readouterr().err
    before = snapshot_folder(out)
    assert train.main(quick_args(fork, 400, "", "--seed", "1", "--fork_from", str(out))) == 0
    assert snapshot_folder(out) == before  # the source is only read
    record = json.loads((fork / "hparams.json").read_text())
    assert record["hparams"]["run"]["seed"] == 1 and record["forked_from"]["step"] == 300
    assert "resuming from step 300" in capsys.readouterr().out
    assert train.main(quick_args(out, 400, "", "--fork_from", str(fork))) == 2  # never into a folder with a run


def test_a_run_whose_checkpoints_were_deleted_is_refused_not_restarted(tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(quick_args(out)) == 0
    for path in (out / "checkpoints").iterdir():
        path.unlink()
    (out / "checkpoints").rmdir()
    before = snapshot_folder(out)
    capsys.readouterr()
    assert train.main(quick_args(out, 400)) == 2
    assert "checkpoints/ folder is gone" in one_error_line(capsys.readouterr().err)
    assert snapshot_folder(out) == before


def test_an_output_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("not a folder")
    assert train.main(quick_args(path)) == 2
    assert "is a file" in one_error_line(capsys.readouterr().err)
    assert train.main(quick_args(path, 300, "", "--training", "False")) == 2
    assert "is a file" in one_error_line(capsys.readouterr().err)


NAN_ENV = '''
"""CartPole whose reward is NaN at one step: of evaluation episodes (reset with seed >= 10000) while
NAN_EVALUATIONS evaluations have not passed, or of training at step NAN_AT_TRAINING_STEP."""
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

COUNT = {"evaluation_resets": 0, "training_steps": 0}


class NanCartPole(CartPoleEnv):
    def reset(self, *, seed=None, options=None):
        self.evaluating = seed is not None and seed >= 10_000
        if self.evaluating:
            COUNT["evaluation_resets"] += 1
        self.t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.t += 1
        if self.evaluating and COUNT["evaluation_resets"] <= EVAL_EPISODES * NAN_EVALUATIONS and self.t == 5:
            reward = float("nan")
        if not self.evaluating:
            COUNT["training_steps"] += 1
            if COUNT["training_steps"] == NAN_AT_TRAINING_STEP:
                reward = float("nan")
        return obs, reward, terminated, truncated, info


gym.register(ENV_ID, entry_point=NanCartPole, max_episode_steps=500)
'''


@pytest.fixture
def nan_env(tmp_path, monkeypatch):
    def make(nan_evaluations: int = 0, at_training_step: int = -1) -> str:
        tag = uuid.uuid4().hex[:8]
        module = f"nan_cartpole_{tag}"
        (tmp_path / f"{module}.py").write_text(
            f"ENV_ID = 'NanCartPole{tag}-v0'\nEVAL_EPISODES = 2\nNAN_EVALUATIONS = {nan_evaluations}\n"
            f"NAN_AT_TRAINING_STEP = {at_training_step}\n{NAN_ENV}")
        monkeypatch.syspath_prepend(str(tmp_path))
        return f"{module}:NanCartPole{tag}-v0"
    return make


def test_a_nan_evaluation_never_becomes_the_best_and_eval_json_stays_strict(tmp_path, nan_env, capsys):
    out = tmp_path / "run"
    env = nan_env(nan_evaluations=1)
    args = quick_args(out, 600, "eval_interval=200,vector_mode=sync", "--env", env)
    assert train.main(args) == 0, capsys.readouterr().err
    best = read(out / "checkpoints" / "best.pt")
    assert best["step"] > 200 and best["mean_return"] == best["mean_return"]  # a later, finite evaluation
    json.loads((out / "eval.json").read_text(), parse_constant=lambda c: pytest.fail(f"eval.json holds {c}"))


def test_a_nan_loss_stops_the_run_without_saving_the_broken_weights(tmp_path, nan_env, capsys):
    out = tmp_path / "run"
    env = nan_env(at_training_step=450)
    assert train.main(quick_args(out, 5000, "vector_mode=sync", "--env", env)) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "non-finite" in line and "kept" in line, line
    steps = [s for s, _ in list_checkpoints(out)]
    assert steps and steps[-1] <= 600, steps  # the run did not go on, and no checkpoint came after the NaN
    state = read(list_checkpoints(out)[-1][1])
    weights = [t for net in state["agent"]["networks"].values() for t in net.values() if t.is_floating_point()]
    assert weights and all(torch.isfinite(t).all() for t in weights)


@pytest.fixture
def mount_point(tmp_path):
    """A tmpfs of this test's own, which the test can remount read-only (needs root: skipped elsewhere)."""
    point = tmp_path / "mnt"
    point.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(point)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_read_only_run_folder_is_one_line_before_anything_is_played(mount_point, capsys):
    out = mount_point / "run"
    assert train.main(quick_args(out)) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], check=True)
    capsys.readouterr()
    started = time.monotonic()
    assert train.main(quick_args(out, 300, "", "--training", "False", "--test_episodes", "10000")) == 2
    assert "is not writable" in one_error_line(capsys.readouterr().err)
    assert time.monotonic() - started < 30  # refused before 10,000 episodes were played, not after
    assert train.main(quick_args(out, 400)) == 2
    assert "is not writable" in one_error_line(capsys.readouterr().err)
