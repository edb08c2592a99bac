"""`train.py --tune`: the search space (each distribution, each bad space in one line, the override round trip), and
real searches on a tiny budget: pruning, resuming from study.db, Ctrl-C, and a best override that reproduces its
trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from rl.errors import ConfigError
from rl.registry import hparams as sets
from rl.resolve import read_record
from rl.tune.space import format_value, override, parse_space

ROOT = Path(__file__).resolve().parents[1]
SPACE = ("lr=loguniform(1e-5,1e-2),ent_coef=uniform(0,0.02),epochs=intuniform(2,20),batch_size=choice(64,128,256),"
         "hidden_sizes=choice([64,64],[32]),activation=choice(tanh,relu),lr_decay=choice(true,false)")
# the search of the study tests: a good and a clearly bad learning rate are queued first (lr=0.5 saturates the policy:
# greedy returns of 9-19, against 27-500 at lr=3e-3 from step 1000 at seeds 0-5), so the pruning is not left to chance
TINY = ["--hparams", "ppo_cartpole", "--train_steps", "3000", "--eval_episodes", "2", "--hparam_override",
        "eval_interval=500,checkpoint_interval=1000,log_interval=500", "--tune_space", "lr=loguniform(1e-4,1),"
        "batch_size=choice(64,256)", "--tune_jobs", "1"]
SEED = int(os.environ.get("TUNE_TEST_SEED", "0"))  # checked at 0-5 while writing the test


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def args_of(argv: list[str]):
    import train

    return train.parser().parse_args(argv)


def trials_of(out: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="search", storage=f"sqlite:///{out / 'study.db'}").trials


# ---------------------------------------------------------------------------------------------------- the space
def test_each_distribution_samples_values_of_its_setting():
    params = parse_space(SPACE, sets["ppo_cartpole"]())
    assert [(p.name, p.kind) for p in params] == [
        ("lr", "loguniform"), ("ent_coef", "uniform"), ("epochs", "intuniform"), ("batch_size", "choice"),
        ("hidden_sizes", "choice"), ("activation", "choice"), ("lr_decay", "choice")]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = {p.name: set() for p in params}
    for _ in range(40):
        trial = study.ask()
        values = {p.name: p.suggest(trial) for p in params}
        assert 1e-5 <= values["lr"] <= 1e-2 and 0 <= values["ent_coef"] <= 0.02
        assert type(values["epochs"]) is int and 2 <= values["epochs"] <= 20
        assert values["batch_size"] in (64, 128, 256) and values["hidden_sizes"] in ([64, 64], [32])
        assert values["activation"] in ("tanh", "relu") and values["lr_decay"] in (True, False)
        for name, value in values.items():
            seen[name].add(format_value(value))
        study.tell(trial, 0.0)
    assert all(len(seen[p.name]) > 1 for p in params)
    lows = sorted(float(v) for v in seen["lr"])  # log-uniform: as many draws below 1e-4 as above 1e-3 (roughly)
    assert sum(v < 1e-4 for v in lows) >= 5 and sum(v > 1e-3 for v in lows) >= 5


@pytest.mark.parametrize("space, words", [
    ("lrr=uniform(0,1)", "unknown setting 'lrr': did you mean 'lr'"),
    ("lr=unifrom(0,1)", "unknown distribution 'unifrom': did you mean 'uniform'"),
    ("lr_decay=loguniform(1e-3,1)", "'lr_decay' is a bool setting: only choice(...) fits it"),
    ("activation=uniform(0,1)", "'activation' is a str setting: only choice(...) fits it"),
    ("epochs=uniform(1,30)", "'epochs' is an int setting: intuniform(low,high) or choice(...) fits it"),
    ("lr=intuniform(1,3)", "'lr' is a float setting"),
    ("batch_size=choice(64,1.5)", "'batch_size' expects an int, could not parse '1.5'"),
    ("lr_decay=choice(true,maybe)", "could not parse 'maybe'"),
    ("lr=uniform(0.1,0.01)", "the range is reversed"),
    ("lr=uniform(0.01,0.01)", "the range is empty"),
    ("lr=loguniform(0,0.1)", "loguniform() needs low > 0"),
    ("lr=loguniform(-1,0.1)", "loguniform() needs low > 0"),
    ("epochs=intuniform(1.5,3)", "whole-number bounds"),
    ("lr=uniform(0)", "takes two bounds"),
    ("lr=uniform(a,1)", "the bounds must be numbers"),
    ("lr=choice()", "at least one value"),
    ("batch_size=choice(64,64)", "lists 64 more than once"),
    ("lr=0.1", "is not name=distribution(...)"),
    ("lr=uniform(0,1", "unbalanced brackets"),
    ("lr=uniform(0.1,1),lr=loguniform(1e-4,1)", "names 'lr' twice"),
    ("", "--tune needs --tune_space"),
])
def test_a_bad_space_is_one_line(space, words):
    with pytest.raises(ConfigError) as err:
        parse_space(space, sets["ppo_cartpole"]())
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_override_reproduces_the_sampled_values_exactly(tmp_path):
    """Through resolve_hparams, as `train.py --hparam_override TEXT` reads it: every value comes back bit for bit."""
    from rl.resolve import resolve_hparams

    params = parse_space(SPACE + ",env=choice(CartPole-v1,'Cart,Pole')", sets["ppo_cartpole"]())
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(25):
        trial = study.ask()
        values = {p.name: p.suggest(trial) for p in params}
        text = override(params, trial.params)
        parsed = sets["ppo_cartpole"]().parse(text)
        assert {name: getattr(parsed, name) for name in values} == values, text
        study.tell(trial, 0.0)
    values = {"lr": 0.0001234567891234567, "ent_coef": 0.1 + 0.2, "epochs": 7, "batch_size": 128,
              "hidden_sizes": "[32]", "activation": "tanh", "lr_decay": False, "env": "CartPole-v1"}
    args = args_of(["--hparams", "ppo_cartpole", "--output_dir", str(tmp_path), "--hparam_override",
                    override(params, values)])
    hp = resolve_hparams(args, tmp_path / "run")
    assert (hp.lr, hp.ent_coef, hp.epochs, hp.hidden_sizes, hp.lr_decay) == (
        0.0001234567891234567, 0.30000000000000004, 7, [32], False)
    assert format_value("Cart,Pole") in ("'Cart,Pole'", '"Cart,Pole"')


def test_a_search_refuses_what_it_cannot_search_in_one_line(tmp_path):
    from rl.tune import search

    base = ["--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "s"), "--tune", "2"]
    res = cli(*base, "--tune_space", "lr=uniform(1,0)")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "the range is reversed" in res.stderr, res.stderr
    for extra, words in [
        (["--tune_space", "lr=uniform(0.1,1)", "--hparam_override", "lr=0.1"], "in both --tune_space and"),
        (["--tune_space", "lr=uniform(0.1,1)", "--tune_jobs", "-1"], "--tune_jobs must be"),
        (["--tune_space", "lr=uniform(0.1,1)", "--training", "False"], "--tune trains its trials"),
    ]:
        with pytest.raises(ConfigError, match=words.replace("-", "\\-")):
            search(args_of(base + extra))
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------------------------------- real searches
def test_a_search_prunes_a_bad_trial_and_prints_an_override_that_reproduces_the_best(tmp_path):
    """Two trials: a good lr queued first, then a bad one that the median rule prunes at an evaluation. The printed
    override retrains the best trial to the same settings and the same value; the same command again only prints
    the result (the pruned trial counts toward N); a changed space is refused."""
    from rl.tune.search import open_search

    out = tmp_path / "search"
    argv = [*TINY, "--output_dir", str(out), "--seed", str(SEED), "--tune", "2"]
    _, study = open_search(args_of(argv))
    study.enqueue_trial({"lr": 3e-3, "batch_size": 256})
    study.enqueue_trial({"lr": 0.5, "batch_size": 256})
    del study

    res = cli(*argv)
    assert res.returncode == 0, res.stderr
    trials = trials_of(out)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED], res.stdout
    assert "trial 1: pruned at step" in res.stdout and "1 complete, 1 pruned, 0 failed" in res.stdout
    saved = read_record(out / "trial_1" / "hparams.json")["hparams"]
    assert saved["lr"] == 0.5 and saved["batch_size"] == 256 and saved["eval_interval"] == 500  # the trial's values
    pruned_at = max(trials[1].intermediate_values)
    assert 1000 <= pruned_at < 3000
    ended = json.loads((out / "trial_1" / "eval.json").read_text())  # stopped at an evaluation, and says so
    assert ended["mode"] == "stopped_early" and pruned_at <= ended["env_steps"] < pruned_at + 500

    best = json.loads((out / "best.json").read_text())
    assert best["trial"] == 0 and best["value"] == trials[0].value
    assert best["hparam_override"] == TINY[7] + ",lr=0.003,batch_size=256"
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    events = EventMultiplexer()  # each trial is a row of TensorBoard's HParams view, with its score
    events.AddRunsFromDirectory(str(out))
    events.Reload()
    assert {"trial_0", "trial_1"} <= set(events.PluginRunToTagToContent("hparams"))
    assert [e.value for e in events.Scalars("trial_0", "hparams/final_return_mean")] == [pytest.approx(best["value"])]
    line = next(li for li in res.stdout.splitlines() if li.strip().startswith("--hparam_override"))
    printed = line.split("--hparam_override", 1)[1].strip().strip('"')
    assert printed == best["hparam_override"]
    again = cli("--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "again"), "--train_steps", "3000",
                "--eval_episodes", "2", "--seed", str(SEED), "--hparam_override", printed)
    assert again.returncode == 0, again.stderr
    ran = read_record(out / "trial_0" / "hparams.json")["hparams"]
    assert read_record(tmp_path / "again" / "hparams.json")["hparams"] == ran
    assert json.loads((tmp_path / "again" / "eval.json").read_text())["mean_return"] == best["value"]

    res = cli(*argv)  # N trials are finished: only the result again
    assert res.returncode == 0 and "trial 2" not in res.stdout and "best: trial 0" in res.stdout, res.stderr
    assert len(trials_of(out)) == 2
    res = cli(*[a.replace("batch_size=choice(64,256)", "batch_size=choice(64,128)") for a in argv])
    assert res.returncode == 2 and "holds a search of other settings" in res.stderr and "tune_space" in res.stderr


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            pass
    return found


@pytest.mark.slow
def test_ctrl_c_stops_every_trial_and_the_search_resumes_them(tmp_path):
    """Two trials at once; Ctrl-C: both runs checkpoint, no process outlives the search, exit 130. The same command
    puts them back to WAITING under their own numbers and continues their runs from the checkpoints."""
    out, budget = tmp_path / "search", 12000
    argv = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--train_steps", str(budget), "--eval_episodes", "2",
            "--hparam_override", "eval_interval=2000,checkpoint_interval=2000,log_interval=1000", "--tune", "2",
            "--tune_jobs", "2", "--tune_space", "lr=loguniform(1e-4,1e-2)"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not all(list((out / f"trial_{i}" / "checkpoints").glob("ckpt_*")) for i in (0, 1)):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "run the same command to resume the search" in stdout
    time.sleep(0.2)
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    stopped = trials_of(out)
    assert [t.state for t in stopped] == [TrialState.WAITING] * 2  # back in the queue, under their numbers
    saved_steps = {i: max(int(p.stem.split("_")[1]) for p in (out / f"trial_{i}" / "checkpoints").glob("ckpt_*"))
                   for i in (0, 1)}
    assert all(2000 <= s < budget for s in saved_steps.values())

    res = cli(*argv)
    assert res.returncode == 0, res.stderr
    trials = trials_of(out)
    assert [(t.number, t.state) for t in trials] == [(0, TrialState.COMPLETE), (1, TrialState.COMPLETE)]
    assert "2 trials finished: 2 complete" in res.stdout
    for trial in trials:
        assert trial.params == stopped[trial.number].params  # the same settings, the same number
        assert f"resuming from step {saved_steps[trial.number]}" in res.stdout  # its run went on from its checkpoint
        steps = [int(r.split(",")[0]) for r in (out / f"trial_{trial.number}" / "progress.csv").read_text().split()[1:]]
        assert steps == sorted(steps) and steps[-1] == budget  # one run that went on, not a second from step 0
        assert set(stopped[trial.number].intermediate_values) <= set(trial.intermediate_values)

    argv[argv.index("--tune") + 1] = "3"  # the resumed study, grown to 3 trials: one more runs
    res = cli(*argv)
    assert res.returncode == 0, res.stderr
    assert "1 of 3 trials to run" in res.stdout and "trial 2:" in res.stdout and len(trials_of(out)) == 3


# ---------------------------------------------------------------------------------------------------- flags, pruning
def main_status(capsys, *argv: str) -> tuple[int, str]:
    import train

    status = train.main(list(argv))
    return status, capsys.readouterr().err


def test_tune_flags_without_a_search_and_tune_0_are_refused(capsys, tmp_path):
    run = ["--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run")]
    for extra, words in [(["--tune_space", "lr=uniform(0.1,1)"], "--tune_space apply to a search only"),
                         (["--tune_jobs", "2"], "--tune_jobs apply to a search only"),
                         (["--tune_sampler", "random", "--tune_study", "x"], "--tune_sampler, --tune_study apply"),
                         (["--tune_pruner", "none"], "--tune_pruner apply"),
                         (["--tune_storage", str(tmp_path / "j.log")], "--tune_storage apply"),
                         (["--tune", "0", "--tune_space", "lr=uniform(0.1,1)"], "--tune must be a positive number")]:
        status, err = main_status(capsys, *run, *extra)
        assert status == 2 and err.count("\n") == 1 and words in err, (extra, err)
    assert not (tmp_path / "run").exists()  # nothing trained


def test_a_choice_that_names_nothing_is_refused_before_any_trial(capsys, tmp_path):
    out = tmp_path / "search"
    for space, words in [("env=choice(CartPole-v1,NoSuchEnv-v0)", "NoSuchEnv-v0"),
                         ("torso=choice(mlp,no_such_torso)", "unknown models 'no_such_torso'"),
                         ("grad_comp=choice(ppo_clip,ppo_clipp)", "did you mean 'ppo_clip'")]:
        status, err = main_status(capsys, "--hparams", "ppo_cartpole", "--output_dir", str(out), "--tune", "2",
                                  "--tune_space", space)
        assert status == 2 and err.count("\n") == 1 and words in err and "--tune_space" in err, (space, err)
        assert not out.exists()


def test_the_study_hands_an_interrupted_trial_back_under_its_own_number(tmp_path):
    from rl.tune import study as studies

    store = studies.storage(None, tmp_path)
    study = optuna.create_study(study_name="search", storage=store, direction="maximize")
    first = study.ask()
    lr = first.suggest_float("lr", 1e-4, 1e-2, log=True)
    first.report(10.0, 500)
    second = study.ask()
    second.suggest_float("lr", 1e-4, 1e-2, log=True)
    study.tell(second, 1.0)
    assert studies.recover(store, study) == [0]  # the stale RUNNING trial 0
    assert [t.state for t in study.trials] == [TrialState.WAITING, TrialState.COMPLETE]
    again = study.ask()
    assert again.number == 0 and again.suggest_float("lr", 1e-4, 1e-2, log=True) == lr
    assert study.trials[0].intermediate_values == {500: 10.0}
    study.tell(again, 5.0)
    assert [t.number for t in studies.finished(study.trials)] == [0, 1] and len(study.trials) == 2


@pytest.mark.slow
def test_a_budget_below_eval_interval_still_prunes(tmp_path):
    """ppo_cartpole evaluates every 50k steps: a 3000-step search would report nothing to the pruner. The search
    places evaluations every 500 steps (said, and kept in the trials' overrides and the best command); the bad trial
    is pruned at one of them. An eval_interval the user fixes that leaves too few is refused."""
    from rl.tune.search import open_search

    out = tmp_path / "search"
    argv = ["--hparams", "ppo_cartpole", "--train_steps", "3000", "--eval_episodes", "2", "--hparam_override",
            "checkpoint_interval=1000,log_interval=500", "--tune_space", "lr=loguniform(1e-4,1),"
            "batch_size=choice(64,256)", "--tune_jobs", "1", "--output_dir", str(out), "--seed", str(SEED),
            "--tune", "2"]
    _, study = open_search(args_of(argv))
    study.enqueue_trial({"lr": 3e-3, "batch_size": 256})
    study.enqueue_trial({"lr": 0.5, "batch_size": 256})
    del study
    res = cli(*argv)
    assert res.returncode == 0, res.stderr
    assert "eval_interval 50000 leaves the median pruner fewer than 3 evaluations" in res.stdout
    assert "the trials evaluate every 500 steps" in res.stdout
    trials = trials_of(out)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.PRUNED], res.stdout
    assert sorted(trials[0].intermediate_values) == [500, 1000, 1500, 2000, 2500]
    assert read_record(out / "trial_1" / "hparams.json")["hparams"]["eval_interval"] == 500
    best = json.loads((out / "best.json").read_text())
    assert best["hparam_override"] == "checkpoint_interval=1000,log_interval=500,eval_interval=500,lr=0.003," \
                                      "batch_size=256"

    refused = cli("--hparams", "ppo_cartpole", "--train_steps", "3000", "--hparam_override", "eval_interval=1000",
                  "--tune_space", "lr=loguniform(1e-4,1)", "--output_dir", str(tmp_path / "refused"), "--tune", "2")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "eval_interval=1000 gives the median pruner 2 evaluations" in refused.stderr
    assert "--tune_pruner none" in refused.stderr and not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_sampler_pruner_journal_storage_and_study_name_and_the_search_report(tmp_path):
    """random sampling, no pruner, the study in a journal file under another name: the search runs, resumes from
    that file, and writes trials.csv and Optuna's figures."""
    import csv

    from rl.tune import study as studies

    out, journal = tmp_path / "search", tmp_path / "journal.log"
    argv = ["--hparams", "ppo_cartpole", "--train_steps", "512", "--eval_episodes", "1", "--tune_space",
            "lr=loguniform(1e-4,1e-2)", "--tune_jobs", "1", "--output_dir", str(out), "--tune", "2",
            "--tune_sampler", "random", "--tune_pruner", "none", "--tune_storage", str(journal), "--tune_study", "mine"]
    res = cli(*argv)
    assert res.returncode == 0, res.stderr
    assert "evaluate every" not in res.stdout  # no pruner: the set's eval_interval stands
    assert journal.exists() and not (out / "study.db").exists()
    loaded = optuna.load_study(study_name="mine", storage=studies.storage(str(journal), out))
    assert [t.state for t in loaded.trials] == [TrialState.COMPLETE] * 2
    best = json.loads((out / "best.json").read_text())
    assert best["sampler"]["name"] == "random" and best["pruner"] == {"name": "NopPruner"}
    assert best["study"] == {"name": "mine", "storage": str(journal)}
    with open(out / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["number"]) for r in rows] == [0, 1] and all(float(r["params_lr"]) > 0 for r in rows)
    assert {float(r["value"]) for r in rows} == {t.value for t in loaded.trials}
    assert (out / "optuna" / "optimization_history.png").stat().st_size > 0
    assert (out / "optuna" / "param_importances.png").stat().st_size > 0
    again = cli(*argv)  # finished: the result again, read from the journal
    assert again.returncode == 0 and "best: trial" in again.stdout and len(loaded.trials) == 2, again.stderr


def test_each_sampler_and_pruner_is_the_one_asked_for():
    from rl.tune import study as studies

    assert isinstance(studies.make_sampler("tpe", 0, 0), optuna.samplers.TPESampler)
    assert isinstance(studies.make_sampler("random", 0, 0), optuna.samplers.RandomSampler)
    cma = studies.make_sampler("cmaes", 0, 0)
    assert isinstance(cma, optuna.samplers.CmaEsSampler)
    study = optuna.create_study(sampler=cma, direction="maximize")
    for _ in range(7):  # past its 5 random startup trials: CMA-ES itself draws
        trial = study.ask()
        study.tell(trial, -(trial.suggest_float("x", -1, 1) - 0.3) ** 2)
    assert isinstance(studies.make_pruner("median", 10, 3000, 500), optuna.pruners.MedianPruner)
    assert isinstance(studies.make_pruner("hyperband", 10, 3000, 500), optuna.pruners.HyperbandPruner)
    assert isinstance(studies.make_pruner("none", 10, 3000, 500), optuna.pruners.NopPruner)


@pytest.mark.slow
def test_two_processes_sharing_a_journal_study_run_each_trial_once_with_one_killed_mid_trial(tmp_path):
    """Two searches share a study in an Optuna journal file, as the pods of `--sys k8s --tune N --nodes K` do. One
    is killed (SIGKILL, its worker too) in the middle of a trial and started again: the trial goes back to WAITING
    under its number, continues from its checkpoint, and the N trials each complete exactly once."""
    from rl.tune import study as studies

    out, journal = tmp_path / "search", tmp_path / "study.journal"
    argv = [sys.executable, str(ROOT / "train.py"), "--hparams", "ppo_cartpole", "--train_steps", "4000",
            "--eval_episodes", "1", "--hparam_override", "eval_interval=1000,checkpoint_interval=500,log_interval=500",
            "--tune_space", "lr=loguniform(1e-4,1e-2)", "--tune", "4", "--tune_jobs", "1", "--tune_pruner", "none",
            "--tune_storage", str(journal), "--output_dir", str(out)]

    def start():
        return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)  # its own process group: killed with its worker

    first, other = start(), start()
    victim = None
    deadline = time.time() + 120
    while victim is None:
        assert time.time() < deadline and first.poll() is None and other.poll() is None, "no trial to kill"
        time.sleep(0.05)
        if not journal.exists():
            continue
        try:  # the journal file can exist before either process has written the study into it
            study = optuna.load_study(study_name="search", storage=studies.storage(str(journal), out))
        except KeyError:
            continue
        for t in study.get_trials(states=(TrialState.RUNNING,)):
            worker = t.user_attrs.get("worker", {})
            folder = out / f"trial_{t.number}"
            try:
                ours = os.getpgid(worker.get("pid", -1)) == first.pid
            except ProcessLookupError:
                continue
            if ours and list((folder / "checkpoints").glob("ckpt_*")) and not (folder / "eval.json").exists():
                victim = t.number
    os.killpg(first.pid, signal.SIGKILL)
    killed_output = first.communicate(timeout=30)[0]
    assert first.returncode == -signal.SIGKILL
    restarted = start()
    outputs = [killed_output] + [p.communicate(timeout=300)[0] for p in (other, restarted)]
    assert other.returncode == 0 and restarted.returncode == 0, outputs

    trials = optuna.load_study(study_name="search", storage=studies.storage(str(journal), out)).trials
    assert [(t.number, t.state) for t in trials] == [(i, TrialState.COMPLETE) for i in range(4)]
    text = "\n".join(outputs)
    for t in trials:  # each trial's result was told once, by one process
        assert sum(line.startswith(f"trial {t.number}: ") for line in text.splitlines()) == 1, text
    assert f"trial {victim} " in text and "queued again under its number" in text
    assert "resuming from step" in text  # the killed trial's run went on from its checkpoint
    steps = [int(r.split(",")[0]) for r in (out / f"trial_{victim}" / "progress.csv").read_text().split()[1:]]
    assert steps == sorted(steps) and steps[-1] == 4000
    assert not (out / "trial_4").exists() and json.loads((out / "best.json").read_text())["trials"]["complete"] == 4
