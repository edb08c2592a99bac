"""Train or evaluate an agent assembled from a named hyperparameter set (the flags: rl/cli.py, or --help).

    python train.py --sys local --hparams dqn_cartpole --output_dir runs/dqn_cartpole
    python train.py --hparams dqn_cartpole --output_dir runs/dqn_cartpole --training False --record_video True
    python train.py --hparams dqn_cartpole --output_dir runs/dqn_cartpole --training False --checkpoint best
    python train.py --list

`python -m rl` is the same command; from Python, `rl.make` and `rl.load` (docs/python.md).
"""

from __future__ import annotations

import signal
import sys


def stop_while_starting(signum, frame) -> None:
    """SIGTERM or SIGINT while train.py imports its modules, before rl/signals.py takes over: nothing to save yet. A
    handler at all is what matters in a container, whose PID 1 ignores a signal it has no handler for."""
    print(f"\n{signal.Signals(signum).name} before training began: nothing new to save; run the same command to "
          f"resume.", file=sys.stderr, flush=True)
    raise SystemExit(128 + signum)


def parser():
    from rl.cli import parser

    return parser()


def main(argv: list[str] | None = None, own_signals: bool = False) -> int:
    from rl.cli import main

    return main(argv, own_signals)


if __name__ == "__main__":
    for stop in (signal.SIGINT, signal.SIGTERM):  # first of all (rl/signals.py says why)
        signal.signal(stop, stop_while_starting)
    sys.exit(main(own_signals=True))
