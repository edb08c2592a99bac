"""Resume-grade checkpoints (Dopamine's checkpointer): atomic writes, the last N kept, corrupt files skipped.

A checkpoint is one `torch.save` of plain containers and tensors (no pickled classes), written to a temporary file
and renamed into place, so a crash never leaves a half-written `ckpt_*.pt`. Loading uses `weights_only=True`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import torch

from rl.errors import ConfigError

PATTERN = re.compile(r"^ckpt_(\d+)\.pt$")


def checkpoint_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint, oldest first."""
    folder = checkpoint_dir(output_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := PATTERN.match(p.name))]
    return sorted(found)


def save(output_dir, step: int, state: dict, keep: int = 3) -> Path:
    """Write `state` as checkpoint `step` atomically, then delete all but the newest `keep`."""
    folder = checkpoint_dir(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt_{step:012d}.pt"
    tmp = folder / f".{path.name}.tmp"
    torch.save({"complete": True, "step": step, **state}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for _, old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def load_latest(output_dir, map_location="cpu") -> dict | None:
    """The newest intact checkpoint, or None when there is none. Corrupt ones are reported and skipped; if every
    checkpoint is corrupt, a ConfigError says so."""
    found = list_checkpoints(output_dir)
    errors = []
    for _, path in reversed(found):
        try:
            state = torch.load(path, map_location=map_location, weights_only=True)
            if not isinstance(state, dict) or not state.get("complete"):
                raise ValueError("not a complete rl checkpoint")
            if errors:
                print(f"warning: skipped corrupt checkpoint(s) {', '.join(errors)}; using {path.name}", file=sys.stderr)
            return state
        except Exception as exc:  # noqa: BLE001 - any failure to read means "corrupt"; the message says which
            errors.append(f"{path.name} ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})")
    if errors:
        raise ConfigError(f"every checkpoint in {checkpoint_dir(output_dir)} is corrupt: {'; '.join(errors)}. "
                          f"Delete the folder to start over, or point --output_dir elsewhere")
    return None
