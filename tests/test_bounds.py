"""Bounds on settings (rl/hparams.py): declared where a setting is defined, checked on every assignment, so a value
outside them is refused in one line naming the setting, the value and the bound, whichever way it arrives:
--hparam_override, --control (on the sender's side and on the job's), --tune_space (before any trial) and a resumed
hparams.json."""

from __future__ import annotations

import json
import os
import socket
from types import SimpleNamespace

import pytest

from rl.errors import ConfigError
from rl.hparams import HParams, above, at_least, between, each, one_of, where
from rl.registry import hparams as sets


def main(capsys, *argv: str) -> tuple[int, str]:
    """train.py in this process: its exit status and its stderr."""
    import train

    status = train.main(list(argv))
    return status, capsys.readouterr().err


def one_line(err: str, *words: str) -> None:
    assert err.count("\n") == 1 and all(w in err for w in words), err


def _sticky(p: float) -> bool:
    return p == -1 or 0 <= p <= 1


def test_a_bound_is_checked_on_every_assignment_and_a_setting_without_one_takes_any_value():
    hp = HParams()
    hp.define("lr", 3e-4, "learning rate", bound=above(0))
    hp.define("gamma", 0.99, "discount", bound=between(0, 1))
    hp.define("tau", 1.0, "target update rate", bound=between(0, 1, low_open=True))
    hp.define("sizes", [64], "widths", bound=each(at_least(1)))
    hp.define("loss", "huber", "loss", bound=one_of("huber", "mse"))
    hp.define("sticky", -1.0, "probability", bound=where(_sticky, "-1 or in [0, 1]"))
    hp.define("free", 1.0, "no bound")
    hp.parse("lr=1e-9,gamma=0,tau=1,sizes=[1,2],loss=mse,sticky=0.25,free=-5")
    assert (hp.gamma, hp.tau, hp.free) == (0.0, 1.0, -5.0)
    for text, words in [("lr=0", "'lr' must be > 0, got 0.0"), ("lr=nan", "'lr' must be > 0, got nan"),
                        ("gamma=1.01", "'gamma' must be in [0, 1], got 1.01"),
                        ("tau=0", "'tau' must be in (0, 1], got 0.0"),
                        ("sizes=[64,0]", "'sizes' must be a list whose items are each >= 1, got [64, 0]"),
                        ("loss=l1", "'loss' must be one of huber, mse, got 'l1'"),
                        ("sticky=-0.5", "'sticky' must be -1 or in [0, 1], got -0.5")]:
        with pytest.raises(ConfigError) as err:
            hp.parse(text)
        assert words in str(err.value), text
    with pytest.raises(ConfigError, match="'lr' must be > 0"):
        hp.lr = -1.0
    with pytest.raises(ConfigError, match="'x' must be >= 1, got 0"):  # a default outside its own bound
        hp.define("x", 0, "x", bound=at_least(1))
    assert hp.copy().bound("gamma") == between(0, 1) and hp.bound("free") is None
    with pytest.raises(ConfigError, match="'y': its where\\(\\) test is a lambda"):  # it would not pickle
        hp.define("y", 1, "y", bound=where(lambda v: v > 0, "> 0"))


def test_the_usual_bounds_are_declared_on_the_sets():
    for name, text, words in [("ppo_cartpole", "lr=-1", "'lr' must be > 0, got -1.0"),
                              ("ppo_cartpole", "gamma=1.5", "'gamma' must be in [0, 1]"),
                              ("ppo_cartpole", "batch_size=-1", "'batch_size' must be >= 0"),
                              ("ppo_cartpole", "gae_lambda=2", "'gae_lambda' must be in [0, 1]"),
                              ("dqn_cartpole", "tau=0", "'tau' must be in (0, 1]"),
                              ("dqn_cartpole", "exploration_final_eps=1.5", "must be in [0, 1], got 1.5"),
                              ("sac_pendulum", "initial_alpha=0", "'initial_alpha' must be > 0")]:
        with pytest.raises(ConfigError) as err:
            sets[name]().parse(text)
        assert words in str(err.value), (name, text, str(err.value))
    for name in sets:  # every set's own values keep its bounds (each assignment in it was checked)
        assert sets[name]().lr > 0


def test_hparam_override_out_of_bounds_is_one_line(capsys, tmp_path):
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"),
                       "--hparam_override", "lr=-1")
    assert status == 2
    one_line(err, "--hparam_override", "'lr'", "> 0", "-1.0")
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"), "--seed", "-3")
    assert status == 2
    one_line(err, "--seed", "'seed'", ">= 0", "-3")
    assert not (tmp_path / "run").exists()


def _run_record(out, overrides: str = ""):
    from rl.hparams import resolve_hparams
    from rl.run import write_run_record

    args = SimpleNamespace(hparams="ppo_cartpole", hparam_override=overrides, env=None, seed=None, train_steps=None,
                           eval_episodes=None, test_episodes=None, num_workers=None, ray_address=None)
    out.mkdir(parents=True, exist_ok=True)
    hp = resolve_hparams(args, out)
    write_run_record(hp, args, out)
    return hp, args


def test_control_out_of_bounds_is_refused_by_the_sender_and_by_the_job(capsys, tmp_path):
    from rl.control import Controller, parse_request

    out = tmp_path / "run"
    hp, _ = _run_record(out)
    (out / "control").mkdir()
    (out / "control" / "job.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    status, err = main(capsys, "--output_dir", str(out), "--control", "lr=-1")
    assert status == 2
    one_line(err, "--control", "'lr'", "> 0", "-1.0")
    assert not list((out / "control").glob("*.request.json"))  # nothing was sent
    with pytest.raises(ConfigError, match="'eval_episodes' must be >= 1, got 0"):
        parse_request(hp, "eval_episodes=0")

    # a request file written by hand reaches the job: the job refuses it too, and nothing changes
    agent = SimpleNamespace(env_steps=100, change_settings=lambda settings: pytest.fail("the agent was changed"))
    controller = Controller(out, hp, agent, log=lambda *a: pytest.fail("a change was logged"),
                            evaluate=None, checkpoint=None)
    (out / "control" / "1-1.request.json").write_text(json.dumps({"command": "set", "settings": {"lr": -1.0}}))
    controller.poll()
    answer = json.loads((out / "control" / "1-1.answer.json").read_text())
    assert "'lr' must be > 0, got -1.0" in answer["error"] and hp.lr == 1e-3
    assert json.loads((out / "hparams.json").read_text())["hparams"]["lr"] == 1e-3
    controller.close()


def test_tune_space_out_of_bounds_is_refused_before_any_trial(capsys, tmp_path):
    out = tmp_path / "search"
    for space, words in [("lr=uniform(0,0.01)", ["'lr' must be > 0", "reaches 0"]),
                         ("gamma=uniform(0.9,1.1)", ["'gamma' must be in [0, 1]", "reaches 1.1"]),
                         ("epochs=intuniform(0,4)", ["'epochs' must be >= 1", "reaches 0"]),
                         ("batch_size=choice(64,-8)", ["'batch_size' must be >= 0, got -8"])]:
        status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out), "--tune", "2",
                           "--tune_space", space)
        assert status == 2
        one_line(err, "--tune_space", *words)
        assert not out.exists()


def test_a_resumed_hparams_json_out_of_bounds_is_one_line(capsys, tmp_path):
    out = tmp_path / "run"
    _run_record(out)
    record = json.loads((out / "hparams.json").read_text())
    record["hparams"]["lr"] = -1.0  # as an older version let --control write it
    (out / "hparams.json").write_text(json.dumps(record))
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out))
    assert status == 2
    one_line(err, "hparams.json", "'lr'", "> 0", "-1.0")

    record["hparams"]["lr"] = 1e-3  # a --control change kept in the record is checked as well
    record["control"] = [{"step": 10, "settings": {"gamma": 2.0}}]
    (out / "hparams.json").write_text(json.dumps(record))
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out))
    assert status == 2
    one_line(err, "hparams.json", "'gamma'", "[0, 1]", "2.0")


def test_every_set_pickles_with_its_bounds_for_worker_processes():
    import pickle

    for name in sets:
        hp = sets[name]()
        back = pickle.loads(pickle.dumps(hp))
        assert back == hp and all(str(back.bound(k)) == str(hp.bound(k)) for k in hp.to_dict())
    with pytest.raises(ConfigError, match="'sticky_actions' must be one of -1.0 or in \\[0, 1\\], got 1.5"):
        sets["ppo_atari"]().sticky_actions = 1.5
    sets["ppo_atari"]().sticky_actions = 0.25
