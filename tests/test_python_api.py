"""rl from Python (docs/python.md): the README's example runs as written (at a smaller budget), and the folder it
makes is a complete run folder that train.py's evaluation and rl.report read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import rl
import train
from rl.errors import ConfigError, FolderBusy

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_and_its_folder_is_a_run_folder(tmp_path, monkeypatch, capsys):
    code = readme_example()
    assert 'rl.make("dqn_cartpole", "runs/py_dqn"' in code
    code = code.replace('"train_steps": 20_000', '"train_steps": 600, "eval_episodes": 2, "learning_starts": 100')
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert printed[-1] in ("0", "1")  # an action of CartPole
    out = tmp_path / "runs" / "py_dqn"
    record = json.loads((out / "hparams.json").read_text())
    assert record["hparams_set"] == "dqn_cartpole" and record["hparams"]["run"]["seed"] == 1
    assert json.loads((out / "eval.json").read_text())["env_steps"] == 600
    assert train.main(["--hparams", "dqn_cartpole", "--output_dir", str(out), "--training", "False",
                       "--test_episodes", "2"]) == 0
    assert "evaluation of step 600 over 2 episodes" in capsys.readouterr().out
    from rl.report.__main__ import main as report

    assert report([str(out), "--output", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "index.html").exists()


def test_train_in_parts_evaluate_and_reopen(tmp_path):
    out = tmp_path / "run"
    with rl.make("dqn_cartpole", out, overrides="train_steps=500,eval_interval=0,learning_starts=100",
                 seed=3) as run:
        assert run.train(steps=200) == {"env_steps": 200}
        assert (out / "checkpoints" / "ckpt_000000000200.pt").exists() and not (out / "eval.json").exists()
        with pytest.raises(FolderBusy):
            rl.make("dqn_cartpole", out, seed=3)  # the folder is owned while the run is open
        result = run.train()
        assert result["env_steps"] == 500 and len(result["returns"]) == run.hp.eval_episodes
        sampled = run.evaluate(episodes=3, deterministic=False)
        assert sampled["episodes"] == 3 and sampled["env_steps"] == 500
    loaded = rl.load(out)
    assert loaded.env_steps == 500 and loaded.hp.seed == 3
    batch = np.zeros((4, 4), np.float32)
    assert loaded.agent.act(batch).shape == (4,) and np.ndim(loaded.agent.act(batch[0])) == 0
    with pytest.raises(ConfigError, match="not open for training"):
        loaded.train()
    with rl.make("dqn_cartpole", out, overrides={"train_steps": 700, "eval_interval": 0, "learning_starts": 100},
                 seed=3) as again:  # the same folder resumes
        assert again.env_steps == 500
        assert not (out / "eval.json").exists()  # the last sitting's eval.json belongs to a step this run passes
        again.train(steps=100)
    assert rl.make is rl.api.make


def test_bad_input_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown hparams"):
        rl.make("no_such_set", tmp_path / "a")
    with pytest.raises(ConfigError, match="lr"):
        rl.make("dqn_cartpole", tmp_path / "b", overrides={"lr": "fast"})
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # a refusal writes nothing
    with pytest.raises(ConfigError, match="holds no run"):
        rl.load(tmp_path)


def test_a_control_change_is_kept_in_every_checkpoint_after_it(tmp_path):
    """The last checkpoint comes after the control channel closed: it must still hold the change."""
    import time

    from rl.checkpoint import list_checkpoints, read, write_json

    out = tmp_path / "run"
    with rl.make("dqn_cartpole", out, "train_steps=400,eval_interval=0,learning_starts=100") as run:
        run.train(steps=100)
        write_json(out / "control" / "1-1.request.json", {"command": "set", "settings": {"lr": 5e-4}})
        time.sleep(0.6)  # the channel looks for requests at most every 0.5 s
        run.control.poll()
        assert run.hp.lr == 5e-4
        run.train()
    assert read(list_checkpoints(out)[-1][1])["control"] == {"lr": 5e-4}
    assert json.loads((out / "hparams.json").read_text())["control"][0]["settings"] == {"lr": 5e-4}
