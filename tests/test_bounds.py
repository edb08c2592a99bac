"""Bounds on settings (rl/hparams.py): declared where a setting is defined, checked on every assignment, so a value
outside them is refused in one line naming the setting, the value and the bound, whichever way it arrives:
--hparam_override, --control (on the sender's side and on the job's), --tune_space (before any trial) and a resumed
hparams.json."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from rl.errors import ConfigError
from rl.hparams import HParams, above, at_least, between, each, one_of, where
from rl.registry import hparams as sets
from rl.resolve import read_record


def main(capsys, *argv: str) -> tuple[int, str]:
    """train.py in this process: its exit status and its stderr."""
    import train

    status = train.main(list(argv))
    return status, capsys.readouterr().err


def refused_before_a_run(capsys, *argv: str) -> tuple[int, str]:
    """`main` for a command that must be refused while its settings are resolved: checked there first, so that a
    missing refusal fails this test at once instead of starting the run (an evaluation of 100,000 episodes)."""
    import train
    from rl.resolve import resolve_hparams

    args = train.parser().parse_args(list(argv))
    with pytest.raises(ConfigError):
        resolve_hparams(args, Path(args.output_dir))
    return main(capsys, *argv)


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
    for name, text, words in [("ppo_cartpole", "lr=-1", "'lr' must be in (0, 1], got -1.0"),
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
    one_line(err, "--hparam_override", "'lr'", "(0, 1]", "-1.0")
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"), "--seed", "-3")
    assert status == 2
    one_line(err, "--seed", "'seed'", "[0, 1_073_741_823]", "-3")
    assert not (tmp_path / "run").exists()


def _run_record(out, overrides: str = ""):
    from rl.resolve import resolve_hparams

    args = SimpleNamespace(hparams="ppo_cartpole", hparam_override=overrides, env=None, seed=None, train_steps=None,
                           eval_episodes=None, test_episodes=None, num_workers=None, ray_address=None)
    out.mkdir(parents=True, exist_ok=True)
    hp = resolve_hparams(args, out)
    record = {"hparams_set": args.hparams, "hparams": hp.record(), "flags": vars(args)}  # as train.py writes it
    (out / "hparams.json").write_text(json.dumps(record, indent=2, sort_keys=True))
    return hp, args


def test_control_out_of_bounds_is_refused_by_the_sender_and_by_the_job(capsys, tmp_path):
    from rl.control import Controller, parse_request

    out = tmp_path / "run"
    hp, _ = _run_record(out)
    (out / "control").mkdir()
    (out / "control" / "job.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    status, err = main(capsys, "--output_dir", str(out), "--control", "lr=-1")
    assert status == 2
    one_line(err, "--control", "'lr'", "(0, 1]", "-1.0")
    assert not list((out / "control").glob("*.request.json"))  # nothing was sent
    with pytest.raises(ConfigError, match="'eval_episodes' must be in \\[1, 10_000\\], got 0"):
        parse_request(hp, "eval_episodes=0")

    # a request file written by hand reaches the job: the job refuses it too, and nothing changes
    agent = SimpleNamespace(env_steps=100, change_settings=lambda settings: pytest.fail("the agent was changed"))
    controller = Controller(out, hp, agent, log=lambda *a: pytest.fail("a change was logged"),
                            evaluate=None, checkpoint=None)
    (out / "control" / "1-1.request.json").write_text(json.dumps({"command": "set", "settings": {"lr": -1.0}}))
    controller.poll()
    answer = json.loads((out / "control" / "1-1.answer.json").read_text())
    assert "'lr' must be in (0, 1], got -1.0" in answer["error"] and hp.lr == 1e-3
    assert read_record(out / "hparams.json")["hparams"]["lr"] == 1e-3
    controller.close()


def test_tune_space_out_of_bounds_is_refused_before_any_trial(capsys, tmp_path):
    out = tmp_path / "search"
    for space, words in [("lr=uniform(0,0.01)", ["'lr' must be in (0, 1]", "reaches 0"]),
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
    record["hparams"]["optimisation"]["lr"] = -1.0  # as an older version let --control write it
    (out / "hparams.json").write_text(json.dumps(record))
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out))
    assert status == 2
    one_line(err, "hparams.json", "'lr'", "(0, 1]", "-1.0")

    record["hparams"]["optimisation"]["lr"] = 1e-3  # a --control change kept in the record is checked as well
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


# ---------------------------------------------------------------------------------------------------- upper bounds
@pytest.mark.parametrize("name, setting, edge, beyond", [
    ("ppo_cartpole", "lr", 1.0, 1e300),  # a rate above 1 throws the weights to inf
    ("sac_ant_bullet", "lr_actor", 1.0, 1.5),
    ("sac_ant_bullet", "lr_alpha", 1.0, 2.0),
    ("impala", "lr_end_value", 1.0, 2.0),
    ("ppo_cartpole", "eval_episodes", 10_000, 10**30),  # an evaluation that never ends
    ("ppo_cartpole", "test_episodes", 10_000, 10_001),
    ("ppo_cartpole", "train_steps", 10**12, 10**12 + 1),
    ("ppo_cartpole", "eval_interval", 10**10, 10**10 + 1),
    ("ppo_cartpole", "checkpoint_interval", 10**10, 10**10 + 1),
    ("ppo_cartpole", "log_interval", 10**10, 10**10 + 1),
    ("ppo_cartpole", "checkpoint_minutes", 1e10, 1e11),
    ("ppo_atari", "seed", 2**30 - 1, 2**30),  # ale-py takes seeds below 2^31, offsets included
])
def test_values_that_would_hang_or_wreck_a_run_are_refused(name, setting, edge, beyond):
    """Each setting's upper bound: the edge is taken, one past it refused, naming the bound. Bug caught: the bound
    left out of (or wrong in) the setting's `define`."""
    hp = sets[name]()
    setattr(hp, setting, edge)
    with pytest.raises(ConfigError, match=f"'{setting}' must be in "):
        setattr(hp, setting, beyond)
    assert getattr(hp, setting) == edge


def test_intervals_and_zero_rates_keep_their_off_values():
    """0 keeps meaning what it meant: no periodic evaluation or step checkpoints, no wall-clock checkpoints, the
    critics' rate for the actor and temperature. Bug caught: an upper bound written with a lower end that drops 0."""
    hp = sets["sac_ant_bullet"]().parse("eval_interval=0,checkpoint_interval=0,checkpoint_minutes=0,lr_actor=0,"
                                        "lr_alpha=0")
    assert [hp.eval_interval, hp.checkpoint_interval, hp.checkpoint_minutes, hp.lr_actor, hp.lr_alpha] == [0] * 5
    for text in ("log_interval=0", "lr=0", "train_steps=0", "eval_episodes=0", "test_episodes=0", "seed=-1"):
        with pytest.raises(ConfigError, match="must be in "):
            sets["ppo_cartpole"]().parse(text)


def test_the_largest_seed_with_its_offsets_is_a_seed_ale_takes():
    """The seed's bound leaves room for the offsets a run adds (a test's seed + 20_000 + episode, ranks' 7919 x rank,
    workers' 1000 x (rank + 1)) below ale-py's 2^31, where a larger seed is a TypeError from its vector env's reset.
    Bug caught: a seed bound raised past what ALE takes (2^62 would pass numpy and torch)."""
    from rl.envs import make_env

    hp = sets["ppo_atari"]()
    hp.seed, hp.num_envs = int(hp.bound("seed").high), 2
    largest = hp.seed + 20_000 + int(hp.bound("test_episodes").high) + 7919 * 64 + 1000 * 65
    env = make_env(hp)
    try:
        env.reset(seed=largest)
    finally:
        env.close()
    assert largest < 2**31


def test_every_set_has_the_lower_bounds_its_sizes_need():
    """Every int setting that is a size, count or interval refuses a negative value, and those that divide or
    allocate refuse 0. Bug caught: a setting defined without its bound (batch_size=0 on a replay agent was a
    ZeroDivisionError)."""
    zero_means_something = {"max_episode_steps", "noop_max", "env_threads", "eval_interval", "checkpoint_interval",
                            "num_workers", "max_policy_lag", "worker_envs", "learning_starts", "update_every",
                            "num_updates", "recurrent_seq_len", "probe_size", "feature_size", "batch_rollouts", "seed",
                            "top_quantiles_to_drop_per_net"}
    for name in sets:
        hp = sets[name]()
        for key, value in hp.to_dict().items():
            if type(value) is not int or key == "sde_sample_freq":  # -1: a phase's noise (its own bound)
                continue
            zero_ok = key in zero_means_something or (key == "batch_size" and hp.memory == "rollout")
            for bad in ([-1] if zero_ok else [-1, 0]):
                with pytest.raises(ConfigError, match=f"'{key}' must be"):
                    setattr(hp.copy(), key, bad)


# ---------------------------------------------------------------------------------------------------- one line each
def test_float_text_for_an_int_is_one_line_from_the_command_line_and_from_control(capsys, tmp_path):
    """`eval_episodes=1e30` was read as 10^30 episodes: an evaluation that never ended. Bug caught: int settings
    parsing float text."""
    from rl.control import parse_request

    status, err = refused_before_a_run(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"),
                                       "--hparam_override", "eval_episodes=1e30")
    assert status == 2 and err.startswith("error: --hparam_override: ")
    one_line(err, "setting 'eval_episodes' expects an int, could not parse '1e30' (write it as a whole number: 1")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError) as refused:
        parse_request(sets["ppo_cartpole"](), "eval_episodes=1e30")
    assert str(refused.value).startswith("--control: setting 'eval_episodes' expects an int, could not parse '1e30'")


@pytest.mark.parametrize("argv, words", [
    (["--hparam_override", "lr=1e300"], ["--hparam_override: setting 'lr' must be in (0, 1], got 1e+300"]),
    (["--seed", "99999999999999999999"], ["--seed: setting 'seed' must be in [0, 1_073_741_823], got 9999"]),
    (["--train_steps", "10000000000000"], ["--train_steps: setting 'train_steps' must be in [1, 1_000_000_000_000]"]),
    (["--eval_episodes", "100000"], ["--eval_episodes: setting 'eval_episodes' must be in [1, 10_000]"]),
    (["--hparams", "dqn_cartpole", "--hparam_override", "batch_size=0"], ["'batch_size' must be >= 1, got 0"]),
    (["--hparam_override", "device=tpu9"], ["'device' must be cpu, auto", "cuda:N", "got 'tpu9'"]),
])
def test_out_of_bounds_flags_and_overrides_are_one_line(capsys, tmp_path, argv, words):
    """Bugs caught: the bound missing (the run starts, or a traceback deep in torch or numpy: a seed past 2^64), or
    the flag not named."""
    hparams_set = [] if "--hparams" in argv else ["--hparams", "ppo_cartpole"]
    status, err = refused_before_a_run(capsys, *hparams_set, "--output_dir", str(tmp_path / "run"), *argv)
    assert status == 2 and err.startswith("error: ") and "Traceback" not in err
    one_line(err, *words)
    assert not (tmp_path / "run").exists()


def test_batch_size_zero_is_the_whole_rollout_on_policy_and_refused_on_replay():
    assert sets["ppo_cartpole"]().parse("batch_size=0").batch_size == 0  # the whole rollout
    for name in ("dqn_cartpole", "sac_pendulum", "td3_pendulum"):
        with pytest.raises(ConfigError, match="'batch_size' must be >= 1, got 0"):
            sets[name]().parse("batch_size=0")


def test_a_device_this_machine_lacks_is_one_line_naming_the_valid_ones(capsys, tmp_path):
    """`device=cuda` on a torch without CUDA failed at the first tensor moved. Bug caught: the device not checked
    before the run starts (or checked by name only)."""
    import torch

    from rl.agents.base import check_device, resolve_device

    assert resolve_device("cpu") == "cpu" and resolve_device("auto") in ("cpu", "cuda")
    missing = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    status, err = refused_before_a_run(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"),
                                       "--hparam_override", f"device={missing}")
    assert status == 2 and err.startswith(f"error: device={missing}: ")
    one_line(err, "valid here: cpu, auto")
    assert not (tmp_path / "run").exists()
    if torch.version.cuda is None:
        assert err == (f"error: device=cuda: this torch {torch.__version__.split('+')[0]} build has no CUDA (built "
                       f"for CPU); valid here: cpu, auto\n")
    for name in (missing, "tpu9"):
        with pytest.raises(ConfigError, match=f"device={name}: .*valid here: cpu, auto"):
            resolve_device(name)  # where an agent is built (rl.make, a worker)
    check_device("cpu")


def test_a_run_for_the_cluster_is_not_checked_against_this_machines_devices(capsys):
    """`--sys k8s` resolves the settings here for pods with GPUs: device=cuda is theirs to check. Bug caught: the
    device check applied to a run that does not run here."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: device=cuda passes either way")
    status = main(capsys, "--sys", "k8s", "--output_dir", "runs/x", "--hparams", "ppo_cartpole", "--hparam_override",
                  "device=cuda", "--accelerator", "nvidia-l4", "--dry_run", "True")[0]
    assert status == 0


@pytest.mark.parametrize("record, words", [
    ([1, 2], "found a list"),
    ({"hparams_set": "ppo_cartpole", "hparams": [1, 2]}, '"hparams": an object of settings, found a list'),
    ({"hparams_set": "ppo_cartpole", "hparams": {"agent": "ppo"}, "control": "oops"}, '"control": a list'),
    ({"hparams_set": "ppo_cartpole", "hparams": {"agent": "ppo"}, "flags": ["--seed", "1"]}, '"flags": an object'),
])
def test_a_hand_edited_record_of_the_wrong_structure_is_one_line(capsys, tmp_path, record, words):
    """Bug caught: a part of hparams.json read before its structure is checked (AttributeError: 'list' object has no
    attribute 'get', or a TypeError)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "hparams.json").write_text(json.dumps(record))
    status, err = main(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out))
    assert status == 2 and err.startswith(f"error: {out / 'hparams.json'} is corrupt: expected ")
    one_line(err, words)
