"""One run: the training loop (its evaluations, checkpoints, logging and signals) and `run_one`, which trains or
evaluates one run folder. What the command asks for (a search, copies, a submission) is rl/cli.py's, above this;
building the run and picking its trainer is rl/trainer.py's, the evaluation loops are rl/evaluation.py's, the
checkpoint helpers rl/checkpoint.py's and settings resolution rl/hparams.py's; their names are re-exported here for
scripts and tests.
"""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path

import numpy as np

from rl import signals
from rl.checkpoint import BestKeeper, restore, restore_checked, save, snapshot, write_json  # noqa: F401
from rl.collector import true_next_obs  # noqa: F401 - re-exported for scripts
from rl.control import Controller, carry_changes
from rl.errors import ConfigError
from rl.evaluation import Games, evaluate, has_display, play, record_videos, summarize, test  # noqa: F401
from rl.hparams import FLAG_SETTINGS, resolve_hparams  # noqa: F401
from rl.trainer import (  # noqa: F401 - re-exported for scripts and tests
    SingleProcess,
    build_agent,
    configure_torch,
    follow,
    make_trainer,
    prepare,
    seed_everything,
    uses_scheme,
)


class StopFlag(signals.armed):
    """SIGINT/SIGTERM set a flag (`signum`); the loop checkpoints and exits at the next step (rl/signals.py)."""


def train(hp, output_dir: Path, quiet: bool = False, member=None, on_evaluation=None) -> dict:
    """Train (resuming from the newest checkpoint in `output_dir` if any); return the final evaluation. `member`: this
    process's place in a group that torchrun or PyTorchJob started (`env_member`); its ranks > 0 follow and return
    {}. `on_evaluation(step, mean_return) -> bool` hears each periodic evaluation; True stops the run there (a search
    pruning its trial, rl/tune.py): it checkpoints and returns that evaluation with `stopped_early`."""
    from rl.logger import Logger

    group = children = None
    if member is not None and member.rank:  # torchrun/PyTorchJob started this rank: rank 0 does the rest
        from rl.parallel.collective import serve

        serve(partial(follow, hp, output_dir), member)
        return {}
    if hp.num_grad_workers > 1 and hp.grad_communication == "sync":  # DPPO/RAPID: rank 0, its ranks forked here first
        from rl.parallel.collective import launch

        group, children = launch(hp, partial(follow, hp, output_dir), member)  # (unless torchrun started them)
        hp = group.settings(hp)
    trainer = control = None
    try:  # whatever fails before the loop's own `finally` stops the workers and ranks started so far
        env, agent, stats = prepare(hp, output_dir)
        start = agent.env_steps
        logger = Logger(output_dir, hp.train_steps, start, quiet=quiet)
        best = BestKeeper(output_dir)
        trainer = make_trainer(hp, env, agent, stats, seed=hp.seed + start)  # a resumed run restarts its episodes
        if group is not None:
            from rl.parallel.collective import GroupTrainer

            group.join(agent)
            trainer = GroupTrainer(trainer, agent, group, hp.train_steps)

        saved_at = time.monotonic()  # the wall clock of the last checkpoint (checkpoint_minutes)

        def checkpoint():
            nonlocal saved_at
            state = snapshot(agent, hp.checkpoint_memory, stats)
            state["control"] = dict(control.changes)  # settings changed while running (rl/control.py)
            save(output_dir, agent.env_steps, state, keep=hp.keep_checkpoints)
            saved_at = time.monotonic()

        diagnostics: dict = {}
        last = {"log": start, "eval": start, "ckpt": start}
        eval_row: dict = {}
        stopped_early: dict = {}

        def stop_seen() -> int:
            """A stop signal here, or one that a rank > 0 got while waiting for this evaluation to end."""
            return signals.received() or (group.peer_stopped() if group is not None else 0)

        def evaluation() -> tuple[float, Games] | None:
            """A greedy evaluation, or None when a stop signal came during it (the loop then checkpoints and exits)."""
            nonlocal eval_row
            with logger.outside_training():
                games = play(agent, hp, hp.eval_episodes, seed=hp.seed + 10_000, stopped=stop_seen)
            last["eval"] = agent.env_steps  # given up or not, not due again before the next interval
            if games is None:
                return None
            best.offer(agent, games.returns)
            eval_row = {"eval/return_mean": float(np.mean(games.returns)),
                        "eval/return_std": float(np.std(games.returns)),
                        "eval/time_limited": games.summary()["time_limited"]}
            last["log"] = -1  # log this evaluation now
            return eval_row["eval/return_mean"], games

        def evaluate_on_request() -> float | None:
            done = evaluation()
            return None if done is None else done[0]

        control = Controller(output_dir, hp, agent, logger.log, evaluate=evaluate_on_request, checkpoint=checkpoint)
    except BaseException:
        closing(control, trainer, group, children)
        raise

    def due(kind: str, interval: int) -> bool:
        return interval > 0 and agent.env_steps // interval > last[kind] // interval

    def checkpoint_due() -> bool:
        """Every checkpoint_interval steps, and once checkpoint_minutes have passed since the last one, whichever
        comes first."""
        overdue = 0 < hp.checkpoint_minutes <= (time.monotonic() - saved_at) / 60
        return due("ckpt", hp.checkpoint_interval) or (overdue and agent.env_steps > last["ckpt"])

    with StopFlag() as stop:
        try:
            while not stopped_early and not trainer.finished(stop.signum):
                diagnostics = trainer.step() or diagnostics
                control.poll()  # between updates: settings changed from outside, checkpoint or evaluate on request
                if due("eval", hp.eval_interval) and agent.env_steps < hp.train_steps and (done := evaluation()):
                    mean, games = done
                    if on_evaluation is not None and on_evaluation(agent.env_steps, mean):
                        stopped_early = summarize(games.returns, env_steps=agent.env_steps, stopped_early=True,
                                                  wall_time_s=round(logger.wall_time_s(), 2), **games.summary())
                if due("log", hp.log_interval) or last["log"] < 0:
                    logger.log(agent.env_steps, {**stats.summary(), **diagnostics, **eval_row, **trainer.clock})
                    eval_row, last["log"] = {}, agent.env_steps
                if checkpoint_due():
                    checkpoint()
                    last["ckpt"] = agent.env_steps
        finally:
            with logger.outside_training():
                closing(control, trainer, group, children)
        with logger.outside_training():
            checkpoint()
        # a stop signal here, or on another rank of the group (it reached this one in the all-reduce)
        signum = stop.signum or (group.stop_signum if group is not None else 0)
        if signum:
            logger.close()
            where = "" if stop.signum else " (on another rank of the group)"
            print(f"\n{signals.name(signum)}{where}: saved a checkpoint at step {agent.env_steps}; run the same "
                  f"command to resume.", flush=True)
            raise SystemExit(signals.exit_code(signum))
    if stopped_early:  # its evaluation is logged and checkpointed already; eval.json says where and why it ended
        logger.close()
        write_json(output_dir / "eval.json", {"mode": "stopped_early", **stopped_early}, indent=2)
        return stopped_early
    with signals.phase(f"during the final evaluation: training ended and was checkpointed at step "
                       f"{agent.env_steps}; run the same command to evaluate it."):
        _, games = evaluation()  # the final one: timed out of steps/s and offered to best.pt like the others
    result = summarize(games.returns, env_steps=agent.env_steps, wall_time_s=round(logger.wall_time_s(), 2),
                       best=best.best, **games.summary())
    logger.log(agent.env_steps, {**stats.summary(), **eval_row})
    logger.close()
    write_json(output_dir / "eval.json", {"mode": "final_training_evaluation", **result}, indent=2)
    if not quiet:
        print(f"final evaluation over {len(games.returns)} episodes: "
              f"{result['mean_return']:.2f} ± {result['std_return']:.2f}; best: {best.best['mean_return']:.2f} "
              f"at step {best.best['step']} ({best.best['path']})")
    return result


def closing(control, trainer, group, children) -> None:
    """Stop what a run started, whichever parts it got to: its control file, its workers (before the last checkpoint:
    it is the state they last saw, or newer), its group and the ranks it forked."""
    try:
        if control is not None:
            control.close()
        if trainer is not None:
            trainer.close()
    finally:
        if group is not None:
            from rl.parallel.collective import reap

            group.close()
            reap(children or [])


def write_run_record(hp, args, output_dir: Path) -> None:
    """hparams.json: the set, the settings in effect and the flags; every --control change is kept, those a new
    --hparam_override replaced marked `overridden` (a resumed run applies the others over the flags'
    --hparam_override, rl/hparams.py)."""
    record = {"hparams_set": args.hparams, "hparams": hp.to_dict(),
              "flags": {k: v for k, v in vars(args).items() if k != "func"}}
    path = output_dir / "hparams.json"
    if path.exists():
        changes = carry_changes(output_dir, json.loads(path.read_text()), record["hparams"])
        if changes:
            record["control"] = changes
    write_json(output_dir / "hparams.json", record, indent=2, sort_keys=True)


def run_one(args, output_dir: Path, seed_offset: int = 0, quiet: bool = False, member=None,
            on_evaluation=None) -> dict:
    """Resolve settings, record them, and train or evaluate one run in `output_dir` (as one rank of `member`'s group:
    rank 0 alone writes the run folder)."""
    hp = resolve_hparams(args, output_dir)
    hp.seed += seed_offset if not (output_dir / "hparams.json").exists() else 0
    if args.training:
        if member is not None:
            member.settle(hp)
        if member is None or member.rank == 0:
            output_dir.mkdir(parents=True, exist_ok=True)
            write_run_record(hp, args, output_dir)
            if not quiet:
                print(f"hparams set {args.hparams!r} -> {output_dir}\n{hp.describe()}", flush=True)
        return train(hp, output_dir, quiet=quiet, member=member, on_evaluation=on_evaluation)
    if not (output_dir / "hparams.json").exists():
        raise ConfigError(f"--training False needs a trained run, and {output_dir} has no hparams.json: "
                          f"train first with the same --output_dir")
    return test(hp, output_dir, render=args.render, record_video=args.record_video,
                checkpoint=getattr(args, "checkpoint", "latest"))


def env_member():
    """This process's place in a group that torchrun or Kubeflow's PyTorchJob started (WORLD_SIZE > 1), else None;
    only such a process imports rl/parallel here."""
    if "WORLD_SIZE" not in os.environ:
        return None
    from rl.parallel.collective import group_from_env

    return group_from_env(os.environ)

