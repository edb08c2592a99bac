"""One logger (SB3's logger, CleanRL's metric names): TensorBoard events, `progress.csv` and a console line.

Keys are namespaced (`charts/episode_return_mean`, `losses/td_loss`); the step is always environment steps, and
`env_steps`, `wall_time_s` and `charts/steps_per_s` are written with every row. steps/s is the training's rate
since the last row: time the run spent evaluating (`left_out`) is in `wall_time_s` but not in it.
"""

from __future__ import annotations

import csv
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch


def _number(value) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def csv_name(key: str) -> str:
    """`charts/episode_return_mean` -> `episode_return_mean`; `losses/td_loss` -> `losses_td_loss`."""
    return key.removeprefix("charts/").replace("/", "_")


def after_resumes(steps: list[float], walls: list[float] | None) -> tuple[list[int], list[float] | None]:
    """The rows of a progress.csv that hold the run's history, and their wall times as one running clock. A resumed
    run logs again from its last checkpoint: where env_steps goes back (or the clock restarts, as a process started
    again does), the rows it logs again replace the earlier ones, and its clock continues from the last row kept
    (the checkpoint came after it). Returns (indices of the rows kept, their wall times; None without a clock)."""
    kept: list[int] = []
    clock: list[float] = []
    offset = 0.0
    for i, step in enumerate(steps):
        restarted = walls is not None and kept and walls[i] + offset < clock[-1]
        if kept and (step < steps[kept[-1]] or restarted):  # a resume: drop what it logs again
            while kept and steps[kept[-1]] >= step:
                kept.pop()
                clock.pop()
            offset = clock[-1] if clock else 0.0
        kept.append(i)
        clock.append(walls[i] + offset if walls is not None else 0.0)
    return kept, (clock if walls is not None else None)


class Logger:
    """Write rows of scalars to TensorBoard, CSV and the console. A resumed run (`start_step` > 0) keeps the rows up
    to its checkpoint, drops the ones logged after it (the run does those steps again; TensorBoard's too), and
    continues the run's wall clock, so `wall_time_s` is the time the run has trained, over every sitting."""

    def __init__(self, output_dir, total_steps: int, start_step: int = 0, quiet: bool = False):
        from torch.utils.tensorboard import SummaryWriter  # imported here: it is slow to import

        self.dir = Path(output_dir)
        self.writer = SummaryWriter(str(self.dir), purge_step=start_step + 1 if start_step else None)
        self.csv_path = self.dir / "progress.csv"
        self.columns: list[str] = []
        self.wall_offset = 0.0
        if self.csv_path.exists():  # a resumed run continues the same file
            self.wall_offset = self._history(start_step)
        self.start_time = time.time()
        self.last_time, self.last_step = self.start_time, start_step
        self.rate = 0.0  # agent steps per second of training over the last row's interval
        self.total_steps = total_steps
        self.quiet = quiet
        self.tty = sys.stdout.isatty()

    def _history(self, start_step: int) -> float:
        """Rewrite progress.csv as the run's history up to `start_step` (see `after_resumes`); the wall time there."""
        with open(self.csv_path, newline="") as f:
            records = list(csv.reader(f))
        if not records:
            return 0.0
        self.columns, body = records[0], [r for r in records[1:] if len(r) == len(records[0])]
        try:
            steps = [float(r[self.columns.index("env_steps")]) for r in body]
            wall_col = self.columns.index("wall_time_s") if "wall_time_s" in self.columns else None
            walls = [float(r[wall_col]) for r in body] if wall_col is not None else None
        except ValueError:  # not a file this logger wrote: leave it as it is and append
            return 0.0
        kept, clock = after_resumes(steps, walls)
        rows = []
        for i, wall in zip(kept, clock or [None] * len(kept)):
            if steps[i] > start_step:
                break
            row = list(body[i])
            if wall is not None and wall != walls[i]:
                row[wall_col] = f"{wall:.3f}"
            rows.append(row)
        if rows != body:  # rows dropped or a clock continued
            tmp = self.csv_path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="") as f:
                csv.writer(f).writerows([self.columns, *rows])
            tmp.replace(self.csv_path)
        return float(rows[-1][wall_col]) if rows and wall_col is not None else 0.0

    def wall_time_s(self) -> float:
        """The run's training time so far, over every sitting."""
        return self.wall_offset + time.time() - self.start_time

    @contextmanager
    def outside_training(self):
        """Time spent in the block (an evaluation, stopping the workers, the last checkpoint) is left out of the next
        row's steps/s."""
        began = time.time()
        try:
            yield
        finally:
            self.left_out(time.time() - began)

    def left_out(self, seconds: float) -> None:
        """Time since the last row spent outside training (an evaluation): the next row's steps/s leaves it out."""
        self.last_time += seconds

    def log(self, step: int, values: dict) -> dict:
        """Write one row at `step`; returns the row as floats."""
        now = time.time()
        if step > self.last_step:  # a row at the step of the last one (the final evaluation's) keeps its rate
            self.rate = (step - self.last_step) / max(now - self.last_time, 1e-9)
        row = {"env_steps": step, "wall_time_s": round(self.wall_offset + now - self.start_time, 3),
               "charts/steps_per_s": self.rate}
        row.update({k: _number(v) for k, v in values.items()})
        self.last_time, self.last_step = now, step
        for key, value in row.items():
            if key != "env_steps":
                self.writer.add_scalar(key, value, step)
        self._write_csv(row)
        if not self.quiet:
            self._console(step, row)
        return row

    def _write_csv(self, row: dict) -> None:
        names = [csv_name(k) for k in row]
        if any(n not in self.columns for n in names):  # a new column: rewrite the file with the wider header
            old = []
            if self.csv_path.exists():
                with open(self.csv_path, newline="") as f:
                    old = list(csv.DictReader(f))
            self.columns += [n for n in names if n not in self.columns]
            with open(self.csv_path, "w", newline="") as f:
                w = csv.DictWriter(f, self.columns)
                w.writeheader()
                w.writerows(old)
        with open(self.csv_path, "a", newline="") as f:
            csv.DictWriter(f, self.columns).writerow(dict(zip(names, row.values())))

    def _console(self, step: int, row: dict) -> None:
        pct = 100.0 * step / max(self.total_steps, 1)
        filled = int(pct / 5)
        ret = row.get("charts/episode_return_mean")
        score = row.get("charts/game_score_mean")  # whole games, unclipped: the figure Atari players know
        ev = row.get("eval/return_mean")
        line = (f"[{'#' * filled}{'.' * (20 - filled)}] {pct:5.1f}% {step}/{self.total_steps} steps "
                f"| {row['charts/steps_per_s']:7.0f} steps/s"
                + (f" | return {ret:8.2f}" if ret is not None and score is None else "")
                + (f" | score {score:8.2f}" if score is not None else "")
                + (f" | eval {ev:8.2f}" if ev is not None else ""))
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)

    def close(self) -> None:
        if self.tty and not self.quiet:
            print()
        self.writer.close()


def hparam_value(value):
    """A setting as TensorBoard's HParams view takes it: numbers, strings and booleans as they are, anything else
    (a list, None) as its text."""
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def log_final_hparams(run_dir, metrics: dict) -> None:
    """A finished run's settings (its hparams.json) with its final scores, for TensorBoard's HParams view: one row
    per run, so copies and trials compare in a table (`tensorboard --logdir <the folder of the runs>`). Written
    into the run's own folder beside its scalars; `metrics` keys become tags under `hparams/`."""
    import json

    from torch.utils.tensorboard import SummaryWriter

    run_dir = Path(run_dir)
    record = json.loads((run_dir / "hparams.json").read_text())
    settings = {"hparams_set": record.get("hparams_set", ""),
                **{k: hparam_value(v) for k, v in record.get("hparams", {}).items()}}
    with SummaryWriter(str(run_dir), filename_suffix=".hparams") as writer:
        writer.add_hparams(settings, {f"hparams/{k}": float(v) for k, v in metrics.items()}, run_name=".")
