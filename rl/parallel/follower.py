"""A synchronous gradient rank > 0 (DPPO, RAPID's synchronous groups): the training loop of rl/run.py without
evaluation, logging or checkpoints, stepping in lockstep with rank 0 through the group's all-reduce
(rl/parallel/collective.py). Rank 0 forks it (`launch`), Ray runs it as an actor, or torchrun and PyTorchJob start it
as `train.py` (`serve`).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rl.parallel.collective import GradientGroup, GroupTrainer, stop_code
from rl.settle import rank_seed
from rl.signals import armed
from rl.trainer import make_trainer, prepare


def follow(hp, output_dir: Path, rank: int, address, local_rank: int | None = None, signals: bool = False) -> None:
    """A synchronous gradient worker of rank > 0: the training loop without evaluation, logging or checkpoints, with
    rank 0's settings. It reads the run folder (a resumed run's checkpoint) and never writes it. `signals`: this rank
    was started by torchrun or PyTorchJob, and a SIGTERM or SIGINT it gets stops the group (rank 0 checkpoints); it
    then exits with 128 + the signal, as after a stop that another rank got (rl/parallel/collective.py)."""
    group = GradientGroup(rank, hp.num_grad_workers, address, hp.device, hp.group_timeout_s, local_rank)
    trainer = None
    try:
        hp = group.settings(hp)
        env, agent, stats = prepare(hp, output_dir, rank)
        group.join(agent)
        trainer = GroupTrainer(make_trainer(hp, env, agent, stats, seed=rank_seed(hp.seed + agent.env_steps, rank)),
                               agent, group, hp.train_steps)
        with armed(tell=group.tell_stop) if signals else nullcontext() as stop:
            while not trainer.finished(stop.signum if signals else 0):
                trainer.step()
            own = stop.signum if signals else 0
    finally:
        if trainer is not None:
            trainer.close()
        group.close()
    code = stop_code(own, group) if signals else 0
    if code:
        raise SystemExit(code)
