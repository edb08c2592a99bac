"""The single-machine transport: forked worker processes, preallocated shared-memory buffers, one pipe per worker.

Everything is allocated before the fork, as torch tensors in shared memory (torch's file-descriptor strategy: the
segments have no name in /dev/shm, so nothing is left behind however a process ends). Only slot indices and small
shipment records travel through the pipes. Weights are published behind a seqlock: a worker that read while the
learner wrote reads again. Each worker has two slots (it fills one while the learner reads the other).

A worker that dies is restarted; one whose heartbeat (a monotonic clock, written at every env step) is older than
`worker_timeout` is killed and restarted; a worker that keeps failing ends the run with its error in one line
(faults.py says when). Workers ignore Ctrl-C (the terminal sends it to the whole group: the learner stops them), die
with the learner (PR_SET_PDEATHSIG), and are reaped by `close()`, which also runs at the learner's exit if nothing
called it (the workers are not daemons, since a worker may start processes of its own, and multiprocessing would
otherwise wait at exit for workers that wait for the learner: a run that raised before its loop never ended).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait

import torch

from rl.errors import ConfigError, first_line
from rl.parallel.buffers import share
from rl.parallel.processes import die_with_parent, settle_worker
from rl.parallel.transports.faults import FaultBook

SLOTS_PER_WORKER = 2
SEQ, VERSION, WRITING, STOP = range(4)  # the control block: publish count, policy version, write flag, stop flag


class Stopped(Exception):
    """The learner asked the workers to stop, or it is gone."""


class SharedWeights:
    """An agent's acting state (rl/agents/base.py `acting_state`) in shared memory, behind a seqlock."""

    def __init__(self, acting_state: dict):
        self.tensors = {k: t.detach().to("cpu", copy=True).share_memory_() for k, t in acting_state.items()}
        self.control = torch.zeros(4, dtype=torch.int64).share_memory_()
        self.control[SEQ] = -1  # nothing published yet

    @property
    def seq(self) -> int:
        return int(self.control[SEQ])

    def publish(self, acting_state: dict, version: int) -> None:
        self.control[WRITING] = 1
        for k, t in acting_state.items():
            self.tensors[k].copy_(t)
        self.control[VERSION] = version
        self.control[SEQ] += 1
        self.control[WRITING] = 0

    def load(self, worker, have: int) -> int:
        """Load the newest weights into `worker` if newer than publish `have`; returns the publish held."""
        while True:
            seq = self.seq
            if seq <= have:
                return have
            if self.control[WRITING]:
                time.sleep(0.0005)
                continue
            worker.load(self.tensors, int(self.control[VERSION]))
            if not self.control[WRITING] and self.seq == seq:
                return seq


class Channel:
    """A worker process's side: its slots, the pipe, the heartbeat, the weights."""

    def __init__(self, rank, weights, slots, conn, heartbeats, parent_pid):
        self.rank, self.weights, self.slots, self.conn = rank, weights, slots, conn
        self.heartbeats, self.parent_pid = heartbeats, parent_pid

    def beat(self) -> None:
        self.heartbeats[self.rank] = time.monotonic()
        if self.weights.control[STOP] or os.getppid() != self.parent_pid:
            raise Stopped

    def next_slot(self) -> int:
        while not self.conn.poll(0.05):
            self.beat()
        message = self.conn.recv()
        if message is None:
            raise Stopped
        return message

    def await_publish(self, after: int) -> None:
        while self.weights.seq <= after:
            self.beat()
            time.sleep(0.001)


def serve(spec, make_worker, channel: Channel, sync: bool) -> None:
    """The worker process's loop: take a free slot, load the newest weights, fill the slot, ship it."""
    worker = make_worker(spec)
    try:
        channel.await_publish(-1)
        held = -1
        while True:
            slot = channel.next_slot()
            held = channel.weights.load(worker, held)
            shipment = worker.fill(channel.slots[slot], channel.beat)
            shipment.slot = slot
            channel.conn.send(shipment)
            if sync:
                channel.await_publish(held)
    finally:
        worker.close()


def error_line(exc: BaseException) -> str:
    """A worker's error in one line: the message of a one-line error (an env that raised: rl/collector.py), else the
    exception's type and first line."""
    if isinstance(exc, ConfigError):
        return first_line(exc, 300)
    return f"{type(exc).__name__}: {first_line(exc, 300)}" if str(exc).strip() else type(exc).__name__


def _process_main(spec, make_worker, channel: Channel, sync: bool) -> None:
    """One thread for torch and BLAS, Ctrl-C left to the learner, errors reported in one line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(channel.parent_pid)
    settle_worker(spec)
    try:
        serve(spec, make_worker, channel, sync)
    except Stopped:
        pass
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the learner hears it in one line
        line = error_line(exc)
        try:
            channel.conn.send(("error", line, traceback.format_exc()[-2000:]))
        except (OSError, ValueError):
            pass
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


class Handle:
    """One worker process, the pipe to it, its slots and its record of failures."""

    def __init__(self, spec, slots: list[int]):
        self.spec, self.slots = spec, slots
        self.process = self.conn = None
        self.restarts = 0
        self.failures = 0  # consecutive failures without a shipment in between
        self.raised = 0  # consecutive failures in which it reported an error, shipments or not
        self.last_error = ""  # the error it reported for the failure being handled
        self.held: set[int] = set()  # its slots the learner is reading: a restarted process gets them on release


class ShmTransport(FaultBook):
    def __init__(self, hp):
        self.hp = hp
        self.context = mp.get_context("fork")  # children inherit the registries (a script's own registrations too)
        super().__init__()

    def start(self, specs, make_worker, make_buffer, acting_state: dict, version: int, sync: bool) -> None:
        """Start a process for each spec, running `make_worker(spec)` (rl/parallel/roles.py) on two slots made by
        `make_buffer(spec)`, after publishing the first weights."""
        self.sync, self.make_worker = sync, make_worker
        self.handles = [Handle(s, list(range(i * SLOTS_PER_WORKER, (i + 1) * SLOTS_PER_WORKER)))
                        for i, s in enumerate(specs)]
        self.slots = [share(make_buffer(s)) for s in specs for _ in range(SLOTS_PER_WORKER)]
        self.weights = SharedWeights(acting_state)
        self.heartbeats = torch.zeros(len(specs), dtype=torch.float64).share_memory_()
        self.publish(acting_state, version)
        # registered after multiprocessing's own exit hook, so it runs first (atexit is last in, first out)
        atexit.register(self.close)
        for h in self.handles:
            self._start(h)

    def publish(self, acting_state: dict, version: int) -> None:
        self.weights.publish(acting_state, version)

    # ------------------------------------------------------------------ the workers' lives
    def _start(self, h: Handle) -> None:
        ours, theirs = self.context.Pipe()
        spec = h.spec
        if h.restarts:  # a restarted worker starts new episodes with a seed of its own
            from dataclasses import replace

            spec = replace(spec, seed=spec.seed + 100_003 * h.restarts)
        self.heartbeats[spec.rank] = time.monotonic()
        channel = Channel(spec.rank, self.weights, self.slots, theirs, self.heartbeats, os.getpid())
        h.process = self.context.Process(target=_process_main, args=(spec, self.make_worker, channel, self.sync),
                                         name=f"rl-worker-{spec.rank}", daemon=False)
        h.process.start()
        theirs.close()
        h.conn = ours
        for slot in h.slots:
            if slot not in h.held:
                h.conn.send(slot)

    def _restart(self, h: Handle, why: str) -> None:
        if h.process.is_alive():
            h.process.kill()
        h.process.join()
        self._read_error(h)  # one it sent just before it exited, not read yet
        h.conn.close()
        self.count_failure(h, why, raised=bool(h.last_error))
        self._start(h)

    def _heard(self, h: Handle, message: tuple) -> None:
        """A worker's ("error", line, traceback): said at once, kept for its failure's count."""
        h.last_error = message[1]
        print(f"worker {h.spec.rank}: {message[1]}", flush=True)

    def _read_error(self, h: Handle) -> None:
        """The error message left in a dead worker's pipe (its shipments there are dropped with it)."""
        try:
            while h.conn.poll():
                message = h.conn.recv()
                if isinstance(message, tuple) and message[0] == "error":
                    self._heard(h, message)
        except (EOFError, OSError):
            pass

    def _check_health(self) -> None:
        now = time.monotonic()
        for h in self.handles:
            if not h.process.is_alive():
                self._restart(h, f"exited (code {h.process.exitcode})")
            elif now - float(self.heartbeats[h.spec.rank]) > self.hp.worker_timeout:
                self._restart(h, f"made no step for {self.hp.worker_timeout:g} s (hung)")

    def _collect(self, timeout: float) -> None:
        """Move every message that has arrived into `pending`."""
        by_conn = {h.conn: h for h in self.handles}
        for conn in wait(list(by_conn), timeout):
            h = by_conn[conn]
            try:
                while conn.poll():
                    message = conn.recv()
                    if isinstance(message, tuple) and message[0] == "error":
                        self._heard(h, message)
                        continue
                    self.count_shipment(h)
                    message.data = self.slots[message.slot]
                    self.pending.append(message)
            except (EOFError, OSError):  # it died: the health check restarts it
                pass

    def receive(self, timeout: float = 0.5):
        """The next shipment, or None after waiting up to `timeout` s; dead and hung workers are restarted."""
        if not self.pending:
            self._collect(timeout)
            self._check_health()
        if not self.pending:
            return None
        shipment = self.pending.popleft()
        self.handles[shipment.worker].held.add(shipment.slot)
        return shipment

    def release(self, shipment) -> None:
        """The shipment's slot may be refilled."""
        h = self.handles[shipment.worker]
        h.held.discard(shipment.slot)
        try:
            h.conn.send(shipment.slot)
        except (OSError, ValueError, BrokenPipeError):  # it died meanwhile: restarted with all its slots
            pass

    def close(self) -> None:
        """Stop every worker (asked first, killed after 5 s) and reap it: no process outlives the run."""
        if not hasattr(self, "handles") or getattr(self, "closed", False):
            return
        self.closed = True
        atexit.unregister(self.close)
        self.weights.control[STOP] = 1
        for h in self.handles:
            try:
                h.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for h in self.handles:
            h.process.join(max(0.0, deadline - time.monotonic()))
            if h.process.is_alive():
                h.process.kill()
                h.process.join()
            h.conn.close()
        self.pending.clear()
