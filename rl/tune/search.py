"""`train.py --tune N --tune_space ...`: a hyperparameter search whose trials are ordinary runs.

Trial i trains in `output_dir/trial_<i>` with `--hparam_override` = the search's own overrides plus the trial's
values, so its hparams.json records them and every run tool (resume, --training False, the report) works on it.
Every trial uses the same seed (the set's, or --seed): trials differ by their settings only. The objective is the
run's final evaluation mean return (maximised); each periodic evaluation is reported to the pruner at its interval
boundary (the step `eval_interval` x k, whatever the rollout length), so trials with other rollout sizes still
compare at the same steps. A pruner needs evaluations to judge by: where `eval_interval` leaves it fewer than
`MIN_REPORTS` between its warm-up and `train_steps` (ppo_cartpole's 50k interval at any budget up to 200k), the
trials evaluate every train_steps / 6 steps instead, said at the start and kept in their overrides; an
eval_interval the user fixed that does so is refused in one line. With `--copies K` a trial is K runs
(`trial_<i>/copy_<j>`, seeds seed..seed+K-1, one after another) and its value is their mean; such trials are not
pruned, since no mean exists until every copy has reached a step.

Up to `--tune_jobs` forked worker processes (default: one per core, at most N) each take the next trial from the
shared study until N trials have finished (study.py says which count). With several workers each run uses
cores // jobs threads at most. Ctrl-C or SIGTERM reaches every worker, whose runs checkpoint, and the search exits
with 128 + the signal (130, 143) after the last one; running the same command resumes it, each stopped trial under
its own number. A worker dies with its search (PR_SET_PDEATHSIG), after saving its run.

At the end: best.json, trials.csv (Optuna's trials_dataframe), the runs' report (rl/report) in report/ and Optuna's
optimisation history and parameter importances in optuna/.

This module opens the study and runs the search; settings.py checks what it searches, workers.py runs its trials and
result.py writes its result.
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

import optuna

from rl.errors import ConfigError
from rl.tune import study as studies
from rl.tune.result import finish
from rl.tune.settings import (
    MIN_REPORTS,
    check,
    evaluation_interval,
    fixed_override,
    identity,
    make_pruner,
    pruner_name,
    sampler_name,
    shared,
    study_name,
)
from rl.tune.workers import ask_lock, requeue_stale, run_workers


def search(args) -> None:
    """Run (or resume) the search `args` describes in `output_dir`, then print and save its best trial."""
    out = Path(args.output_dir)
    hp, params = check(args, out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per finished trial, printed by the workers
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".search.lock", "w") as lock:
        if not shared(args):  # the default study.db is this search's alone
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ConfigError(f"another search is running in {out}") from None
        store, study = open_search(args, hp, params)
        if shared(args):  # other searches may be running trials: only those that lost their worker come back
            asking = ask_lock(args, out)  # (a trial being handed out carries its old worker until it is marked)
            try:
                stopped = requeue_stale(store, study, studies.worker_id())
            finally:
                asking.release()
        else:
            stopped = studies.recover(store, study)
        for number in stopped:
            print(f"trial {number} was interrupted: queued again under its number (it continues from its "
                  f"checkpoints)", flush=True)
        done = len(studies.finished(study.get_trials(deepcopy=False)))
        if done < args.tune:
            cores = os.cpu_count() or 1
            jobs = min(args.tune - done, args.tune_jobs or cores)
            threads = min(hp.torch_threads, max(1, cores // jobs))  # jobs x threads <= cores
            if fixed_override(args, hp) != (args.hparam_override or ""):
                print(f"search: eval_interval {hp.eval_interval} leaves the {pruner_name(args)} pruner fewer than "
                      f"{MIN_REPORTS} evaluations to judge a trial by in {hp.train_steps} steps: the trials evaluate "
                      f"every {evaluation_interval(args, hp)} steps", flush=True)
            print(f"search: {args.tune - done} of {args.tune} trials to run in {out}/trial_<i>, {jobs} at a time "
                  f"(study {study.study_name!r} in {studies.storage_text(args.tune_storage, out)})", flush=True)
            studies.close(store)  # no open database connection crosses the fork
            signum = run_workers(args, hp, params, jobs, threads)
            if signum:
                print(f"\n{signal.Signals(signum).name}: the trials saved checkpoints; run the same command to resume "
                      f"the search.", flush=True)
                raise SystemExit(128 + signum)
            store, study = open_search(args, hp, params)
            left = args.tune - len(studies.finished(study.get_trials(deepcopy=False)))
            if shared(args) and left > 0:  # the rest run in other processes: the last of them reports
                print(f"search: {left} of {args.tune} trials still run in other processes sharing the study; the "
                      f"last to end writes best.json and the reports", flush=True)
                return
        finish(args, out, hp, params, report=done < args.tune or not (out / "report").exists())


def open_search(args, hp=None, params=None) -> tuple:
    """The storage and study of the search `args` describes (created if new; checked against its settings if not).
    Also for a script that queues known settings first: `study.enqueue_trial({"lr": 3e-3})`."""
    out = Path(args.output_dir)
    if hp is None:
        hp, params = check(args, out)
    out.mkdir(parents=True, exist_ok=True)
    store = studies.storage(args.tune_storage, out)
    study = studies.open_study(store, study_name(args), studies.storage_text(args.tune_storage, out),
                               identity(args, hp, params), make_pruner(args, hp),
                               studies.make_sampler(sampler_name(args), hp.seed, 0))
    return store, study
