"""The command line (`python train.py ...` or `python -m rl ...`): its flags, and what the command asks for once they
are parsed: a submission to the cluster (--sys k8s), a change sent to a running job (--control), a search (--tune),
independent copies (--copies) or one run (rl/run.py). Above all of them, so that one run knows nothing of the
searches and copies made of it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rl.command import env_member, run_one
from rl.copies import run_copies
from rl.errors import ConfigError

CLUSTER_ONLY = ("image", "namespace", "run_name", "accelerator", "nodes", "cpus", "memory", "ephemeral_storage",
                "node_selector", "dry_run")
TUNE_FLAGS = ("tune_space", "tune_jobs", "tune_sampler", "tune_pruner", "tune_storage", "tune_study")


def local_only(args, what: str) -> None:
    """A ConfigError naming the --sys k8s flags given to a local command, if any."""
    cluster = [f"--{name}" for name in CLUSTER_ONLY if getattr(args, name, None) not in (None, False)]
    if cluster:
        raise ConfigError(f"{', '.join(cluster)} apply to --sys k8s only ({what} is --sys local)")


def dispatch(args, argv: list[str] | None = None) -> None:
    """What the parsed command asks for. `argv`: the command line as typed, which --sys k8s carries to the cluster."""
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


def str2bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "1", "yes", "y"):
        return True
    if low in ("false", "0", "no", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train.py",
                                description="Train or evaluate an rl agent from a named hyperparameter set.",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                allow_abbrev=False)  # --sys k8s carries the flags as typed: no abbreviations
    p.add_argument("--sys", choices=["local", "k8s"], default="local",
                   help="where to run: on this machine, or submitted to a Kubernetes cluster")
    p.add_argument("--hparams", help="name of the hyperparameter set (see --list)")
    p.add_argument("--hparam_override", default="",
                   help='comma-separated key=value settings, typed like the defaults: "lr=1e-3,hidden_sizes=[64,64]"')
    p.add_argument("--env", help="env id, overriding the set's: a gymnasium id, an Atari id (PongNoFrameskip-v4, "
                                 "ALE/Pong-v5) or module:EnvId (mypackage.envs:MyEnv-v0: the module is imported to "
                                 "register EnvId, as gym.make does)")
    p.add_argument("--output_dir", help="run folder: hparams.json, checkpoints/, TensorBoard events, progress.csv, "
                                        "videos/, eval.json. A folder holding a run is resumed")
    p.add_argument("--train_steps", type=int, help="environment steps to train for, overriding the set's")
    p.add_argument("--eval_episodes", type=int, help="episodes per periodic evaluation during training")
    p.add_argument("--test_episodes", type=int, help="episodes to play with --training False")
    p.add_argument("--training", type=str2bool, default=True,
                   help="True: train (resuming if output_dir holds a run); False: restore a checkpoint (see "
                        "--checkpoint) and evaluate only, writing eval.json")
    p.add_argument("--checkpoint", default="latest", metavar="latest|best|PATH",
                   help="with --training False, what to evaluate: latest (the newest intact "
                        "checkpoints/ckpt_<step>.pt), best (checkpoints/best.pt, the agent of the best evaluation "
                        "during training) or the path of a checkpoint file")
    p.add_argument("--render", type=str2bool, default=False,
                   help="with --training False, show the episodes in a window (needs a display)")
    p.add_argument("--record_video", type=str2bool, default=False,
                   help="with --training False, write each episode as an mp4 under output_dir/videos/")
    p.add_argument("--copies", type=int, default=1,
                   help="independent runs with seeds seed..seed+N-1 in output_dir/copy_<i>, in parallel processes")
    p.add_argument("--num_workers", type=int, default=None,
                   help="0: one process; N > 0: N collection worker processes feeding the learner (default: the "
                        "set's; the Scheme's settings col_communication, num_grad_workers, grad_communication)")
    p.add_argument("--ray_address", default=None, metavar="auto|HOST:PORT",
                   help="run the workers as Ray actors on this Ray cluster (default: RAY_ADDRESS if set, else "
                        "shared-memory processes on this machine); needs Ray: bash setup.sh --ray")
    p.add_argument("--seed", type=int, help="random seed, overriding the set's")
    p.add_argument("--fork_from", metavar="RUN_DIR",
                   help="start a new run in --output_dir from RUN_DIR's newest checkpoint (its weights, memory and "
                        "step), with its settings and this command's overrides, env and seed; RUN_DIR is only read")
    p.add_argument("--list", action="store_true", help="print what each registry holds and exit")
    p.add_argument("--control", metavar="SETTINGS|checkpoint|evaluate",
                   help='change the job running in --output_dir at its next update: "lr=1e-4,ent_coef=0.005" (the '
                        "settings that can change mid-run), checkpoint (save one now) or evaluate (evaluate now); "
                        "kept in hparams.json and the checkpoint")
    tune = p.add_argument_group("search", "hyperparameter search with Optuna: trials are runs in "
                                          "output_dir/trial_<i>, the study is output_dir/study.db by default "
                                          "(resumable); the other --tune_* flags need --tune")
    tune.add_argument("--tune", type=int, default=None, metavar="N", help="run a search of N trials over --tune_space")
    tune.add_argument("--tune_space", default="",
                      help='the settings to search: "lr=loguniform(1e-4,1e-2),ent_coef=uniform(0,0.02),'
                           'batch_size=choice(64,128,256)" (also intuniform(a,b))')
    tune.add_argument("--tune_jobs", type=int, default=None,
                      help="trials run at the same time (default: one per core, at most N)")
    tune.add_argument("--tune_sampler", choices=["tpe", "random", "cmaes"], default=None,
                      help="how trials are drawn: TPE (default; its first 5 at random), random, or CMA-ES")
    tune.add_argument("--tune_pruner", choices=["median", "hyperband", "none"], default=None,
                      help="how a trial is stopped early at its evaluations: the median rule (default), hyperband, "
                           "or none")
    tune.add_argument("--tune_storage", metavar="URL|PATH", default=None,
                      help="where the study is kept: a database URL (sqlite:///x.db, postgresql://...) or the path "
                           "of an Optuna journal file (safe on a volume shared by several machines); default "
                           "output_dir/study.db")
    tune.add_argument("--tune_study", metavar="NAME", default=None,
                      help="the study's name in the storage (default: search)")
    k8s = p.add_argument_group("--sys k8s", "submit this command to the Kubernetes cluster of kubectl's current "
                                            "context, rendered into the k8s/ manifests (k8s/README.md)")
    k8s.add_argument("--image", help="container image (built from k8s/Dockerfile; default rl:cuda with a GPU, "
                                     "else rl:cpu)")
    k8s.add_argument("--namespace", help="namespace (default: the current context's)")
    k8s.add_argument("--run_name", help="name of the job; its run folder is /runs/NAME on the volume claim rl-runs "
                                        "(default: from --output_dir's last part)")
    k8s.add_argument("--accelerator", metavar="NAME:COUNT",
                     help="per node: nvidia-l4:1, nvidia-h100-80gb:8, tpu-v6e:4 ... (default: CPUs only)")
    k8s.add_argument("--nodes", type=int, help="nodes the run spans (default 1: a Job; more: a RayJob when the set "
                                               "has workers, a PyTorchJob of gradient ranks when it has none)")
    k8s.add_argument("--cpus", type=int, help="CPUs of the learner's pod (default: 1 + num_workers, at least 2)")
    k8s.add_argument("--memory", help="memory of each pod (default 16Gi)")
    k8s.add_argument("--ephemeral_storage", metavar="QUANTITY",
                     help="local disk of each pod that runs train.py or Ray: /tmp and its logs (default 10Gi)")
    k8s.add_argument("--node_selector", metavar="KEY=VALUE[,KEY=VALUE]",
                     help="node labels the accelerator pods must have (default: none for GPUs, whose nvidia.com/gpu "
                          "request places them on any cloud's GPU nodes; GKE's TPU labels for TPUs); e.g. "
                          "cloud.google.com/gke-accelerator=nvidia-l4 or nvidia.com/gpu.product=NVIDIA-L4")
    k8s.add_argument("--dry_run", type=str2bool, default=False,
                     help="print the manifests (for kubectl apply -f -) instead of submitting them")
    return p


def list_registries() -> None:
    from rl.registry import ALL

    for kind, registry in ALL.items():
        print(f"{kind:<11} {', '.join(registry.names())}")


def main(argv: list[str] | None = None, own_signals: bool = False) -> int:
    """`own_signals`: this is the process's entry (`python train.py`), whose SIGTERM and SIGINT are its own to act
    on from its first line to its exit (rl/signals.py); tests call main() in-process without."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    import hparams  # noqa: F401  (registers the sets)

    if own_signals:
        from rl.signals import install

        install()
    if args.list:
        list_registries()
        return 0
    try:
        if not args.output_dir or not (args.hparams or args.control):
            raise ConfigError("--hparams and --output_dir are required (see --list for the sets)")
        dispatch(args, argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
