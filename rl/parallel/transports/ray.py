"""The many-machine transport: each worker is a Ray actor; weights and shipments go through Ray's object store.

The learner joins a running cluster (`ray.init(address=hp.ray_address)`: "auto", "HOST:PORT" or "ray://HOST:PORT");
Ray is imported by the transport's modules only (ray.py and ray_*.py here), inside their functions, so a run without
`--ray_address` never imports it. Each worker (a plain rl.parallel.roles worker built from its picklable WorkerSpec)
lives in one actor that declares the resources of `ray_worker_cpus`, `ray_worker_gpus` and `ray_worker_resources`
("NAME:AMOUNT;NAME:AMOUNT"), so a cluster's nodes can be chosen by custom resources.

Weights go out with one `ray.put` per publish, announced to a small WeightStore actor (pinned to the learner's own
node: it lives and dies with the run; a store that died is started again and told the newest publish, and no worker
is blamed for the calls that failed with it; `close()` kills it); each call
`actor.fill.remote(store)` asks the store for the newest publish when it starts, loads its weights (if it does not hold
them yet), fills the actor's own buffer and returns the Shipment with the buffer in it, shipped by value through the
object store. Asynchronous collection keeps two calls in flight per worker (the second starts as the first returns,
as a worker of the shared-memory transport fills its second slot: the worker never waits for the learner);
synchronous collection (`sync=True`) one, issued by the publish that follows one shipment of every worker (policy lag
0).

Ray's own actor restarts are off (`max_restarts=0`): a worker whose actor died, whose call raised, or whose call has
been in flight for more than `worker_timeout` seconds since its actor was up is killed and replaced here by a fresh
actor (with a seed of its own). An actor not placed yet (no node has its resources free: an autoscaling cluster adds
one) is not hung: its clock starts when Ray has placed and built it (its `__ray_ready__` returns), and a worker that
waits longer than `worker_timeout` for a node is said once. Restarts are made here, so the restart count and the
ranks whose episodes were cut are the learner's to see, as with the shared-memory transport, and a worker that keeps
failing ends the run with its error in one line (faults.py says when). `close()` kills every actor and disconnects
this driver; a cluster it joined keeps running.

Collection workers declare `ray_worker_cpus`, `ray_worker_gpus` and `ray_worker_resources`;
`ray_learner_cpus`/`ray_learner_gpus` hold resources on the learner's node for the learner (a pinned actor that does
nothing), so that no actor is placed on them. DPPO's gradient ranks run as actors of their own (ray_ranks.py). The
classes inside the actors are in ray_actors.py, what is asked of the cluster in ray_cluster.py.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

from rl.errors import ConfigError, first_line
from rl.parallel.transports.faults import FaultBook
from rl.parallel.transports.ray_actors import LearnerSeat, WeightStore, WorkerActor
from rl.parallel.transports.ray_cluster import (
    check_reachable,
    node_can_hold,
    one_line,
    parse_resources,
    pinned_here,
    resources_text,
)

RESEED = 100_003  # a restarted worker's seed: spec.seed + RESEED * restarts (as the shared-memory transport)


class Handle:
    """One worker's actor, its call in flight and its record of failures."""

    def __init__(self, spec):
        self.spec = spec
        self.actor = None
        self.calls: deque = deque()  # object refs of the calls in flight, oldest first (empty: idle)
        self.issued = 0.0  # monotonic time the oldest call in flight could start
        self.restarts = 0
        self.failures = 0  # consecutive failures without a shipment in between
        self.raised = 0  # consecutive failures in which its call raised, shipments or not
        self.last_error = ""  # the error of the failure being handled
        self.ready = None  # the actor's __ray_ready__ call: done once Ray has placed and built it
        self.placed = False
        self.waiting_said = False


class RayTransport(FaultBook):
    def __init__(self, hp):
        self.hp = hp
        super().__init__()
        self.handles: list[Handle] = []
        self.connected = False  # this transport connected the driver (and disconnects it on close)
        self.store = self.seat = None
        self.options = {"num_cpus": float(hp.ray_worker_cpus), "num_gpus": float(hp.ray_worker_gpus),
                        "resources": parse_resources(hp.ray_worker_resources)}

    # ------------------------------------------------------------------ the cluster
    def connect(self) -> None:
        import ray

        address = self.hp.ray_address
        if ray.is_initialized():
            return
        check_reachable(address)
        try:
            ray.init(address=address, logging_level="warning", log_to_driver=True)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError, OSError) as exc:
            raise ConfigError(f"cannot reach the Ray cluster at {address}: {first_line(exc, 200)}; start one with "
                              f"`ray start --head` or check --ray_address") from None
        self.connected = True

    def _check_resources(self, options: dict | None = None, what: str = "worker actor") -> None:
        """A warning (not an error: an autoscaling cluster may add such nodes) when no node can hold one actor."""
        import ray

        options = self.options if options is None else options
        if not node_can_hold(options):
            nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
            have = "; ".join(", ".join(f"{k}:{v:g}" for k, v in sorted(r.items()) if not k.startswith("node:")
                                       and "memory" not in k) for r in nodes)
            print(f"warning: no node of the Ray cluster has the resources of one {what} ({resources_text(options)}); "
                  f"nodes have: {have or 'none'}; the {what}s wait until such a node joins", flush=True)

    def hold_learner_seat(self) -> None:
        """`ray_learner_cpus`/`ray_learner_gpus` held on this node for the learner (a one-line ConfigError when this
        node does not have them free within a minute)."""
        import ray

        cpus, gpus = float(self.hp.ray_learner_cpus), float(self.hp.ray_learner_gpus)
        if (cpus <= 0 and gpus <= 0) or self.seat is not None:
            return
        self.seat = ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=0)(LearnerSeat).options(
            **pinned_here()).remote()
        try:
            ray.get(self.seat.ready.remote(), timeout=60)
        except ray.exceptions.GetTimeoutError:
            ray.kill(self.seat)
            self.seat = None
            raise ConfigError(f"the learner's node has no free CPU:{cpus:g}, GPU:{gpus:g} for ray_learner_cpus/"
                              f"ray_learner_gpus (within 60 s): lower them, or start the learner on a node that has "
                              f"them") from None

    def _start_store(self) -> None:
        """The weight store, on this (the learner's) node: it shares the run's fate, not a worker node's."""
        import ray

        self.store = ray.remote(num_cpus=0, max_restarts=0)(WeightStore).options(**pinned_here()).remote()

    def _store_alive(self) -> bool:
        import ray
        import ray.exceptions

        try:
            ray.get(self.store.get.remote(), timeout=30)
            return True
        except ray.exceptions.RayActorError:
            return False
        except ray.exceptions.GetTimeoutError:  # busy, not dead
            return True

    def _restart_store(self) -> None:
        """A store that died: a new one, told the newest publish; every worker's calls are issued again against it
        (the failed ones were the store's fault, not the workers')."""
        import ray

        try:
            ray.kill(self.store, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._start_store()
        self.store.set.remote(self.publishes, self.version, [self.weights])
        self.store_restarts += 1
        print(f"the weight store died: started again ({self.store_restarts}); no worker is blamed", flush=True)
        for h in self.handles:
            busy = bool(h.calls)
            h.calls.clear()
            if busy:  # an idle sync worker is sent off by the next publish, as usual
                self._fill_up(h)

    # ------------------------------------------------------------------ the learner's side
    def start(self, specs, make_worker, make_buffer, acting_state: dict, version: int, sync: bool) -> None:
        """Start an actor for each spec, running `make_worker(spec)` (rl/parallel/roles.py: pickled by reference) on
        buffers made by `make_buffer(spec)`, after publishing the first weights."""
        import ray

        self.connect()
        self.hold_learner_seat()
        self.sync = sync
        self.make_worker, self.make_buffer = make_worker, make_buffer
        self.actor_class = ray.remote(max_restarts=0, max_task_retries=0, **self.options)(WorkerActor)
        self._check_resources()
        self.handles = [Handle(s) for s in specs]
        self.publishes = -1
        self.store_restarts = 0
        # async: two calls in flight per worker (the second starts as the first returns: the worker never waits for
        # the learner, as with two shared-memory slots); sync: one, issued by the publish that follows the round
        self.depth = 1 if sync else 2
        self._start_store()
        self._put(acting_state, version)
        for h in self.handles:
            self._start(h)
            self._fill_up(h)

    def _put(self, acting_state: dict, version: int) -> None:
        import ray

        cpu = {k: t.detach().to("cpu") for k, t in acting_state.items()}
        self.weights = ray.put(cpu)
        self.version = version
        self.publishes += 1
        self.store.set.remote(self.publishes, version, [self.weights])

    def publish(self, acting_state: dict, version: int) -> None:
        """One ray.put of the new weights, announced to the workers; sync: the idle workers are sent off."""
        self._put(acting_state, version)
        for h in self.handles:
            self._fill_up(h)

    def _fill_up(self, h: Handle) -> None:
        while len(h.calls) < self.depth:
            if not h.calls:
                h.issued = time.monotonic()
            h.calls.append(h.actor.fill.remote(self.store, self.publishes, self.version, [self.weights]))

    # ------------------------------------------------------------------ the workers' lives
    def _start(self, h: Handle) -> None:
        spec = h.spec
        if h.restarts:  # a restarted worker starts new episodes with a seed of its own
            spec = replace(spec, seed=spec.seed + RESEED * h.restarts)
        h.actor = self.actor_class.options(name=None).remote(spec, self.make_worker, self.make_buffer)
        h.ready, h.placed, h.waiting_said = h.actor.__ray_ready__.remote(), False, False

    def _restart(self, h: Handle, why: str, raised: bool = False) -> None:
        import ray

        try:
            ray.kill(h.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        h.calls.clear()
        self.count_failure(h, why, raised)
        self._start(h)
        self._fill_up(h)  # a fresh worker acts with the newest weights at once (as a restarted process does)

    def _collect(self, timeout: float) -> None:
        """Move every call that has returned into `pending`; failed calls restart their workers."""
        import ray
        import ray.exceptions

        by_call = {h.calls[0]: h for h in self.handles if h.calls}  # an actor's calls return in order
        if not by_call:
            time.sleep(timeout)
            return
        ready, _ = ray.wait(list(by_call), num_returns=1, timeout=timeout)
        if ready:  # and whatever else is done by now
            ready, _ = ray.wait(list(by_call), num_returns=len(by_call), timeout=0)
        for call in ready:
            h = by_call[call]
            if not h.calls or h.calls[0] != call:  # restarted meanwhile
                continue
            try:
                shipment = ray.get(call)
            except ray.exceptions.RayError as exc:
                if not self._store_alive():  # the store's death failed the call, not the worker
                    self._restart_store()
                    return
                h.last_error = one_line(exc)
                died = isinstance(exc, ray.exceptions.RayActorError)
                print(f"worker {h.spec.rank}: {h.last_error}", flush=True)
                self._restart(h, "died" if died else "failed", raised=not died)
                continue
            h.calls.popleft()
            h.issued = time.monotonic()  # the next call in flight starts now
            self.count_shipment(h)
            self.pending.append(shipment)
            if not self.sync:
                self._fill_up(h)

    def _placed(self, h: Handle, now: float) -> bool:
        """Whether Ray has placed and built `h`'s actor; its hang clock starts then, not when its call was queued."""
        import ray

        if not h.placed and h.ready is not None and ray.wait([h.ready], timeout=0)[0]:
            h.placed = True
            h.issued = max(h.issued, now)
        if not h.placed and h.calls and now - h.issued > self.hp.worker_timeout and not h.waiting_said:
            h.waiting_said = True
            print(f"worker {h.spec.rank}: waiting for a node with {resources_text(self.options)} free (not placed "
                  f"after {self.hp.worker_timeout:g} s; not counted as hung)", flush=True)
        return h.placed

    def _check_hung(self) -> None:
        now = time.monotonic()
        for h in self.handles:
            if not self._placed(h, now):
                continue
            if h.calls and now - h.issued > self.hp.worker_timeout:
                h.last_error = f"no shipment within worker_timeout={self.hp.worker_timeout:g} s"
                self._restart(h, f"made no shipment for {self.hp.worker_timeout:g} s (hung)")

    def receive(self, timeout: float = 0.5):
        """The next shipment, or None after waiting up to `timeout` s; dead and hung workers are restarted."""
        now = time.monotonic()
        for h in self.handles:  # placements are noted as they happen, whatever else arrives meanwhile
            if not h.placed:
                self._placed(h, now)
        if not self.pending:
            self._collect(timeout)
            self._check_hung()
        if not self.pending:
            return None
        return self.pending.popleft()

    def release(self, shipment) -> None:
        """The shipment is consumed (its data was a copy: nothing to give back). Async workers already have their
        next calls; a sync worker is idle until the publish that follows the round sends it off."""
        shipment.data = None

    def actors(self) -> list:
        """The live workers' actor handles, by rank (tests and diagnostics)."""
        return [h.actor for h in self.handles]

    def close(self) -> None:
        """Kill every actor (no call is awaited), the weight store and the learner's seat included, and disconnect
        this driver if it connected it; a cluster it joined keeps running."""
        if not self.handles and not self.connected and self.store is None and self.seat is None:
            return
        import ray

        if ray.is_initialized():
            for actor in [h.actor for h in self.handles] + [self.store, self.seat]:
                if actor is None:
                    continue
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            for h in self.handles:
                h.calls.clear()
        self.handles = []
        self.store = self.seat = None
        self.pending.clear()
        if self.connected:
            ray.shutdown()
            self.connected = False
