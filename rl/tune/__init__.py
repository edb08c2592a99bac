"""Hyperparameter search with Optuna (`train.py --tune N --tune_space ...`): `space.py` parses and checks the
searched settings, `study.py` keeps the study (output_dir/study.db, a database URL or a journal file; TPE, random or
CMA-ES sampling; median, hyperband or no pruning; interrupted trials queued again under their numbers),
`settings.py` checks a search's flags and places the pruner's evaluations, `search.py` opens the study and runs the
search, `workers.py` runs its trials as ordinary runs in output_dir/trial_<i> and `result.py` reports the best
settings."""

from rl.tune.search import search

__all__ = ["search"]
