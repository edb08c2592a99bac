"""SIGTERM and SIGINT, from a process's first line to its exit.

Kubernetes (a drain, an eviction, a preemption, `kubectl delete`), `docker stop` and torchrun stop a run with SIGTERM,
and in a container it reaches PID 1 alone: train.py. The kernel drops a signal that PID 1 has no handler for, so a
Python without one ignores SIGTERM until the grace period ends in SIGKILL (137, no last checkpoint). So train.py calls
`install()` before anything else, and a stop is then acted on in every phase of the run:

- While the run starts (imports, restoring a checkpoint, meeting a DPPO group, which can block inside gloo's
  rendezvous for `group_timeout_s`) there is nothing new to save: the process ends at once with one line and
  128 + the signal's number (143 for SIGTERM). Python runs a handler only between bytecodes, so a main thread blocked
  in C would run it only when the call returns; the C-level handler also writes the signal's number to a wakeup
  socket (`signal.set_wakeup_fd`), and a thread reading it ends the process when the main thread has not within 2 s.
- In the training loop (`StopFlag`, rl/run.py) the signal is recorded; the loop stops at its next step, checkpoints
  and exits with 128 + the number. A periodic evaluation under way is given up at its next env step (`received()`):
  a greedy Atari game can last minutes, a pod's grace period is 30 s by default. A rank of a DPPO group carries the
  stop to its peers in the next all-reduce, so a SIGTERM on any rank ends every rank after the same step, rank 0 with
  a checkpoint (rl/parallel/collective.py); a rank > 0 also posts it to the group's store at once (`tell`, from the
  watcher thread: the rank waits in an all-reduce while rank 0 evaluates), and rank 0 gives its evaluation up.
- A process with children to stop (`--copies`) forwards the signal to them (`forwarding`), and exits with its code
  once they have checkpointed.
- After training (the final evaluation, which follows the last checkpoint) and in `--training False`'s evaluation
  there is nothing to save either: the process ends at once, and its line says which phase the stop interrupted and
  what is kept (`phase`).
- A stop with nothing armed raises SystemExit in the main thread, and Python swallows it where the handler happens to
  run inside a callback whose exceptions it only reports ("Exception ignored in ..."): a `__del__`, or an
  `os.register_at_fork` hook such as logging's `_releaseLock`, which runs each time a subprocess starts (ffmpeg for
  every video); the process would then play on. So the watcher ends a process that is still alive EXIT_GRACE_S
  after its handler raised, with the same code (the line is already printed).

These exit codes (130, 143) are the ones Kubeflow's PyTorchJob (`restartPolicy: ExitCode`) and a Job's pod failure
policy treat as retryable: the job is started again and resumes from the checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

STOPS = (signal.SIGINT, signal.SIGTERM)
BEFORE_TRAINING = "before training began: nothing new to save; run the same command to resume."
BLOCKED_GRACE_S = 2.0  # how long the main thread has to act on a signal itself before the watcher ends the process
EXIT_GRACE_S = 10.0  # how long a SystemExit raised by the handler has to end the process (cleanup: workers, Ray)


class _State:
    def __init__(self):
        self.signum = 0  # the first stop signal received while armed
        self.exiting = 0  # the signal whose handler raised SystemExit (nothing was armed)
        self.armed = 0  # > 0 while a loop or a parent acts on signals itself
        self.forward = None  # callable(signum) while forwarding to children
        self.tell = None  # callable(signum) while armed with `tell`: called from the watcher thread
        self.phase = BEFORE_TRAINING  # what a stop while nothing is armed interrupts, and what is kept
        self.handled = threading.Event()  # the main thread's handler ran for the latest signal
        self.watcher: threading.Thread | None = None


_state = _State()


def exit_code(signum: int) -> int:
    return 128 + int(signum)


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _handle(signum, frame):
    """The Python-level handler (main thread)."""
    if not _state.armed:
        _state.exiting = _state.exiting or signum  # before `handled`: the watcher reads it once that is set
    _state.handled.set()
    if _state.forward is not None:
        try:
            _state.forward(signum)
        except Exception as exc:  # a child that is already gone
            print(f"warning: could not forward {name(signum)}: {exc}", file=sys.stderr, flush=True)
    if _state.armed:
        _state.signum = _state.signum or signum
        return
    raise SystemExit(_unarmed(_state.exiting or signum))  # a second signal repeats the first's line and status


def _unarmed(signum: int) -> int:
    """A stop with nothing armed to act on it: one line (the phase it interrupted), and the signal's exit code."""
    print(f"\n{name(signum)} {_state.phase}", file=sys.stderr, flush=True)
    return exit_code(signum)


def _watch(sock: socket.socket) -> None:
    """Reads the wakeup socket: a stop signal that the main thread has not acted on within BLOCKED_GRACE_S while
    nothing is armed (the main thread is blocked in C) ends the process here."""
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum not in STOPS:
                continue
            if _state.armed and _state.tell is not None:
                try:
                    _state.tell(signum)
                except Exception as exc:  # a peer that is already gone: the stop still ends this process's loop
                    print(f"warning: could not tell the group of {name(signum)}: {exc}", file=sys.stderr, flush=True)
            deadline = time.monotonic() + BLOCKED_GRACE_S
            while time.monotonic() < deadline and not _state.handled.is_set():
                time.sleep(0.05)
            if not _state.handled.is_set() and not _state.armed:
                os._exit(_unarmed(signum))
            _state.handled.clear()
            if _state.exiting:  # the handler raised SystemExit: a process still here after the grace swallowed it
                time.sleep(EXIT_GRACE_S)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_code(_state.exiting))


def install() -> None:
    """Handle SIGTERM and SIGINT from now on in this process (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOPS:
        signal.signal(sig, _handle)
    if _state.watcher is None:
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        _state.watcher = threading.Thread(target=_watch, args=(reader,), name="rl-signal-watcher", daemon=True)
        _state.watcher.start()
        _state._sockets = (reader, writer)


def _after_fork_in_child() -> None:
    """A forked child (a worker, a copy) starts with no watcher, nothing armed and no forwarding; its signals are
    its own (the wakeup socket is the parent's: it is dropped)."""
    global _state
    if _state.watcher is not None:
        try:
            signal.set_wakeup_fd(-1)
        except ValueError:  # not the main thread
            pass
    _state = _State()


os.register_at_fork(after_in_child=_after_fork_in_child)


class armed:
    """While inside: a stop signal is recorded (`received()`), not acted on; the caller stops and saves. `tell`, if
    given, hears the signal's number at once, from the watcher thread, even while the main thread is blocked in C (a
    DPPO rank waiting in an all-reduce for a rank 0 that evaluates: rl/parallel/collective.py)."""

    def __init__(self, tell=None):
        self._old: dict = {}
        self._tell = tell

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in STOPS:
                old = signal.getsignal(sig)
                if old is not _handle:
                    self._old[sig] = signal.signal(sig, _handle)
        if not _state.armed:
            _state.signum = 0
        _state.armed += 1
        if self._tell is not None:
            _state.tell = self._tell
        return self

    @property
    def signum(self) -> int:
        return _state.signum

    def __exit__(self, *exc):
        _state.armed -= 1
        if self._tell is not None:
            _state.tell = None
        for sig, old in self._old.items():
            signal.signal(sig, old)


def received() -> int:
    return _state.signum


class forwarding(armed):
    """While inside: a stop signal is recorded and sent on to `send(signum)` (a parent's children)."""

    def __init__(self, send):
        super().__init__()
        self._send = send

    def __enter__(self):
        super().__enter__()
        _state.forward = self._send
        return self

    def __exit__(self, *exc):
        _state.forward = None
        super().__exit__(*exc)


class phase:
    """While inside, a stop signal that nothing armed acts on ends the process with the line `says` (after the
    signal's name): which phase it interrupted and what is kept, e.g. "during the final evaluation: ...". Outside,
    the line is the one before training."""

    def __init__(self, says: str):
        self._says, self._old = says, None

    def __enter__(self):
        self._old, _state.phase = _state.phase, self._says
        return self

    def __exit__(self, *exc):
        _state.phase = self._old
