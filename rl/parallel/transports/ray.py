"""The many-machine transport: each worker is a Ray actor; weights and shipments go through Ray's object store.

The learner joins a running cluster (`ray.init(address=hp.ray_address)`: "auto", "HOST:PORT" or "ray://HOST:PORT");
Ray is imported by this module only, so a run without `--ray_address` never imports it. Each worker (a plain
rl.parallel.roles worker built from its picklable WorkerSpec) lives in one actor that declares the resources of
`ray_worker_cpus`, `ray_worker_gpus` and `ray_worker_resources` ("NAME:AMOUNT;NAME:AMOUNT"), so a cluster's nodes can
be chosen by custom resources.

Weights go out with one `ray.put` per publish, announced to a small WeightStore actor; each call
`actor.fill.remote(store)` asks the store for the newest publish when it starts, loads its weights (if it does not hold
them yet), fills the actor's own buffer and returns the Shipment with the buffer in it, shipped by value through the
object store. Asynchronous collection keeps two calls in flight per worker (the second starts as the first returns,
as a worker of the shared-memory transport fills its second slot: the worker never waits for the learner);
synchronous collection (`sync=True`) one, issued by the publish that follows one shipment of every worker (policy lag
0).

Ray's own actor restarts are off (`max_restarts=0`): a worker whose actor died, whose call raised, or whose call has
been in flight for more than `worker_timeout` seconds is killed and replaced here by a fresh actor (with a seed of its
own), so the restart count and the ranks whose episodes were cut are the learner's to see, as with the shared-memory
transport; three failures in a row without a shipment end the run with the worker's error in one line. `close()`
kills every actor and disconnects this driver; a cluster it joined keeps running.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

from rl.errors import ConfigError, first_line
from rl.parallel.transports.faults import FaultBook

RESEED = 100_003  # a restarted worker's seed: spec.seed + RESEED * restarts (as the shared-memory transport)


def parse_resources(text: str) -> dict[str, float]:
    """"NAME:AMOUNT;NAME:AMOUNT" -> {NAME: AMOUNT}; "" -> {}. A malformed entry is a one-line ConfigError."""
    resources: dict[str, float] = {}
    for entry in filter(None, (e.strip() for e in (text or "").split(";"))):
        name, sep, amount = entry.rpartition(":")
        name = name.strip()
        try:
            value = float(amount)
        except ValueError:
            value = -1.0
        if not sep or not name or value <= 0 or name in resources:
            raise ConfigError(f"bad ray_worker_resources entry {entry!r} in {text!r}: expected "
                              f"NAME:AMOUNT[;NAME:AMOUNT] with distinct names and positive amounts (e.g. cpu_node:1)")
        resources[name] = value
    return resources


def one_line(exc: BaseException) -> str:
    """A Ray error in one line: the worker's own exception where Ray carries it (a task's cause, or the last line of
    the traceback in an actor's creation error), else Ray's first line."""
    import re

    import ray.exceptions

    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    if not isinstance(exc, ray.exceptions.RayError):
        line = f"{type(exc).__name__}: {text}".splitlines()[0] if text else type(exc).__name__
        return line[:300]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    raised = [ln for ln in lines if _names_exception(ln.split(":", 1)[0]) and ":" in ln]
    line = raised[-1] if raised else (lines[0] if lines else type(exc).__name__)
    return line[:300]


def _names_exception(prefix: str) -> bool:
    """"ValueError", "rl.errors.ConfigError": a traceback's last line starts with an exception's (dotted) name."""
    parts = prefix.split(".")
    return all(p.isidentifier() for p in parts) and parts[-1][:1].isupper()


def _check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that accepts no connection fails at once (ray.init would retry for
    minutes)."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" (ray.init says so itself) or a form Ray understands better than this check
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start one with "
                          f"`ray start --head` or check --ray_address") from None


class WorkerActor:
    """One worker inside a Ray actor: built from its spec, filling its own buffer at every call."""

    def __init__(self, spec, make_buffer):
        import numpy as np
        import torch

        from rl.parallel.roles import make_worker
        from rl.threads import limit_threads

        limit_threads(1)
        torch.set_flush_denormal(True)
        np.random.seed((spec.seed * 7919 + spec.rank) % 2**32)
        torch.manual_seed(spec.seed * 7919 + spec.rank)
        self.worker = make_worker(spec)
        self.buffer = make_buffer(spec)
        self.held = -1  # the publish whose weights the worker holds

    def fill(self, store, publish: int, version: int, weights: list):
        """Load the newest published weights: the store's, or the publish this call was issued with where the store
        has not heard of it yet (calls from two callers are not ordered); fetched only when new. Ship one filled
        buffer."""
        import ray

        newest = ray.get(store.get.remote())
        if newest[0] > publish:
            publish, version, weights = newest
        if publish != self.held:
            self.worker.load(ray.get(weights[0]), version)
            self.held = publish
        shipment = self.worker.fill(self.buffer, _beat)
        shipment.data = self.buffer  # serialised when returned: the next fill may reuse it
        return shipment

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def close(self) -> None:
        self.worker.close()


class WeightStore:
    """The newest publish: (publish count, policy version, [object ref of the acting state]). A worker asks for it
    when it starts a fill, so it acts with the newest weights, as a worker of the shared-memory transport does."""

    def __init__(self):
        self.entry = (-1, -1, [None])

    def set(self, publish: int, version: int, weights: list) -> None:
        self.entry = (publish, version, weights)

    def get(self) -> tuple:
        return self.entry


def _beat() -> None:
    """An actor's heartbeat: hung calls are found by their age on the learner's side, and actors are stopped by
    ray.kill."""


class Handle:
    """One worker's actor, its call in flight and its record of failures."""

    def __init__(self, spec):
        self.spec = spec
        self.actor = None
        self.calls: deque = deque()  # object refs of the calls in flight, oldest first (empty: idle)
        self.issued = 0.0  # monotonic time the oldest call in flight could start
        self.restarts = 0
        self.failures = 0  # consecutive failures without a shipment in between
        self.last_error = ""


class RayTransport(FaultBook):
    def __init__(self, hp):
        self.hp = hp
        super().__init__()
        self.handles: list[Handle] = []
        self.connected = False  # this transport connected the driver (and disconnects it on close)
        self.options = {"num_cpus": float(hp.ray_worker_cpus), "num_gpus": float(hp.ray_worker_gpus),
                        "resources": parse_resources(hp.ray_worker_resources)}

    # ------------------------------------------------------------------ the cluster
    def connect(self) -> None:
        import ray

        address = self.hp.ray_address
        if ray.is_initialized():
            return
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level="warning", log_to_driver=True)
        except (ConnectionError, TimeoutError, RuntimeError, ValueError, OSError) as exc:
            raise ConfigError(f"cannot reach the Ray cluster at {address}: {first_line(exc, 200)}; start one with "
                              f"`ray start --head` or check --ray_address") from None
        self.connected = True

    def _check_resources(self) -> None:
        """A warning (not an error: an autoscaling cluster may add such nodes) when no node can hold one actor."""
        import ray

        wanted = {"CPU": self.options["num_cpus"], "GPU": self.options["num_gpus"], **self.options["resources"]}
        wanted = {k: v for k, v in wanted.items() if v > 0}
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        if not any(all(r.get(k, 0) >= v for k, v in wanted.items()) for r in nodes):
            have = "; ".join(", ".join(f"{k}:{v:g}" for k, v in sorted(r.items()) if not k.startswith("node:")
                                       and "memory" not in k) for r in nodes)
            print(f"warning: no node of the Ray cluster has the resources of one worker actor "
                  f"({', '.join(f'{k}:{v:g}' for k, v in wanted.items())}); nodes have: {have or 'none'}; "
                  f"the workers wait until such a node joins", flush=True)

    # ------------------------------------------------------------------ the learner's side
    def start(self, specs, make_buffer, acting_state: dict, version: int, sync: bool) -> None:
        import ray

        self.connect()
        self.sync = sync
        self.make_buffer = make_buffer
        self.actor_class = ray.remote(max_restarts=0, max_task_retries=0, **self.options)(WorkerActor)
        self._check_resources()
        self.handles = [Handle(s) for s in specs]
        self.publishes = -1
        # async: two calls in flight per worker (the second starts as the first returns: the worker never waits for
        # the learner, as with two shared-memory slots); sync: one, issued by the publish that follows the round
        self.depth = 1 if sync else 2
        self.store = ray.remote(num_cpus=0)(WeightStore).remote()
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
        h.actor = self.actor_class.options(name=None).remote(spec, self.make_buffer)

    def _restart(self, h: Handle, why: str) -> None:
        import ray

        try:
            ray.kill(h.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        h.calls.clear()
        self.count_failure(h, why)
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
                h.last_error = one_line(exc)
                died = isinstance(exc, ray.exceptions.RayActorError)
                print(f"worker {h.spec.rank}: {h.last_error}", flush=True)
                self._restart(h, "died" if died else "failed")
                continue
            h.calls.popleft()
            h.issued = time.monotonic()  # the next call in flight starts now
            h.failures = 0
            self.pending.append(shipment)
            if not self.sync:
                self._fill_up(h)

    def _check_hung(self) -> None:
        now = time.monotonic()
        for h in self.handles:
            if h.calls and now - h.issued > self.hp.worker_timeout:
                h.last_error = f"no shipment within worker_timeout={self.hp.worker_timeout:g} s"
                self._restart(h, f"made no shipment for {self.hp.worker_timeout:g} s (hung)")

    def receive(self, timeout: float = 0.5):
        """The next shipment, or None after waiting up to `timeout` s; dead and hung workers are restarted."""
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
        """Kill every actor (no call is awaited) and disconnect this driver; a cluster it joined keeps running."""
        if not self.handles and not self.connected:
            return
        import ray

        if ray.is_initialized():
            for h in self.handles:
                try:
                    ray.kill(h.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
                h.calls.clear()
        self.handles = []
        self.pending.clear()
        if self.connected:
            ray.shutdown()
            self.connected = False


# ---------------------------------------------------------------------------------------------------- gradient ranks
class RankActor:
    """A synchronous gradient worker of rank > 0 inside a Ray actor: runs `follow(rank, address)` (rl/run.py), which
    joins rank 0's torch.distributed group at `address` and trains until the group agrees to stop."""

    def run(self, follow, rank: int, address: str) -> int:
        follow(rank, address)
        return rank


class RankHandle:
    """A rank's actor behind the calls rl.parallel.collective.reap makes of a process."""

    def __init__(self, actor, ref):
        self.actor, self.ref = actor, ref

    def join(self, timeout: float | None = None) -> None:
        import ray

        ray.wait([self.ref], timeout=timeout)

    def is_alive(self) -> bool:
        import ray

        return not ray.wait([self.ref], timeout=0)[0]

    def kill(self) -> None:
        import ray

        ray.kill(self.actor)


def launch_ranks(hp, follow, port: int) -> tuple[str, list[RankHandle]]:
    """Start ranks 1..M-1 as Ray actors (the resources of a worker actor each); returns rank 0's init method
    (tcp://this node's address:port, where this process's TCPStore listens) and their handles."""
    import ray

    transport = RayTransport(hp)
    transport.connect()
    address = f"tcp://{ray.util.get_node_ip_address()}:{port}"
    actor_class = ray.remote(max_restarts=0, max_task_retries=0, **transport.options)(RankActor)
    children = []
    for rank in range(1, hp.num_grad_workers):
        actor = actor_class.remote()
        children.append(RankHandle(actor, actor.run.remote(follow, rank, address)))
    return address, children
