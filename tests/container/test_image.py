"""The `cpu` image of k8s/Dockerfile, built here and run as Kubernetes' `restricted` Pod Security Standard runs a
pod: uid/gid 1000, a read-only root filesystem with the run folder and /tmp as volumes, every capability dropped,
no-new-privileges. train.py is the container's PID 1.

- `docker stop` mid-run (SIGTERM to PID 1, as the kubelet sends it) ends in a checkpoint and exit 143, and the same
  command resumes from the volume.
- Two containers on a docker network run DPPO as a PyTorchJob's pods do (MASTER_ADDR, MASTER_PORT, RANK,
  WORLD_SIZE): stopping either one (a drained Master, an evicted Worker) ends both with a checkpoint and exit 143, the
  status the training operator retries, after which both, started again, resume.

No registry is reachable here: the base image comes from Debian's packages and the Python packages from a wheelhouse
(k8s/build-base.sh, run once; docker keeps the images, and its layer cache makes a rebuild of unchanged code quick).
Marked `container`; skipped where no docker daemon answers, unless RL_REQUIRE_CONTAINER=1 (CI) makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "rl:cpu-test"
BASE = "rl-base:bookworm"
NEVER_ENDS = "10000000"
RESTRICTED = ["--user", "1000:1000", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run([shutil.which("docker") or "docker", *args], capture_output=True, text=True,
                         timeout=timeout)
    if check and res.returncode:
        raise AssertionError(f"docker {' '.join(args[:3])} ... exited {res.returncode}: {res.stderr[-2000:]}")
    return res


def daemon_answers() -> str | None:
    """None when a docker daemon answers, else why not."""
    if shutil.which("docker") is None:
        return "no docker client (apt-get install docker.io)"
    try:
        res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                             timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info timed out"
    return None if res.returncode == 0 else f"no docker daemon answers: {res.stderr.strip()[:300]}"


@pytest.fixture(scope="session")
def image() -> str:
    why = daemon_answers()
    if why is not None:
        if os.environ.get("RL_REQUIRE_CONTAINER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    if docker("image", "inspect", BASE, check=False).returncode or not any((ROOT / ".wheels").glob("*.whl")):
        res = subprocess.run(["bash", str(ROOT / "k8s" / "build-base.sh")], cwd=ROOT, capture_output=True,
                             text=True, timeout=1800)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    began = time.monotonic()
    docker("build", "-q", "-f", "k8s/Dockerfile", "--target", "cpu", "--build-arg", f"BASE={BASE}", "-t", IMAGE,
           str(ROOT), timeout=2400)
    print(f"image {IMAGE} built in {time.monotonic() - began:.0f} s")
    return IMAGE


class Containers:
    """Containers and networks made by one test, removed at its end whatever happened."""

    def __init__(self, tmp_path: Path):
        self.tag = uuid.uuid4().hex[:8]
        self.names: list[str] = []
        self.networks: list[str] = []
        self.tmp_path = tmp_path

    def folder(self, name: str) -> Path:
        """A host folder for a volume, writable by uid 1000 (as a volume with fsGroup 1000 is)."""
        path = self.tmp_path / name
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 1000, 1000)
        return path

    def network(self) -> str:
        name = f"rlnet-{self.tag}"
        docker("network", "create", name)
        self.networks.append(name)
        return name

    def run(self, name: str, image: str, runs: Path, args: list[str], env: dict | None = None,
            network: str | None = None, alias: str | None = None) -> str:
        name = f"{name}-{self.tag}"
        tmp = self.folder(f"tmp-{name}")
        flags = [*RESTRICTED, "-v", f"{runs}:/runs", "-v", f"{tmp}:/tmp"]
        for key, value in (env or {}).items():
            flags += ["-e", f"{key}={value}"]
        if network:
            flags += ["--network", network]
        if alias:  # another name on the network, as a Service gives a pod
            flags += ["--network-alias", alias]
        docker("run", "-d", "--name", name, *flags, image, "python", "train.py", *args)
        self.names.append(name)
        return name

    def exit_code(self, name: str, timeout: float = 180) -> int:
        res = docker("wait", name, timeout=timeout)
        return int(res.stdout.strip())

    def logs(self, name: str) -> str:
        res = docker("logs", name, check=False)
        return res.stdout + res.stderr

    def pid1(self, name: str) -> str:
        return docker("exec", name, "cat", "/proc/1/cmdline").stdout.replace("\0", " ").strip()

    def close(self) -> None:
        for name in self.names:
            docker("rm", "-f", name, check=False)
        for network in self.networks:
            docker("network", "rm", network, check=False)


@pytest.fixture
def containers(tmp_path):
    c = Containers(tmp_path)
    yield c
    c.close()


def wait_for_rows(path: Path, c: Containers, names: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and len(path.read_text().splitlines()) >= 3):
        running = docker("inspect", "-f", "{{.State.Running}}", *names).stdout.split()
        assert all(r == "true" for r in running), "\n".join(c.logs(n)[-2000:] for n in names)
        assert time.monotonic() < deadline, "no progress: " + "\n".join(c.logs(n)[-2000:] for n in names)
        time.sleep(0.5)


def newest_step(out: Path) -> int:
    return max(int(p.stem.split("_")[1]) for p in (out / "checkpoints").glob("ckpt_*.pt"))


TRAIN = ["--hparams", "ppo_cartpole", "--eval_episodes", "2", "--hparam_override",
         "log_interval=256,checkpoint_interval=10000000"]


def test_docker_stop_checkpoints_through_pid_1_exits_143_and_the_command_resumes(image, containers):
    runs = containers.folder("runs")
    args = [*TRAIN, "--output_dir", "/runs/pong"]
    name = containers.run("rl-one", image, runs, [*args, "--train_steps", NEVER_ENDS])
    wait_for_rows(runs / "pong" / "progress.csv", containers, [name])
    assert containers.pid1(name).startswith("python train.py")  # no init in between: train.py is PID 1
    docker("stop", "-t", "60", name)  # SIGTERM to PID 1, SIGKILL after 60 s
    assert containers.exit_code(name) == 143, containers.logs(name)[-3000:]
    assert "SIGTERM: saved a checkpoint" in containers.logs(name)
    step = newest_step(runs / "pong")
    again = containers.run("rl-again", image, runs, [*args, "--train_steps", str(step + 512)])
    assert containers.exit_code(again) == 0, containers.logs(again)[-3000:]
    assert f"resuming from step {step}" in containers.logs(again)
    assert (runs / "pong" / "eval.json").exists()


@pytest.mark.parametrize("victim", [0, 1], ids=["master_stopped", "worker_stopped"])
def test_two_containers_run_dppo_as_a_pytorchjob_and_a_stop_of_either_is_retried_and_resumed(image, containers,
                                                                                              victim):
    runs = containers.folder("runs")  # the shared run folder (a ReadWriteMany claim)
    network = containers.network()
    master = f"rl-master-{containers.tag}"

    def group(budget: str, stage: str) -> list[str]:
        env = {"WORLD_SIZE": "2", "MASTER_ADDR": master, "MASTER_PORT": "23456"}
        return [containers.run(f"rl-{stage}-master" if rank == 0 else f"rl-{stage}-worker", image, runs,
                               [*TRAIN, "--output_dir", "/runs/dppo", "--train_steps", budget],
                               env={**env, "RANK": str(rank)}, network=network,
                               alias=master if rank == 0 else None) for rank in range(2)]

    # the operator gives the Master a Service named after the job: here a network alias of the master's container
    names = group(NEVER_ENDS, "first")
    wait_for_rows(runs / "dppo" / "progress.csv", containers, names)
    docker("stop", "-t", "60", names[victim])
    codes = [containers.exit_code(n) for n in names]
    logs = [containers.logs(n) for n in names]
    assert codes == [143, 143], "\n".join(x[-2000:] for x in logs)  # both retried by restartPolicy ExitCode
    assert "saved a checkpoint at step" in logs[0] and "rank 1: SIGTERM" in logs[1]
    step = newest_step(runs / "dppo")
    for n in names:
        docker("rm", "-f", n)
    names = group(str(step + 512), "again")  # the operator's new pods: the same command
    codes = [containers.exit_code(n) for n in names]
    logs = [containers.logs(n) for n in names]
    assert codes == [0, 0], "\n".join(x[-2000:] for x in logs)
    assert f"resuming from step {step}" in logs[0]
