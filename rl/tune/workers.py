"""The worker processes of a search: up to `--tune_jobs` forked workers each take the next trial from the shared
study and run it as an ordinary run in output_dir/trial_<i>, reporting its evaluations to the pruner; a stop
signal reaches every worker, whose run checkpoints, and its trial goes back to WAITING under its number. Each trial
beats a heartbeat into the study, so that in a shared study the trials that lost their worker are queued again."""

from __future__ import annotations

import copy
import fcntl
import os
import signal
import threading
import traceback
from pathlib import Path

import optuna
from optuna.trial import TrialState

from rl.errors import first_line
from rl.logger import log_final_hparams
from rl.parallel.processes import die_with_parent
from rl.tune import study as studies
from rl.tune.settings import evaluation_interval, fixed_override, make_pruner, sampler_name, shared, study_name
from rl.tune.space import Param, override


def run_workers(args, hp, params, jobs: int, threads: int) -> int:
    """Fork the workers and wait for them; a stop signal is passed on to them. Return that signal (0: none)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # the children inherit the filled registries, as in rl/copies.py
    workers = [ctx.Process(target=_worker, args=(args, hp, params, threads, os.getpid()), name=f"trial-worker-{i}")
               for i in range(jobs)]
    for w in workers:
        w.start()
    stop = {"signum": 0}

    def forward(signum, frame):
        stop["signum"] = signum
        for w in workers:
            if w.pid is not None and w.exitcode is None:
                try:
                    os.kill(w.pid, signum)
                except ProcessLookupError:  # it ended just now
                    pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for w in workers:
            w.join()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    for w in workers:
        if w.exitcode not in (0, 130, 143) and not stop["signum"]:
            print(f"{w.name} ended with status {w.exitcode}; its trial is queued again when the search resumes",
                  flush=True)
    return stop["signum"]


def _worker(args, hp, params: list[Param], threads: int, parent: int) -> None:
    """Take trials from the study until N have finished. A stop signal ends the run (it checkpoints) and the worker
    with 128 + the signal; the trial goes back to WAITING, and the next search continues it. (A worker killed
    outright leaves it RUNNING: the next search, or in a shared study the next worker to ask, queues it again.)"""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent, signal.SIGTERM)  # the search's death is a SIGTERM: the run checkpoints and ends
    out = Path(args.output_dir)
    store, me = studies.storage(args.tune_storage, out), studies.worker_id()
    study = optuna.load_study(study_name=study_name(args), storage=store, pruner=make_pruner(args, hp))
    try:
        while (trial := _next_trial(study, store, me, args, hp, out)) is not None:
            _run_trial(study, store, trial, me, args, hp, params, threads)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _next_trial(study: optuna.Study, store, me: dict, args, hp, out: Path):
    """Ask for the next trial while fewer than N are finished or running; one worker at a time, so the search never
    starts more than N, and each TPE draw is seeded by the number of trials before it. In a shared study the lock is
    Optuna's journal file lock (a file created exclusively: it holds across the machines sharing the volume), and
    the trials that lost their worker are queued again first."""
    lock = ask_lock(args, out)
    try:
        if shared(args):
            for number in requeue_stale(store, study, me):
                print(f"trial {number} lost its worker: queued again under its number (it continues from its "
                      f"checkpoints)", flush=True)
        trials = study.get_trials(deepcopy=False)
        running = [t for t in trials if t.state == TrialState.RUNNING]
        if len(studies.finished(trials)) + len(running) >= args.tune:
            return None
        study.sampler = studies.make_sampler(sampler_name(args), hp.seed, len(trials))
        trial = study.ask()
        studies.beat(trial, me)
        return trial
    finally:
        lock.release()


def requeue_stale(store, study: optuna.Study, me: dict) -> list[int]:
    """Queue again the running trials whose worker stopped beating (`studies.stale`); their numbers."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return studies.requeue(store, study.study_name, [t.number for t in running if studies.stale(t, me)])


def ask_lock(args, out: Path):
    """Held while a worker asks for a trial: fcntl's lock for this machine's workers, Optuna's journal file lock
    when processes on other machines share the study."""
    if shared(args):
        from optuna.storages.journal import JournalFileOpenLock

        lock = JournalFileOpenLock(str(out / ".ask.lock"))
        lock.acquire()
        return lock

    class Flock:
        def __init__(self):
            self.file = open(out / ".ask.lock", "w")  # noqa: SIM115 - released by release()
            fcntl.flock(self.file, fcntl.LOCK_EX)

        def release(self):
            self.file.close()

    return Flock()


def _run_trial(study: optuna.Study, store, trial: optuna.Trial, me: dict, args, hp, params: list[Param],
               threads: int) -> None:
    """Run `trial` (continuing its run if it was stopped before), with a heartbeat that tells the other workers of
    a shared study that it is still running. Stopped by a signal, it goes back to WAITING under its number."""
    stop = threading.Event()

    def heartbeat():
        while not stop.wait(studies.HEARTBEAT_S):
            studies.beat(trial, me)

    beating = threading.Thread(target=heartbeat, name=f"trial-{trial.number}-heartbeat", daemon=True)
    beating.start()
    try:
        _run_one_trial(study, trial, args, hp, params, threads)
    except BaseException:  # a stop signal: the run saved a checkpoint; the trial waits for the next worker
        stop.set()
        beating.join()
        studies.requeue(store, study.study_name, [trial.number])
        raise
    finally:
        stop.set()
        beating.join()


def _run_one_trial(study: optuna.Study, trial: optuna.Trial, args, hp, params: list[Param], threads: int) -> None:
    for p in params:
        p.suggest(trial)
    text = override(params, trial.params)
    trial.set_user_attr("override", text)
    out = Path(args.output_dir) / f"trial_{trial.number}"
    # a trial queued again after an interruption keeps its number: its folder holds its checkpoints (the run goes
    # on from them) and the study its reported evaluations (not reported twice)
    reported = set(study.get_trials(deepcopy=False)[trial.number].intermediate_values)
    run_args = copy.copy(args)
    extra = [f"torch_threads={threads}"] if threads != hp.torch_threads else []
    run_args.hparam_override = ",".join(s for s in [fixed_override(args, hp), *extra, text] if s)
    run_args.output_dir, run_args.tune, run_args.copies = str(out), None, 1
    interval = evaluation_interval(args, hp)
    pruned_at = {}

    def on_evaluation(step: int, mean_return: float) -> bool:
        step = step // interval * interval  # the interval boundary: the same steps in every trial
        if step not in reported:  # a continued run may evaluate again at a step reported before its checkpoint
            trial.report(mean_return, step)
            reported.add(step)
        if trial.should_prune():
            pruned_at["step"] = step
            return True
        return False

    from rl.command import run_one

    try:
        if args.copies == 1:
            result = run_one(run_args, out, quiet=True, on_evaluation=on_evaluation)
            value = result["mean_return"]
        else:
            means = [run_one(run_args, out / f"copy_{i}", seed_offset=i, quiet=True)["mean_return"]
                     for i in range(args.copies)]
            value = sum(means) / len(means)
    except Exception as exc:  # noqa: BLE001 - one trial's failure is recorded; the search goes on
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").write_text(traceback.format_exc())
        trial.set_user_attr("error", first_line(exc, 300))
        study.tell(trial, state=TrialState.FAIL)
        print(f"trial {trial.number}: failed ({first_line(exc, 200)}; {out / 'error.txt'})  {text}", flush=True)
        return
    if pruned_at:
        study.tell(trial, state=TrialState.PRUNED)
        print(f"trial {trial.number}: pruned at step {pruned_at['step']} ({value:.2f})  {text}", flush=True)
    else:
        study.tell(trial, value)
        print(f"trial {trial.number}: {value:.2f}  {text}", flush=True)
    # a row per run in TensorBoard's HParams view: `tensorboard --logdir` the search folder compares the trials
    runs = {out: value} if args.copies == 1 else {out / f"copy_{i}": m for i, m in enumerate(means)}
    for run_dir, score in runs.items():
        log_final_hparams(run_dir, {"final_return_mean": score})
