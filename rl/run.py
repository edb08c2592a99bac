"""A run: one run folder, owned while it trains or evaluates, and the training loop as named steps.

    run = Run.open(hp, output_dir, record)   # checks everything, takes the folder's lock, builds and restores
    run.train()                              # step -> control -> evaluate -> log -> checkpoint, then finish
    run.close()

Nothing is written before every check has passed: the settings and the run's identity (a folder that holds a run
keeps its set, env and seed: rl/command.py `resolve_run`), then in `Run.open` the folder's owner (rl/folder.py: a second
process is refused in one line) and the checkpoint's fit and counters. Only then are `hparams.json` and `checkpoints/`
written and the settings printed. A refusal leaves the folder as it was.

The loop stops on a stop signal (checkpoint, exit 128 + signal), at its budget (checkpoint, final evaluation,
`eval.json`), or on a `RunStopped`: a non-finite loss or weight (rl/finite.py) ends the run without saving the broken
weights; an env that raised, or a worker that keeps failing, ends it after a checkpoint of the steps before.
`train.py`, `--copies` and `--tune` come here through rl/command.py's `run_one`, the Python API through rl/api.py.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from rl import signals
from rl.checkpoint import BestKeeper, checkpoint_dir, list_checkpoints, save, snapshot, write_json
from rl.control import Controller
from rl.errors import ConfigError, RunStopped
from rl.evaluation import play, summarize
from rl.finite import NonFiniteStop, nonfinite_value, nonfinite_weight
from rl.folder import FolderLock
from rl.trainer import make_trainer, prepare


class StopFlag(signals.armed):
    """SIGINT/SIGTERM set a flag (`signum`); the loop checkpoints and exits at the next step (rl/signals.py)."""


@dataclass
class Due:
    """When each periodic task last ran, in env steps."""

    log: int
    eval: int
    ckpt: int
    saved_at: float = field(default_factory=time.monotonic)  # the wall clock of the last checkpoint


class Run:
    """One run folder, owned (its lock held) from `open` to `close`, with the agent built and restored."""

    def __init__(self, hp, output_dir: Path, lock: FolderLock | None, env, agent, stats, quiet: bool = False,
                 on_evaluation=None, group=None, children=None):
        self.hp, self.dir, self.lock = hp, Path(output_dir), lock
        self.env, self._agent, self.stats = env, agent, stats
        self._view = None
        self.quiet, self.on_evaluation = quiet, on_evaluation
        self.group, self.children = group, children
        self.peer_signum = 0
        self.trainer = self.control = self.logger = self.best = None
        self.changes: dict = {}  # what --control changed, as the control channel last held it
        self.result: dict = {}

    @property
    def agent(self):
        """The agent, as a policy for scripts: `act(obs, deterministic=True)` takes one observation or a batch
        (rl/policy.py); everything else is the agent's own."""
        if self._view is None:
            from rl.policy import AgentView

            self._view = AgentView(self._agent)
        return self._view

    @property
    def env_steps(self) -> int:
        return self._agent.env_steps

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, hp, output_dir: Path, record: dict, *, quiet: bool = False, on_evaluation=None, member=None,
             fork_from: Path | None = None) -> Run:
        """Take `output_dir`, build the agent (restored from the newest checkpoint, or `fork_from`'s), and only when
        everything fits write `record` as hparams.json. `member`: this process's place in a group that torchrun or
        PyTorchJob started (rank 0 only comes here)."""
        output_dir = Path(output_dir)
        group = children = None
        lock = FolderLock(output_dir)
        fresh = not (output_dir / "hparams.json").exists()
        try:
            lock.acquire()
            check_checkpoints_kept(output_dir, fresh)
            if hp.num_grad_workers > 1 and hp.grad_communication == "sync":  # DPPO: rank 0; its ranks forked here
                from rl.parallel.collective import launch
                from rl.parallel.follower import follow

                group, children = launch(hp, partial(follow, hp, output_dir), member)
                hp = group.settings(hp)
            env, agent, stats = prepare(hp, output_dir, source=fork_from, quiet=True)
        except BaseException:
            _close_group(group, children)
            lock.release(remove_new_folder=fresh)
            raise
        run = cls(hp, output_dir, lock, env, agent, stats, quiet, on_evaluation, group, children)
        try:
            run._record(record, fresh)
        except BaseException:
            run.close()
            raise
        return run

    def _record(self, record: dict, fresh: bool) -> None:
        """Everything checked: write hparams.json (every --control change kept), make checkpoints/, drop the
        eval.json of an earlier sitting (it belongs to a step this run goes past), and say what runs."""
        from rl.control import carry_changes
        from rl.resolve import read_record

        checkpoint_dir(self.dir).mkdir(parents=True, exist_ok=True)  # its absence later means it was deleted
        record = {**record, "hparams": self.hp.record()}  # as they are now (a group's rank 0 settled them)
        if not fresh:
            changes = carry_changes(self.dir, read_record(self.dir / "hparams.json"), self.hp.to_dict())
            if changes:
                record = {**record, "control": changes}
        write_json(self.dir / "hparams.json", record, indent=2, sort_keys=True)
        if self._agent.env_steps < self.hp.train_steps:
            (self.dir / "eval.json").unlink(missing_ok=True)
        if not self.quiet:
            print(f"hparams set {record['hparams_set']!r} -> {self.dir}\n{self.hp.describe()}", flush=True)
        if self._agent.env_steps:
            print(f"resuming from step {self._agent.env_steps}", flush=True)

    # ------------------------------------------------------------------ the loop
    def _start(self) -> None:
        """The loop's parts, made at the first `train`: the logger, best.pt's keeper, the trainer (this process, or
        the Scheme's learner and its workers) and the control channel."""
        from rl.logger import Logger

        hp, agent = self.hp, self._agent
        start = agent.env_steps
        self.logger = Logger(self.dir, hp.train_steps, start, quiet=self.quiet)
        self.best = BestKeeper(self.dir)
        self.trainer = make_trainer(hp, self.env, agent, self.stats, seed=hp.seed + start)  # fresh episodes on resume
        if self.group is not None:
            from rl.parallel.collective import GroupTrainer

            self.group.join(agent)
            self.trainer = GroupTrainer(self.trainer, agent, self.group, hp.train_steps)
        self.due = Due(start, start, start)
        self.diagnostics: dict = {}
        self.eval_row: dict = {}
        self.control = Controller(self.dir, hp, agent, self.logger.log, evaluate=self._evaluate_on_request,
                                  checkpoint=self.checkpoint)

    def train(self, steps: int | None = None) -> dict:
        """Train to the budget (`train_steps`), or `steps` more env steps; then checkpoint. At the budget: the final
        evaluation, eval.json and its result. A stop signal checkpoints and exits with 128 + the signal."""
        if self.lock is None or self.lock.fd is None:
            raise ConfigError(f"{self.dir} is not open for training (closed, or opened with rl.load for evaluation "
                              f"only): use rl.make(..., output_dir={str(self.dir)!r}) to continue its training")
        if self.trainer is None:
            self._start()
        # the budget is the trainer's to decide (`finished`: in a gradient group, the ranks agree on it); `steps` ends
        # this call sooner
        end = None if steps is None else self._agent.env_steps + steps
        early: dict = {}
        with StopFlag() as stop:
            try:
                # `finished` first: in a gradient group it is a collective call that every rank makes each step
                while not early and not self.trainer.finished(stop.signum) and (end is None or
                                                                                  self._agent.env_steps < end):
                    early = self.step()
            except RunStopped as exc:
                self._stopped(exc)
            finally:
                peer = self.group.stop_signum if self.group is not None else 0  # a stop another rank got
                if self._agent.env_steps >= self.hp.train_steps or stop.signum or peer or early:
                    self._close_trainer()
                    self._close_group()  # its ranks left the loop with this one and wait for it to let go
            self.checkpoint()
            signum = stop.signum or self.peer_signum
            if signum:
                self._close_logger()
                where = "" if stop.signum else " (on another rank of the group)"
                print(f"\n{signals.name(signum)}{where}: saved a checkpoint at step {self._agent.env_steps}; run the "
                      f"same command to resume.", flush=True)
                raise SystemExit(signals.exit_code(signum))
        if early:
            return self._finish_early(early)
        if self._agent.env_steps >= self.hp.train_steps:
            return self.finish()
        return {"env_steps": self._agent.env_steps}

    def step(self) -> dict:
        """One trainer step, then whatever is due: a control request, an evaluation, a log row, a checkpoint.
        Returns the early-stop result when `on_evaluation` asked to stop (a pruned search trial), else {}."""
        hp, agent, due = self.hp, self._agent, self.due
        diagnostics = self.trainer.step()
        if diagnostics:
            self.diagnostics = diagnostics
            broken = nonfinite_value(diagnostics)
            if broken:
                raise NonFiniteStop(f"non-finite {broken} at step {agent.env_steps} (update {agent.updates})")
        self.control.poll()  # between updates: settings changed from outside, checkpoint or evaluate on request
        early: dict = {}
        if self._due("eval", hp.eval_interval) and agent.env_steps < hp.train_steps:
            done = self.evaluate_periodic()
            if done is not None and self.on_evaluation is not None and self.on_evaluation(agent.env_steps, done[0]):
                early = summarize(done[1].returns, env_steps=agent.env_steps, stopped_early=True,
                                  wall_time_s=round(self.logger.wall_time_s(), 2), **done[1].summary())
        if self._due("log", hp.log_interval) or due.log < 0:
            self.log()
        overdue = 0 < hp.checkpoint_minutes <= (time.monotonic() - due.saved_at) / 60
        if self._due("ckpt", hp.checkpoint_interval) or (overdue and agent.env_steps > due.ckpt):
            self.checkpoint()
        return early

    def _due(self, kind: str, interval: int) -> bool:
        return interval > 0 and self._agent.env_steps // interval > getattr(self.due, kind) // interval

    def log(self) -> None:
        """One row (TensorBoard, progress.csv, the console); the weights are checked for NaN and inf first."""
        broken = nonfinite_weight(self._agent) or nonfinite_value(self.diagnostics)
        if broken:
            raise NonFiniteStop(f"non-finite {broken} at step {self._agent.env_steps} (update {self._agent.updates})")
        self.logger.log(self._agent.env_steps, {**self.stats.summary(), **self.diagnostics, **self.eval_row,
                                               **self.trainer.clock})
        self.eval_row, self.due.log = {}, self._agent.env_steps

    def checkpoint(self) -> None:
        """Save the run's state as ckpt_<step>.pt (rl/checkpoint.py refuses non-finite weights)."""
        with self.logger.outside_training():
            state = snapshot(self._agent, self.hp.checkpoint_memory, self.stats)
            state["control"] = self.control_changes()
            save(self.dir, self._agent.env_steps, state, keep=self.hp.keep_checkpoints)
        self.due.ckpt, self.due.saved_at = self._agent.env_steps, time.monotonic()

    def control_changes(self) -> dict:
        """The settings --control changed while the run went on (kept in each checkpoint and in hparams.json)."""
        if self.control is not None:
            self.changes = dict(self.control.changes)
        return dict(self.changes)

    def evaluate_periodic(self):
        """A greedy evaluation offered to best.pt and logged with the next row: (mean, Games), or None when a stop
        signal came during it (the loop then checkpoints and exits)."""
        with self.logger.outside_training():
            games = play(self._agent, self.hp, self.hp.eval_episodes, seed=self.hp.seed + 10_000, stopped=self._stop)
        self.due.eval = self._agent.env_steps  # given up or not, not due again before the next interval
        if games is None:
            return None
        self.best.offer(self._agent, games.returns)
        mean = float(np.mean(games.returns))
        self.eval_row = {"eval/return_mean": mean, "eval/return_std": float(np.std(games.returns)),
                         "eval/time_limited": games.summary()["time_limited"]}
        self.due.log = -1  # log this evaluation now
        return mean, games

    def evaluate(self, episodes: int = 10, deterministic: bool = True) -> dict:
        """`episodes` episodes of the agent as it is now on fresh envs, greedy unless `deterministic` is False: their
        mean, std and returns. Writes nothing (eval.json belongs to the end of training and to --training False)."""
        from rl.policy import Sampling

        if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= 10_000:
            raise ConfigError(f"evaluate: episodes must be a whole number in [1, 10000], got {episodes!r}")
        agent = self._agent if deterministic else Sampling(self._agent)
        games = play(agent, self.hp, episodes, seed=self.hp.seed + 20_000)
        return summarize(games.returns, env_steps=self._agent.env_steps, deterministic=deterministic,
                         **games.summary())

    def _evaluate_on_request(self) -> float | None:
        done = self.evaluate_periodic()
        return None if done is None else done[0]

    def _stop(self) -> int:
        """A stop signal here, or one that a rank > 0 got while waiting for this evaluation to end."""
        return signals.received() or (self.group.peer_stopped() if self.group is not None else 0)

    # ------------------------------------------------------------------ endings
    def finish(self) -> dict:
        """The final evaluation (after the last checkpoint: a stop here loses nothing), then eval.json."""
        with signals.phase(f"during the final evaluation: training ended and was checkpointed at step "
                           f"{self._agent.env_steps}; run the same command to evaluate it."):
            _, games = self.evaluate_periodic()
        best = self.best.best
        result = summarize(games.returns, env_steps=self._agent.env_steps,
                           wall_time_s=round(self.logger.wall_time_s(), 2), best=best, **games.summary())
        self.logger.log(self._agent.env_steps, {**self.stats.summary(), **self.eval_row})
        self._close_logger()
        write_json(self.dir / "eval.json", {"mode": "final_training_evaluation", **result}, indent=2)
        if not self.quiet:
            best_text = (f"; best: {best['mean_return']:.2f} at step {best['step']} ({best['path']})"
                         if best else "")
            print(f"final evaluation over {len(games.returns)} episodes: {result['mean_return']:.2f} ± "
                  f"{result['std_return']:.2f}{best_text}")
        self.result = result
        return result

    def _finish_early(self, early: dict) -> dict:
        """A search pruned this trial at an evaluation, logged and checkpointed already: eval.json says where."""
        self._close_logger()
        write_json(self.dir / "eval.json", {"mode": "stopped_early", **early}, indent=2)
        self.result = early
        return early

    def _stopped(self, exc: RunStopped) -> None:
        """A run that cannot go on: the last good checkpoint stays. Broken weights are never saved; otherwise (an
        env that raised, a worker that kept failing) the steps before it are checkpointed first."""
        kept = list_checkpoints(self.dir)
        saved = ""
        if not isinstance(exc, NonFiniteStop) and nonfinite_weight(self._agent) is None:
            try:
                self._close_trainer()
                self.checkpoint()
                saved = f"; saved a checkpoint at step {self._agent.env_steps}"
            except RunStopped as again:
                saved = f"; no checkpoint written ({again})"
        elif kept:
            saved = f"; nothing saved of the broken state: the newest checkpoint, step {kept[-1][0]}, is kept"
        else:
            saved = "; nothing saved of the broken state (no checkpoint was written before it)"
        self._close_trainer()
        self._close_group()
        self._close_logger()
        raise RunStopped(f"{exc}{saved}") from None

    def _close_trainer(self) -> None:
        """Stop the workers (before the last checkpoint: it is the state they last saw, or newer) and the control
        file; the trainer and control are made anew by the next `train`."""
        self.control_changes()  # kept for the checkpoints after it
        with self.logger.outside_training() if self.logger is not None else nullcontext():
            _closing(self.control, self.trainer)
        self.trainer = self.control = None

    def _close_group(self) -> None:
        if self.group is not None:  # a stop signal another rank got, carried here by the last all-reduce
            self.peer_signum = self.group.stop_signum
        _close_group(self.group, self.children)
        self.group = self.children = None

    def _close_logger(self) -> None:
        if self.logger is not None:
            self.logger.close()
            self.logger = None

    def close(self) -> None:
        """Stop what the run started and give the folder up (a Run is also a context manager)."""
        try:
            if self.trainer is not None:
                self._close_trainer()
            self._close_logger()
            if self.env is not None and self.trainer is None:
                self.env.close()
                self.env = None
        finally:
            self._close_group()
            if self.lock is not None:
                self.lock.release()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _closing(control, trainer) -> None:
    try:
        if control is not None:
            control.close()
    finally:
        if trainer is not None:
            trainer.close()


def _close_group(group, children) -> None:
    if group is not None:
        from rl.parallel.collective import reap

        group.close()
        reap(children or [])


def check_checkpoints_kept(output_dir: Path, fresh: bool) -> None:
    """A run folder whose checkpoints/ was deleted would restart at step 0 beside its old record: refused. (A run
    stopped before its first checkpoint has an empty checkpoints/, and restarts at 0.)"""
    if fresh or checkpoint_dir(output_dir).is_dir():
        return
    raise ConfigError(f"{output_dir} holds a run record (hparams.json) but its checkpoints/ folder is gone, so it "
                      f"cannot resume: restore checkpoints/, or start over in another --output_dir (or delete "
                      f"{output_dir})")
