"""One run uses exactly the threads it is configured for: torch's intra-op pool, the BLAS under numpy (OpenBLAS
starts one thread per core at import and keeps them spinning after a call) and OpenCV's pool where it is loaded.

Without this, `--copies 2` on 2 cores ran 2 x (1 torch + 2 BLAS) threads: dqn_cartpole at 20k steps took 10.2 s
alone and 43.4 s as two copies on this project's 2-core machine (the numpy code of commit ce87ddc); limited, 13.5 s
alone and 13.6-13.9 s as two copies (docs/performance.md).
"""

from __future__ import annotations

import sys

import torch
from threadpoolctl import threadpool_limits


def limit_threads(n: int) -> None:
    """Run torch, BLAS/OpenMP and (if imported) OpenCV on `n` threads each, for the rest of the process."""
    torch.set_num_threads(n)
    threadpool_limits(n)  # every BLAS and OpenMP library loaded in this process
    if "cv2" in sys.modules:
        sys.modules["cv2"].setNumThreads(n)
