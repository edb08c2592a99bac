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
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
import signal
import threading
import traceback
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from rl.errors import ConfigError, first_line
from rl.hparams import check_assembly, resolve_hparams, split_top_level
from rl.logger import log_final_hparams
from rl.parallel.processes import die_with_parent
from rl.tune import study as studies
from rl.tune.space import Param, format_value, override, parse_space

MIN_REPORTS = 3  # evaluations a pruner gets from each trial, at least, after its warm-up


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
            asking = _ask_lock(args, out)  # (a trial being handed out carries its old worker until it is marked)
            try:
                stopped = _requeue_stale(store, study, studies.worker_id())
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
            signum = _run_workers(args, hp, params, jobs, threads)
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


def shared(args) -> bool:
    """Whether other searches, on this machine or others, may work on the same study at the same time: the study is
    in a --tune_storage (a journal file on a shared volume, or a database)."""
    return bool(getattr(args, "tune_storage", None))


def _requeue_stale(store, study: optuna.Study, me: dict) -> list[int]:
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return studies.requeue(store, study.study_name, [t.number for t in running if studies.stale(t, me)])


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


def sampler_name(args) -> str:
    return getattr(args, "tune_sampler", None) or "tpe"


def pruner_name(args) -> str:
    """The pruner; none with --copies K > 1 (no mean exists until every copy has reached a step)."""
    return "none" if args.copies > 1 else (getattr(args, "tune_pruner", None) or "median")


def study_name(args) -> str:
    return getattr(args, "tune_study", None) or studies.STUDY_NAME


def make_pruner(args, hp) -> optuna.pruners.BasePruner:
    return studies.make_pruner(pruner_name(args), args.tune, hp.train_steps, evaluation_interval(args, hp))


def _reports(interval: int, train_steps: int, warmup: int) -> int:
    """Periodic evaluations at k x interval < train_steps that a pruner with this warm-up may act on."""
    if interval <= 0:
        return 0
    first = max(1, -(-warmup // interval))
    return max(0, (train_steps - 1) // interval - first + 1)


def evaluation_interval(args, hp) -> int:
    """The trials' eval_interval: the run's own where it gives the pruner MIN_REPORTS evaluations past its warm-up,
    else train_steps // 6 (evaluations at 1/6 ... 5/6 of the run: at least 3 past a third). An eval_interval typed in
    --hparam_override that gives fewer is refused; so is a budget too small to place them."""
    pruner = pruner_name(args)
    interval, steps = hp.eval_interval, hp.train_steps
    warmup = studies.warmup_steps(pruner, steps)
    if pruner == "none" or _reports(interval, steps, warmup) >= MIN_REPORTS:
        return interval
    typed = {item.split("=", 1)[0].strip() for item in split_top_level(args.hparam_override or "")}
    placed = steps // 6
    if "eval_interval" in typed:
        raise ConfigError(f"--tune: eval_interval={interval} gives the {pruner} pruner "
                          f"{_reports(interval, steps, warmup)} evaluations to judge a trial by between step {warmup} "
                          f"and train_steps {steps}; it needs {MIN_REPORTS}: leave eval_interval out (the search then "
                          f"evaluates every {placed} steps), set it to {max(1, placed)} or less, or --tune_pruner none")
    if placed < 1 or _reports(placed, steps, warmup) < MIN_REPORTS:
        raise ConfigError(f"--tune: train_steps {steps} is too short to place {MIN_REPORTS} evaluations for the "
                          f"{pruner} pruner; use more steps or --tune_pruner none")
    return placed


def fixed_override(args, hp) -> str:
    """The overrides every trial shares: the user's, and the eval_interval the search placed (if it did)."""
    interval = evaluation_interval(args, hp)
    extra = [f"eval_interval={interval}"] if interval != hp.eval_interval else []
    return ",".join(s for s in [args.hparam_override or "", *extra] if s)


def check(args, out: Path) -> tuple:
    """The search's settings (the set with the fixed overrides and flags) and its parsed space; ConfigError lines for
    what cannot be searched."""
    from rl.command import env_member

    check_flags(args)
    if env_member() is not None:
        raise ConfigError("--tune cannot be one rank of a torchrun/PyTorchJob group: run the search alone")
    if (out / "hparams.json").exists():
        raise ConfigError(f"{out} holds a run, not a search: use another --output_dir")
    if not getattr(args, "tune_storage", None) and not (out / "study.db").exists() and any(out.glob("trial_*")):
        raise ConfigError(f"{out} holds trial_* folders but no study.db: use another --output_dir")
    hp = resolve_hparams(args, out)
    return hp, check_space(args, hp)


def check_flags(args) -> None:
    if args.tune < 1:
        raise ConfigError(f"--tune must be a positive number of trials, got {args.tune}")
    if (args.tune_jobs or 0) < 0:
        raise ConfigError(f"--tune_jobs must be 0 (one per core) or a positive number, got {args.tune_jobs}")
    if args.copies < 1:
        raise ConfigError(f"--copies must be at least 1, got {args.copies}")
    if not args.training:
        raise ConfigError("--tune trains its trials; evaluate a trial with --training False --output_dir "
                          "OUTPUT_DIR/trial_<i>")


def check_space(args, hp) -> list[Param]:
    """The parsed --tune_space, its choices checked as a run's parts, and the pruner's evaluations placed (or a
    line saying why they cannot be); `--sys k8s` calls this before it submits."""
    params = parse_space(args.tune_space, hp)
    fixed = {item.split("=", 1)[0].strip() for item in split_top_level(args.hparam_override or "")}
    both = [p.name for p in params if p.name in fixed]
    if both:
        raise ConfigError(f"{', '.join(both)} in both --tune_space and --hparam_override: search it or fix it")
    for p in params:  # each choice must name what exists (an agent, env, model ...) before any trial runs
        for value in p.values:
            trial_hp = hp.copy()
            setattr(trial_hp, p.name, value)
            try:
                check_assembly(trial_hp)
            except ConfigError as exc:
                raise ConfigError(f"--tune_space {p.name}=choice(...): {format_value(value)}: {exc}") from None
    evaluation_interval(args, hp)  # the pruner gets its evaluations, or a line says why not
    return params


def identity(args, hp, params: list[Param]) -> dict:
    """What a resumed search must share with the study: anything that changes what a trial's value means."""
    space = [[p.name, p.kind, p.low, p.high, [format_value(v) for v in p.values]] for p in params]
    found = {"hparams": args.hparams, "tune_space": space, "hparam_override": args.hparam_override or "",
             "train_steps": hp.train_steps, "eval_episodes": hp.eval_episodes, "env": hp.env, "seed": hp.seed,
             "copies": args.copies}
    if evaluation_interval(args, hp) != hp.eval_interval:  # placed by the search: part of what a trial is
        found["eval_interval"] = evaluation_interval(args, hp)
    return found


# ---------------------------------------------------------------------------------------------------- worker processes
def _run_workers(args, hp, params, jobs: int, threads: int) -> int:
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
    lock = _ask_lock(args, out)
    try:
        if shared(args):
            for number in _requeue_stale(store, study, me):
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


def _ask_lock(args, out: Path):
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


# ---------------------------------------------------------------------------------------------------- the result
def finish(args, out: Path, hp, params: list[Param], report: bool = True) -> dict | None:
    """Print the best trial as a ready --hparam_override, write best.json and trials.csv, then the reports
    (`report`: they take seconds, so a search that ran nothing new keeps the ones it wrote)."""
    study = optuna.load_study(study_name=study_name(args), storage=studies.storage(args.tune_storage, out))
    trials = study.get_trials(deepcopy=False)
    write_trials_csv(study, out / "trials.csv")
    tally = studies.counts(trials)
    print(f"search {out}: {sum(tally.values())} trials finished: {tally['complete']} complete, {tally['pruned']} "
          f"pruned, {tally['fail']} failed", flush=True)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    if not complete:
        print("no trial completed: no best settings", flush=True)
        return None
    best = max(complete, key=lambda t: (t.value, -t.number))
    trial_text = override(params, best.params)
    full = ",".join(s for s in [fixed_override(args, hp), trial_text] if s)
    flags = "".join(f" --{name} {getattr(args, name)}" for name in ("env", "train_steps", "eval_episodes", "seed")
                    if getattr(args, name, None) is not None) + (f" --copies {args.copies}" if args.copies > 1 else "")
    command = (f"python train.py --hparams {args.hparams} --hparam_override {_shell(full)}{flags} "
               f"--output_dir OUTPUT_DIR")
    record = {"trial": best.number, "value": best.value, "run": str(out / f"trial_{best.number}"),
              "params": {p.name: p.value(best.params[p.name]) for p in params}, "trial_override": trial_text,
              "hparam_override": full, "command": command, "trials": tally,
              "study": {"name": study.study_name, "storage": studies.storage_text(args.tune_storage, out)},
              "sampler": {"name": sampler_name(args), "n_startup_trials": studies.STARTUP_TRIALS, "seed": hp.seed},
              "pruner": studies.pruner_record(pruner_name(args), args.tune, hp.train_steps,
                                              evaluation_interval(args, hp))}
    (out / "best.json").write_text(json.dumps(record, indent=2))
    what = "final evaluation" if args.copies == 1 else f"mean final evaluation of {args.copies} copies"
    print(f"best: trial {best.number}, {what} {best.value:.2f} ({out / f'trial_{best.number}'})\n"
          f"  --hparam_override {_shell(full)}\n  {command}\n  written to {out / 'best.json'}", flush=True)
    if report:
        _report(out)
        plot_study(study, out / "optuna")
    return record


def write_trials_csv(study: optuna.Study, path: Path) -> None:
    """Every trial as a row (number, value, state, times, each setting, the evaluations it reported), by Optuna's
    own `trials_dataframe`."""
    frame = study.trials_dataframe(attrs=("number", "value", "state", "datetime_start", "datetime_complete",
                                          "duration", "params", "user_attrs", "intermediate_values"))
    frame.to_csv(path, index=False)


def plot_study(study: optuna.Study, folder: Path) -> None:
    """Optuna's own figures of the search: the optimisation history (each trial's value and the best so far) and
    the settings' importances (fANOVA), as PNGs; a figure it cannot draw yet (fewer than 2 complete trials) is
    left out with a note."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as figures

    folder.mkdir(parents=True, exist_ok=True)
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    drawn = {"optimization_history.png": figures.plot_optimization_history}
    if len(complete) >= 2 and complete[0].params:
        drawn["param_importances.png"] = figures.plot_param_importances
    for name, plot in drawn.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Optuna marks its matplotlib figures experimental
                axes = plot(study)
            axes.figure.tight_layout()
            axes.figure.savefig(folder / name, dpi=100)
            plt.close(axes.figure)
        except Exception as exc:  # noqa: BLE001 - the search's result is printed and saved already
            print(f"note: {folder / name} could not be drawn ({type(exc).__name__}: {first_line(exc, 200)})",
                  flush=True)
    if "param_importances.png" not in drawn:
        print(f"note: no {folder / 'param_importances.png'}: it needs 2 complete trials", flush=True)


def _shell(text: str) -> str:
    """`text` quoted for a shell: in double quotes where that is safe (the usual case), else by shlex."""
    import shlex

    return f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)


def _report(out: Path) -> None:
    try:
        from rl.report import write_report

        write_report([out], out / "report")
    except Exception as exc:  # noqa: BLE001 - the search's result is printed and saved already
        print(f"note: the report could not be written ({type(exc).__name__}: {first_line(exc, 200)})", flush=True)
