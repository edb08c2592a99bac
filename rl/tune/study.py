"""The search's Optuna study, kept in `output_dir/study.db` (SQLite through Optuna's RDB storage) so that a stopped
search resumes where it stopped and its worker processes share one record.

- Sampler: TPE (Bergstra et al. 2011), its first `STARTUP_TRIALS` trials drawn at random (rl-baselines3-zoo's 5).
  Each trial is sampled by a TPE seeded from the set's seed and the number of trials in the study, so a search
  run again with the same seed draws the same settings, and parallel workers never draw the same random ones.
- Pruner: the median rule (Golovin et al. 2017, Google Vizier): at each periodic evaluation a trial stops when its
  best evaluation so far is below the median of the completed trials' evaluations at the same step. It waits for
  `pruner_startup(N)` completed trials (a fifth of the search, 1 to 5) and for the first third of `train_steps`
  (early evaluations of RL agents say little about the end: rl-baselines3-zoo waits a third of its evaluations).
- Trials that count toward N: complete, pruned and failed ones. A trial a killed search left RUNNING is marked
  failed and its settings are queued again (`recover`); the queued trial records `retry_of` and the interrupted one
  no longer counts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from rl.errors import ConfigError

STUDY_NAME = "search"
STARTUP_TRIALS = 5


def pruner_startup(n_trials: int) -> int:
    """Completed trials the pruner waits for: a fifth of the search, at least 1, at most 5."""
    return max(1, min(5, n_trials // 5))


def make_pruner(n_trials: int, train_steps: int) -> optuna.pruners.MedianPruner:
    return optuna.pruners.MedianPruner(n_startup_trials=pruner_startup(n_trials), n_warmup_steps=train_steps // 3)


def make_sampler(seed: int, trials_so_far: int) -> optuna.samplers.TPESampler:
    """The TPE for the next trial, its seed mixed from both numbers (seeds 0 and 3 draw 0.549 and 0.551 first)."""
    mixed = int(np.random.SeedSequence([seed % 2**63, trials_so_far]).generate_state(1)[0])
    return optuna.samplers.TPESampler(n_startup_trials=STARTUP_TRIALS, seed=mixed)


def storage(out: Path) -> optuna.storages.RDBStorage:
    """The study's SQLite file; a writer waits up to a minute for another process's write to finish."""
    return optuna.storages.RDBStorage(f"sqlite:///{out / 'study.db'}", engine_kwargs={"connect_args": {"timeout": 60}})


def open_study(store: optuna.storages.RDBStorage, out: Path, identity: dict, pruner: optuna.pruners.BasePruner,
               seed: int) -> optuna.Study:
    """Create the study, or load it and check that it searches the same thing: `identity` (the set, the space, the
    fixed overrides and the flags that change a trial's result) is saved with it, and a resumed search that differs
    would mix two searches in one study, so it is refused in one line."""
    study = optuna.create_study(study_name=STUDY_NAME, storage=store, direction="maximize",
                                load_if_exists=True, sampler=make_sampler(seed, 0), pruner=pruner)
    saved = study.user_attrs.get("search")
    if saved is None:
        study.set_user_attr("search", identity)
    elif saved != identity:
        changed = ", ".join(f"{k}: {saved.get(k)!r} -> {identity.get(k)!r}" for k in sorted(set(saved) | set(identity))
                            if saved.get(k) != identity.get(k))
        raise ConfigError(f"{out / 'study.db'} holds a search of other settings ({changed}); resume it with the same "
                          f"ones, or use another --output_dir")
    return study


def recover(study: optuna.Study) -> list[int]:
    """Mark the trials a killed search left RUNNING as failed and queue their settings again; return their numbers.
    Called only while no worker runs (the search holds its folder's lock), so every RUNNING trial is stale. The
    queued trial continues the interrupted run: it takes over its folder and checkpoints (rl/tune/search.py)."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in stale:
        study.tell(trial.number, state=TrialState.FAIL)
        study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
    return [t.number for t in stale]


def finished(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count toward N: complete, pruned, and failed ones other than interrupted-and-queued ones."""
    retried = {t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs}
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or (t.state == TrialState.FAIL and t.number not in retried)]


def counts(trials: list[FrozenTrial]) -> dict[str, int]:
    done = finished(trials)
    return {state.name.lower(): sum(t.state == state for t in done)
            for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
