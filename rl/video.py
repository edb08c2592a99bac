"""Record evaluation episodes to mp4 with imageio (headless: the env renders `rgb_array` frames)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_mp4(path: Path, frames: list[np.ndarray], fps: int = 30) -> Path:
    import imageio.v2 as imageio  # here: a tenth of a second at start-up that only video recording needs

    path.parent.mkdir(parents=True, exist_ok=True)
    # macro_block_size=1 keeps odd frame sizes as they are instead of resizing them with a warning
    imageio.mimwrite(path, frames, fps=fps, codec="libx264", macro_block_size=1)
    return path


def env_fps(env) -> int:
    return int(env.metadata.get("render_fps") or 30)
