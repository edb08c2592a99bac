"""`python -m rl.cloud.prestop`: the preStop hook of a RayJob's learner pod (k8s/rayjob.yaml).

In a RayJob, train.py is the Ray job's driver: a child of Ray's job supervisor inside the learner pod's container, not
its PID 1. When the pod is evicted, drained or deleted, the kubelet runs this hook first and sends SIGTERM to PID 1
(`ray start`) only after it returns; so the hook sends SIGTERM to every train.py of the container itself, and waits
until they have exited (each checkpoints and exits 143, rl/signals.py) or `--timeout` seconds have passed. The Ray
job then fails, and the RayJob's retry (`backoffLimit`) resumes the run from that checkpoint.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path


def runs_train(argv: list[str]) -> bool:
    """A `python train.py ...` (any path to it) or `python -m rl.cloud.entry ...` command line."""
    if len(argv) >= 2 and Path(argv[0]).name.startswith("python"):
        if Path(argv[1]).name == "train.py":
            return True
        if argv[1:3] == ["-m", "rl.cloud.entry"]:
            return True
    return False


def train_processes(proc: Path = Path("/proc")) -> list[int]:
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if runs_train([a.decode(errors="replace") for a in argv if a]):
            found.append(int(entry.name))
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=110.0,
                   help="seconds to wait for them to exit (below the pod's terminationGracePeriodSeconds)")
    args = p.parse_args(argv)
    pids = train_processes()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    print(f"preStop: SIGTERM to train.py {pids or 'none running'}", flush=True)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() and not _zombie(pid) for pid in pids):
        time.sleep(0.2)
    return 0


def _zombie(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2:].split()[0] in "ZX"


if __name__ == "__main__":
    raise SystemExit(main())
