"""Grouping runs into lines: the runs that differ only in their seed are copies of one setting and make one line.

A line is (hparams set, env, the settings that differ between runs of that set); a method is the same without the
env, so one method trained on several games is one entry of the aggregates across games.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rl.report.runs import Run

PER_RUN_KEYS = {"seed", "env", "env_type"}  # differ between copies or follow the env: never make a line of their own


def value_text(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ",".join(value_text(v) for v in value) + "]"
    return str(value)


@dataclass
class Line:
    """The copies of one setting on one env."""

    hparams_set: str
    env: str
    settings: dict  # the settings that set this line apart from other runs of its set
    runs: list[Run] = field(default_factory=list)
    label: str = ""

    @property
    def method(self) -> str:
        """The line's name without its env: one entry across games in the aggregates."""
        return " ".join([self.hparams_set] + [f"{k}={value_text(v)}" for k, v in sorted(self.settings.items())])


def _differing(runs: list[Run], ignore: frozenset[str] = frozenset()) -> list[str]:
    """Settings with more than one value among the runs that have them (a setting added to the code later is missing
    from older runs' hparams.json: that alone does not make two lines), less those the user said to `ignore`."""
    keys = sorted({k for r in runs for k in r.hparams} - PER_RUN_KEYS - ignore)
    return [k for k in keys if len({repr(r.hparams[k]) for r in runs if k in r.hparams}) > 1]


def _trial_of(run: Run) -> str | None:
    return next((p.name for p in (run.path, run.path.parent) if p.name.startswith("trial_")), None)


def group_lines(runs: list[Run], ignore: frozenset[str] = frozenset()) -> list[Line]:
    """Runs -> lines, in the order their first runs came, each with a readable label: the set, the env where the
    set was run on several, the differing settings, and the folder where a line is one run of a search. Settings in
    `ignore` do not set runs apart (`train_steps`, where a 1M run's first 300k steps are a 300k run's: no schedule
    of the set reads it)."""
    by_set: dict[str, list[Run]] = {}
    for run in runs:
        by_set.setdefault(run.hparams_set, []).append(run)
    lines: dict[tuple, Line] = {}
    for name, members in by_set.items():
        keys = _differing(members, ignore)
        several_envs = len({r.env for r in members}) > 1
        for run in members:
            settings = {k: run.hparams[k] for k in keys if k in run.hparams}
            key = (name, run.env, repr(sorted(settings.items())))
            if key not in lines:
                lines[key] = Line(name, run.env, settings)
                lines[key].label = " ".join([name] + ([f"on {run.env}"] if several_envs else [])
                                            + [f"{k}={value_text(v)}" for k, v in settings.items()])
            lines[key].runs.append(run)
    result = list(lines.values())
    for line in result:  # a search's trial (trial_<i>, or its copies trial_<i>/copy_<j>): its folder finds it
        trials = {_trial_of(run) for run in line.runs}
        if len(trials) == 1 and None not in trials and line.settings:
            line.label += f" ({trials.pop()})"
    labels = [line.label for line in result]
    for line in result:  # the same set and settings in two unrelated places: keep them apart by name
        if labels.count(line.label) > 1:
            line.label += f" ({line.runs[0].name})"
    return result
