"""Resume-grade checkpoints (Dopamine's checkpointer): atomic writes, the last N kept, corrupt files skipped, and the
best periodic evaluation kept beside them.

A checkpoint is one `torch.save` of plain containers and tensors (no pickled classes), written to a temporary file
and renamed into place, so a crash never leaves a half-written `ckpt_*.pt` (the temporary files such a crash leaves
are deleted by the next save). A write that fails (a full disk) removes its temporary file and stops the run with
`RunStopped`; so does an agent whose weights or optimizer state hold NaN or inf (`nonfinite`): a broken state never
replaces the checkpoints kept. Loading uses `weights_only=True`; a file that is empty, not a checkpoint or holds
impossible counters is reported in one line (and skipped when resuming).

`checkpoints/best.pt` holds the agent of the best evaluation so far (its `step` and `mean_return` with it); its name
does not match `ckpt_<step>.pt`, so resuming and pruning never see it, and a NaN or inf mean return is never the
best. `load_checkpoint` picks what evaluation mode loads: the newest intact checkpoint, best.pt, or a file named by
path. `write_json` writes the run's JSON records the same atomic way, as strict JSON (a non-finite number is null).

What goes into a checkpoint is `snapshot` (the agent's state, torch's RNG, the recent episode statistics); `restore`
and `restore_checked` load it back; `BestKeeper` decides when an evaluation replaces best.pt.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import re
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from rl.errors import ConfigError, RunStopped

if TYPE_CHECKING:
    from rl.envs.episode_stats import EpisodeStats

PATTERN = re.compile(r"^ckpt_(\d+)\.pt$")
BEST = "best.pt"
STALE = ".ckpt_*.pt.tmp"  # what a save killed mid-write leaves (see `_atomic_save`)
# the parts of an agent's state (rl/agents/base.py `state_dict`) that hold what it saw, not what it learned: the replay
# memory or rollout, IMPALA's replayed sequences and probe observations; gigabytes at full size, and a NaN reward or
# observation stored there is data, not a broken agent
AGENT_DATA = ("memory", "sequence_replay", "probe")


def checkpoint_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def best_path(output_dir) -> Path:
    return checkpoint_dir(output_dir) / BEST


def list_checkpoints(output_dir) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint, oldest first (best.pt is not one of them)."""
    folder = checkpoint_dir(output_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := PATTERN.match(p.name))]
    return sorted(found)


# ------------------------------------------------------------------------------------------------------------- writing
def finite_json(data):
    """`data` with every NaN or inf (numpy's too) replaced by None, at any depth of dicts, lists and tuples: strict
    JSON readers (JavaScript, jq, Go) reject a bare `NaN`. Numpy scalars become Python numbers."""
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite_json(v) for v in data]
    if isinstance(data, float | np.floating):
        return float(data) if math.isfinite(data) else None
    if isinstance(data, np.integer):
        return int(data)
    return data


def _kept(path: Path) -> str:
    return f"the previous {path.name} is kept" if path.exists() else f"there was no previous {path.name}"


def write_json(path: Path, data: dict, **dump_options) -> None:
    """Write `data` as strict JSON (non-finite numbers as null) through a temporary file renamed onto `path`: a reader
    (rl.report, a resuming run, the other side of --control) sees the old file or the new one, never a half-written
    one. A write the OS refuses (a full disk, a read-only folder) is a RunStopped that keeps the old file."""
    text = json.dumps(finite_json(data), **{**dump_options, "allow_nan": False})
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise RunStopped(f"could not write {path} ({exc.strerror or _short(exc)}); "
                         f"{_kept(path)}") from None


class _KeepsWriteError:
    """A file for torch.save that keeps the OS's error of a failed write (ENOSPC on a full disk): torch's writer turns
    it into a RuntimeError that says only "unexpected pos"."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.file.flush()


def _atomic_save(obj: dict, path: Path, what: str, kept: str) -> Path:
    """torch.save to a temporary file in the same folder, fsync it, and rename it onto `path`. Any failure (a full
    disk, a read-only folder) removes the temporary file and is a RunStopped saying `what` was not written, why, and
    what is `kept`."""
    tmp = path.parent / f".{path.name}.tmp"
    writer = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            writer = _KeepsWriteError(f)
            torch.save(obj, writer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        cause = writer.error if writer is not None and writer.error is not None else exc
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else _short(cause)
        raise RunStopped(f"{what} could not be written to {path.parent} ({reason}); {kept}") from None
    return path


def nonfinite(state, name: str = "") -> str | None:
    """The dotted name of the first floating-point tensor, array or number holding NaN or inf among an agent's
    weights, optimizer state (Adam's moments) and normalisation statistics in a checkpoint `state`, else None. Only
    `state["agent"]` is looked at, and not its stored experience (`AGENT_DATA`): data may hold NaN, and it is the
    bulk of a checkpoint. `name` is the path walked so far (a state passed without it is a whole checkpoint)."""
    if not name:
        agent = state.get("agent") if isinstance(state, dict) else None
        return None if agent is None else nonfinite(agent, "agent")
    if isinstance(state, dict):
        items = ((k, v) for k, v in state.items() if not (name == "agent" and k in AGENT_DATA))
    elif isinstance(state, list | tuple):
        items = enumerate(state)
    elif isinstance(state, torch.Tensor):
        return name if state.is_floating_point() and not bool(torch.isfinite(state).all()) else None
    elif isinstance(state, np.ndarray):
        return name if np.issubdtype(state.dtype, np.floating) and not np.isfinite(state).all() else None
    elif isinstance(state, float | np.floating):
        return None if math.isfinite(state) else name
    else:
        return None
    for key, value in items:
        if (found := nonfinite(value, f"{name}.{key}")) is not None:
            return found
    return None


def _newest_kept(output_dir) -> str:
    found = list_checkpoints(output_dir)
    return f"the newest checkpoint {found[-1][1].name} is kept" if found else "no checkpoint was written before"


def save(output_dir, step: int, state: dict, keep: int = 3) -> Path:
    """Write `state` as checkpoint `step` atomically, then delete all but the newest `keep`. An agent holding NaN or
    inf is not saved (a RunStopped); the temporary files of a save killed mid-write are deleted first."""
    if (bad := nonfinite(state)) is not None:
        raise RunStopped(f"the agent's weights hold non-finite values ({bad}) at step {step}: not saved; "
                         f"{_newest_kept(output_dir)}")
    folder = checkpoint_dir(output_dir)
    for stale in folder.glob(STALE) if folder.is_dir() else ():
        with contextlib.suppress(OSError):
            stale.unlink()
    found = list_checkpoints(output_dir)
    kept = (f"the previous checkpoints are kept (newest: {found[-1][1].name})" if found
            else "no checkpoint was written before")
    path = _atomic_save({"complete": True, "step": step, **state}, folder / f"ckpt_{step:012d}.pt",
                        f"the checkpoint at step {step}", kept)
    for _, old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def save_best(output_dir, step: int, mean_return: float, state: dict, **evaluation) -> Path:
    """Write `state` as `checkpoints/best.pt` atomically, with the step and evaluation score it was chosen by; an agent
    holding NaN or inf is not saved (a RunStopped)."""
    path = best_path(output_dir)
    if (bad := nonfinite(state)) is not None:
        raise RunStopped(f"the agent's weights hold non-finite values ({bad}) at step {step}: not saved as {BEST}; "
                         f"{_newest_kept(output_dir)}")
    return _atomic_save({"complete": True, "step": step, "mean_return": float(mean_return), **evaluation, **state},
                        path, f"{BEST} of step {step}", _kept(path))


# ------------------------------------------------------------------------------------------------------------- reading
class Unreadable(ValueError):
    """Why a file is no usable checkpoint, in words a user reads as they are (no exception name before them)."""


WEIGHTS_ONLY_REFUSAL = ("holds pickled Python objects{what} that weights_only loading refuses (not a checkpoint rl "
                        "wrote; rl never unpickles code)")


def _short(exc: BaseException, limit: int = 120) -> str:
    """An exception in one line: its first line, at most `limit` characters, cut between words with an ellipsis."""
    if isinstance(exc, Unreadable):
        return str(exc)
    text = str(exc).strip()
    if isinstance(exc, pickle.UnpicklingError) and "weights_only" in text.lower().replace(" ", "_"):
        found = re.search(r"GLOBAL (\S+)", text)
        return WEIGHTS_ONLY_REFUSAL.format(what=f" ({found.group(1)})" if found else "")
    first = text.splitlines()[0] if text else ""
    if len(first) > limit:
        cut = first[:limit - 3]
        first = (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _whole_number(value) -> int | None:
    """`value` as an int when it is a whole number (Python's, numpy's or a 0-d integer tensor), else None."""
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _check_counters(state: dict) -> None:
    """The checkpoint's step and the agent's counters are non-negative whole numbers (a crafted or damaged file
    otherwise resumes "from step -500")."""
    counters = {"step": state.get("step")}
    agent_counters = state["agent"].get("counters") if isinstance(state["agent"], dict) else None
    if isinstance(agent_counters, dict):
        counters.update(agent_counters)
    for key, value in counters.items():
        number = _whole_number(value)
        if number is None:
            shown = repr(value)[:40] if isinstance(value, str | float | int | type(None)) else type(value).__name__
            raise Unreadable(f"its {key} is {shown}, not a whole number")
        if number < 0:
            raise Unreadable(f"negative {key} {number}")


def read(path: Path, map_location="cpu") -> dict:
    """Load one checkpoint file with `weights_only=True`; raises if it is unreadable or not a complete checkpoint
    (its message says why in words: empty, not a torch file, pickled objects, counters below zero).
    Memory-mapped: a replay memory's frames are read from the page cache as they are copied into the agent, so
    restoring a large memory does not hold it twice in RAM."""
    path = Path(path)
    if path.stat().st_size == 0:
        raise Unreadable("empty file (0 bytes: its write was cut off)")
    if not zipfile.is_zipfile(path):
        raise Unreadable("not a torch checkpoint file (no zip archive: cut off, or another kind of file)")
    state = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    if not isinstance(state, dict) or not state.get("complete") or "agent" not in state:
        raise Unreadable("not a complete rl checkpoint")
    _check_counters(state)
    return state


def load_newest(output_dir, map_location="cpu") -> tuple[dict, Path] | None:
    """(state, path) of the newest intact checkpoint, or None when there is none; corrupt ones are reported and
    skipped, and if every checkpoint is corrupt a ConfigError says so."""
    found = list_checkpoints(output_dir)
    errors = []
    for _, path in reversed(found):
        try:
            state = read(path, map_location)
        except Exception as exc:  # noqa: BLE001 - any failure to read means "corrupt"; the message says which
            errors.append(f"{path.name} ({_short(exc)})")
            continue
        if errors:
            print(f"warning: skipped corrupt checkpoint(s) {', '.join(errors)}; using {path.name}", file=sys.stderr)
        return state, path
    if errors:
        raise ConfigError(f"every checkpoint in {checkpoint_dir(output_dir)} is corrupt: {'; '.join(errors)}. "
                          f"Delete the folder to start over, or point --output_dir elsewhere")
    return None


def read_best(output_dir) -> dict | None:
    """`{"step", "mean_return", "path"}` of `checkpoints/best.pt`, or None when there is none. An unreadable best.pt,
    or one whose mean return is NaN or inf, is reported and treated as absent (the next evaluation replaces it)."""
    path = best_path(output_dir)
    if not path.exists():
        return None
    try:
        state = read(path)
        best = {"step": int(state["step"]), "mean_return": float(state["mean_return"]), "path": str(path)}
    except Exception as exc:  # noqa: BLE001 - unreadable: say so and start a new best
        print(f"warning: ignoring unreadable {path} ({_short(exc)}); the next evaluation replaces it", file=sys.stderr)
        return None
    if not math.isfinite(best["mean_return"]):
        print(f"warning: ignoring {path}: its mean return is {best['mean_return']}, not a score; the next evaluation "
              f"replaces it", file=sys.stderr)
        return None
    return best


VALID = "latest (the newest intact ckpt_<step>.pt), best (checkpoints/best.pt) or the path of a checkpoint file"


def load_checkpoint(output_dir, which: str = "latest", map_location="cpu") -> tuple[dict, Path]:
    """What evaluation mode restores: `which` is "latest", "best" or a file path. Returns (state, path); anything
    missing or unreadable is a ConfigError saying what was wrong and what is valid."""
    folder = checkpoint_dir(output_dir)
    if which == "latest":
        found = load_newest(output_dir, map_location)
        if found is None:
            hint = " (there is a best.pt: --checkpoint best)" if best_path(output_dir).exists() else ""
            raise ConfigError(f"--training False needs a checkpoint, and {folder} has none{hint}: "
                              f"train first with the same --output_dir")
        return found
    if which == "best":
        path = best_path(output_dir)
        if not path.exists():
            raise ConfigError(f"--checkpoint best: {folder} has no {BEST} (it is written by the evaluations during "
                              f"training, every eval_interval steps and at the end); valid: {VALID}")
    else:
        path = Path(which)
        if not path.is_file():
            raise ConfigError(f"--checkpoint {which!r}: no such file; valid: {VALID}")
    try:
        return read(path, map_location), path
    except Exception as exc:  # noqa: BLE001 - any failure to read means "corrupt"; the message says which
        raise ConfigError(f"--checkpoint {which}: {path} is not a readable checkpoint ({_short(exc)}); "
                          f"valid: {VALID}") from None


# ---------------------------------------------------------------------------------------------------- what a run saves
def snapshot(agent, include_memory: bool = True, stats: EpisodeStats | None = None) -> dict:
    """What a checkpoint holds: the agent's state, torch's global RNG and the recent episode statistics."""
    state = {"agent": agent.state_dict(include_memory=include_memory), "torch_rng": torch.get_rng_state()}
    if stats is not None:
        state["episode_stats"] = stats.state_dict()
    return state


def restore(agent, state: dict, stats: EpisodeStats | None = None, include_memory: bool = True) -> None:
    """Load what `snapshot` saved; `include_memory=False` leaves the memory out (evaluation needs none, and an
    on-policy rollout is sized by the number of envs it was collected with)."""
    agent_state = state["agent"]
    if not include_memory:
        agent_state = {k: v for k, v in agent_state.items() if k != "memory"}
    agent.load_state_dict(agent_state)
    torch.set_rng_state(state["torch_rng"])
    if stats is not None and "episode_stats" in state:
        stats.load_state_dict(state["episode_stats"])


def restore_checked(agent, state: dict, path, stats: EpisodeStats | None = None, include_memory: bool = True) -> None:
    """`restore`, with a checkpoint that does not fit the agent (other sizes or settings) as a ConfigError."""
    try:
        restore(agent, state, stats, include_memory)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as exc:
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ConfigError(f"checkpoint {path} does not fit this run's agent ({type(exc).__name__}: {detail}); it was "
                          f"written with other settings (env, sizes, model): use those, or another --output_dir "
                          f"or --checkpoint") from None


class BestKeeper:
    """Keeps `checkpoints/best.pt`: the agent of the evaluation with the highest mean return so far. A resumed run
    reads the previous best's score back from best.pt, so only a strictly better evaluation replaces it."""

    def __init__(self, output_dir: Path):
        self.output_dir = output_dir
        self.best = read_best(output_dir)  # {"step", "mean_return", "path"} or None

    def offer(self, agent, returns: list[float]) -> bool:
        """Save the agent as best.pt when the mean of `returns` beats the best so far; a NaN or inf mean never does
        (it compares false both ways, so a first NaN would otherwise stay the best for good)."""
        mean = float(np.mean(returns))
        if not math.isfinite(mean):
            return False
        if self.best is not None and not mean > self.best["mean_return"]:
            return False
        path = save_best(self.output_dir, agent.env_steps, mean, snapshot(agent, include_memory=False),
                         std_return=float(np.std(returns)), episodes=len(returns))
        self.best = {"step": agent.env_steps, "mean_return": mean, "path": str(path)}
        return True
