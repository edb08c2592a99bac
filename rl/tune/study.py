"""The search's Optuna study: where it is kept, how it samples and prunes, and how interrupted trials come back.

- Storage (`--tune_storage`): by default `output_dir/study.db` (SQLite through Optuna's RDB storage); a database URL
  (`postgresql://...`, `mysql://...`, `sqlite:///...`) goes to the RDB storage, any other text is the path of an
  Optuna journal file (`JournalFileBackend`: appends under a file lock, safe for processes on several machines
  sharing one volume). The study is named `--tune_study` (default `search`).
- Sampler (`--tune_sampler`): TPE (Bergstra et al. 2011), its first `STARTUP_TRIALS` trials drawn at random
  (rl-baselines3-zoo's 5); `random`; or CMA-ES (Hansen 2016; categorical settings drawn at random beside it). Each
  trial is sampled by a sampler seeded from the set's seed and the number of trials in the study, so a search run
  again with the same seed draws the same settings, and parallel workers never draw the same random ones.
- Pruner (`--tune_pruner`): the median rule (Golovin et al. 2017, Google Vizier): at each periodic evaluation a
  trial stops when its best evaluation so far is below the median of the completed trials' evaluations at the same
  step. It waits for `pruner_startup(N)` completed trials (a fifth of the search, 1 to 5) and for the first third of
  `train_steps` (early evaluations of RL agents say little about the end: rl-baselines3-zoo waits a third of its
  evaluations). `hyperband` (Li et al. 2018): successive halving from the first evaluation to `train_steps`, factor
  3. `none`: every trial runs to the end.
- Trials that count toward N: complete, pruned and failed ones. A trial whose run was stopped (Ctrl-C, SIGTERM, a
  killed process) is put back to WAITING under its own number, with its settings and the evaluations it reported;
  the next worker to ask takes it and continues its run from its checkpoints (`requeue`, rl/tune/workers.py). Studies
  of older versions recorded such trials as FAIL with a `retry_of` copy; those are not counted twice.
- Several searches may share one study (a `--tune_storage`: processes on several machines, the pods of an Indexed
  Job). Each running trial carries its worker (`WORKER_ATTR`: host, pid, a token of that process, a heartbeat
  refreshed every `HEARTBEAT_S`); a RUNNING trial is stale, and queued again by whichever worker asks next, when its
  worker's process on this host is gone, or its heartbeat is older than `GRACE_S` (another host, or a pod whose
  container restarted).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from rl.errors import ConfigError, first_line
from rl.job import pid_alive

STUDY_NAME = "search"
STARTUP_TRIALS = 5
WORKER_ATTR = "worker"
HEARTBEAT_S = 15.0
GRACE_S = 120.0  # 8 missed heartbeats: a host's clock skew and a slow shared volume stay well inside it
SAMPLERS = ("tpe", "random", "cmaes")
PRUNERS = ("median", "hyperband", "none")


def pruner_startup(n_trials: int) -> int:
    """Completed trials the median pruner waits for: a fifth of the search, at least 1, at most 5."""
    return max(1, min(5, n_trials // 5))


def warmup_steps(pruner: str, train_steps: int) -> int:
    """The first step at which `pruner` may stop a trial."""
    return train_steps // 3 if pruner == "median" else 0


def make_pruner(name: str, n_trials: int, train_steps: int, eval_interval: int) -> optuna.pruners.BasePruner:
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=pruner_startup(n_trials),
                                           n_warmup_steps=warmup_steps(name, train_steps))
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, eval_interval), max_resource=train_steps,
                                              reduction_factor=3)
    return optuna.pruners.NopPruner()


def pruner_record(name: str, n_trials: int, train_steps: int, eval_interval: int) -> dict:
    """The pruner's settings, for best.json."""
    if name == "median":
        return {"name": "MedianPruner", "n_startup_trials": pruner_startup(n_trials),
                "n_warmup_steps": warmup_steps(name, train_steps)}
    if name == "hyperband":
        return {"name": "HyperbandPruner", "min_resource": eval_interval, "max_resource": train_steps,
                "reduction_factor": 3}
    return {"name": "NopPruner"}


def make_sampler(name: str, seed: int, trials_so_far: int) -> optuna.samplers.BaseSampler:
    """The sampler for the next trial, its seed mixed from both numbers (seeds 0 and 3 draw 0.549 and 0.551
    first)."""
    mixed = int(np.random.SeedSequence([seed % 2**63, trials_so_far]).generate_state(1)[0])
    if name == "random":
        return optuna.samplers.RandomSampler(seed=mixed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(n_startup_trials=STARTUP_TRIALS, seed=mixed,
                                            independent_sampler=optuna.samplers.RandomSampler(seed=mixed),
                                            warn_independent_sampling=False)
    return optuna.samplers.TPESampler(n_startup_trials=STARTUP_TRIALS, seed=mixed)


def storage_text(spec: str | None, out: Path) -> str:
    """Where the study is, in words for messages and best.json."""
    return spec or str(out / "study.db")


def is_url(spec: str) -> bool:
    return "://" in spec


def storage(spec: str | None, out: Path) -> optuna.storages.BaseStorage:
    """The study's storage: `out/study.db` (default), a database URL, or a journal file path. SQLite writers wait up
    to a minute for another process's write to finish."""
    if not spec:
        return optuna.storages.RDBStorage(f"sqlite:///{out / 'study.db'}",
                                          engine_kwargs={"connect_args": {"timeout": 60}})
    if is_url(spec):
        kwargs = {"connect_args": {"timeout": 60}} if spec.startswith("sqlite") else {}
        try:
            return optuna.storages.RDBStorage(spec, engine_kwargs=kwargs)
        except Exception as exc:  # noqa: BLE001 - a bad URL, a missing driver, a database that does not answer
            raise ConfigError(f"--tune_storage {spec}: {type(exc).__name__}: {first_line(exc, 200)}") from None
    from optuna.storages.journal import JournalFileBackend

    path = Path(spec)
    if not path.parent.is_dir():
        raise ConfigError(f"--tune_storage {spec}: the folder {path.parent} does not exist (a journal file path, or "
                          f"a database URL such as postgresql://user:password@host/db)")
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def close(store: optuna.storages.BaseStorage) -> None:
    """Drop open database connections (none may cross a fork)."""
    if isinstance(store, optuna.storages.RDBStorage):
        store.engine.dispose()


def open_study(store: optuna.storages.BaseStorage, name: str, where: str, identity: dict,
               pruner: optuna.pruners.BasePruner, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create the study, or load it and check that it searches the same thing: `identity` (the set, the space, the
    fixed overrides and the flags that change a trial's result) is saved with it, and a resumed search that differs
    would mix two searches in one study, so it is refused in one line."""
    study = optuna.create_study(study_name=name, storage=store, direction="maximize", load_if_exists=True,
                                sampler=sampler, pruner=pruner)
    saved = study.user_attrs.get("search")
    if saved is None:
        study.set_user_attr("search", identity)
    elif saved != identity:
        changed = ", ".join(f"{k}: {saved.get(k)!r} -> {identity.get(k)!r}" for k in sorted(set(saved) | set(identity))
                            if saved.get(k) != identity.get(k))
        raise ConfigError(f"{where} (study {name!r}) holds a search of other settings ({changed}); resume it with "
                          f"the same ones, or use another --output_dir or --tune_study")
    return study


def requeue(store: optuna.storages.BaseStorage, name: str, numbers: list[int]) -> list[int]:
    """Put the RUNNING trials `numbers` of study `name` back to WAITING, under their own numbers, with their settings
    and reported evaluations; `study.ask()` hands them out again before new ones. Return those it changed."""
    study_id = store.get_study_id_from_name(name)
    done = []
    for number in numbers:
        trial_id = store.get_trial_id_from_study_id_trial_number(study_id, number)
        if store.get_trial(trial_id).state == TrialState.RUNNING:
            store.set_trial_state_values(trial_id, TrialState.WAITING)
            done.append(number)
    return done


def recover(store: optuna.storages.BaseStorage, study: optuna.Study) -> list[int]:
    """Queue again, under their own numbers, the trials a stopped search left RUNNING; return their numbers. Called
    only while no worker of this study runs (the search holds its folder's lock), so every RUNNING trial is
    stale."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return requeue(store, study.study_name, [t.number for t in running])


def worker_id() -> dict:
    """This process as a trial's worker (call it in the process that runs the trials: each fork has its own)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}


def beat(trial: optuna.Trial, worker: dict) -> None:
    """Mark `trial` as run by `worker`, now."""
    trial.set_user_attr(WORKER_ATTR, {**worker, "beat": time.time()})


def stale(trial: FrozenTrial, me: dict, now: float | None = None) -> bool:
    """Whether RUNNING `trial` has lost its worker: a process of this host that is gone (or this very pid in an
    earlier life, as a restarted container's), or a heartbeat older than GRACE_S."""
    now = time.time() if now is None else now
    worker = trial.user_attrs.get(WORKER_ATTR)
    if not isinstance(worker, dict):  # asked but not yet marked, or by an older version: its start is the beat
        start = trial.datetime_start.timestamp() if trial.datetime_start else now
        return now - start > GRACE_S
    if worker.get("host") == me["host"]:
        pid = int(worker.get("pid", -1))
        if not pid_alive(pid) or (pid == me["pid"] and worker.get("token") != me["token"]):
            return True
    return now - float(worker.get("beat", 0)) > GRACE_S


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count toward N: complete, pruned, and failed ones (other than an older version's
    interrupted-and-copied ones, `retry_of`)."""
    retried = {t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs}
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or (t.state == TrialState.FAIL and t.number not in retried)]


def counts(trials: list[FrozenTrial]) -> dict[str, int]:
    done = finished(trials)
    return {state.name.lower(): sum(t.state == state for t in done)
            for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
