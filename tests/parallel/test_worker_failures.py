"""A collection worker that keeps failing ends the run with its own error in one line (rl/parallel/transports/
faults.py): a worker that raises does so three times in a row even when it ships between (an env that raises at its
50th step lets every new worker ship first), while deaths and hangs are forgiven by a shipment."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from rl.errors import RunStopped
from rl.parallel.transports.faults import MAX_FAILURES, FaultBook
from tests.envs.faulty_envs import FAIL_AT


def handle(rank: int = 0):
    """What the FaultBook reads of a worker: the transports' Handle fields."""
    return SimpleNamespace(spec=SimpleNamespace(rank=rank), failures=0, raised=0, restarts=0, last_error="")


def fail(book: FaultBook, h, error: str = "") -> None:
    h.last_error = error
    book.count_failure(h, "exited (code 1)" if error else "exited (code -9)", raised=bool(error))


def test_a_worker_that_raises_three_times_ends_the_run_though_it_shipped_between(capsys):
    """Bug caught: a shipment forgiving a raised error (the worker restarted forever: 32 restarts in 3,000 steps and
    exit 0 with a score)."""
    book, h = FaultBook(), handle(1)
    for _ in range(MAX_FAILURES - 1):
        fail(book, h, "the env 'X-v0' raised SimulatorError: diverged")
        book.count_shipment(h)
    with pytest.raises(RunStopped) as info:
        fail(book, h, "the env 'X-v0' raised SimulatorError: diverged")
    assert str(info.value) == ("collection worker 1 failed 3 times in a row: the env 'X-v0' raised SimulatorError: "
                               "diverged")
    assert book.restarts == MAX_FAILURES - 1 and book.take_lost() == [1, 1]


def test_deaths_are_forgiven_by_a_shipment_and_break_a_row_of_raised_errors(capsys):
    """Bugs caught: a worker killed now and then (out of memory, a hang) ending a run that ships between, and a row of
    raised errors that a death in between does not break; three deaths without a shipment still end the run, with
    why the last one was restarted when the worker said nothing."""
    book, h = FaultBook(), handle()
    for _ in range(10):
        fail(book, h)
        book.count_shipment(h)
    fail(book, h, "SimulatorError: diverged")
    fail(book, h)
    book.count_shipment(h)
    fail(book, h, "SimulatorError: diverged")
    book.count_shipment(h)
    assert h.raised == 1 and h.failures == 0
    fail(book, h)
    fail(book, h)
    with pytest.raises(RunStopped, match=r"^collection worker 0 failed 3 times in a row: exited \(code -9\)$"):
        fail(book, h)


@pytest.mark.parametrize("hparams", ["ppo_cartpole", "dqn_cartpole"])
def test_a_worker_whose_env_raises_ends_the_run_in_one_line(tmp_path, train_cli, faulty, hparams):
    """Through train.py with one worker (a rollout worker, a replay rows worker), the env raising at its 50th step in
    every worker's life. Bug caught: the run restarting the worker after every rollout it shipped and ending with
    exit 0 and a final score; the env's error not carried from the worker process to the learner's line."""
    res = train_cli("--hparams", hparams, "--env", faulty.diverging, "--output_dir", str(tmp_path / "run"),
                    "--train_steps", "20000", "--num_workers", "1", "--hparam_override", "eval_interval=0",
                    env=faulty.environ(), timeout=240)
    assert res.returncode == 2, (res.stdout[-2000:], res.stderr[-2000:])
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert re.match(rf"error: collection worker 0 failed 3 times in a row: the env {re.escape(repr(faulty.diverging))} "
                    rf"raised SimulatorError: the simulation diverged at step {FAIL_AT} at agent step \d+", res.stderr)
    assert res.stdout.count("; restarted (") == MAX_FAILURES - 1, res.stdout[-2000:]


def test_an_error_left_in_a_dead_workers_pipe_counts_as_raised(capsys):
    """The worker sends its error and exits; the health check may see it dead before the learner read the pipe.
    Bug caught: the pipe closed unread, so the failure counted as a death (a shipment then forgave it: the worker
    restarted forever) and the run's line lost the env's error."""
    import multiprocessing as mp

    from rl.parallel.transports.shm import Handle, ShmTransport

    transport = ShmTransport(SimpleNamespace(worker_timeout=60.0))
    transport._start = lambda h: None  # no process: only the bookkeeping of `_restart` runs
    h = Handle(SimpleNamespace(rank=0), [0, 1])
    h.process = SimpleNamespace(is_alive=lambda: False, join=lambda: None, exitcode=1)
    error = ("error", "the env 'X-v0' raised SimulatorError: diverged", "Traceback ...")
    for _ in range(MAX_FAILURES - 1):
        h.conn, theirs = mp.Pipe()
        theirs.send(error)  # and exited
        transport._restart(h, "exited (code 1)")
        transport.count_shipment(h)  # the restarted worker ships before it fails again
    h.conn, theirs = mp.Pipe()
    theirs.send(error)
    with pytest.raises(RunStopped, match="failed 3 times in a row: the env 'X-v0' raised SimulatorError: diverged"):
        transport._restart(h, "exited (code 1)")
    assert "worker 0: the env 'X-v0' raised SimulatorError: diverged" in capsys.readouterr().out
