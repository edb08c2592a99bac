"""One run as the command line asks for it: the flags resolved against the run folder (`resolve_run`: the settings,
and the identity of a folder that holds a run), then training (`run_one`, through rl/run.py's `Run`) or `--training
False`'s evaluation (`evaluate_folder`), each owning the folder while it works. `--copies` and `--tune` call `run_one`
for each of their runs; rl/api.py's `make` calls `resolve_run`."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from rl.checkpoint import list_checkpoints
from rl.errors import ConfigError
from rl.run import Run

IDENTITY = ("env", "seed")  # with the set: what a run is; resuming it with others would mix two runs in one record


def resolve_run(args, output_dir: Path, seed_offset: int = 0) -> tuple:
    """The settings of the run `args` asks for in `output_dir`, checked against the run the folder holds, and the
    record to write once it starts: (hp, record, fork_from). `seed_offset`: this copy's place among `--copies`."""
    from rl.resolve import read_record, resolve_hparams

    fork = Path(args.fork_from) if getattr(args, "fork_from", None) else None
    fresh = not (output_dir / "hparams.json").exists()
    if fork is not None:
        if not fresh:
            raise ConfigError(f"--fork_from starts a new run, and {output_dir} holds one already: give a new "
                              f"--output_dir")
        if not (fork / "hparams.json").is_file() or not list_checkpoints(fork):
            raise ConfigError(f"--fork_from {fork}: not a run folder with a checkpoint (hparams.json and "
                              f"checkpoints/ckpt_<step>.pt)")
    hp = resolve_hparams(args, fork or output_dir)
    if fresh or args.seed is not None:  # a resumed copy keeps the seed it was given, unless --seed is typed again
        try:
            hp.seed = hp.seed + seed_offset
        except ConfigError as exc:
            raise ConfigError(f"--seed with --copies: {exc}") from None
    if not fresh:
        saved = read_record(output_dir / "hparams.json")["hparams"]
        differ = [f"{key} {saved.get(key)!r} (asked: {getattr(hp, key)!r})" for key in IDENTITY
                  if key in saved and saved[key] != getattr(hp, key)]
        if differ:
            raise ConfigError(f"{output_dir} holds a run of {args.hparams} with {', '.join(differ)}: a run keeps its "
                              f"env and seed. Use another --output_dir, or --fork_from {output_dir} --output_dir NEW "
                              f"to start a new run from its checkpoint")
    record = {"hparams_set": args.hparams, "hparams": hp.record(),
              "flags": {k: v for k, v in vars(args).items() if k != "func"}}
    if fork is not None:
        step, path = list_checkpoints(fork)[-1]
        record["forked_from"] = {"output_dir": str(fork), "checkpoint": path.name, "step": step}
    return hp, record, fork


def run_one(args, output_dir: Path, seed_offset: int = 0, quiet: bool = False, member=None,
            on_evaluation=None) -> dict:
    """Train or evaluate one run folder as the flags say (as one rank of `member`'s group: rank 0 alone owns the
    folder)."""
    from rl.folder import check_writable_folder

    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"--output_dir {output_dir} is a file, not a folder: give a run folder")
    if not args.training:
        return evaluate_folder(args, output_dir)
    hp, record, fork = resolve_run(args, output_dir, seed_offset)
    if member is not None:
        member.settle(hp)
        if member.rank:  # torchrun/PyTorchJob started this rank: it follows rank 0 and never writes the folder
            from rl.parallel.collective import serve
            from rl.parallel.follower import follow

            serve(partial(follow, hp, output_dir), member)
            return {}
    check_writable_folder(output_dir, "training")
    with Run.open(hp, output_dir, record, quiet=quiet, on_evaluation=on_evaluation, member=member,
                  fork_from=fork) as run:
        return run.train()


def evaluate_folder(args, output_dir: Path) -> dict:
    """`--training False`: evaluate a checkpoint of the run in `output_dir`, owning the folder while it plays (it
    writes eval.json)."""
    from rl.evaluation import test
    from rl.folder import FolderLock, check_writable_folder
    from rl.resolve import resolve_hparams

    if not (output_dir / "hparams.json").exists():
        raise ConfigError(f"--training False needs a trained run, and {output_dir} has no hparams.json: "
                          f"train first with the same --output_dir")
    hp = resolve_hparams(args, output_dir)
    check_writable_folder(output_dir, "an evaluation")
    with FolderLock(output_dir):
        return test(hp, output_dir, render=args.render, record_video=args.record_video,
                    checkpoint=getattr(args, "checkpoint", "latest"))


def env_member():
    """This process's place in a group that torchrun or Kubeflow's PyTorchJob started (WORLD_SIZE > 1), else None;
    only such a process imports rl/parallel here."""
    if "WORLD_SIZE" not in os.environ:
        return None
    from rl.parallel.collective import group_from_env

    return group_from_env(os.environ)
