"""`--num_workers 0` keeps today's single process: it imports nothing of the parallel machinery."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import train
train.main(["--hparams", "dqn_cartpole", "--output_dir", sys.argv[1], "--train_steps", "300",
            "--eval_episodes", "1", "--num_workers", "0"])
loaded = sorted(m for m in sys.modules if m.startswith(("rl.parallel", "ray")))
print("PARALLEL:", loaded)
"""


def test_num_workers_0_imports_nothing_parallel(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "run")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "PARALLEL: []" in out.stdout
