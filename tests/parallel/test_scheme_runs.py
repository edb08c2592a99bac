"""`--num_workers N` end to end (rl/parallel), as a user runs train.py: one agent of each family, a worker that is
killed or hangs, the learner stopped by SIGTERM or killed outright (no process or shared memory left behind) and the
resume of an asynchronous run.

The runs that are signalled are subprocesses; their worker processes are found through /proc (the learner's
children). No assertion depends on how fast anything runs: the deadlines below only keep a broken run from hanging
the suite.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from rl.checkpoint import list_checkpoints

ROOT = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")


# ---------------------------------------------------------------------------------------------------- helpers
def progress(out: Path) -> list[dict]:
    """progress.csv's rows ([] while it does not exist or is being rewritten with new columns)."""
    try:
        with open(out / "progress.csv", newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, csv.Error):
        return []


def column(rows: list[dict], name: str) -> list[float]:
    """The logged values of one column (rows without it, like the final evaluation's, or a row still being written,
    are skipped)."""
    values = []
    for r in rows:
        try:
            values.append(float(r[name]))
        except (KeyError, TypeError, ValueError):
            continue
    return values


def env_steps(out: Path) -> int:
    """The newest env step count in progress.csv (0 before the first row)."""
    return int(max(column(progress(out), "env_steps"), default=0))


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) of a process from /proc/<pid>/stat; None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": the name may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def children(pid: int) -> dict[int, int]:
    """{pid: start time} of the live children of `pid` (the learner's children are its workers)."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := stat(int(name))) is not None and s[1] == pid and s[0] not in "ZX":
            found[int(name)] = s[2]
    return found


def alive(pid: int, started: int) -> bool:
    """The process recorded with this start time still runs (a zombie, or a new process reusing the pid, is not
    it)."""
    s = stat(pid)
    return s is not None and s[2] == started and s[0] not in "ZX"


def held_shm() -> set[str]:
    """Names under /dev/shm that some live process has open or mapped."""
    held = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{name}/fd"):
                target = os.readlink(f"/proc/{name}/fd/{fd}")
                if target.startswith("/dev/shm/"):
                    held.add(target[len("/dev/shm/"):].split(" (deleted)")[0])
            with open(f"/proc/{name}/maps") as f:
                for line in f:
                    if "/dev/shm/" in line:
                        held.add(line.split("/dev/shm/", 1)[1].strip().split(" (deleted)")[0])
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return held


def shm_entries() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def assert_nothing_left(workers: dict[int, int], shm_before: set[str]) -> None:
    """Within ~10 s every recorded worker is gone, and /dev/shm holds no more entries than before the run. Entries
    that another live process holds (other people's runs on this machine) are not the run's leftovers."""
    deadline = time.time() + 10
    while any(alive(p, t) for p, t in workers.items()) and time.time() < deadline:
        time.sleep(0.1)
    assert not [p for p, t in workers.items() if alive(p, t)], "worker processes outlived the run"
    after = shm_entries()
    leaked = (after - shm_before) - held_shm()
    assert not leaked, f"left in /dev/shm: {sorted(leaked)} (had {len(shm_before)} entries before, {len(after)} after)"


class Run:
    """`python train.py --num_workers 2 ...` in a subprocess, its output (stdout and stderr) read as it comes."""

    def __init__(self, out: Path, hparams: str, steps: int, override: str = "", extra: tuple = ()):
        self.out = out
        cmd = [sys.executable, "train.py", "--hparams", hparams, "--num_workers", "2", "--output_dir", str(out),
               "--train_steps", str(steps), "--eval_episodes", "2", *extra]
        if override:
            cmd += ["--hparam_override", override]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.workers: dict[int, int] = {}  # every worker seen: pid -> start time

    def _read(self) -> None:
        while chunk := self.proc.stdout.read1(65536):
            self.chunks.append(chunk)

    @property
    def output(self) -> str:
        return b"".join(self.chunks).decode(errors="replace")

    def wait_for(self, what: str, condition, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while not condition():
            assert self.proc.poll() is None, f"the run ended (code {self.proc.returncode}) before {what}:\n" \
                                             f"{self.output[-3000:]}"
            assert time.time() < deadline, f"no {what} after {timeout:g} s:\n{self.output[-3000:]}"
            time.sleep(0.1)

    def live_workers(self) -> dict[int, int]:
        now = children(self.proc.pid)
        self.workers.update(now)
        return now

    def wait_running(self) -> dict[int, int]:
        """Both workers started and their data reached the learner (a progress.csv row is written)."""
        self.wait_for("two workers and a progress.csv row",
                      lambda: len(self.live_workers()) == 2 and progress(self.out))
        return self.live_workers()

    def finish(self, timeout: float = 120) -> int:
        """Wait for the exit (noting the workers as they come and go) and the last of the output."""
        deadline = time.time() + timeout
        while self.proc.poll() is None:
            self.live_workers()
            assert time.time() < deadline, f"the run did not end within {timeout:g} s:\n{self.output[-3000:]}"
            time.sleep(0.05)
        self.reader.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def runs():
    started: list[Run] = []
    yield started
    for run in started:  # a failed test leaves nothing running, orphaned workers included
        run.kill()
        for pid, started_at in run.workers.items():
            if alive(pid, started_at):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------------------------- every family
DQN_FAST = "learning_starts=500,train_freq=64,gradient_steps=8,log_interval=512"
FAMILIES = {  # name: (hparams set, env steps, overrides)
    "ppo_sync": ("ppo_cartpole", 4096, "col_communication=sync,log_interval=512"),
    "ppo_async": ("ppo_cartpole", 4096, "log_interval=512"),
    "dqn_async": ("dqn_cartpole", 3000, DQN_FAST),
    "dqn_prioritized_sync": ("dqn_cartpole", 3000, DQN_FAST + ",memory=prioritized,col_communication=sync"),
    "sac_pendulum": ("sac_pendulum", 1500, "learning_starts=500,train_freq=4,log_interval=256"),
    "impala_vtrace": ("impala_cartpole", 4096, "log_interval=512"),  # the Scheme with V-trace (async, rescored)
    "max_policy_lag": ("ppo_cartpole", 4096, "log_interval=512,max_policy_lag=1,num_steps=16"),
}


@pytest.mark.parametrize("name", FAMILIES)
def test_two_workers_train_every_family(tmp_path, train_cli, name):
    hparams, steps, override = FAMILIES[name]
    out = tmp_path / "run"
    res = train_cli("--hparams", hparams, "--num_workers", "2", "--output_dir", str(out), "--train_steps", str(steps),
                    "--eval_episodes", "2", "--hparam_override", override)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "; restarted (" not in res.stdout  # no worker failed on the way
    ev = json.loads((out / "eval.json").read_text())
    assert ev["mode"] == "final_training_evaluation" and len(ev["returns"]) == 2 and ev["env_steps"] >= steps
    rows = progress(out)
    assert int(rows[-1]["env_steps"]) >= steps
    assert max(column(rows, "scheme_version")) > 0  # the learner learned from the workers and published weights
    assert set(column(rows, "scheme_workers")) == {2.0} and column(rows, "scheme_restarts")[-1] == 0
    assert max(column(rows, "episodes")) > 0  # the workers' finished episodes reach the learner's statistics
    lags = column(rows, "scheme_policy_lag")
    assert lags and min(lags) >= 0
    if name.endswith("_sync"):
        assert set(lags) == {0.0}  # every shipment acted with the newest weights
    if name == "ppo_async":
        assert max(lags) > 0  # the workers act on while the learner learns: some rollouts come from older weights
    if name == "max_policy_lag":
        assert max(lags) <= 2  # the mean of kept and dropped shipments' lags: a lag over 1 is dropped, not learned


# ---------------------------------------------------------------------------------------------------- gradient workers
GRADIENT_WORKERS = {  # name: (hparams set, env steps, overrides)
    "dppo": ("ppo_cartpole", 2048, "num_grad_workers=2,grad_communication=sync,log_interval=512,target_kl=0.02"),
    "rapid": ("ppo_cartpole", 2048, "num_grad_workers=2,grad_communication=sync,num_workers=1,log_interval=512"),
    "a3c": ("a3c_cartpole", 2000, "log_interval=500"),
    "async_rapid": ("a3c_cartpole", 2000, "num_workers=1,log_interval=500"),
}


@pytest.mark.parametrize("name", GRADIENT_WORKERS)
def test_gradient_worker_architectures_train_end_to_end(tmp_path, train_cli, name):
    """DPPO and RAPID (sync gradient workers, the second with collection workers), A3C and async RAPID (async
    gradient workers, the second fed by collection workers of its own): short runs through train.py."""
    hparams, steps, override = GRADIENT_WORKERS[name]
    out = tmp_path / "run"
    res = train_cli("--hparams", hparams, "--output_dir", str(out), "--train_steps", str(steps),
                    "--eval_episodes", "2", "--hparam_override", override, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "; restarted (" not in res.stdout
    ev = json.loads((out / "eval.json").read_text())
    assert ev["env_steps"] >= steps
    state = torch.load(sorted((out / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=True)
    assert state["agent"]["counters"]["grad_steps"] > 0 and state["agent"]["counters"]["updates"] > 0


# ---------------------------------------------------------------------------------------------------- failures
NEVER_ENDS = 10_000_000  # the runs below end by signal


def test_killed_worker_is_restarted_and_sigterm_saves_and_leaves_nothing(tmp_path, runs):
    shm_before = shm_entries()
    run = Run(tmp_path / "run", "ppo_cartpole", NEVER_ENDS, "log_interval=512")
    runs.append(run)
    workers = run.wait_running()
    for pid in workers:  # Ctrl-C reaches the whole process group: the workers leave it to the learner
        os.kill(pid, signal.SIGINT)
    steps_then = env_steps(run.out)
    run.wait_for("two more progress.csv rows", lambda: env_steps(run.out) >= steps_then + 2 * 512)
    assert all(alive(p, t) for p, t in workers.items()) and "; restarted (" not in run.output
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    run.wait_for("restart message", lambda: "; restarted (" in run.output)
    assert re.search(r"worker [01] exited \(code -9\); restarted", run.output)
    run.wait_for("a progress.csv row counting the restart",
                 lambda: any(r >= 1 for r in column(progress(run.out), "scheme_restarts")))
    replacement = run.live_workers()
    assert len(replacement) == 2 and victim not in replacement  # the learner forked a new worker 0
    steps_at_restart = env_steps(run.out)
    run.wait_for("training to go on with the new worker", lambda: env_steps(run.out) > steps_at_restart)
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 128 + signal.SIGTERM, run.output[-3000:]
    assert "SIGTERM: saved a checkpoint" in run.output and "Traceback" not in run.output
    assert list_checkpoints(run.out)
    assert_nothing_left(run.workers, shm_before)


def test_hung_worker_is_killed_and_restarted(tmp_path, runs):
    shm_before = shm_entries()
    run = Run(tmp_path / "run", "ppo_cartpole", NEVER_ENDS, "log_interval=512,worker_timeout=3")
    runs.append(run)
    workers = run.wait_running()
    victim = min(workers)
    os.kill(victim, signal.SIGSTOP)  # alive, but it makes no step
    try:
        run.wait_for("hung worker restart", lambda: "(hung); restarted" in run.output)
        run.wait_for("the stopped worker killed", lambda: not alive(victim, workers[victim]))
        run.wait_for("a replacement worker", lambda: len(run.live_workers()) == 2)
        run.wait_for("a progress.csv row counting the restart",
                     lambda: any(r >= 1 for r in column(progress(run.out), "scheme_restarts")))
    finally:
        if alive(victim, workers[victim]):
            os.kill(victim, signal.SIGCONT)
    assert "made no step for 3 s (hung)" in run.output
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 128 + signal.SIGTERM, run.output[-3000:]
    assert "SIGTERM: saved a checkpoint" in run.output and "Traceback" not in run.output
    assert_nothing_left(run.workers, shm_before)


def test_learner_killed_takes_its_workers_along(tmp_path, runs):
    shm_before = shm_entries()
    run = Run(tmp_path / "run", "ppo_cartpole", NEVER_ENDS, "log_interval=512")
    runs.append(run)
    run.wait_running()
    run.proc.kill()  # SIGKILL: the learner cannot stop its workers; they die with it (PR_SET_PDEATHSIG)
    assert run.finish() == -signal.SIGKILL
    assert len(run.workers) == 2
    assert_nothing_left(run.workers, shm_before)


# ---------------------------------------------------------------------------------------------------- resume
def test_async_run_resumes_after_sigterm(tmp_path, runs):
    shm_before = shm_entries()
    out = tmp_path / "run"
    override = "checkpoint_interval=2048,log_interval=512"
    run = Run(out, "ppo_cartpole", NEVER_ENDS, override)
    runs.append(run)
    run.wait_running()
    run.wait_for("the first checkpoint", lambda: list_checkpoints(out))
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish() == 128 + signal.SIGTERM, run.output[-3000:]
    assert "SIGTERM: saved a checkpoint" in run.output
    assert_nothing_left(run.workers, shm_before)
    saved = list_checkpoints(out)[-1][0]
    assert saved >= 2048

    total = saved + 2048
    again = Run(out, "ppo_cartpole", total, override)
    runs.append(again)
    assert again.finish() == 0, again.output[-3000:]
    assert f"resuming from step {saved}" in again.output and "Traceback" not in again.output
    ev = json.loads((out / "eval.json").read_text())
    assert ev["env_steps"] >= total
    rows = progress(out)
    assert int(rows[-1]["env_steps"]) >= total
    resumed = [r for r in rows if r.get("scheme_version") and int(r["env_steps"]) > saved]
    assert resumed and max(column(resumed, "scheme_version")) > 0  # the resumed learner learned from new workers
    assert_nothing_left(again.workers, shm_before)


# the learner process raises after its workers started and before the loop's own `finally`: a Controller that fails
# (rl/run.py's Run.train), or a script that builds a trainer and never closes it (the transport's exit hook)
RAISES_BEFORE_THE_LOOP = {
    "train": """
import rl.run
def broken(*args, **kwargs):
    raise RuntimeError("the control file could not be read")
rl.run.Controller = broken
with rl.make("ppo_cartpole", OUT, "num_workers=2,train_steps=100000") as run:
    run.train()
""",
    "script": """
from rl.registry import hparams as sets
from rl.trainer import make_trainer, prepare
hp = sets["ppo_cartpole"]().parse("num_workers=2,train_steps=100000")
env, agent, stats = prepare(hp, OUT)
trainer = make_trainer(hp, env, agent, stats, seed=0)
raise RuntimeError("the script failed with its workers running")
""",
}


@pytest.mark.parametrize("where", sorted(RAISES_BEFORE_THE_LOOP))
def test_a_learner_that_raises_with_its_workers_running_exits_and_reaps_them(tmp_path, where):
    """The shm workers are not daemons: without the fix the interpreter waited at exit, forever, for workers that
    wait for the learner."""
    code = f"import hparams, rl\nfrom pathlib import Path\nOUT = Path({str(tmp_path / 'run')!r})\n"
    proc = subprocess.Popen([sys.executable, "-c", code + RAISES_BEFORE_THE_LOOP[where]], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    try:
        _, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        workers = children(proc.pid)
        proc.kill()
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"the learner never exited; its workers: {sorted(workers)}") from None
    assert proc.returncode == 1 and "RuntimeError" in err, err[-3000:]
