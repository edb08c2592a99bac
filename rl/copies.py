"""`--copies N`: independent runs of one set with seeds seed..seed+N-1, in parallel processes.

Each copy is a forked process (it inherits the filled registries, including the sets that train.py imported) that
dies with this one: Linux sends it SIGTERM when this process ends, however it ends (SIGKILL included), and it
checkpoints on it, so no copy trains on unwatched and the same command resumes them all. A copy that ends badly (a
signal, a failing exit status, a ConfigError or RunStopped it raised) stops the others, which checkpoint, and this
process ends in one line that names the copy and how it ended."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np

from rl.errors import ConfigError, RunStopped, first_line
from rl.logger import log_final_hparams


def _copy_worker(args, index: int) -> dict:
    from rl.command import run_one

    out = Path(args.output_dir) / f"copy_{index}"
    return {"copy": index, **run_one(args, out, seed_offset=index, quiet=True)}


def _copy_main(args, index: int, parent_pid: int, writer) -> None:
    """A copy's process: its result, or the one line of the ConfigError it raised, goes back on `writer`."""
    from rl.parallel.processes import die_with_parent

    die_with_parent(parent_pid, signal.SIGTERM)  # SIGTERM, not SIGKILL: the copy checkpoints before it ends
    try:
        writer.send(("result", _copy_worker(args, index)))
    except ConfigError as exc:  # bad input, a non-finite loss: the parent's one line, no traceback here
        writer.send(("error", type(exc), first_line(exc)))
        raise SystemExit(2) from None


class _Copy:
    """One copy's process, and the pipe that brings back its result ("result", dict) or its error ("error", class,
    line); read while the copy runs, since a large message would block its send."""

    def __init__(self, ctx, args, index: int):
        self.index, self.message, self.stopped = index, ("none",), False
        self.reader, writer = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_copy_main, args=(args, index, os.getpid(), writer), name=f"copy_{index}")
        self.process.start()
        writer.close()  # the copy holds the only writer

    def waitables(self) -> list:
        return [self.process.sentinel] + ([self.reader] if self.message[0] == "none" else [])

    def receive(self) -> None:
        if self.message[0] == "none" and self.reader.poll():
            try:
                self.message = self.reader.recv()
            except (EOFError, OSError):  # it ended without a word
                self.message = ("ended",)

    def stop(self, signum: int) -> None:
        """Send `signum` once, to a copy still running (it checkpoints on it)."""
        if not self.stopped and self.process.exitcode is None:
            self.stopped = True
            try:
                os.kill(self.process.pid, signum)
            except ProcessLookupError:  # it ended just now
                pass

    def failure(self, stopped_others: bool) -> ConfigError | None:
        """None when this ended copy brought its result; else the parent's one line: which copy, how it ended, and
        what became of the others."""
        code, others = self.process.exitcode, "; stopped the others (their progress is saved)" if stopped_others else ""
        if code == 0 and self.message[0] == "result":
            return None
        if self.message[0] == "error":  # its own line says what to do
            return self.message[1](f"copy {self.index}: {self.message[2]}{others}")
        if code < 0:
            how = f"was killed by {_signal_name(-code)}"
        elif code - 128 in (signal.SIGINT, signal.SIGTERM):
            how = f"was stopped by {_signal_name(code - 128)}"
        else:
            how = f"exited with status {code}" if code else "ended without a result"
        return RunStopped(f"copy {self.index} (pid {self.process.pid}) {how}{others}; run the same command to resume")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name
        return f"signal {signum}"


class _Copies:
    """The copies' processes, at most `workers` at once (one a core): the next starts when one brings its result."""

    def __init__(self, args, workers: int):
        import multiprocessing as mp

        self.args, self.workers, self.ctx = args, workers, mp.get_context("fork")
        self.started: list[_Copy] = []
        self.active: list[_Copy] = []  # started, and not yet seen to end

    def stop(self, signum: int) -> None:
        for copy in self.active:
            copy.stop(signum)

    def run(self, stopping) -> ConfigError | None:
        """Run the copies until all have ended; the first to fail stops the others (SIGTERM: they checkpoint) and is
        returned. `stopping()`: the stop signal this process received (passed on to the copies), after which no copy
        starts and none is a failure."""
        from multiprocessing import connection

        failure = None
        while True:
            while (not failure and not stopping() and len(self.started) < self.args.copies
                   and len(self.active) < self.workers):
                self.started.append(_Copy(self.ctx, self.args, len(self.started)))
                self.active.append(self.started[-1])
            if stopping():  # it may have come while a copy was starting: that one gets it now
                self.stop(stopping())
            if not self.active:
                return failure
            waiting = {w: copy for copy in self.active for w in copy.waitables()}
            for ready in connection.wait(list(waiting)):
                waiting[ready].receive()
            for copy in [c for c in self.active if c.process.exitcode is not None]:
                copy.receive()
                copy.reader.close()
                self.active.remove(copy)
                if failure or stopping():  # what ended it is known already
                    continue
                others = [c for c in self.active if c.process.exitcode is None]
                if failure := copy.failure(stopped_others=bool(others)):
                    self.stop(signal.SIGTERM)

    def end(self) -> None:
        """No copy outlives this process's wait for them (a failure of this process's own code included)."""
        self.stop(signal.SIGTERM)
        for copy in self.started:
            copy.process.join()


def run_copies(args) -> list[dict]:
    """`--copies N`: N independent seeds (seed + i) in `output_dir/copy_<i>`, up to one process per core. A SIGTERM
    or SIGINT to this process (PID 1 of a container gets the pod's SIGTERM alone) is passed on to every copy, each of
    which checkpoints; then this process exits with 128 + the signal, and the same command resumes every copy."""
    from rl import signals

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = min(args.copies, os.cpu_count() or 1)
    print(f"running {args.copies} copies in {out}/copy_<i> with {workers} processes", flush=True)
    copies = _Copies(args, workers)
    with signals.forwarding(copies.stop) as stop:
        try:
            failure = copies.run(lambda: stop.signum)
        finally:
            copies.end()
        signum = stop.signum
    if signum:
        saved = sum(c.process.exitcode == signals.exit_code(signum) for c in copies.started)
        print(f"\n{signals.name(signum)}: passed on to the copies ({saved} saved a checkpoint); run the same "
              f"command to resume them.", flush=True)
        raise SystemExit(signals.exit_code(signum))
    if failure is not None:
        raise failure
    results = [c.message[1] for c in copies.started]
    means = [r["mean_return"] for r in results]
    summary = {"copies": results, "mean_of_means": float(np.mean(means)), "std_of_means": float(np.std(means))}
    (out / "copies_summary.json").write_text(json.dumps(summary, indent=2))
    for r in results:  # TensorBoard's HParams view: each copy's settings beside its final score
        log_final_hparams(out / f"copy_{r['copy']}", {"final_return_mean": r["mean_return"],
                                                      "final_return_std": r["std_return"]})
    for r in results:
        print(f"copy {r['copy']}: {r['mean_return']:.2f} ± {r['std_return']:.2f}")
    print(f"over {args.copies} copies: {summary['mean_of_means']:.2f} ± {summary['std_of_means']:.2f} "
          f"(written to {out / 'copies_summary.json'})")
    write_copies_report(out)
    return results


def write_copies_report(out: Path) -> None:
    """The comparison page of the copies (rl/report), after their results are safe in copies_summary.json: a report
    that fails to draw costs one line on stderr, never the copies' results or the exit status."""
    import sys

    from rl.errors import first_line

    try:
        from rl.report import write_report

        write_report([out], out / "report", quiet=True)
    except Exception as exc:  # the copies are done and saved; the report is a view of them
        print(f"report not written: {type(exc).__name__}: {first_line(exc, 300)} (retry with python -m rl.report "
              f"{out} --output {out / 'report'})", file=sys.stderr)
        return
    print(f"report of the copies: {out / 'report' / 'index.html'}", flush=True)
