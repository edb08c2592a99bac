"""What train.py's command asks for, once its flags are parsed: a submission to the cluster (--sys k8s), a change sent
to a running job (--control), a search (--tune), independent copies (--copies) or one run (rl/run.py). Above all of
them, so that one run knows nothing of the searches and copies made of it."""

from __future__ import annotations

from pathlib import Path

from rl.copies import run_copies
from rl.errors import ConfigError
from rl.run import env_member, run_one

CLUSTER_ONLY = ("image", "namespace", "run_name", "accelerator", "nodes", "cpus", "memory", "node_selector",
                "dry_run")
TUNE_FLAGS = ("tune_space", "tune_jobs", "tune_sampler", "tune_pruner", "tune_storage", "tune_study")


def local_only(args, what: str) -> None:
    """A ConfigError naming the --sys k8s flags given to a local command, if any."""
    cluster = [f"--{name}" for name in CLUSTER_ONLY if getattr(args, name, None) not in (None, False)]
    if cluster:
        raise ConfigError(f"{', '.join(cluster)} apply to --sys k8s only ({what} is --sys local)")


def main(args, argv: list[str] | None = None) -> None:
    """`argv`: the command line as typed, which --sys k8s carries to the cluster."""
    if args.sys == "k8s":
        from rl.cloud import submit_run

        return submit_run(args, argv or [])
    if args.control:
        from rl.control import send

        return send(Path(args.output_dir), args.control)
    if args.tune is not None:
        from rl.tune import search

        local_only(args, "this search")
        return search(args)
    search_only = [f"--{name}" for name in TUNE_FLAGS if getattr(args, name, None) not in (None, "")]
    if search_only:
        raise ConfigError(f"{', '.join(search_only)} apply to a search only: add --tune N, the number of trials")
    local_only(args, "this run")
    if args.num_workers is not None and args.num_workers < 0:
        raise ConfigError(f"--num_workers must be 0 (one process) or a positive number of workers, got "
                          f"{args.num_workers}")
    if args.copies < 1:
        raise ConfigError(f"--copies must be at least 1, got {args.copies}")
    if args.training and getattr(args, "checkpoint", "latest") != "latest":
        raise ConfigError(f"--checkpoint {args.checkpoint} applies to --training False (evaluation) only; training "
                          f"always resumes from the newest checkpoint")
    if args.train_steps is not None and args.train_steps <= 0:
        raise ConfigError(f"--train_steps must be a positive integer, got {args.train_steps}")
    member = env_member()
    if member is not None and (args.copies > 1 or not args.training):
        what = f"--copies {args.copies} (independent runs)" if args.training else "--training False (an evaluation)"
        raise ConfigError(f"{what} cannot be one rank of a group, and this process is rank {member.rank} of "
                          f"WORLD_SIZE={member.world} (started by torchrun or PyTorchJob): run it without them")
    if args.copies > 1:
        if not args.training:
            for i in range(args.copies):
                run_one(args, Path(args.output_dir) / f"copy_{i}")
            return
        run_copies(args)
        return
    run_one(args, Path(args.output_dir), member=member)
