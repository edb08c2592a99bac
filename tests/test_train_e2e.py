"""train.py end to end, as a user runs it: training, evaluation mode, video, copies, resume and signals."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import imageio.v3 as iio
import pytest

from rl.checkpoint import list_checkpoints
from rl.resolve import read_record

ROOT = Path(__file__).resolve().parents[1]

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
    assert saved["hparams_set"] == "dqn_cartpole" and saved["hparams"]["replay"]["learning_starts"] == 100
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
    seeds = [read_record(out / f"copy_{i}" / "hparams.json")["hparams"]["seed"] for i in range(2)]
    assert seeds == [0, 1]
    assert "over 2 copies" in res.stdout


def stopped_with_a_checkpoint(cmd: list[str], ready, after: float = 0.0) -> None:
    """Run train.py's `cmd`, send it SIGTERM once `ready()` (at most 120 s), and check that it saved a checkpoint and
    exited 143 within 60 s."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not ready() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(after)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and "SIGTERM: saved a checkpoint" in stdout


def test_sigterm_saves_and_exits_cleanly_then_resumes(tmp_path, train_cli):
    out = tmp_path / "run"
    never = FAST.replace("checkpoint_interval=200", "checkpoint_interval=10000000")
    cmd = [sys.executable, "train.py", *train_args(out, steps=10_000_000, extra=never)]
    stopped_with_a_checkpoint(cmd, lambda: (out / "progress.csv").exists(), after=0.5)
    (step, _), = list_checkpoints(out)
    assert step > 0
    res = train_cli(*train_args(out, steps=step + 100))
    assert res.returncode == 0 and f"resuming from step {step}" in res.stdout
    rows = [tuple(map(float, r.split(",")[:2])) for r in (out / "progress.csv").read_text().split()[1:]]
    steps, clock = zip(*rows)  # one history: steps go forward, and the clock goes on from the first sitting's
    assert all(a < b for a, b in zip(steps[:-2], steps[1:-1])) and list(clock) == sorted(clock), rows
    assert json.loads((out / "eval.json").read_text())["wall_time_s"] >= clock[-1] - 0.1


def test_sigterm_during_a_periodic_evaluation_gives_it_up_checkpoints_and_exits(tmp_path, train_cli):
    """A greedy Atari game can last minutes and a cluster's grace period after SIGTERM is 30 s: a stop during an
    evaluation inside training gives the evaluation up (it is not logged) and checkpoints at once."""
    out = tmp_path / "run"
    extra = FAST.replace("checkpoint_interval=200", "checkpoint_interval=10000000").replace("log_interval=100",
                                                                                            "log_interval=20")
    # the first evaluation (step 200) outlasts the test: 10,000 games of MountainCar, each 200 steps for an untrained
    # policy (CartPole's end in about 9, and 10,000 of them took 3 s on an idle core)
    cmd = [sys.executable, "train.py", *train_args(out, steps=10_000_000, extra=extra), "--env", "MountainCar-v0"]
    cmd[cmd.index("--eval_episodes") + 1] = "10000"
    progress = out / "progress.csv"

    def evaluating() -> bool:  # a row every 20 steps up to 180, none during the evaluation at 200
        rows = progress.read_text().split() if progress.exists() else []
        return len(rows) > 1 and int(rows[-1].split(",")[0]) >= 180 and time.time() - progress.stat().st_mtime > 3

    stopped_with_a_checkpoint(cmd, evaluating)
    (step, _), = list_checkpoints(out)
    assert 200 <= step < 220, step  # where the evaluation began: training had not gone past it
    rows = list(csv.DictReader(open(progress)))
    assert not any(r.get("eval_return_mean") for r in rows), rows[-1]


def test_sigterm_while_evaluating_says_which_evaluation_and_the_command_evaluates_again(tmp_path, train_cli):
    """Training is over and checkpointed when the final evaluation starts: a stop there saves nothing, says which
    phase it interrupted (not "before training began"), and the same command evaluates the trained agent; so does a
    stop in `--training False`'s evaluation."""
    out = tmp_path / "run"
    args = train_args(out, steps=400, extra=FAST.replace("eval_interval=200", "eval_interval=10000000"))
    cmd = [sys.executable, "train.py", *args]
    cmd[cmd.index("--eval_episodes") + 1] = "10000"  # an evaluation that outlasts the test
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while not any(step == 400 for step, _ in list_checkpoints(out)) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and not (out / "eval.json").exists()
    assert "SIGTERM during the final evaluation: training ended and was checkpointed at step 400" in stderr, stderr
    res = train_cli(*args)
    assert res.returncode == 0 and "resuming from step 400" in res.stdout, res.stderr
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 400
    assert [s for s, _ in list_checkpoints(out)][-1] == 400

    # --training False: evaluating, with nothing to save; its first video says the evaluation is under way
    cmd = [sys.executable, "train.py", "--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
           "--record_video", "True", "--test_episodes", "10000"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while not (out / "videos" / "episode_000.mp4").exists() and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "SIGTERM during evaluation (--training False): nothing to save" in stderr, stderr


def test_checkpoint_minutes_bounds_what_a_kill_can_cost(tmp_path, train_cli):
    """Steps alone would checkpoint only at the end here; a few milliseconds of checkpoint_minutes save on the way,
    and the run learns exactly as it would without them (a checkpoint reads the agent, it does not move it)."""
    never = FAST.replace("checkpoint_interval=200", "checkpoint_interval=10000000")
    steps, learned = {}, {}
    for minutes in (0, 0.0002):
        out = tmp_path / f"minutes_{minutes}"
        res = train_cli(*train_args(out, steps=400, extra=f"{never},keep_checkpoints=100,checkpoint_minutes={minutes}"))
        assert res.returncode == 0, res.stderr
        steps[minutes] = [step for step, _ in list_checkpoints(out)]
        with open(out / "progress.csv") as f:  # all but the clocks
            learned[minutes] = [{k: v for k, v in row.items() if not k.startswith(("wall_time", "steps_per", "perf_"))}
                                for row in csv.DictReader(f)]
    assert steps[0] == [400]
    assert len(steps[0.0002]) > 2 and steps[0.0002][-1] == 400 and len(set(steps[0.0002])) == len(steps[0.0002])
    assert learned[0] == learned[0.0002] and "losses_td_loss" in learned[0][-2]


BAD_INPUTS = [
    (["--hparams", "dqn_cartpol"], "unknown hparams 'dqn_cartpol'.*dqn_cartpole"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "learning_rate=1"], "unknown setting 'learning_rate'"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "batch_size=big"], "batch_size.*int.*'big'"),
    (["--hparams", "dqn_cartpole", "--hparam_override", "lr=1,,batch_size"], "malformed override"),
    (["--hparams", "dqn_cartpole", "--env", "CartPole-v7"], "unknown env 'CartPole-v7'.*CartPole-v1"),
    (["--hparams", "dqn_cartpole", "--training", "False"], "--training False needs"),
    (["--hparams", "dqn_cartpole", "--train_steps", "0"], "train_steps must be a positive"),
    (["--hparams", "dqn_cartpole", "--train_steps", "-5"], "train_steps must be a positive"),
    (["--hparams", "dqn_cartpole", "--num_workers", "-1"], "--num_workers must be"),
    (["--hparams", "dqn_cartpole", "--image", "rl:cpu"], "--image apply to --sys k8s only"),
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


# ---------------------------------------------------------------------------------------------------- best checkpoint
BEST_RUN = FAST.replace("eval_interval=200", "eval_interval=100") + ",keep_checkpoints=2"


def eval_rows(out) -> list[tuple[int, float]]:
    """(env_steps, eval mean return) of every evaluation logged in progress.csv, the final one included."""
    rows = csv.DictReader(open(out / "progress.csv"))
    return [(int(r["env_steps"]), float(r["eval_return_mean"])) for r in rows if r.get("eval_return_mean")]


def load_best(out) -> dict:
    import torch

    from rl.checkpoint import best_path

    return torch.load(best_path(out), weights_only=True)


_BEST_RUN: dict = {}
PPO_BEST = "num_steps=16,eval_interval=256,checkpoint_interval=512,log_interval=256,keep_checkpoints=2"


@pytest.fixture
def best_run(tmp_path_factory, train_cli):
    """A 3072-step ppo_cartpole run evaluated every 256 steps, checkpointed every 512 and keeping the last 2, trained
    once for the tests below: (output_dir, stdout, its final eval.json)."""
    if not _BEST_RUN:
        out = tmp_path_factory.mktemp("best") / "run"
        res = train_cli("--hparams", "ppo_cartpole", "--output_dir", str(out), "--train_steps", "3072",
                        "--eval_episodes", "2", "--hparam_override", PPO_BEST)
        assert res.returncode == 0, res.stderr
        _BEST_RUN["run"] = out, res.stdout, json.loads((out / "eval.json").read_text())
    return _BEST_RUN["run"]


def test_best_checkpoint_is_the_best_evaluation(best_run):
    from rl.checkpoint import best_path

    out, stdout, final = best_run
    evals = eval_rows(out)
    assert [s for s, _ in evals] == list(range(256, 3073, 256))  # 11 periodic evaluations and the final one
    top = max(m for _, m in evals)
    first = min(s for s, m in evals if m == top)  # a later evaluation that only ties does not replace the best
    best = load_best(out)
    assert best["complete"] and best["step"] == first and best["mean_return"] == top
    assert best["episodes"] == 2 and "memory" not in best["agent"]  # evaluation needs no rollout
    assert [s for s, _ in list_checkpoints(out)] == [2560, 3072]  # pruning keeps 2 and leaves best.pt alone
    assert final["best"] == {"step": first, "mean_return": top, "path": str(best_path(out))}
    assert f"; best: {top:.2f} at step {first} ({best_path(out)})" in stdout


def test_a_tie_does_not_replace_the_best(tmp_path):
    from rl.checkpoint import BestKeeper, read_best
    from rl.envs import make_env
    from rl.registry import hparams as sets
    from rl.trainer import build_agent

    hp = sets["dqn_cartpole"]()
    agent = build_agent(hp, make_env(hp, num_envs=1), seed=0)
    keeper = BestKeeper(tmp_path)
    assert keeper.best is None
    for step, returns, kept in [(10, [5.0, 7.0], 10), (20, [4.0], 10), (30, [7.0, 9.0], 30), (40, [8.0], 30),
                                (50, [6.0, 8.0, 10.0], 30), (60, [8.5], 60)]:
        agent.env_steps = step
        assert keeper.offer(agent, returns) == (kept == step)
        assert read_best(tmp_path)["step"] == keeper.best["step"] == kept
    assert BestKeeper(tmp_path).best == {"step": 60, "mean_return": 8.5, "path": str(tmp_path / "checkpoints" /
                                                                                       "best.pt")}


def test_checkpoint_flag_picks_what_is_evaluated(best_run, train_cli):
    from rl.checkpoint import best_path

    out = best_run[0]
    base = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--training", "False", "--test_episodes", "2"]
    best_step = load_best(out)["step"]
    older = str(list_checkpoints(out)[0][1])
    for which, step, path in [("best", best_step, str(best_path(out))), (older, 2560, older),
                              ("latest", 3072, str(list_checkpoints(out)[-1][1]))]:
        res = train_cli(*base, "--checkpoint", which)
        assert res.returncode == 0, res.stderr
        ev = json.loads((out / "eval.json").read_text())
        assert (ev["mode"], ev["checkpoint"], ev["checkpoint_path"], ev["env_steps"]) == ("test", which, path, step)
        assert f"evaluation of step {step} over 2 episodes" in res.stdout and path in res.stdout


def test_resume_reads_back_the_previous_best(tmp_path, train_cli):
    import torch

    from rl.checkpoint import best_path

    out = tmp_path / "run"
    assert train_cli(*train_args(out, steps=400, extra=BEST_RUN)).returncode == 0
    best = load_best(out)
    torch.save({**best, "mean_return": 1e9}, best_path(out))  # a better best than any CartPole evaluation
    res = train_cli(*train_args(out, steps=600, extra=BEST_RUN))
    assert res.returncode == 0 and "resuming from step 400" in res.stdout
    assert [s for s, _ in eval_rows(out)][-2:] == [500, 600]  # evaluated after the resume, and not kept
    assert (load_best(out)["step"], load_best(out)["mean_return"]) == (best["step"], 1e9)
    assert json.loads((out / "eval.json").read_text())["best"]["mean_return"] == 1e9
    assert f"best: 1000000000.00 at step {best['step']}" in res.stdout

    torch.save({**best, "mean_return": -1e9}, best_path(out))  # worse than any: the next evaluation replaces it
    assert train_cli(*train_args(out, steps=800, extra=BEST_RUN)).returncode == 0
    replaced = load_best(out)
    assert replaced["step"] == 700 and replaced["mean_return"] == dict(eval_rows(out))[700]


def bad_checkpoints(tmp_path, out) -> list[tuple[list[str], str]]:
    """(extra argv, expected message) for each way --checkpoint can be wrong; files are made under tmp_path."""
    import torch

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    misfit = tmp_path / "misfit.pt"  # a real checkpoint of a network with other sizes
    state = load_best(out)

    def resized(tree):  # every tensor of the agent's state with 7 rows
        return {k: resized(v) if isinstance(v, dict) else torch.zeros(7, *v.shape[1:])
                if isinstance(v, torch.Tensor) and v.ndim else v for k, v in tree.items()}

    torch.save({**state, "agent": resized(state["agent"])}, misfit)
    return [
        (["--checkpoint", "best"], "has no best.pt.*valid: latest.*best.*path"),
        (["--checkpoint", str(tmp_path / "nope.pt")], "nope.pt'?: no such file; valid: latest"),
        (["--checkpoint", str(garbage)], "garbage.pt is not a readable checkpoint.*valid: latest"),
        (["--checkpoint", str(foreign)], "foreign.pt is not a readable checkpoint.*not a complete rl checkpoint"),
        (["--checkpoint", str(misfit)], "misfit.pt does not fit this run's agent"),
    ]


def test_bad_checkpoint_values_exit_2_with_one_line(best_run, tmp_path, train_cli, capsys):
    import re
    import shutil

    import train

    out = tmp_path / "run"
    shutil.copytree(best_run[0], out)
    (out / "checkpoints" / "best.pt").unlink()
    (out / "eval.json").unlink()
    base = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--training", "False", "--test_episodes", "1"]
    cases = bad_checkpoints(tmp_path, best_run[0])
    cases.append((["--checkpoint", "best", "--training", "True"], "--checkpoint best applies to --training False"))
    for i, (extra, message) in enumerate(cases):
        if i in (0, len(cases) - 2):  # as a user runs it: no traceback, one line
            res = train_cli(*base, *extra)
            code, err = res.returncode, res.stderr
        else:  # in this process (quicker): these fail before anything is built
            code, err = train.main([*base, *extra]), capsys.readouterr().err
        assert code == 2, (extra, err)
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert re.search(message, err), err
    assert not (out / "eval.json").exists()  # nothing was evaluated
