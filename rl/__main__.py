"""`python -m rl ...`: train.py's command, from wherever rl is installed."""

import sys

from rl.cli import main

if __name__ == "__main__":
    sys.exit(main(own_signals=True))
