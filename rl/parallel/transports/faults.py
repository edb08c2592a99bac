"""What every transport keeps of its workers' failures, so that a failure means the same whatever runs the worker.

A worker that fails is restarted, and the run ends with the worker's own error in one line (`RunStopped`) when it
keeps failing: `MAX_FAILURES` failures in a row, where "in a row" depends on how it failed:
- a worker that died or hung (killed, out of memory, a stuck simulator) may have met something passing: a shipment
  from it breaks the row;
- a worker that raised (its env's `step`, or its own code: the error it reported) raises again where it did before,
  whatever it shipped in between (an env that raises at its 50th step lets every new worker ship a rollout first): only
  a failure of the other kind breaks that row. One process stops at the first such error (rl/collector.py); workers
  allow it twice.
"""

from __future__ import annotations

from collections import deque

from rl.errors import RunStopped

MAX_FAILURES = 3  # in a row (see above): the run ends with the worker's error


class FaultBook:
    """Shipments received but not yet taken (`pending`), the ranks restarted since the learner last asked (`lost`:
    their next data starts new episodes) and the restart count."""

    def __init__(self):
        self.pending: deque = deque()
        self.lost: list[int] = []
        self.restarts = 0

    def count_failure(self, h, why: str, raised: bool) -> None:
        """Worker `h` failed and is being replaced (`raised`: it reported an error of its own, `h.last_error`): its
        undelivered shipments go, and a third failure in a row ends the run in one line. `h` has `spec`, `failures`,
        `raised`, `restarts` and `last_error`."""
        self.pending = deque(s for s in self.pending if s.worker != h.spec.rank)
        h.failures += 1
        h.raised = h.raised + 1 if raised else 0
        error, h.last_error = h.last_error or why, ""  # the next failure brings its own
        if max(h.failures, h.raised) >= MAX_FAILURES:
            raise RunStopped(f"collection worker {h.spec.rank} failed {max(h.failures, h.raised)} times in a row: "
                             f"{error}")
        h.restarts += 1
        self.restarts += 1
        self.lost.append(h.spec.rank)
        print(f"worker {h.spec.rank} {why}; restarted (its unfinished shipment is dropped)", flush=True)

    def count_shipment(self, h) -> None:
        """Worker `h` shipped: a row of deaths and hangs is broken, a row of raised errors is not (see above)."""
        h.failures = 0

    def take_lost(self) -> list[int]:
        """The workers restarted since the last call (their next data starts new episodes)."""
        lost, self.lost = self.lost, []
        return lost
