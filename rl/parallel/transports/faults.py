"""What every transport keeps of its workers' failures, so that a failure means the same whatever runs the worker."""

from __future__ import annotations

from collections import deque

from rl.errors import ConfigError

MAX_FAILURES = 3  # in a row, without a shipment in between: the run ends with the worker's error


class FaultBook:
    """Shipments received but not yet taken (`pending`), the ranks restarted since the learner last asked (`lost`:
    their next data starts new episodes) and the restart count."""

    def __init__(self):
        self.pending: deque = deque()
        self.lost: list[int] = []
        self.restarts = 0

    def count_failure(self, h, why: str) -> None:
        """Worker `h` failed and is being replaced: its undelivered shipments go, and a third failure in a row ends
        the run in one line. `h` has `spec`, `failures`, `restarts` and `last_error`."""
        self.pending = deque(s for s in self.pending if s.worker != h.spec.rank)
        h.failures += 1
        if h.failures >= MAX_FAILURES:
            detail = f": {h.last_error}" if h.last_error else ""
            raise ConfigError(f"collection worker {h.spec.rank} failed {h.failures} times in a row{detail}")
        h.restarts += 1
        self.restarts += 1
        self.lost.append(h.spec.rank)
        print(f"worker {h.spec.rank} {why}; restarted (its unfinished shipment is dropped)", flush=True)

    def take_lost(self) -> list[int]:
        """The workers restarted since the last call (their next data starts new episodes)."""
        lost, self.lost = self.lost, []
        return lost
