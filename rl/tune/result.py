"""The result of a search: the best trial printed as a ready --hparam_override and command, best.json, trials.csv
(Optuna's trials_dataframe), the runs' report (rl/report) in report/ and Optuna's optimisation history and parameter
importances in optuna/."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from rl.errors import first_line
from rl.tune import study as studies
from rl.tune.settings import evaluation_interval, fixed_override, pruner_name, sampler_name, study_name
from rl.tune.space import Param, override


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
