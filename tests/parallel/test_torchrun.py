"""DPPO across machines without Ray: train.py started once per rank by torchrun or Kubeflow's PyTorchJob, which set
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_RANK). Here the ranks are processes on this machine given those
variables, as torchrun gives them: they keep one model (equal weights after every update), rank 0 alone writes the run
folder, a second start resumes, a rank that dies ends the others with one line and exit 129, a SIGTERM to any rank
stops the group with a checkpoint and exit 143 on every rank (which a PyTorchJob retries), and bad variables are one
line and exit 2.
"""

from __future__ import annotations

import csv
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hparams  # noqa: F401 - registers the sets (also in the spawned ranks, which import this module)
from rl.errors import ConfigError
from rl.parallel.collective import EXIT_GROUP_LOST, GroupEnv, free_port, group_from_env
from rl.registry import hparams as sets
from rl.resolve import read_record

ROOT = Path(__file__).resolve().parents[2]
NEVER_ENDS = 10_000_000  # the runs that are killed


def group_env(rank: int, port: int, world: int = 2) -> dict[str, str]:
    """What torchrun sets for a rank of a group on this machine (PyTorchJob sets the same but LOCAL_RANK)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "LOCAL_RANK": str(rank)}


def start(rank: int, port: int, out: Path, steps: int, logs: Path, override: str = "",
          eval_episodes: int = 2) -> subprocess.Popen:
    """`python train.py` as one rank; its stdout and stderr go to files under `logs` (read while it runs)."""
    logs.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, str(ROOT / "train.py"), "--hparams", "ppo_cartpole", "--output_dir", str(out),
            "--train_steps", str(steps), "--eval_episodes", str(eval_episodes)]
    if override:
        args += ["--hparam_override", override]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WORLD_SIZE")}
    return subprocess.Popen(args, cwd=ROOT, env={**env, **group_env(rank, port)},
                            stdout=open(logs / f"rank{rank}.out", "w"), stderr=open(logs / f"rank{rank}.err", "w"))


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def read(logs: Path, rank: int, stream: str = "out") -> str:
    return (logs / f"rank{rank}.{stream}").read_text()


# ---------------------------------------------------------------------------------------------------- the variables
def test_the_group_is_read_from_torchruns_and_pytorchjobs_variables():
    assert group_from_env({}) is None and group_from_env({"WORLD_SIZE": "1"}) is None  # a single process
    assert group_from_env(group_env(1, 29500)) == GroupEnv(1, 2, 1, "127.0.0.1:29500")
    pytorchjob = {k: v for k, v in group_env(1, 23456, world=3).items() if k != "LOCAL_RANK"}  # one process a pod
    assert group_from_env(pytorchjob) == GroupEnv(1, 3, 0, "127.0.0.1:23456")


@pytest.mark.parametrize("change, named", [
    ({"MASTER_ADDR": None}, "MASTER_ADDR"),
    ({"RANK": None}, "RANK"),
    ({"RANK": "5"}, "RANK must be an integer 0..1"),
    ({"RANK": "-1"}, "RANK must be an integer 0..1"),
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer >= 1"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be an integer >= 1"),
    ({"MASTER_PORT": None}, "MASTER_PORT"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT must be an integer 1..65535"),
    ({"LOCAL_RANK": "x"}, "LOCAL_RANK must be an integer >= 0"),
])
def test_a_missing_or_malformed_variable_is_a_config_error_naming_it(change, named):
    env = {**group_env(0, 29500), **change}
    with pytest.raises(ConfigError, match=named):
        group_from_env({k: v for k, v in env.items() if v is not None})


def test_the_group_decides_num_grad_workers_and_refuses_ray_and_async(capsys):
    hp = sets["ppo_cartpole"]()
    GroupEnv(0, 4, 0, "h:1").settle(hp)
    assert hp.num_grad_workers == 4 and hp.grad_communication == "sync"
    assert "num_grad_workers 1 -> 4" in capsys.readouterr().out  # rank 0 says so, once
    follower = sets["ppo_cartpole"]()
    GroupEnv(1, 4, 0, "h:1").settle(follower)
    assert follower.num_grad_workers == 4 and capsys.readouterr().out == ""
    for override, named in (("ray_address=auto", "ray_address"), ("grad_communication=async", "grad_communication")):
        with pytest.raises(ConfigError, match=named):
            GroupEnv(0, 2, 0, "h:1").settle(sets["ppo_cartpole"]().parse(override))


@pytest.mark.parametrize("env, flags, named", [
    ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "29500"}, (), "MASTER_ADDR"),
    ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, (), "RANK"),
    (group_env(1, 29500), ("--ray_address", "auto"), "ray_address"),
    (group_env(0, 29500), ("--copies", "2"), "--copies"),
])
def test_train_py_with_bad_group_settings_says_so_in_one_line_and_writes_nothing(tmp_path, train_cli, env, flags,
                                                                                named):
    out = tmp_path / "run"
    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WORLD_SIZE", "RANK")}
    res = train_cli("--hparams", "ppo_cartpole", "--output_dir", str(out), "--train_steps", "512", *flags,
                    env={**clean, **env}, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], res.stderr
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------- one model
def weights(agent) -> str:
    digest = hashlib.sha256()
    for _, net in sorted(agent.networks().items()):
        for p in net.parameters():
            digest.update(p.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def _rank_main(rank: int, port: int, out: str, record: str) -> None:
    """One rank built from the public pieces train() uses, recording its weights after every update."""
    os.environ.update(group_env(rank, port))
    from rl.parallel.collective import GradientGroup, GroupTrainer
    from rl.trainer import make_trainer, prepare

    member = group_from_env(os.environ)
    hp = sets["ppo_cartpole"]().parse("train_steps=3072,epochs=2,batch_size=128,lr_decay=false,group_timeout_s=60")
    if rank:  # a rank that resolved other settings (another view of the run folder) takes rank 0's
        hp.epochs = 3
    member.settle(hp)
    group = GradientGroup(member.rank, member.world, "env://", hp.device, hp.group_timeout_s, member.local_rank)
    hp = group.settings(hp)
    env, agent, stats = prepare(hp, Path(out), member.rank)
    group.join(agent)
    trainer = GroupTrainer(make_trainer(hp, env, agent, stats, seed=hp.seed + 7919 * rank), agent, group,
                           hp.train_steps)
    seen = [(agent.grad_steps, agent.env_steps, weights(agent))]
    while not trainer.finished(0):
        trainer.step()
        if agent.grad_steps != seen[-1][0]:
            seen.append((agent.grad_steps, agent.env_steps, weights(agent)))
    trainer.close()
    group.close()
    Path(record).write_text(json.dumps(seen))


def test_two_ranks_hold_equal_weights_after_every_update(tmp_path):
    port, ctx = free_port(), mp.get_context("spawn")  # fresh interpreters, as torchrun starts them
    procs = [ctx.Process(target=_rank_main, args=(r, port, str(tmp_path / "run"), str(tmp_path / f"{r}.json")))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1]  # the same weights (and counts) after every update, on both ranks
    steps = ranks[0]
    assert len(steps) >= 4 and len({w for _, _, w in steps}) == len(steps)  # and they changed at every update
    assert steps[-1][1] >= 3072  # the group's env steps: each rank counts its peer's
    assert not (tmp_path / "run").exists()  # the pieces write nothing; train() on rank 0 does


# ---------------------------------------------------------------------------------------------------- train.py
def test_two_train_py_ranks_write_one_run_and_resume_it(tmp_path):
    out, elsewhere = tmp_path / "run", tmp_path / "rank1_folder"
    # rank 1 is pointed at a folder of its own, which must stay absent: it needs nothing from the run folder on a
    # fresh run (rank 0's settings and state reach it through the group) and writes nothing anywhere
    logs = tmp_path / "first"
    port = free_port()
    codes = finish([start(0, port, out, 2048, logs), start(1, port, elsewhere, 2048, logs)])
    assert codes == [0, 0], read(logs, 0, "err")[-3000:] + read(logs, 1, "err")[-3000:]
    assert "num_grad_workers 1 -> 2" in read(logs, 0)
    assert "rank 1 of 2: training with rank 0" in read(logs, 1)
    assert not elsewhere.exists()
    assert (out / "hparams.json").exists() and (out / "eval.json").exists() and (out / "progress.csv").exists()
    assert read_record(out / "hparams.json")["hparams"]["num_grad_workers"] == 2
    assert sorted((out / "checkpoints").glob("ckpt_*.pt"))
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= 2048

    logs = tmp_path / "second"  # the same two commands with a larger budget: both read the shared run folder
    port = free_port()
    codes = finish([start(0, port, out, 4096, logs), start(1, port, out, 4096, logs)])
    assert codes == [0, 0], read(logs, 0, "err")[-3000:] + read(logs, 1, "err")[-3000:]
    assert "resuming from step" in read(logs, 0)
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= 4096
    assert "Traceback" not in read(logs, 0, "err") + read(logs, 1, "err")


def wait_for_training(logs: Path, procs: list[subprocess.Popen], timeout: float = 120) -> None:
    """Until rank 0 logged a row (the group has stepped together)."""
    deadline = time.monotonic() + timeout
    while "steps/s" not in read(logs, 0):
        assert all(p.poll() is None for p in procs), read(logs, 0, "err") + read(logs, 1, "err")
        assert time.monotonic() < deadline, "the group never started training"
        time.sleep(0.2)


@pytest.mark.parametrize("victim, how", [(1, signal.SIGKILL), (0, signal.SIGKILL), (1, signal.SIGSTOP)],
                         ids=["rank1_killed", "rank0_killed", "rank1_silent"])
def test_a_rank_that_dies_ends_the_other_with_one_line_and_exit_129(tmp_path, victim, how):
    """Killed: its sockets close and the survivor's next all-reduce fails at once. Stopped (a node gone without
    closing its connections): the survivor waits group_timeout_s."""
    logs, out, port = tmp_path / "logs", tmp_path / "run", free_port()
    override = "log_interval=256,group_timeout_s=5"
    procs = [start(r, port, out, NEVER_ENDS, logs, override) for r in range(2)]
    try:
        wait_for_training(logs, procs)
        procs[victim].send_signal(how)
        survivor = 1 - victim
        began = time.monotonic()
        code = procs[survivor].wait(120)
        waited = time.monotonic() - began
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    err = read(logs, survivor, "err")
    assert code == EXIT_GROUP_LOST == 129, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]
    assert errors[0].startswith(f"error: rank {survivor} lost its group (")
    assert errors[0].endswith("; the job restarts the group from the last checkpoint")
    if how == signal.SIGSTOP:
        assert "Timed out" in errors[0] and waited >= 4
    else:
        assert waited < 30


def test_sigterm_to_every_rank_stops_the_group_with_one_checkpoint(tmp_path):
    """What torchrun and a deleted PyTorchJob do: SIGTERM to every rank. The stop rides the next all-reduce, rank 0
    checkpoints, and every rank exits 143 (a status the job retries)."""
    logs, out, port = tmp_path / "logs", tmp_path / "run", free_port()
    procs = [start(r, port, out, NEVER_ENDS, logs, "log_interval=256") for r in range(2)]
    try:
        wait_for_training(logs, procs)
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        codes = finish(procs, timeout=120)
    finally:
        finish(procs, timeout=1)
    assert codes == [128 + signal.SIGTERM] * 2, read(logs, 0, "err")[-3000:] + read(logs, 1, "err")[-3000:]
    assert "SIGTERM: saved a checkpoint" in read(logs, 0)
    assert "error:" not in read(logs, 0, "err") + read(logs, 1, "err")
    assert sorted((out / "checkpoints").glob("ckpt_*.pt"))


def newest_step(out: Path) -> int:
    return max(int(p.stem.split("_")[1]) for p in (out / "checkpoints").glob("ckpt_*.pt"))


def evaluating(progress: Path, last_row: int):
    """Rank 0 is in an evaluation: it logged a row every group step up to `last_row`, and none for 3 s."""
    rows = progress.read_text().split() if progress.exists() else []
    return len(rows) > 1 and int(rows[-1].split(",")[0]) >= last_row and time.time() - progress.stat().st_mtime > 3


@pytest.mark.parametrize("victim", [0, 1], ids=["master_drained", "worker_evicted_while_the_master_evaluates"])
def test_sigterm_to_one_rank_checkpoints_exits_143_on_every_rank_and_the_group_resumes(tmp_path, victim):
    """Kubernetes sends SIGTERM to one pod: the Master's node is drained, or a Worker is evicted. The signalled rank
    flags the stop in the next all-reduce, rank 0 checkpoints, and both ranks exit 143: a PyTorchJob (restartPolicy
    ExitCode) recreates every pod that failed with 128 or more, and a rank that exited 0 would stay Succeeded while
    the new Master waited for it alone. Started again, both ranks resume from rank 0's checkpoint.
    The Worker is evicted while the Master plays an evaluation (10,000 games) and the Worker's rank waits for
    it in an all-reduce: its stop reaches rank 0 through the group's store, rank 0 gives the evaluation up (it is not
    logged), and the group checkpoints within the pod's grace period."""
    logs, out, port = tmp_path / "logs", tmp_path / "run", free_port()
    override = "log_interval=256,checkpoint_interval=10000000"  # the only checkpoint is the one the stop writes
    if victim:  # 512 agent steps a group step; the first evaluation at 2048
        procs = [start(r, port, out, NEVER_ENDS, logs, override + ",eval_interval=2048", eval_episodes=10_000)
                 for r in range(2)]
    else:
        procs = [start(r, port, out, NEVER_ENDS, logs, override) for r in range(2)]
    try:
        wait_for_training(logs, procs)
        deadline = time.monotonic() + 120
        while victim and not evaluating(out / "progress.csv", 1536) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), read(logs, 0, "err") + read(logs, 1, "err")
            time.sleep(0.2)
        procs[victim].send_signal(signal.SIGTERM)
        codes = finish(procs, timeout=60 if victim else 120)
    finally:
        finish(procs, timeout=1)
    both = read(logs, 0, "err")[-3000:] + read(logs, 1, "err")[-3000:]
    assert codes == [128 + signal.SIGTERM] * 2, both
    assert "error:" not in both and "Traceback" not in both
    elsewhere = "" if victim == 0 else " (on another rank of the group)"
    assert f"SIGTERM{elsewhere}: saved a checkpoint at step" in read(logs, 0)
    assert "rank 1: SIGTERM" in read(logs, 1)
    step = newest_step(out)
    assert step > 0
    if victim:  # the evaluation's step, and the steps that carry the stop; the evaluation was not logged
        assert 2048 <= step <= 2048 + 3 * 512, step
        assert not any(r.get("eval_return_mean") for r in csv.DictReader(open(out / "progress.csv")))

    logs = tmp_path / "again"  # what the operator does next: both pods again, with the same command
    port = free_port()
    codes = finish([start(r, port, out, step + 1024, logs, override) for r in range(2)])
    assert codes == [0, 0], read(logs, 0, "err")[-3000:] + read(logs, 1, "err")[-3000:]
    assert f"resuming from step {step}" in read(logs, 0)
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= step + 1024


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun is not installed next to this Python")
def test_torchrun_starts_the_group(tmp_path):
    """The real launcher (its workers meet at the agent's store): one run folder, written by rank 0."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "WORLD_SIZE", "RANK")}
    res = subprocess.run([str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nnodes", "1",
                          "--nproc-per-node", "2", str(ROOT / "train.py"), "--hparams", "ppo_cartpole",
                          "--output_dir", str(out), "--train_steps", "2048", "--eval_episodes", "2"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rank 1 of 2: training with rank 0" in res.stdout and "num_grad_workers 1 -> 2" in res.stdout
    assert json.loads((out / "eval.json").read_text())["env_steps"] >= 2048
    assert sorted((out / "checkpoints").glob("ckpt_*.pt"))
