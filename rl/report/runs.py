"""Reading the run folders that train.py writes (rl/run.py, rl/logger.py): what each run is, its curves and its scores.

A run folder holds `hparams.json` (the set, the resolved settings, the flags), `progress.csv` (one row per log
interval; a new column rewrites the header; evaluation columns are blank on rows without an evaluation) and, once
training finished, `eval.json`. Folders are read as they are found, in the middle of a run or after a crash, so
everything here tolerates a half-written file and says what it skipped in the run's `notes` instead of failing.

An eval.json ends a run only when it is that run's last word: written at the end of training (or where a search
stopped it early) at the step of the last row logged (its own evaluation's), and, for the end of training, at or past
its budget. One of
an earlier sitting (the run was resumed and stopped again before its end) is stale, and one of an evaluation run
(`--training False`) evaluated a checkpoint: neither makes a run finished nor gives its final score.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rl.errors import ConfigError, first_line
from rl.hparams import flat
from rl.logger import after_resumes
from rl.report.scores import atari_game

SKIP_DIRS = {"checkpoints", "videos", "report", "__pycache__"}  # never runs: not worth walking into
TRAIN_SCORE_COLUMNS = ("game_score_mean", "episode_return_mean")  # Atari's whole-game score first, when logged
ENDING_MODES = ("final_training_evaluation", "stopped_early")  # the eval.json modes that end a run


def _number(value) -> float | None:
    """A finite number from a JSON record, None for anything else (null: a NaN written as strict JSON)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        return None
    return float(value)


def natural_key(text: str) -> list:
    """`copy_2` before `copy_10`."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def is_run(folder: Path) -> bool:
    return (folder / "hparams.json").is_file() or (folder / "progress.csv").is_file()


def find_runs(path: Path) -> list[Path]:
    """The run folders in `path`: the path itself when it is a run, otherwise every run below it (a folder of
    `copy_<i>` or `trial_<i>` runs, or a folder of several runs or copy-folders), in natural order."""
    if not path.exists():
        raise ConfigError(f"no such run or folder: {path}")
    if not path.is_dir():
        raise ConfigError(f"{path} is a file: give a run folder (it holds hparams.json) or a folder of runs")
    if is_run(path):
        return [path]
    found = []
    for root, dirs, _ in os.walk(path):
        folder = Path(root)
        if folder != path and is_run(folder):
            found.append(folder)
            dirs[:] = []
            continue
        dirs[:] = sorted((d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")), key=natural_key)
    return sorted(found, key=lambda p: natural_key(str(p)))


@dataclass
class Run:
    """One run folder, read."""

    path: Path
    name: str  # the path as the report shows it: relative to the parent of the path it was found under
    hparams_set: str
    hparams: dict
    columns: dict[str, np.ndarray]  # progress.csv as float columns (NaN where blank), wall time made cumulative
    final: dict | None  # eval.json as found; `ending` says whether it ends this run
    notes: list[str] = field(default_factory=list)
    control: list[dict] = field(default_factory=list)  # --control's changes: hparams.json's {"step", "settings"}

    @property
    def env(self) -> str:
        return str(self.hparams.get("env", "unknown env"))

    @property
    def agent(self) -> str:
        return str(self.hparams.get("agent", ""))

    @property
    def seed(self):
        return self.hparams.get("seed")

    @property
    def train_steps(self) -> int | None:
        return self.hparams.get("train_steps")

    @property
    def last_step(self) -> int:
        steps = self.columns.get("env_steps")
        return int(steps[-1]) if steps is not None and len(steps) else 0

    @property
    def wall_time_s(self) -> float | None:
        wall = self.columns.get("wall_time_s")
        return float(wall[-1]) if wall is not None and len(wall) else None

    def final_problem(self) -> str | None:
        """Why eval.json does not end this run (None when it does, or when there is none)."""
        final = self.final
        if final is None:
            return None
        mode = final.get("mode")
        if mode == "test":
            return "eval.json is from an evaluation run (--training False), not the end of training"
        if mode not in ENDING_MODES:
            return f"eval.json has mode {mode!r}, which is not how train.py ends a run"
        step = _number(final.get("env_steps"))
        if step is None:
            return "eval.json gives no env_steps: the step it was written at is unknown"
        if step < self.last_step:
            return (f"eval.json is from step {step:.0f}, before the run's last logged step {self.last_step} (stale: "
                    f"the run was resumed)")
        if step > self.last_step and len(self.columns.get("env_steps", ())):  # its own row comes before it
            return (f"eval.json is from step {step:.0f}, past the run's last logged step {self.last_step} (stale: the "
                    f"run was resumed from an earlier checkpoint)")
        budget = _number(self.train_steps)
        if mode == "final_training_evaluation" and budget is not None and step < budget:
            return (f"eval.json is from step {step:.0f}, before the run's budget of {budget:.0f} steps (stale: the "
                    f"run was resumed with a larger train_steps)")
        return None

    @property
    def ending(self) -> dict | None:
        """eval.json where it ends this run (its final evaluation, or where a search stopped it early)."""
        return self.final if self.final is not None and self.final_problem() is None else None

    @property
    def trained_then_evaluated(self) -> bool:
        """An evaluation run's eval.json replaced the one the end of training wrote: progress.csv still holds that
        final evaluation (the only one logged at or past the budget)."""
        budget = _number(self.train_steps)
        if (self.final or {}).get("mode") != "test" or budget is None:
            return False
        steps, _ = self.evaluations
        return bool(len(steps)) and steps[-1] >= budget

    @property
    def finished(self) -> bool:
        """Whether the run has ended (trained to its budget and evaluated, or stopped early by a search): its
        numbers are final."""
        return self.ending is not None or self.trained_then_evaluated

    @property
    def train_score_column(self) -> str | None:
        for name in TRAIN_SCORE_COLUMNS:
            if name in self.columns and np.isfinite(self.columns[name]).any():
                return name
        return None

    def curve(self, score: str, x: str = "env_steps") -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the evaluation (`score="eval"`) or training (`"train"`) score against `x` (`env_steps` or
        `wall_time_s`), rows without that score left out and one point per x (the later row wins)."""
        name = "eval_return_mean" if score == "eval" else self.train_score_column
        if name is None or name not in self.columns or x not in self.columns:
            return np.zeros(0), np.zeros(0)
        xs, ys = self.columns[x], self.columns[name]
        keep = np.isfinite(xs) & np.isfinite(ys)
        xs, ys = xs[keep], ys[keep]
        last = np.r_[xs[1:] != xs[:-1], True] if len(xs) else np.zeros(0, bool)  # the final row repeats its step
        return xs[last], ys[last]

    @property
    def evaluations(self) -> tuple[np.ndarray, np.ndarray]:
        return self.curve("eval")

    def final_score(self) -> tuple[float | None, int | None, str]:
        """(score, at step, where from): the mean return of the eval.json that ends the run, else the last
        evaluation in progress.csv (a stale eval.json, or an evaluation run's, is not the run's final score)."""
        ending = self.ending or {}
        if _number(ending.get("mean_return")) is not None:
            return _number(ending["mean_return"]), int(_number(ending["env_steps"])), "eval.json"
        steps, values = self.evaluations
        if len(values):
            where = ("final evaluation in progress.csv" if self.trained_then_evaluated
                     else "last evaluation in progress.csv")
            return float(values[-1]), int(steps[-1]), where
        return None, None, "no evaluation yet"

    def score_at(self, step: float) -> tuple[float | None, int | None]:
        """(score, its step): the latest evaluation at or before `step`, periodic or final; None before the first."""
        steps, values = self.evaluations
        points = [(int(s), float(v)) for s, v in zip(steps, values) if s <= step]
        final, final_step, source = self.final_score()
        if source == "eval.json" and final_step is not None and final_step <= step:
            points.append((int(final_step), final))
        if not points:
            return None, None
        at, value = max(reversed(points), key=lambda p: p[0])  # the final one wins over a periodic one at its step
        return value, at

    def wall_time_at(self, step: float) -> float | None:
        """The wall time when the run reached `step` (interpolated between its log rows), for markers on wall-time
        axes; None outside the logged steps."""
        steps, wall = self.columns.get("env_steps"), self.columns.get("wall_time_s")
        if steps is None or wall is None or not len(steps) or not steps[0] <= step <= steps[-1]:
            return None
        return float(np.interp(step, steps, wall))

    def best_score(self) -> tuple[float | None, int | None]:
        """The best evaluation: the highest periodic or final mean return (and the one eval.json's `best` kept)."""
        candidates = [(float(v), int(s)) for s, v in zip(*self.evaluations)]
        final, step, _ = self.final_score()
        if final is not None:
            candidates.append((final, step))
        best = (self.final or {}).get("best")  # best.pt's evaluation: one that happened, whichever sitting kept it
        if isinstance(best, dict) and _number(best.get("mean_return")) is not None:
            candidates.append((_number(best["mean_return"]), best.get("step")))
        if not candidates:
            return None, None
        return max(candidates, key=lambda c: c[0])

    def status(self) -> str:
        if self.ending is not None:
            return "stopped early" if self.ending.get("mode") == "stopped_early" else "finished"
        if self.trained_then_evaluated:
            return "finished"
        if not len(self.columns.get("env_steps", ())):
            return "not started"
        return "unfinished"


def _read_json(path: Path) -> dict | None:
    """A run's JSON record, None where there is none. train.py writes these whole, so one that does not parse is
    damaged, and the report stops with one line rather than show the run as unfinished (or without its settings)
    and its numbers wrong."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({first_line(exc)}); train.py writes it whole, so it is "
                          f"damaged: restore it, or move it out of the run folder") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not the object train.py writes: restore it, or "
                          f"move it out of the run folder")
    return data


def read_progress(path: Path, notes: list[str]) -> dict[str, np.ndarray]:
    """progress.csv as float columns. A last line without its newline is a row being written (or cut off) and is
    left out; so is a row that does not parse. A resumed run logs again from its last checkpoint: where env_steps
    goes back, the later rows win, and its wall clock (restarted by the new process) is continued from there."""
    if not path.is_file():
        return {}
    text = path.read_text(errors="replace")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        notes.append("progress.csv: the last line is cut off (being written, or the run was stopped); left out")
    records = list(csv.reader(io.StringIO(text)))
    if not records:
        return {}
    header, body = records[0], records[1:]
    rows, bad = [], 0
    for record in body:
        try:
            if len(record) != len(header):
                raise ValueError
            rows.append([float(v) if v.strip() else np.nan for v in record])
        except ValueError:
            bad += 1
    if bad:
        notes.append(f"progress.csv: {bad} malformed row(s) left out")
    if "env_steps" not in header:
        notes.append("progress.csv has no env_steps column; left out")
        return {}
    table = np.array(rows, dtype=float).reshape(len(rows), len(header))
    table = table[np.isfinite(table[:, header.index("env_steps")])]
    table = _after_resumes(table, header)
    return {name: table[:, i] for i, name in enumerate(header)}


def _after_resumes(table: np.ndarray, header: list[str]) -> np.ndarray:
    step_col = header.index("env_steps")
    wall_col = header.index("wall_time_s") if "wall_time_s" in header else None
    kept, clock = after_resumes(table[:, step_col].tolist(), table[:, wall_col].tolist() if wall_col is not None
                                else None)
    table = table[kept].reshape(len(kept), len(header))
    if wall_col is not None:
        table[:, wall_col] = clock
    return table


def read_run(folder: Path, name: str) -> Run:
    notes: list[str] = []
    record = _read_json(folder / "hparams.json") or {}
    if not (folder / "hparams.json").is_file():
        notes.append("no hparams.json: its set and settings are unknown")
    hparams = flat(record["hparams"]) if isinstance(record.get("hparams"), dict) else {}  # grouped by section, or flat
    columns = read_progress(folder / "progress.csv", notes)
    final = _read_json(folder / "eval.json")
    control = [entry for entry in record.get("control", []) if isinstance(entry, dict) and "step" in entry]
    run = Run(folder, name, str(record.get("hparams_set") or "unknown set"), hparams, columns, final, notes, control)
    if not (folder / "progress.csv").is_file():
        notes.append("no progress.csv yet: nothing logged")
    problem = run.final_problem()
    if problem is not None:
        notes.append(problem + ("; training finished: its final evaluation is progress.csv's last"
                                if run.trained_then_evaluated else ""))
    if not run.finished and len(columns.get("env_steps", ())):
        age = time.time() - (folder / "progress.csv").stat().st_mtime
        target = f" of {run.train_steps}" if run.train_steps else ""
        why = "no eval.json" if final is None else "no eval.json of its end"
        notes.append(f"unfinished: {why}; at step {run.last_step}{target}, progress.csv last written "
                     f"{_age(age)} ago (in progress, or stopped)")
    if not len(run.evaluations[0]) and run.ending is None:
        notes.append("no evaluation yet: only training scores")
    if atari_game(run.env):  # elsewhere (a robot that stays up) the time limit is how a good episode ends
        notes.extend(_time_limited(columns, run.ending))
    return run


def _time_limited(columns: dict, final: dict | None) -> list[str]:
    """Atari evaluations whose games the time limit ended rather than game over (a greedy policy that never serves
    again after a lost life): their scores are cut short, which the report says rather than hides."""
    notes = []
    limited = columns.get("eval_time_limited")
    if limited is not None:
        steps = [int(s) for s, n in zip(columns["env_steps"], limited) if n > 0]
        if steps:
            notes.append(f"evaluations with episodes ended by the time limit (cut short, not game over) at step(s) "
                         f"{', '.join(map(str, steps))}")
    if final and final.get("time_limited"):
        notes.append(f"eval.json: {final['time_limited']} of {final.get('episodes', '?')} episodes ended by the time "
                     f"limit, not the game")
    return notes


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def read_runs(paths: list[Path]) -> tuple[list[Run], list[str]]:
    """Every run under `paths`, and a note for each path that held none."""
    runs, notes, seen = [], [], set()
    for path in paths:
        path = Path(path)
        folders = find_runs(path)
        if not folders:
            notes.append(f"{path}: no runs found (a run folder holds hparams.json and progress.csv)")
        base = path.resolve().parent
        for folder in folders:
            real = folder.resolve()
            if real in seen:
                continue
            seen.add(real)
            name = str(real.relative_to(base)) if real.is_relative_to(base) else str(folder)
            runs.append(read_run(folder, name))
    return runs, notes
