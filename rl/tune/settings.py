"""What a search is, checked before any trial runs: its flags and space (`check`), the pruner and sampler it names,
the evaluation interval that gives the pruner `MIN_REPORTS` evaluations to judge a trial by (`evaluation_interval`),
the overrides every trial shares (`fixed_override`) and the identity a resumed search must match (`identity`). The
search (search.py), its workers (workers.py) and its result (result.py) all read these; `--sys k8s` (rl/cloud)
checks a search with them before it submits."""

from __future__ import annotations

from pathlib import Path

import optuna

from rl.errors import ConfigError
from rl.overrides import split_top_level
from rl.resolve import check_assembly, resolve_hparams
from rl.tune import study as studies
from rl.tune.space import Param, format_value, parse_space

MIN_REPORTS = 3  # evaluations a pruner gets from each trial, at least, after its warm-up


def shared(args) -> bool:
    """Whether other searches, on this machine or others, may work on the same study at the same time: the study is
    in a --tune_storage (a journal file on a shared volume, or a database)."""
    return bool(getattr(args, "tune_storage", None))


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
