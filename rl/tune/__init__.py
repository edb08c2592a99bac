"""Hyperparameter search with Optuna (`train.py --tune N --tune_space ...`): `space.py` parses and checks the
searched settings, `study.py` keeps the study in output_dir/study.db (TPE sampling, median pruning, resume),
`search.py` runs the trials as ordinary runs in output_dir/trial_<i> and reports the best settings."""

from rl.tune.search import search

__all__ = ["search"]
