"""DPPO's synchronous gradient ranks 1..M-1 as Ray actors (`launch_ranks`): each declares `ray_rank_cpus`,
`ray_rank_gpus` and `ray_rank_resources` (a rank runs a whole learner: a GPU for ranks is not one for every collection
worker) and joins rank 0's torch.distributed group. A rank actor that fails, or that no node can place within
`group_timeout_s`, ends the run at once with its own error in one line (exit 1, or 2 for bad input), where rank 0
would otherwise wait in gloo's rendezvous and exit 129. Ray is imported inside the functions only."""

from __future__ import annotations

import time

from rl.errors import ConfigError
from rl.parallel.transports.ray import RayTransport
from rl.parallel.transports.ray_cluster import one_line, parse_resources, resources_text


class RankActor:
    """A synchronous gradient worker of rank > 0 inside a Ray actor: runs `follow(rank, address)` (rl/trainer.py's,
    bound to the run's settings by rl/run.py; it sets the rank's threads and seeds: no settle_worker here), which
    joins rank 0's torch.distributed group at `address` and trains until the group agrees to stop."""

    def run(self, follow, rank: int, address: str) -> int:
        follow(rank, address)
        return rank


class RankHandle:
    """A rank's actor behind the calls rl.parallel.collective.reap makes of a process."""

    def __init__(self, actor, ref, rank: int = 0, ready=None):
        self.actor, self.ref, self.rank, self.ready, self.watch = actor, ref, rank, ready, None

    def join(self, timeout: float | None = None) -> None:
        import ray

        ray.wait([self.ref], timeout=timeout)

    def is_alive(self) -> bool:
        import ray

        return not ray.wait([self.ref], timeout=0)[0]

    def kill(self) -> None:
        import ray

        if self.watch is not None:
            self.watch.forget(self)  # killed by rank 0: not a failure to report
        ray.kill(self.actor)


def rank_failure(handle: RankHandle) -> tuple[str, int] | None:
    """(one line, exit status) when the rank's call ended with an error; None while it runs or after it returned."""
    import ray

    if not ray.wait([handle.ref], timeout=0)[0]:
        return None
    try:
        ray.get(handle.ref)
        return None
    except Exception as exc:  # noqa: BLE001 - whatever the rank raised, or Ray's word for its death
        cause = getattr(exc, "cause", None)
        code = 2 if isinstance(cause, ConfigError) else 1
        return f"error: rank {handle.rank} (a Ray actor) failed: {one_line(exc)}", code


class RankWatch:
    """Rank 0's eye on its rank actors while the group lasts: a rank that failed ends the run with the rank's own
    error in one line, at once. While rank 0 trains, its next collective fails as the rank's group closes, and
    `explain()` (rl/parallel/collective.py asks before it says "lost its group") gives the rank's error; while rank 0
    is blocked in gloo's rendezvous (which Python cannot interrupt), this thread ends the process after 5 s."""

    GRACE_S = 5.0

    def __init__(self, handles: list[RankHandle]):
        import threading

        self.handles = list(handles)
        self.failure: tuple[str, int] | None = None
        self.explained = threading.Event()
        self.stopped = threading.Event()
        for h in handles:
            h.watch = self
        self.thread = threading.Thread(target=self._run, name="rl-rank-watch", daemon=True)
        self.thread.start()

    def forget(self, handle: RankHandle) -> None:
        self.stopped.set()  # rank 0 is closing the group: what the ranks do now is its doing

    def _run(self) -> None:
        import os
        import sys

        import ray

        while not self.stopped.is_set():
            refs = [h.ref for h in self.handles]
            if not refs:
                return
            try:
                ray.wait(refs, num_returns=1, timeout=1.0)
            except Exception:  # noqa: BLE001 - the driver is disconnecting
                return
            for h in list(self.handles):
                failure = None if self.stopped.is_set() else rank_failure(h)
                if failure is None:
                    if not ray.wait([h.ref], timeout=0)[0]:
                        continue
                    self.handles.remove(h)  # it returned: the group ended
                    continue
                self.failure = failure
                if not self.explained.wait(self.GRACE_S) and not self.stopped.is_set():
                    print(failure[0], file=sys.stderr, flush=True)
                    os._exit(failure[1])
                return

    def explain(self, timeout: float = 5.0) -> tuple[str, int] | None:
        """The failure of a rank that broke the group (waiting up to `timeout` s for Ray to report it), or None."""
        deadline = time.monotonic() + timeout
        while self.failure is None and time.monotonic() < deadline and self.thread.is_alive():
            time.sleep(0.05)
        if self.failure is not None:
            self.explained.set()
        return self.failure


def rank_options(hp) -> dict:
    return {"num_cpus": float(hp.ray_rank_cpus), "num_gpus": float(hp.ray_rank_gpus),
            "resources": parse_resources(hp.ray_rank_resources)}


def wait_placed(handles: list[RankHandle], timeout_s: float, options: dict) -> None:
    """Until Ray has placed every rank actor. A rank that fails meanwhile, or one still unplaced after `timeout_s`
    (the group's own timeout), ends the run here in one line: exit 1 (2 for a ConfigError of the rank's)."""
    import sys

    import ray

    deadline = time.monotonic() + timeout_s
    waiting = list(handles)
    while waiting:
        ready, _ = ray.wait([h.ready for h in waiting], num_returns=len(waiting), timeout=1.0)
        for h in handles:
            failure = rank_failure(h)
            if failure is not None:
                print(failure[0], file=sys.stderr, flush=True)
                raise SystemExit(failure[1])
        waiting = [h for h in waiting if h.ready not in ready]
        if waiting and time.monotonic() > deadline:
            print(f"error: rank {waiting[0].rank} (a Ray actor) was not placed within group_timeout_s="
                  f"{timeout_s:g} s: no node had {resources_text(options)} free (ray_rank_cpus, ray_rank_gpus, "
                  f"ray_rank_resources)", file=sys.stderr, flush=True)
            raise SystemExit(1)


def launch_ranks(hp, follow, port: int) -> tuple[str, list[RankHandle], RankWatch]:
    """Start ranks 1..M-1 as Ray actors (declaring `ray_rank_cpus`, `ray_rank_gpus`, `ray_rank_resources`), wait
    until Ray has placed them all, and watch them (`RankWatch`); returns rank 0's init method (tcp://this node's
    address:port, where this process's TCPStore listens), their handles and the watch."""
    import ray

    transport = RayTransport(hp)
    transport.connect()
    options = rank_options(hp)
    transport._check_resources(options, "gradient rank actor")
    address = f"tcp://{ray.util.get_node_ip_address()}:{port}"
    actor_class = ray.remote(max_restarts=0, max_task_retries=0, **options)(RankActor)
    children = []
    for rank in range(1, hp.num_grad_workers):
        actor = actor_class.remote()
        ready = actor.__ray_ready__.remote()  # before run(): an actor's calls run in order, and run() lasts the run
        children.append(RankHandle(actor, actor.run.remote(follow, rank, address), rank, ready))
    try:
        wait_placed(children, hp.group_timeout_s, options)
    except BaseException:
        for h in children:
            ray.kill(h.actor)
        raise
    return address, children, RankWatch(children)
