"""Resume-grade checkpoints (Dopamine's checkpointer): atomic writes, the last N kept, corrupt files skipped, and the
best periodic evaluation kept beside them.

A checkpoint is one `torch.save` of plain containers and tensors (no pickled classes), written to a temporary file
and renamed into place, so a crash never leaves a half-written `ckpt_*.pt`. Loading uses `weights_only=True`.
`checkpoints/best.pt` holds the agent of the best evaluation so far (its `step` and `mean_return` with it); its name
does not match `ckpt_<step>.pt`, so resuming and pruning never see it. `load_checkpoint` picks what evaluation
mode loads: the newest intact checkpoint, best.pt, or a file named by path.

What goes into a checkpoint is `snapshot` (the agent's state, torch's RNG, the recent episode statistics); `restore`
and `restore_checked` load it back; `BestKeeper` decides when an evaluation replaces best.pt.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from rl.errors import ConfigError

if TYPE_CHECKING:
    from rl.envs.episode_stats import EpisodeStats

PATTERN = re.compile(r"^ckpt_(\d+)\.pt$")
BEST = "best.pt"


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


def write_json(path: Path, data: dict, **dump_options) -> None:
    """Write `data` as JSON through a temporary file renamed onto `path`: a reader (rl.report, a resuming run, the
    other side of --control) sees the old file or the new one, never a half-written one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, **dump_options))
    os.replace(tmp, path)


def _atomic_save(obj: dict, path: Path) -> Path:
    """torch.save to a temporary file in the same folder, fsync it, and rename it onto `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    torch.save(obj, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save(output_dir, step: int, state: dict, keep: int = 3) -> Path:
    """Write `state` as checkpoint `step` atomically, then delete all but the newest `keep`."""
    path = _atomic_save({"complete": True, "step": step, **state}, checkpoint_dir(output_dir) / f"ckpt_{step:012d}.pt")
    for _, old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def save_best(output_dir, step: int, mean_return: float, state: dict, **evaluation) -> Path:
    """Write `state` as `checkpoints/best.pt` atomically, with the step and evaluation score it was chosen by."""
    return _atomic_save({"complete": True, "step": step, "mean_return": float(mean_return), **evaluation, **state},
                        best_path(output_dir))


def _short(exc: Exception) -> str:
    first = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def read(path: Path, map_location="cpu") -> dict:
    """Load one checkpoint file with `weights_only=True`; raises if it is unreadable or not a complete checkpoint.
    Memory-mapped: a replay memory's frames are read from the page cache as they are copied into the agent, so
    restoring a large memory does not hold it twice in RAM."""
    state = torch.load(path, map_location=map_location, weights_only=True, mmap=True)
    if not isinstance(state, dict) or not state.get("complete") or "agent" not in state:
        raise ValueError("not a complete rl checkpoint")
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
    """`{"step", "mean_return", "path"}` of `checkpoints/best.pt`, or None when there is none. An unreadable best.pt
    is reported and treated as absent (the next evaluation replaces it)."""
    path = best_path(output_dir)
    if not path.exists():
        return None
    try:
        state = read(path)
        return {"step": int(state["step"]), "mean_return": float(state["mean_return"]), "path": str(path)}
    except Exception as exc:  # noqa: BLE001 - unreadable: say so and start a new best
        print(f"warning: ignoring unreadable {path} ({_short(exc)}); the next evaluation replaces it", file=sys.stderr)
        return None


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
        mean = float(np.mean(returns))
        if self.best is not None and not mean > self.best["mean_return"]:
            return False
        path = save_best(self.output_dir, agent.env_steps, mean, snapshot(agent, include_memory=False),
                         std_return=float(np.std(returns)), episodes=len(returns))
        self.best = {"step": agent.env_steps, "mean_return": mean, "path": str(path)}
        return True
