"""The Scheme's throughput: `train.py --num_workers 0` against 1, 2, 4 and 8 collection workers, with both
transports (shm: forked processes and shared memory; ray: Ray actors on a local cluster), on two workloads.

Workloads (every configuration of a workload learns from the same batch, `--envs` env trajectories per update (8),
with the same hyperparameters; only who steps the envs differs: N workers step envs/N envs each, worker_envs):

    pong     PongNoFrameskip-v4 with `--hparams` (default appo_atari when it is registered, else ppo_atari): 8 x 128
             steps per update. Peer: Stable-Baselines3's PPO, the script of benchmarks/ppo_atari.py (8 envs, 2 torch
             threads), unless --skip_peer.
    sleepy   a "remote simulator": SleepyCartPole-v1 (benchmarks/sleepy_env.py: CartPole-v1 whose step sleeps 2 ms,
             no CPU), `--env sleepy_env:SleepyCartPole-v1` with PYTHONPATH=benchmarks, ppo_cartpole with
             vector_mode=sync (the envs of a process step one after the other): 8 x 32 steps per update. One process
             waits 8 x 2 ms per vector step; workers wait in parallel.

Configurations, per workload: nw0 (`--num_workers 0`: the envs in the learner's process, act, step, learn one after
the other), shmN (`--num_workers N`, forked workers, shared-memory slots) and rayN (the same with `--ray_address`:
the workers are Ray actors), N in `--workers`, and sb3 (pong). Workers ship asynchronously (col_communication=async:
a worker acts on while the learner learns; the policy lag this costs is logged as scheme/policy_lag),
batch_rollouts=0 (one update per envs trajectories). Each run is a whole `train.py` process (seed = round); the
configurations alternate over `--rounds` rounds (workload by workload, shmN next to rayN). No periodic evaluation, no
checkpoint during training; the final evaluation (1 episode) and checkpoint are not timed.

Ray: the script starts ONE local cluster itself before the first run (ray.cluster_utils.Cluster in this process:
one head node with `--ray_cpus` CPUs (default max(8, 4 x cores, the most workers)), `--ray_object_store_mb`, no
dashboard, a temporary directory of its own) and shuts it down at the end (`cluster.shutdown()`: its own processes
only, never `ray stop`).
Its start-up (until the node is up) is reported once and is in no run's time; its daemons (gcs_server, raylet and
their helpers) stay up, idle, during the shm and nw0 runs too. Each actor declares the default ray_worker_cpus=1
(`--override` passes settings such as ray_worker_cpus to every run of ours).

Measured per run (progress.csv rows are logged once per update: log_interval = one batch; the budget is `--steps`
rounded up to whole updates, so that a row is logged at the budget: 20480 is whole for both workloads):
- steps/s: the budget's agent steps divided by the time from the logger's start (imports and the agent
  are built; the workers, forked processes or Ray actors, are started after it, so their start-up is in) to the
  progress.csv row that reaches the budget (logged before the final evaluation). SB3: its steps over the time of
  `model.learn`. steady/s leaves start-up and ramp-up out: steps over time from the first row at `--steady_from`
  (0.2) of the budget to the budget row.
- start-up s: from the train.py process's start (Popen) to its first progress.csv row, i.e. imports, the agent, the
  workers, their first shipments and the first update. The rows' absolute times come from progress.csv's last
  modification (its last row's wall_time_s is the logger's clock at that write).
- policy lag: the mean over the logged rows of scheme_policy_lag (the learner's mean lag, in updates, of its last 100
  shipments); workers only.
- memory, sampled every `--interval` s from /proc: the peak of the summed VmRSS and of the summed PSS (pages shared
  between processes, e.g. forked pages and the shared-memory slots or Ray's object store, split between those that
  map them: the real footprint) of the run's processes: train.py and its descendants, plus, for ray runs, the Ray
  worker processes of this script's cluster (children of its raylet named ray::WorkerActor, ray::IDLE...: not
  children of train.py). "+daemons pss" adds the cluster's own processes (gcs_server, raylet, agents, dashboard,
  monitors; the raylet holds the object store) in the same sample: Ray's whole footprint during the run.
- train cpu s: the run's processes' CPU seconds (utime + stime, start-up included) when the budget row appears (to
  within one sample; a Ray actor's at its last sample); plus the time split of the learner from the budget row:
  perf/wait_s (waiting for a shipment) and perf/learn_s with workers; perf/act_s, perf/env_s, perf/learn_s in one
  process; SB3's collect_rollouts and train.

The summary gives, per configuration, the median and the spread (min-max) over the rounds, ratios of medians vs nw0
(goal: sleepy with 4 workers >= 3x one process) and ray vs shm at the same worker count (goal: Ray costs at most 10%
once started, steady ray/shm >= 0.9), and the goals' lines.

    nice -n 5 python benchmarks/scheme_throughput.py --rounds 3 --steps 20480    # everything: ~1 h on 2 idle cores
    python benchmarks/scheme_throughput.py --workloads sleepy --workers 0 4 --transports shm ray --steps 4000 \\
        --rounds 1 --skip_peer                                                    # a quick look (~1 min)
    python benchmarks/scheme_throughput.py --workloads pong --workers 0 2 --steps 2048 --rounds 1 --skip_peer

Every run's wall time also holds its untimed final evaluation (one episode: a whole Pong game) and checkpoint.

Raw numbers (every run, every process) go to `--output_dir`/scheme_throughput_<time>.json, rewritten after each run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, last_json_line, print_table  # noqa: E402
from ppo_atari import SB3_SCRIPT  # noqa: E402

CLOCK_TICK = os.sysconf("SC_CLK_TCK")
TRANSPORTS = ("shm", "ray")
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")  # the raylet's own helpers: daemons, not workers


@dataclass
class Workload:
    name: str
    title: str
    hparams: str | None  # None: appo_atari if registered, else ppo_atari (or --hparams)
    env: str | None  # --env, None: the set's
    steps_per_update: int  # per env: the set's num_steps (log_interval = envs x this)
    overrides: list[str] = field(default_factory=list)
    peer: bool = False


WORKLOADS = {
    "pong": Workload("pong", "PongNoFrameskip-v4", None, None, 128, peer=True),
    "sleepy": Workload("sleepy", "SleepyCartPole-v1 (2 ms sleep per step)", "ppo_cartpole",
                       "sleepy_env:SleepyCartPole-v1", 32, ["vector_mode=sync"]),
}


# ---------------------------------------------------------------------------------------------------- /proc sampling
def read_proc(pid: int) -> dict | None:
    """ppid, CPU seconds, start tick, command name and VmRSS (MiB) of one process; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3 (state) of proc(5)
    rss_kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return {"ppid": int(fields[1]), "cpu_s": (int(fields[11]) + int(fields[12])) / CLOCK_TICK,
            "start": int(fields[19]), "comm": comm, "rss_mib": rss_kib / 1024}


def read_pss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0.0


def read_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def all_processes() -> dict[int, dict]:
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := read_proc(int(entry))) is not None:
            procs[int(entry)] = info
    return procs


def descendants(procs: dict[int, dict], roots) -> set[int]:
    """The roots (those alive) and all their descendants, from the ppid of every process."""
    children: dict[int, list[int]] = {}
    for pid, info in procs.items():
        children.setdefault(info["ppid"], []).append(pid)
    found, frontier = set(), [r for r in roots if r in procs]
    while frontier:
        pid = frontier.pop()
        if pid not in found:
            found.add(pid)
            frontier += children.get(pid, [])
    return found


def is_ray_worker(cmdline: str) -> bool:
    """A Ray worker process (an actor, or an idle pooled worker), not one of the raylet's agents."""
    head = cmdline.split(" ", 1)[0]
    return (head.startswith("ray::") and head not in RAY_AGENTS) or "default_worker.py" in cmdline


def ray_workers(procs: dict[int, dict], raylet: int | None) -> set[int]:
    """The Ray worker processes of one raylet (its children, and theirs)."""
    if raylet is None:
        return set()
    direct = [pid for pid, info in procs.items() if info["ppid"] == raylet and is_ray_worker(read_cmdline(pid))]
    return descendants(procs, direct)


class TreeMonitor(threading.Thread):
    """Samples a run's processes every `interval` s: train.py's tree plus the Ray worker processes of `raylet`, and
    the daemons of the Ray cluster (this process's other descendants). Keeps the peaks of the summed RSS and PSS of
    the run, and of run + daemons, every process's latest CPU seconds, and a snapshot of those when `done()` first
    returns True (the training budget is reached)."""

    def __init__(self, root: int, interval: float, done=lambda: False, raylet: int | None = None):
        super().__init__(daemon=True)
        self.root, self.interval, self.done, self.raylet = root, interval, done, raylet
        self.peak_rss = self.peak_pss = self.peak_all_rss = self.peak_all_pss = 0.0
        self.peak_processes = self.peak_actors = 0
        self.procs: dict[int, dict] = {}  # pid -> comm, ppid, start, cpu_s (latest seen), kind
        self.train_cpu: dict[int, float] | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def sample(self) -> None:
        procs = all_processes()
        tree = descendants(procs, [self.root])
        if not tree:
            return
        actors = ray_workers(procs, self.raylet) - tree
        run = tree | actors
        daemons = (descendants(procs, [os.getpid()]) - run - {os.getpid()}) if self.raylet is not None else set()
        pss = {pid: read_pss_mib(pid) for pid in run | daemons}
        rss = sum(procs[p]["rss_mib"] for p in run)
        run_pss = sum(pss[p] for p in run)
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, run_pss)
        self.peak_all_rss = max(self.peak_all_rss, rss + sum(procs[p]["rss_mib"] for p in daemons))
        self.peak_all_pss = max(self.peak_all_pss, run_pss + sum(pss[p] for p in daemons))
        self.peak_processes = max(self.peak_processes, len(run))
        self.peak_actors = max(self.peak_actors, len(actors))
        for pid in run:
            info = procs[pid]
            kind = "ray" if pid in actors else ("main" if pid == self.root else "child")
            self.procs[pid] = {**{k: info[k] for k in ("comm", "ppid", "start", "cpu_s")}, "kind": kind}
            if kind == "ray":
                self.procs[pid]["cmd"] = read_cmdline(pid)[:60]
        if self.train_cpu is None and self.done():
            self.train_cpu = {pid: p["cpu_s"] for pid, p in self.procs.items()}

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def processes(self) -> list[dict]:
        """Each process seen, the root first, then in start order: kind, pid, command, train and final CPU s."""
        rows = []
        for pid, p in sorted(self.procs.items(), key=lambda kv: (kv[0] != self.root, kv[1]["start"])):
            train = (self.train_cpu or {}).get(pid)
            rows.append({"kind": p["kind"], "pid": pid, "comm": p.get("cmd") or p["comm"], "ppid": p["ppid"],
                         "train_cpu_s": train, "cpu_s": p["cpu_s"]})
        return rows


def run_monitored(cmd: list[str], interval: float, env: dict, done=lambda: False, raylet: int | None = None) -> dict:
    """Run `cmd` (from the repository root) with its processes sampled while it runs. A command that fails gives
    `failed` and its output's tail instead of exiting."""
    t_start = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
    monitor = TreeMonitor(proc.pid, interval, done, raylet)
    monitor.start()
    try:
        out = proc.stdout.read()
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): stop the run first (train.py stops its workers)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        monitor.stop()
        raise
    monitor.stop()  # before wait4 reaps the root: its /proc entry is still there for the last sample
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    return {"failed": code != 0, "exit_code": code, "start_time": t_start, "wall_s": wall, "stdout": out,
            "peak_tree_rss_mib": monitor.peak_rss, "peak_tree_pss_mib": monitor.peak_pss,
            "peak_with_daemons_rss_mib": monitor.peak_all_rss if raylet else None,
            "peak_with_daemons_pss_mib": monitor.peak_all_pss if raylet else None,
            "max_processes": monitor.peak_processes, "max_ray_workers": monitor.peak_actors,
            "largest_process_rss_mib": usage.ru_maxrss / 1024, "tree_cpu_s": usage.ru_utime + usage.ru_stime,
            "processes": monitor.processes()}


# ---------------------------------------------------------------------------------------------------- Ray
class LocalRay:
    """One local Ray cluster for the whole benchmark (ray.cluster_utils in this process), shut down by `close()`."""

    def __init__(self, num_cpus: int, object_store_mb: int, interval: float):
        from ray.cluster_utils import Cluster

        self.temp = tempfile.mkdtemp(prefix="rlbench", dir="/tmp")  # short: Ray's socket paths stay < 107 chars
        os.makedirs("/tmp/ray", exist_ok=True)  # the head writes its address there
        t0 = time.perf_counter()
        self.cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
            "num_cpus": num_cpus, "object_store_memory": object_store_mb * 1024 * 1024, "include_dashboard": False,
            "temp_dir": self.temp})
        self.cluster.wait_for_nodes()
        self.startup_s = time.perf_counter() - t0
        self.address = self.cluster.address
        self.raylet = self._raylet_pid()
        time.sleep(max(1.0, 5 * interval))  # let the agents come up before the idle footprint is taken
        self.idle = self.footprint()

    def _raylet_pid(self) -> int | None:
        for pid, info in all_processes().items():
            if info["ppid"] == os.getpid() and "/raylet" in read_cmdline(pid).split(" ", 1)[0]:
                return pid
        return None

    def footprint(self) -> dict:
        """The cluster's processes now (this process's descendants): count, summed RSS and PSS (MiB)."""
        procs = all_processes()
        mine = descendants(procs, [os.getpid()]) - {os.getpid()}
        return {"processes": len(mine), "rss_mib": sum(procs[p]["rss_mib"] for p in mine),
                "pss_mib": sum(read_pss_mib(p) for p in mine)}

    def settle(self, timeout: float = 20.0) -> float:
        """Wait (at most `timeout` s) until the last run's actors are gone, so that the next run's samples hold only
        its own; returns the seconds waited."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            procs = all_processes()
            if not any("WorkerActor" in read_cmdline(p) for p in ray_workers(procs, self.raylet)):
                break
            time.sleep(0.2)
        return time.perf_counter() - t0

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self.cluster.shutdown()
        shutil.rmtree(self.temp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- the runs
def read_rows(progress: Path) -> list[dict]:
    if not progress.exists():
        return []
    with progress.open() as f:
        return list(csv.DictReader(f))


def training_rows(rows: list[dict]) -> list[dict]:
    """The rows logged while training: not the final evaluation's (the only one with eval_return_mean here)."""
    return [r for r in rows if r.get("env_steps") and not r.get("eval_return_mean")]


def budget_row(progress: Path, steps: int) -> dict | None:
    """The first training row of progress.csv at or past the budget (logged before the final evaluation), or None
    yet."""
    return next((r for r in training_rows(read_rows(progress)) if int(float(r["env_steps"])) >= steps), None)


def budget(wl: Workload, args) -> int:
    """--steps rounded up to whole updates (envs x the set's num_steps), so that a row is logged at the budget."""
    update = args.envs * wl.steps_per_update
    return -(-args.steps // update) * update


def run_env() -> dict:
    """train.py's environment: sleepy_env importable (benchmarks/ on PYTHONPATH), RAY_ADDRESS never inherited (it
    would turn an shm run into a Ray one; ray runs get --ray_address)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return env


def ours(wl: Workload, hparams_set: str, transport: str, workers: int, seed: int, args, extra: list[str],
         ray: LocalRay | None) -> dict:
    per_worker = args.envs // workers if workers else 0
    name = f"{transport}{workers}" if workers else "nw0"
    steps = budget(wl, args)
    overrides = [*wl.overrides, f"num_envs={args.envs}", f"worker_envs={per_worker}", "batch_rollouts=0",
                 "col_communication=async", f"log_interval={args.envs * wl.steps_per_update}", "eval_interval=0",
                 "checkpoint_interval=1000000000", *extra]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "train.py", "--hparams", hparams_set, "--output_dir", str(out), "--seed", str(seed),
               "--train_steps", str(steps), "--eval_episodes", "1", "--num_workers", str(workers),
               "--hparam_override", ",".join(overrides)]
        if wl.env:
            cmd += ["--env", wl.env]
        use_ray = transport == "ray" and workers > 0
        if use_ray:
            cmd += ["--ray_address", ray.address]
        progress = out / "progress.csv"
        proc = run_monitored(cmd, args.interval, run_env(),
                             done=lambda: budget_row(progress, steps) is not None,
                             raylet=ray.raylet if use_ray else None)
        settled = ray.settle() if use_ray else None
        every_row = read_rows(progress)
        mtime = progress.stat().st_mtime if progress.exists() else None
    rows = training_rows(every_row)
    base = {"workload": wl.name, "config": name, "transport": transport if workers else "one", "seed": seed,
            "num_workers": workers, "worker_envs": per_worker, "hparams": hparams_set,
            **{k: v for k, v in proc.items() if k not in ("stdout", "start_time")}}
    end = next((r for r in rows if int(float(r["env_steps"])) >= steps), None)
    if proc["failed"] or end is None or not rows:
        print(f"run failed ({name}, seed {seed}, exit {proc['exit_code']}): {' '.join(cmd)}\n{proc['stdout'][-3000:]}",
              flush=True)
        return {**base, "failed": True, "output_tail": proc["stdout"][-3000:]}
    first = rows[0]
    steady_from = next(r for r in rows if int(float(r["env_steps"])) >= args.steady_from * steps)
    logger_start = mtime - float(every_row[-1]["wall_time_s"])  # the last row: written at logger start + wall_time_s
    train_s = float(end["wall_time_s"])
    t0, s0 = float(steady_from["wall_time_s"]), int(float(steady_from["env_steps"]))
    done_steps = int(float(end["env_steps"]))
    timers = {k: float(v) for k, v in end.items() if k.startswith(("perf_", "scheme_")) and v not in ("", None)}
    lags = [float(r["scheme_policy_lag"]) for r in rows[:rows.index(end) + 1] if r.get("scheme_policy_lag")]
    return {**base, "steps": done_steps, "train_s": train_s, "steps_per_s": done_steps / train_s,
            "steady_steps_per_s": (done_steps - s0) / (train_s - t0) if train_s > t0 else None,
            "startup_s": logger_start + float(first["wall_time_s"]) - proc["start_time"],
            "logger_start_s": logger_start - proc["start_time"], "first_row_steps": int(float(first["env_steps"])),
            "steady_from_steps": s0, "policy_lag": float(np.mean(lags)) if lags and workers else None,
            "rows": len(rows), "ray_settle_s": settled, "timers": timers}


def sb3(steps: int, seed: int, threads: int, interval: float) -> dict:
    proc = run_monitored([sys.executable, "-c", SB3_SCRIPT, str(seed), str(steps), str(threads)], interval,
                         run_env())
    base = {"workload": "pong", "config": "sb3", "transport": "sb3", "seed": seed, "num_workers": None,
            "worker_envs": None, **{k: v for k, v in proc.items() if k not in ("stdout", "start_time")}}
    if proc["failed"]:
        print(f"sb3 failed (seed {seed}, exit {proc['exit_code']}):\n{proc['stdout'][-3000:]}", flush=True)
        return {**base, "failed": True, "output_tail": proc["stdout"][-3000:]}
    res = last_json_line(proc["stdout"])
    return {**base, "steps": res["steps"], "train_s": res["train_s"], "steps_per_s": res["steps"] / res["train_s"],
            "steady_steps_per_s": None, "startup_s": None, "policy_lag": None,
            "timers": {"collect_s": res["collect_s"], "learn_s": res["learn_s"]}}


def default_hparams() -> str:
    """appo_atari when it is registered (train.py --list), else ppo_atari."""
    listing = subprocess.run([sys.executable, "train.py", "--list"], capture_output=True, text=True, cwd=ROOT).stdout
    line = next((ln for ln in listing.splitlines() if ln.startswith("hparams")), "")
    return "appo_atari" if "appo_atari" in line.split(None, 1)[-1].replace(",", " ").split() else "ppo_atari"


# ---------------------------------------------------------------------------------------------------- the report
def shown_timers(timers: dict) -> dict:
    """The learner's (or SB3's) seconds per part; the JSON keeps the scheme_ keys."""
    return {k.removeprefix("perf_"): v for k, v in timers.items()
            if k.startswith("perf_") or k in ("collect_s", "learn_s")}


def train_cpu(row: dict) -> float:
    return sum(p["train_cpu_s"] if p["train_cpu_s"] is not None else p["cpu_s"] for p in row["processes"])


def brief(row: dict) -> dict:
    """One line of the per-run table."""
    if row.get("failed"):
        return {"workload": row["workload"], "config": row["config"], "seed": row["seed"], "steps/s": "FAILED"}
    return {"workload": row["workload"], "config": row["config"], "seed": row["seed"], "train_s": row["train_s"],
            "steps/s": row["steps_per_s"], "steady/s": row["steady_steps_per_s"], "start-up s": row["startup_s"],
            "lag": row["policy_lag"], "peak rss MiB": row["peak_tree_rss_mib"],
            "peak pss MiB": row["peak_tree_pss_mib"], "+daemons pss": row["peak_with_daemons_pss_mib"],
            "procs": row["max_processes"], "train cpu s": train_cpu(row), "wall_s": row["wall_s"],
            "time split s": " ".join(f"{k}={v:.1f}" for k, v in shown_timers(row["timers"]).items())}


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def spread(values, digits: int = 0) -> str:
    values = [v for v in values if v is not None]
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if values else ""


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(rows: list[dict], configs: list[str]) -> tuple[list[dict], list[dict], dict]:
    """Two tables of one workload (throughput; start-up, lag and cost) and the medians by configuration."""
    groups = {c: [r for r in rows if r["config"] == c and not r.get("failed")] for c in configs}
    groups = {c: g for c, g in groups.items() if g}
    med = {c: {"sps": median([r["steps_per_s"] for r in g]), "steady": median([r["steady_steps_per_s"] for r in g]),
               "startup": median([r["startup_s"] for r in g])} for c, g in groups.items()}
    speed, cost = [], []
    for c, g in groups.items():
        m = med[c]
        shm = med.get("shm" + c[3:]) if c.startswith("ray") else None
        is_ours = c != "sb3"
        speed.append({
            "config": c, "runs": len(g), "steps/s": m["sps"], "min-max": spread([r["steps_per_s"] for r in g]),
            "steady/s": m["steady"], "steady min-max": spread([r["steady_steps_per_s"] for r in g]),
            "vs nw0": ratio(m["sps"], med.get("nw0", {}).get("sps")) if is_ours else None,
            "steady vs nw0": ratio(m["steady"], med.get("nw0", {}).get("steady")) if is_ours else None,
            "ray/shm": ratio(m["sps"], shm["sps"]) if shm else None,
            "steady ray/shm": ratio(m["steady"], shm["steady"]) if shm else None,
            "vs sb3": ratio(m["sps"], med.get("sb3", {}).get("sps")) if is_ours else None,
        })
        timers = {k: median([shown_timers(r["timers"]).get(k) for r in g]) for k in shown_timers(g[0]["timers"])}
        cost.append({
            "config": c, "start-up s": m["startup"], "start-up min-max": spread([r["startup_s"] for r in g], 1),
            "policy lag": median([r["policy_lag"] for r in g]),
            "lag min-max": spread([r["policy_lag"] for r in g], 2),
            "peak rss MiB": median([r["peak_tree_rss_mib"] for r in g]),
            "rss min-max": spread([r["peak_tree_rss_mib"] for r in g]),
            "peak pss MiB": median([r["peak_tree_pss_mib"] for r in g]),
            "pss min-max": spread([r["peak_tree_pss_mib"] for r in g]),
            "+daemons pss": median([r["peak_with_daemons_pss_mib"] for r in g]),
            "train cpu s": median([train_cpu(r) for r in g]),
            "time split (median s)": " ".join(f"{k}={v:.1f}" for k, v in timers.items() if v is not None),
        })
    return speed, cost, med


def goals(med: dict[str, dict], workload: str, workers: list[int]) -> list[str]:
    lines = []
    base = med.get("nw0")
    if workload == "sleepy" and base:
        for t in TRANSPORTS:
            m = med.get(f"{t}4")
            if m:
                r, rs = ratio(m["sps"], base["sps"]), ratio(m["steady"], base["steady"])
                ok = "met" if r is not None and r >= 3 else "NOT met"
                lines.append(f"  {workload}: {t}, 4 workers vs one process (goal >= 3x): {r:.2f}x steps/s"
                             + (f", {rs:.2f}x steady" if rs is not None else "") + f" ({ok} on steps/s)")
    parts = []
    for w in workers:
        ray, shm = med.get(f"ray{w}"), med.get(f"shm{w}")
        if ray and shm and ray["steady"] and shm["steady"]:
            r = ray["steady"] / shm["steady"]
            parts.append(f"{w}: {r:.2f}{'' if r >= 0.9 else ' (NOT met)'}")
    if parts:
        lines.append(f"  {workload}: ray vs shm once started (goal: steady ray/shm >= 0.90): " + ", ".join(parts))
    return lines


# ---------------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--transports", nargs="+", default=list(TRANSPORTS), choices=list(TRANSPORTS))
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 4, 8],
                   help="worker counts (0: the one-process baseline, nw0)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over the configurations (seed = round)")
    p.add_argument("--steps", type=int, default=20_480, help="agent steps per run (default: %(default)s)")
    p.add_argument("--envs", type=int, default=8, help="envs in all (per update): split over the workers")
    p.add_argument("--hparams", default=None, help="pong's set (default: appo_atari if registered, else ppo_atari)")
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. torch_threads=1")
    p.add_argument("--threads", type=int, default=2, help="SB3's torch threads")
    p.add_argument("--skip_peer", action="store_true", help="leave SB3 out")
    p.add_argument("--steady_from", type=float, default=0.2,
                   help="steady/s counts from the first row at this fraction of the budget (default: %(default)s)")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between /proc samples")
    p.add_argument("--ray_cpus", type=int, default=None, help="CPUs of the Ray cluster (default: max(8, 4 x cores, "
                                                               "the most workers))")
    p.add_argument("--ray_object_store_mb", type=int, default=1024, help="the Ray cluster's object store")
    p.add_argument("--output_dir", default=str(ROOT / "benchmarks" / "results"), help="where the JSON goes")
    args = p.parse_args()
    workers = sorted(set(args.workers))
    if any(w < 0 for w in workers) or any(w and args.envs % w for w in workers):
        p.error(f"--workers must be 0 or divisors of --envs {args.envs}: got {workers}")
    extra = [x for x in args.override.split(",") if x]
    plan = {}
    for name in args.workloads:
        configs = ["nw0"] if 0 in workers else []
        configs += [f"{t}{w}" for w in workers if w for t in TRANSPORTS if t in args.transports]
        plan[name] = configs + (["sb3"] if WORKLOADS[name].peer and not args.skip_peer else [])
    hparams_set = {name: (wl.hparams or args.hparams or default_hparams()) if name in plan else None
                   for name, wl in WORKLOADS.items()}
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"scheme_throughput_{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {"workloads": {n: {"hparams": hparams_set[n], "configs": c, "steps": budget(WORKLOADS[n], args)}
                          for n, c in plan.items()},
            "steps": args.steps, "rounds": args.rounds, "envs": args.envs, "override": args.override,
            "sb3_threads": args.threads, "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
            "niceness": os.nice(0), "interval_s": args.interval}
    needs_ray = "ray" in args.transports and any(workers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the cluster is shut down (finally)
    ray = None
    rows: list[dict] = []
    try:
        if needs_ray:
            os.environ["PYTHONPATH"] = run_env()["PYTHONPATH"]  # the actors import sleepy_env too
            cpus = args.ray_cpus or max(8, 4 * (os.cpu_count() or 1), max(workers))
            ray = LocalRay(cpus, args.ray_object_store_mb, args.interval)
            meta["ray"] = {"address": ray.address, "num_cpus": cpus, "object_store_mb": args.ray_object_store_mb,
                           "startup_s": ray.startup_s, "idle_daemons": ray.idle}
            print(f"Ray cluster at {ray.address} ({cpus} CPUs) up in {ray.startup_s:.1f} s; its {ray.idle['processes']}"
                  f" idle processes: rss {ray.idle['rss_mib']:.0f} MiB, pss {ray.idle['pss_mib']:.0f} MiB", flush=True)
        print(f"{args.envs} envs, {args.rounds} rounds of "
              + "; ".join(f"{n} ({hparams_set[n]}, {budget(WORKLOADS[n], args)} steps): {' '.join(c)}"
                          for n, c in plan.items())
              + f"; raw numbers -> {json_path}", flush=True)
        for r in range(args.rounds):
            for name, configs in plan.items():
                for c in configs:
                    if c == "sb3":
                        rows.append(sb3(budget(WORKLOADS[name], args), r, args.threads, args.interval))
                    else:
                        transport, n = ("one", 0) if c == "nw0" else (c[:3], int(c[3:]))
                        rows.append(ours(WORKLOADS[name], hparams_set[name], transport, n, r, args, extra, ray))
                    print_table([brief(rows[-1])], list(brief(rows[-1])))
                    print(flush=True)
                    json_path.write_text(json.dumps({**meta, "loadavg_end": os.getloadavg(), "runs": rows},
                                                    indent=1))
        if ray is not None:
            meta["ray"]["daemons_end"] = ray.footprint()
    finally:
        if ray is not None:
            ray.close()
    json_path.write_text(json.dumps({**meta, "loadavg_end": os.getloadavg(), "runs": rows}, indent=1))
    report(rows, plan, hparams_set, args, meta, workers, json_path)


def report(rows, plan, hparams_set, args, meta, workers, json_path) -> None:
    print(f"\n{args.rounds} rounds, {args.envs} envs per update split over the "
          f"workers" + (f", ours with {args.override}" if args.override else "")
          + f"; load average {meta['loadavg_start'][0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    if "ray" in meta:
        ray = meta["ray"]
        print(f"Ray cluster: start-up {ray['startup_s']:.1f} s (once; in no run's time); idle daemons "
              f"{ray['idle_daemons']['processes']} processes, rss {ray['idle_daemons']['rss_mib']:.0f} MiB, "
              f"pss {ray['idle_daemons']['pss_mib']:.0f} MiB")
    lines = []
    for name, configs in plan.items():
        group = [r for r in rows if r["workload"] == name]
        if not group:
            continue
        title = WORKLOADS[name].title
        print(f"\n=== {name}: {title}, {hparams_set[name]}, {budget(WORKLOADS[name], args)} agent steps per run ===")
        print("per run (train cpu s: the run's processes, Ray workers included, at the budget row)")
        briefs = [brief(r) for r in group]
        for c in configs:
            these = [b for b in briefs if b["config"] == c]
            if these:
                print_table(these, list(max(these, key=len)))
        speed, cost, med = summarize(group, configs)
        if not speed:
            continue
        print(f"\n{name} throughput (agent steps/s medians over the rounds and their min-max; ratios of medians)")
        print_table(speed, list(speed[0]))
        print(f"\n{name} start-up, policy lag, memory (peak over the run; medians over the rounds) and CPU")
        print_table(cost, list(cost[0]))
        lines += goals(med, name, workers)
    if lines:
        print("\ngoals:")
        print("\n".join(lines))
    print(f"\nraw numbers: {json_path}")


if __name__ == "__main__":
    main()
