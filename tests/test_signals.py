"""SIGTERM as a container delivers it: to PID 1 alone, which the kernel spares any signal it has no handler for.

train.py runs here as PID 1 of a PID namespace of its own (`unshare --pid --fork`, root only, as in a container), and
gets SIGTERM from outside as `docker stop` and the kubelet send it: before training began (waiting for its DPPO
group, blocked inside gloo) it exits 143 at once; a `--copies` parent passes the signal on, every copy checkpoints,
the parent exits 143, and the same command resumes every copy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl.parallel.collective import free_port

ROOT = Path(__file__).resolve().parents[1]
NEVER_ENDS = "10000000"


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    res = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "sh", "-c", "test $$ = 1"],
                         capture_output=True, timeout=30)
    return res.returncode == 0


needs_pid_namespace = pytest.mark.skipif(not _can_unshare(), reason="unshare --pid needs root (as in CI)")


class Pid1:
    """`python train.py ARGS` as PID 1 of a new PID namespace; `terminate()` sends SIGTERM from outside it."""

    def __init__(self, args: list[str], logs: Path, env: dict | None = None):
        logs.mkdir(parents=True, exist_ok=True)
        self.out, self.err = logs / "out", logs / "err"
        clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WORLD_SIZE", "RANK")}
        self.proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", sys.executable,
                                      str(ROOT / "train.py"), *args], cwd=ROOT, env={**clean, **(env or {})},
                                     stdout=open(self.out, "w"), stderr=open(self.err, "w"))

    def pid1(self) -> int:
        """The host's pid of the namespace's PID 1 (unshare's one child)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            except FileNotFoundError:
                children = []
            if children:
                nspid = next(line for line in Path(f"/proc/{children[0]}/status").read_text().splitlines()
                             if line.startswith("NSpid:"))
                assert nspid.split()[-1] == "1", nspid  # PID 1 inside its namespace
                return int(children[0])
            time.sleep(0.05)
        raise AssertionError("unshare started no child")

    def terminate(self) -> None:
        os.kill(self.pid1(), signal.SIGTERM)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()  # --kill-child takes PID 1 with it
                self.proc.wait()

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()


def wait_until(check, proc: Pid1, timeout: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.proc.poll() is None, proc.text()[-3000:]
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {proc.text()[-3000:]}"
        time.sleep(0.2)


@needs_pid_namespace
def test_pid1_waiting_for_its_group_exits_143_at_once_on_sigterm(tmp_path):
    """A recreated Master whose Worker is not back yet waits in gloo's rendezvous (blocked in C, where Python runs no
    handler) for group_timeout_s; a SIGTERM then (the job deleted, the node drained) ends it within seconds."""
    run = Pid1(["--hparams", "ppo_cartpole", "--output_dir", str(tmp_path / "run"), "--train_steps", NEVER_ENDS,
                "--hparam_override", "group_timeout_s=600"], tmp_path / "logs",
               env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    wait_until(lambda: "num_grad_workers 1 -> 2" in run.text(), run, what="rank 0 to meet its group")
    time.sleep(2)  # inside init_process_group by now
    run.terminate()
    began = time.monotonic()
    code = run.wait(60)
    assert code == 128 + signal.SIGTERM, run.text()[-3000:]
    assert time.monotonic() - began < 15
    assert "SIGTERM before training began" in run.err.read_text()
    assert "Traceback" not in run.err.read_text()


@needs_pid_namespace
def test_pid1_copies_parent_passes_sigterm_on_every_copy_checkpoints_and_the_command_resumes(tmp_path, train_cli):
    out = tmp_path / "runs"
    args = ["--hparams", "ppo_cartpole", "--output_dir", str(out), "--copies", "2", "--eval_episodes", "2",
            "--hparam_override", "log_interval=256,checkpoint_interval=10000000"]
    run = Pid1([*args, "--train_steps", NEVER_ENDS], tmp_path / "logs")

    def both_training() -> bool:
        return all((out / f"copy_{i}" / "progress.csv").exists() for i in range(2))

    wait_until(both_training, run, what="both copies to log a row")
    run.terminate()
    code = run.wait(120)
    assert code == 128 + signal.SIGTERM, run.text()[-3000:]
    assert "SIGTERM: passed on to the copies (2 saved a checkpoint)" in run.out.read_text()
    assert "Traceback" not in run.err.read_text()
    steps = []
    for i in range(2):
        ckpts = sorted((out / f"copy_{i}" / "checkpoints").glob("ckpt_*.pt"))
        assert ckpts, f"copy_{i} saved no checkpoint: {run.text()[-3000:]}"
        steps.append(int(ckpts[-1].stem.split("_")[1]))
    assert min(steps) > 0

    res = train_cli(*args, "--train_steps", str(max(steps) + 512), timeout=300)  # the same command, a budget left
    assert res.returncode == 0, res.stderr[-3000:]
    for step in steps:
        assert f"resuming from step {step}" in res.stdout


def test_prestop_finds_train_py_command_lines_only():
    from rl.cloud.prestop import runs_train

    assert runs_train(["python", "train.py", "--hparams", "x"]) and runs_train(["/usr/bin/python3", "/app/train.py"])
    assert runs_train(["python", "-m", "rl.cloud.entry", "WyItLWxpc3QiXQ=="])
    assert not runs_train(["python", "-m", "pytest", "tests/test_train_e2e.py"])
    assert not runs_train(["ray::JobSupervisor"]) and not runs_train(["bash", "train.py"])


@needs_pid_namespace
def test_prestop_hook_makes_a_driver_that_is_not_pid_1_checkpoint_and_exit_143(tmp_path):
    """A RayJob's learner pod: train.py runs as a child (Ray's job supervisor's), not as PID 1, so the pod's SIGTERM
    never reaches it; the preStop hook (k8s/rayjob.yaml) sends it one and waits until it has checkpointed. Here in a
    PID namespace of its own (with its own /proc), as in the pod's container."""
    out = tmp_path / "run"
    script = (f"{sys.executable} train.py --hparams ppo_cartpole --output_dir {out} --train_steps {NEVER_ENDS} "
              f"--hparam_override log_interval=256,checkpoint_interval=10000000 >{tmp_path}/train.log 2>&1 & "
              f"for i in $(seq 600); do test -s {out}/progress.csv && break; sleep 0.2; done; "
              f"{sys.executable} -m rl.cloud.prestop --timeout 60; wait $!; echo train exited $?")
    res = subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "bash", "-c", script],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    log = (tmp_path / "train.log").read_text()
    assert "preStop: SIGTERM to train.py [" in res.stdout, res.stdout + res.stderr + log[-2000:]
    assert "train exited 143" in res.stdout, res.stdout + log[-2000:]
    assert "SIGTERM: saved a checkpoint" in log
    assert sorted((out / "checkpoints").glob("ckpt_*.pt"))


SWALLOWS = """
import sys, time
from rl import signals

class Slow:
    def __del__(self):  # Python swallows what a finalizer raises: "Exception ignored in ..."
        time.sleep(0.2)

signals.EXIT_GRACE_S = 1.0  # the process's own setting, read when the watcher acts
signals.install()
with signals.phase("during a finalizer: nothing to save."):
    print("ready", flush=True)
    while True:
        Slow()
"""


def test_a_stop_that_python_swallows_in_a_finalizer_still_ends_the_process():
    """CI once saw `--training False --record_video True` play on after SIGTERM: the handler's SystemExit was raised
    inside logging's at-fork hook as ffmpeg started (reproduced: 2 of 40 stops), and Python reports and swallows what
    such a callback raises, as it does a finalizer's. The watcher ends such a process with the signal's code."""
    proc = subprocess.Popen([sys.executable, "-c", SWALLOWS], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert "Exception ignored in" in stderr, stderr
    assert stderr.count("SIGTERM during a finalizer: nothing to save.") == 1, stderr
