"""train.py end to end, as a user runs it: training, evaluation mode, video, copies, resume and signals."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time

import imageio.v3 as iio
import pytest

from rl.checkpoint import list_checkpoints

FAST = "learning_starts=100,train_freq=50,gradient_steps=5,checkpoint_interval=200,log_interval=100,eval_interval=200"


def train_args(out, steps=400, extra=FAST):
    return ["--hparams", "dqn_cartpole", "--output_dir", str(out), "--train_steps", str(steps),
            "--eval_episodes", "2", "--hparam_override", extra]


def test_train_writes_a_complete_run(tmp_path, train_cli):
    out = tmp_path / "run"
    res = train_cli(*train_args(out))
    assert res.returncode == 0, res.stderr
    assert "dqn_cartpole" in res.stdout and "learning_starts" in res.stdout  # resolved settings printed
    saved = json.loads((out / "hparams.json").read_text())
    assert saved["hparams_set"] == "dqn_cartpole" and saved["hparams"]["learning_starts"] == 100
    assert [s for s, _ in list_checkpoints(out)] == [200, 400]
    rows = list(csv.DictReader(open(out / "progress.csv")))
    assert {"env_steps", "wall_time_s", "episode_return_mean", "steps_per_s"} <= set(rows[0])
    assert int(rows[-1]["env_steps"]) == 400
    assert any(p.name.startswith("events.out.tfevents") for p in out.iterdir())
    ev = json.loads((out / "eval.json").read_text())
    assert len(ev["returns"]) == 2 and ev["env_steps"] == 400


def test_evaluation_mode_video_and_resume(tmp_path, train_cli):
    out = tmp_path / "run"
    assert train_cli(*train_args(out, steps=300)).returncode == 0
    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
                    "--test_episodes", "3")
    assert res.returncode == 0, res.stderr
    ev = json.loads((out / "eval.json").read_text())
    assert ev["mode"] == "test" and len(ev["returns"]) == 3 and ev["env_steps"] == 300
    assert ev["std_return"] >= 0 and min(ev["returns"]) >= 8  # CartPole episodes last at least 8 steps
    assert "±" in res.stdout

    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
                    "--test_episodes", "1", "--record_video", "True")
    assert res.returncode == 0, res.stderr
    videos = sorted((out / "videos").glob("*.mp4"))
    assert len(videos) == 1
    frames = iio.imread(videos[0])
    episode_length = json.loads((out / "eval.json").read_text())["returns"][0]  # CartPole: reward 1 per step
    assert frames.ndim == 4 and frames.shape[-1] == 3 and frames.shape[0] == int(episode_length)

    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False", "--render", "True",
                    "--test_episodes", "1", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0 and "--record_video" in res.stderr  # no display here: told what to use instead

    res = train_cli(*train_args(out, steps=500))
    assert res.returncode == 0, res.stderr
    assert "resuming from step 300" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 500


def test_copies_run_independent_seeds(tmp_path, train_cli):
    out = tmp_path / "runs"
    res = train_cli(*train_args(out, steps=200), "--copies", "2")
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "copies_summary.json").read_text())
    assert [c["copy"] for c in summary["copies"]] == [0, 1]
    seeds = [json.loads((out / f"copy_{i}" / "hparams.json").read_text())["hparams"]["seed"] for i in range(2)]
    assert seeds == [0, 1]
    assert "over 2 copies" in res.stdout


def test_sigterm_saves_and_exits_cleanly_then_resumes(tmp_path, train_cli):
    out = tmp_path / "run"
    never = FAST.replace("checkpoint_interval=200", "checkpoint_interval=10000000")
    cmd = [sys.executable, "train.py", *train_args(out, steps=10_000_000, extra=never)]
    proc = subprocess.Popen(cmd, cwd=train_cli.__globals__["ROOT"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while not (out / "progress.csv").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and "SIGTERM: saved a checkpoint" in stdout
    (step, _), = list_checkpoints(out)
    assert step > 0
    res = train_cli(*train_args(out, steps=step + 100))
    assert res.returncode == 0 and f"resuming from step {step}" in res.stdout


BAD_INPUTS = [
    (["--hparams", "dqn_cartpol"], "unknown hparams 'dqn_cartpol'.*dqn_cartpole"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "learning_rate=1"], "unknown setting 'learning_rate'"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "batch_size=big"], "batch_size.*int.*'big'"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "lr=1,,batch_size"], "malformed override"),
    (["--hparams", "dqn_cartpole", "--env", "CartPole-v7"], "unknown env 'CartPole-v7'.*CartPole-v1"),
    (["--hparams", "dqn_cartpole", "--training", "False"], "--training False needs"),
    (["--hparams", "dqn_cartpole", "--train_steps", "0"], "train_steps must be a positive"),
    (["--hparams", "dqn_cartpole", "--train_steps", "-5"], "train_steps must be a positive"),
    (["--hparams", "dqn_cartpole", "--num_workers", "2"], "not available yet"),
    (["--hparams", "dqn_cartpole", "--sys", "k8s"], "not available yet"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS)
def test_bad_input_exits_2_with_one_clear_message(tmp_path, capsys, argv, message):
    import train

    code = train.main([*argv, "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err), err


def test_bad_input_through_a_real_process_has_no_traceback(tmp_path, train_cli):
    res = train_cli("--hparams", "nope", "--output_dir", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr and "valid:" in res.stderr


def test_corrupt_files_in_output_dir(tmp_path, train_cli, capsys):
    import train

    out = tmp_path / "run"
    assert train_cli(*train_args(out, steps=400)).returncode == 0
    ckpts = list_checkpoints(out)
    ckpts[-1][1].write_bytes(b"garbage")  # newest corrupt: the older intact one is used
    res = train_cli("--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
                    "--test_episodes", "1")
    assert res.returncode == 0 and "corrupt" in res.stderr and "evaluation of step 200" in res.stdout
    ckpts[0][1].write_bytes(b"")  # all corrupt: a clear error
    assert train.main(["--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False"]) == 2
    assert "every checkpoint" in capsys.readouterr().err
    (out / "hparams.json").write_text("{not json")
    assert train.main(["--hparams", "dqn_cartpole", "--output_dir", str(out)]) == 2
    assert "hparams.json is corrupt" in capsys.readouterr().err


def test_a_run_of_another_set_is_refused(tmp_path, train_cli, capsys):
    import train

    out = tmp_path / "run"
    assert train_cli(*train_args(out, steps=200)).returncode == 0
    assert train.main(["--hparams", "ddqn_cartpole", "--output_dir", str(out)]) == 2
    assert "holds a run of hparams set 'dqn_cartpole'" in capsys.readouterr().err
