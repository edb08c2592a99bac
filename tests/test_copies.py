"""`train.py --copies N` leaves no orphans: a parent killed outright takes its copies with it (each checkpoints first,
and the same command resumes them); a copy that dies or fails stops the others and ends the parent in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl.checkpoint import list_checkpoints
from rl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
NEVER_ENDS = 10_000_000
SETTINGS = "eval_interval=0,log_interval=256,checkpoint_interval=10000000"  # no checkpoint but the one a stop saves


def command(out: Path, steps: int) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), "--hparams", "dqn_cartpole", "--copies", "2", "--output_dir",
            str(out), "--train_steps", str(steps), "--eval_episodes", "2", "--hparam_override", SETTINGS]


def start_training(out: Path, logs: Path) -> subprocess.Popen:
    """A --copies 2 parent, returned once both copies are in their training loop (each has logged a row)."""
    proc = subprocess.Popen(command(out, NEVER_ENDS), cwd=ROOT, stdout=open(logs / "out", "w"),
                            stderr=open(logs / "err", "w"))
    deadline = time.monotonic() + 60
    while not all(len(rows(out / f"copy_{i}")) >= 2 for i in range(2)):
        assert proc.poll() is None, (logs / "err").read_text()[-3000:]
        assert time.monotonic() < deadline, "the copies logged no row within 60 s"
        time.sleep(0.1)
    return proc


def rows(run: Path) -> list[str]:
    try:
        return (run / "progress.csv").read_text().splitlines()
    except FileNotFoundError:
        return []


def stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command's name (state first), or None for a process that is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, with its start time (so that a reused pid is not taken for it)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat(int(entry.name))) is not None:
            parents[int(entry.name)] = (int(fields[1]), fields[19])
    found, frontier = {}, [pid]
    while frontier:
        below = [p for p, (ppid, _) in parents.items() if ppid in frontier]
        found.update({p: parents[p][1] for p in below})
        frontier = below
    return found


def alive(processes: dict[int, str]) -> list[int]:
    return [pid for pid, started in processes.items()
            if (fields := stat(pid)) is not None and fields[19] == started and fields[0] != "Z"]


def wait_gone(processes: dict[int, str], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(processes)


def kill_all(processes: dict[int, str]) -> None:
    """Whatever a failing test left behind (the copies of code that does not stop them) is killed here."""
    for pid in alive(processes):
        os.kill(pid, signal.SIGKILL)


def test_a_killed_parent_takes_its_copies_with_it_and_the_same_command_resumes_them(tmp_path):
    out = tmp_path / "runs"
    parent = start_training(out, tmp_path)
    copies = descendants(parent.pid)
    try:
        assert len(copies) == 2, copies
        parent.kill()
        parent.wait()
        assert wait_gone(copies, 10) == [], "copies outlived their parent's SIGKILL"
    finally:
        kill_all(copies)
    steps = []
    for i in range(2):  # each saved a checkpoint on its way out: the parent's death reached it as SIGTERM
        saved = [step for step, _ in list_checkpoints(out / f"copy_{i}")]
        assert saved and saved[-1] > 0, f"copy_{i} saved no checkpoint"
        steps.append(saved[-1])
    again = subprocess.Popen(command(out, NEVER_ENDS), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)  # the same command; stopped (SIGTERM) once both copies have resumed
    try:
        lines = []
        while not all(any(f"resuming from step {step}" in line for line in lines) for step in steps):
            line = again.stdout.readline()
            assert line, "".join(lines)[-3000:]  # it ended without resuming both
            lines.append(line)
        again.send_signal(signal.SIGTERM)
        assert again.wait(60) == 128 + signal.SIGTERM
    finally:
        if again.poll() is None:
            again.kill()

def test_a_killed_copy_stops_the_other_and_ends_the_parent_in_one_line(tmp_path):
    out = tmp_path / "runs"
    parent = start_training(out, tmp_path)
    copies = descendants(parent.pid)
    try:
        victim = min(copies)
        os.kill(victim, signal.SIGKILL)
        code = parent.wait(30)
        err = (tmp_path / "err").read_text()
        assert code == 2, err[-3000:]
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        found = re.fullmatch(rf"error: copy (\d) \(pid {victim}\) was killed by SIGKILL; stopped the others .*"
                             rf"run the same command to resume", last)
        assert found, last
        assert wait_gone(copies, 5) == [], "a copy outlived the parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        kill_all(copies)
    other = out / f"copy_{1 - int(found.group(1))}"
    assert list_checkpoints(other), "the other copy was stopped without a checkpoint (SIGKILL, not SIGTERM)"


def test_a_copy_that_raises_a_config_error_ends_the_copies_in_its_line(tmp_path, monkeypatch):
    """A bad setting that the copies meet on their own (each resolves its settings): the parent's one line is the
    copy's, after which copy it was; on one process, copy 1 never starts."""
    from rl.copies import run_copies
    from train import parser

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    args = parser().parse_args(["--hparams", "dqn_cartpole", "--copies", "2", "--output_dir", str(tmp_path),
                                "--hparam_override", "no_such_setting=1"])
    with pytest.raises(ConfigError, match=r"^copy 0: --hparam_override: unknown setting 'no_such_setting'") as err:
        run_copies(args)
    assert "stopped the others" not in str(err.value)


def test_copies_beyond_the_cores_start_as_others_end(tmp_path, monkeypatch):
    """One core: copy 1 starts (writes its hparams.json) after copy 0 has ended (written its eval.json)."""
    from rl import copies
    from train import parser

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    monkeypatch.setattr(copies, "write_copies_report", lambda out: None)  # the page takes seconds to draw
    args = parser().parse_args(["--hparams", "dqn_cartpole", "--copies", "2", "--output_dir", str(tmp_path),
                                "--train_steps", "200", "--eval_episodes", "1", "--hparam_override", SETTINGS])
    results = copies.run_copies(args)
    assert [r["copy"] for r in results] == [0, 1]
    ended, started = (tmp_path / "copy_0" / "eval.json").stat().st_mtime, (tmp_path / "copy_1" / "hparams.json")
    assert started.stat().st_mtime >= ended
