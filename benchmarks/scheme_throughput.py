"""Asynchronous collection on Pong: agent steps/s of `train.py --num_workers 0, 1, 2` and of SB3's PPO, side by side.

Every configuration learns from the same batch (8 env trajectories of the set's num_steps per update) with the same
hyperparameters; only who steps the envs differs:

    nw0        --num_workers 0: 8 envs in the learner's process (act, step, learn one after the other)
    nw1        --num_workers 1: one worker process with 8 envs, the learner in the main process
    nw2        --num_workers 2: two workers with 4 envs each (worker_envs=4)
    sb3        Stable-Baselines3's PPO, the script of benchmarks/ppo_atari.py (8 envs, 2 torch threads)

Workers ship asynchronously (col_communication=async): a worker fills its second slot while the learner learns from
the first, so acting and learning overlap (the policy lag this costs is logged: scheme/policy_lag). The set is
`--hparams` (default appo_atari when it is registered, else ppo_atari). The configurations run one after the other,
each a whole `train.py` process, and alternate over `--rounds` rounds (seed = round). There is no periodic
evaluation, no checkpoint during training, and the final evaluation (1 episode) is not timed.

Measured per run:
- train steps/s: the budget divided by the time from the logger's start (the agent is built; the workers are
  forked after it, so their start-up is in) to the progress.csv row that reaches the budget, written before the
  final evaluation. SB3: its steps over the time of `model.learn`. "steady steps/s" (ours) leaves the start-up out:
  from the first logged update to the last.
- where the learner's time goes, from that row: perf/wait_s (waiting for a shipment), perf/learn_s, perf/copy_s
  (slot -> rollout) with workers; perf/act_s, perf/env_s, perf/learn_s in one process. SB3: collect_rollouts, train.
- the whole process tree, sampled every `--interval` s from /proc: the peak of the summed VmRSS (a forked worker's
  pages shared with the learner, and the shared-memory slots, count in each process), the peak of the summed PSS
  (shared pages split between the processes that map them: the tree's real footprint), and each process's CPU
  seconds (utime + stime, start-up included) when the budget row appears (train CPU; to within one sample) and at
  its end; plus wait4's CPU of the whole tree (the learner reaps its workers, so their time is in it; start-up and
  final evaluation included) and the max RSS of its largest process.

    nice -n 5 python benchmarks/scheme_throughput.py --rounds 3 --steps 20480
    python benchmarks/scheme_throughput.py --rounds 1 --steps 4096 --configs nw0 nw2 --skip_peer   # a quick look

Raw numbers (every run, every process) go to `--output_dir`/scheme_throughput_<time>.json, rewritten after each run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, last_json_line, print_table  # noqa: E402
from ppo_atari import SB3_SCRIPT  # noqa: E402

CLOCK_TICK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# name -> (num_workers, envs per worker); the total is --envs for every one of them
CONFIGS = {"nw0": (0, 1.0), "nw1": (1, 1.0), "nw2": (2, 0.5)}


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


def process_tree(root: int) -> dict[int, dict]:
    """The root process and all its descendants, from the ppid of every process in /proc."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := read_proc(int(entry))) is not None:
            procs[int(entry)] = info
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in procs:
            tree[pid] = procs[pid]
            frontier += [p for p, info in procs.items() if info["ppid"] == pid]
    return tree


class TreeMonitor(threading.Thread):
    """Samples a process tree every `interval` s: peak summed RSS and PSS, every process's latest CPU seconds, and a
    snapshot of those when `done()` first returns True (the training budget is reached)."""

    def __init__(self, root: int, interval: float, done=lambda: False):
        super().__init__(daemon=True)
        self.root, self.interval, self.done = root, interval, done
        self.peak_rss = self.peak_pss = 0.0
        self.peak_processes = 0
        self.procs: dict[int, dict] = {}  # pid -> comm, ppid, start, cpu_s (latest seen)
        self.train_cpu: dict[int, float] | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def sample(self) -> None:
        tree = process_tree(self.root)
        if not tree:
            return
        self.peak_rss = max(self.peak_rss, sum(p["rss_mib"] for p in tree.values()))
        self.peak_pss = max(self.peak_pss, sum(read_pss_mib(pid) for pid in tree))
        self.peak_processes = max(self.peak_processes, len(tree))
        for pid, info in tree.items():
            self.procs[pid] = {k: info[k] for k in ("comm", "ppid", "start", "cpu_s")}
        if self.train_cpu is None and self.done():
            self.train_cpu = {pid: p["cpu_s"] for pid, p in self.procs.items()}

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def processes(self) -> list[dict]:
        """Each process seen, the root first, then in start order: role, pid, command, train and final CPU s."""
        rows = []
        for i, (pid, p) in enumerate(sorted(self.procs.items(), key=lambda kv: (kv[0] != self.root, kv[1]["start"]))):
            role = "main" if pid == self.root else f"child{i}"
            train = (self.train_cpu or {}).get(pid)
            rows.append({"role": role, "pid": pid, "comm": p["comm"], "ppid": p["ppid"],
                         "train_cpu_s": train, "cpu_s": p["cpu_s"]})
        return rows


def run_monitored(cmd: list[str], interval: float, done=lambda: False) -> dict:
    """common.run_process with the process tree sampled while it runs."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    monitor = TreeMonitor(proc.pid, interval, done)
    monitor.start()
    out = proc.stdout.read()
    monitor.stop()  # before wait4 reaps the root: its /proc entry is still there for the last sample
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{out[-3000:]}")
    return {"wall_s": wall, "stdout": out, "peak_tree_rss_mib": monitor.peak_rss,
            "peak_tree_pss_mib": monitor.peak_pss, "max_processes": monitor.peak_processes,
            "largest_process_rss_mib": usage.ru_maxrss / 1024, "tree_cpu_s": usage.ru_utime + usage.ru_stime,
            "processes": monitor.processes()}


# ---------------------------------------------------------------------------------------------------- the runs
def budget_row(progress: Path, steps: int) -> dict | None:
    """The first progress.csv row at or past the budget (logged before the final evaluation), or None yet."""
    if not progress.exists():
        return None
    with progress.open() as f:
        return next((r for r in csv.DictReader(f) if r.get("env_steps") and int(float(r["env_steps"])) >= steps), None)


def ours(name: str, hparams_set: str, steps: int, seed: int, envs: int, extra: list[str], interval: float) -> dict:
    workers, share = CONFIGS[name]
    per_worker = int(envs * share)
    overrides = [f"num_envs={envs}", f"worker_envs={per_worker if workers else 0}", "batch_rollouts=0",
                 "col_communication=async", "log_interval=1024", "eval_interval=0",
                 "checkpoint_interval=1000000000", *extra]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "train.py", "--hparams", hparams_set, "--output_dir", str(out), "--seed", str(seed),
               "--train_steps", str(steps), "--eval_episodes", "1", "--num_workers", str(workers),
               "--hparam_override", ",".join(overrides)]
        proc = run_monitored(cmd, interval, done=lambda: budget_row(out / "progress.csv", steps) is not None)
        end = budget_row(out / "progress.csv", steps)
        with (out / "progress.csv").open() as f:
            first = next(csv.DictReader(f))
    train_s = float(end["wall_time_s"])
    t0, s0 = float(first["wall_time_s"]), int(float(first["env_steps"]))
    done_steps = int(float(end["env_steps"]))
    timers = {k: float(v) for k, v in end.items() if k.startswith(("perf_", "scheme_")) and v not in ("", None)}
    return {"config": name, "seed": seed, "num_workers": workers, "worker_envs": per_worker if workers else 0,
            "steps": done_steps, "train_s": train_s, "steps_per_s": done_steps / train_s,
            "steady_steps_per_s": (done_steps - s0) / (train_s - t0) if train_s > t0 else None,
            "timers": timers, **{k: v for k, v in proc.items() if k != "stdout"}}


def sb3(steps: int, seed: int, threads: int, interval: float) -> dict:
    proc = run_monitored([sys.executable, "-c", SB3_SCRIPT, str(seed), str(steps), str(threads)], interval)
    res = last_json_line(proc["stdout"])
    return {"config": "sb3", "seed": seed, "num_workers": None, "worker_envs": None, "steps": res["steps"],
            "train_s": res["train_s"], "steps_per_s": res["steps"] / res["train_s"], "steady_steps_per_s": None,
            "timers": {"collect_s": res["collect_s"], "learn_s": res["learn_s"]},
            **{k: v for k, v in proc.items() if k != "stdout"}}


def default_hparams() -> str:
    """appo_atari when it is registered (train.py --list), else ppo_atari."""
    listing = subprocess.run([sys.executable, "train.py", "--list"], capture_output=True, text=True, cwd=ROOT).stdout
    line = next((ln for ln in listing.splitlines() if ln.startswith("hparams")), "")
    return "appo_atari" if "appo_atari" in line.split(None, 1)[-1].replace(",", " ").split() else "ppo_atari"


# ---------------------------------------------------------------------------------------------------- the report
def shown_timers(timers: dict) -> dict:
    """The learner's (or SB3's) seconds per part, and the mean policy lag; the JSON keeps the other scheme_ keys."""
    return {k.removeprefix("perf_").removeprefix("scheme_"): v for k, v in timers.items()
            if k.startswith("perf_") or k in ("collect_s", "learn_s", "scheme_policy_lag")}


def brief(row: dict) -> dict:
    """One line of the per-run table."""
    cpu = [p["train_cpu_s"] if p["train_cpu_s"] is not None else p["cpu_s"] for p in row["processes"]]
    return {"config": row["config"], "seed": row["seed"], "train_s": row["train_s"], "steps/s": row["steps_per_s"],
            "steady/s": row["steady_steps_per_s"], **shown_timers(row["timers"]),
            "train cpu s/proc": " ".join(f"{c:.1f}" for c in cpu), "tree cpu s": row["tree_cpu_s"],
            "wall_s": row["wall_s"], "peak rss MiB": row["peak_tree_rss_mib"], "peak pss MiB": row["peak_tree_pss_mib"]}


def summary(rows: list[dict], configs: list[str]) -> list[dict]:
    med = {c: float(np.median([r["steps_per_s"] for r in rows if r["config"] == c]))
           for c in configs if any(r["config"] == c for r in rows)}
    table = []
    for c, m in med.items():
        group = [r for r in rows if r["config"] == c]
        sps = [r["steps_per_s"] for r in group]
        steady = [r["steady_steps_per_s"] for r in group if r["steady_steps_per_s"] is not None]
        timers = {k: float(np.median([shown_timers(r["timers"])[k] for r in group]))
                  for k in shown_timers(group[0]["timers"])}
        train_cpu = [sum(p["train_cpu_s"] or 0.0 for p in r["processes"]) for r in group]
        table.append({
            "config": c, "runs": len(group), "steps/s median": m, "min-max": f"{min(sps):.0f}-{max(sps):.0f}",
            "vs nw0": m / med["nw0"] if "nw0" in med and c != "sb3" else None,
            "vs sb3": m / med["sb3"] if "sb3" in med and c != "sb3" else None,
            "steady/s": float(np.median(steady)) if steady else None,
            "train cpu s": float(np.median(train_cpu)) if c != "sb3" else None,
            "tree cpu s": float(np.median([r["tree_cpu_s"] for r in group])),
            "peak rss MiB": max(r["peak_tree_rss_mib"] for r in group),
            "peak pss MiB": max(r["peak_tree_pss_mib"] for r in group),
            "time split (median s; policy lag)": " ".join(f"{k}={v:.1f}" for k, v in timers.items()),
        })
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds over the configurations (seed = round)")
    p.add_argument("--steps", type=int, default=20_480, help="agent steps per run (default: %(default)s)")
    p.add_argument("--hparams", default=None, help="the set (default: appo_atari if registered, else ppo_atari)")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS), help="which of ours")
    p.add_argument("--envs", type=int, default=8, help="envs in all (per update): split over the workers")
    p.add_argument("--override", default="", help="extra --hparam_override for ours, e.g. torch_threads=1")
    p.add_argument("--threads", type=int, default=2, help="SB3's torch threads")
    p.add_argument("--skip_peer", action="store_true", help="leave SB3 out")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between /proc samples")
    p.add_argument("--output_dir", default=str(ROOT / "benchmarks" / "results"), help="where the JSON goes")
    args = p.parse_args()
    hparams_set = args.hparams or default_hparams()
    extra = [x for x in args.override.split(",") if x]
    configs = args.configs + ([] if args.skip_peer else ["sb3"])
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"scheme_throughput_{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {"hparams": hparams_set, "steps": args.steps, "rounds": args.rounds, "envs": args.envs,
            "override": args.override, "sb3_threads": args.threads, "cpus": os.cpu_count(),
            "loadavg_start": os.getloadavg(), "niceness": os.nice(0), "interval_s": args.interval}
    print(f"{hparams_set} on Pong, {args.steps} agent steps per run, {args.rounds} rounds of {' '.join(configs)}; "
          f"raw numbers -> {json_path}", flush=True)
    rows = []
    for r in range(args.rounds):
        for c in configs:
            if c == "sb3":
                rows.append(sb3(args.steps, r, args.threads, args.interval))
            else:
                rows.append(ours(c, hparams_set, args.steps, r, args.envs, extra, args.interval))
            print_table([brief(rows[-1])], list(brief(rows[-1])))
            print(flush=True)
            json_path.write_text(json.dumps({**meta, "loadavg_end": os.getloadavg(), "runs": rows}, indent=1))
    print(f"\n{hparams_set} on PongNoFrameskip-v4, {args.steps} agent steps, {args.rounds} rounds, "
          f"{args.envs} envs per update" + (f", ours with {args.override}" if args.override else ""))
    print("\nper run (train cpu s/proc: main process first, then its children in start order)")
    briefs = [brief(r) for r in rows]
    for c in configs:  # one table per configuration: their timer columns differ
        group = [b for b in briefs if b["config"] == c]
        if group:
            print_table(group, list(group[0]))
            print()
    print("summary (vs: ratio of the steps/s medians; peak: the largest over the rounds)")
    table = summary(rows, configs)
    print_table(table, list(table[0]))
    print(f"\nraw numbers: {json_path}")


if __name__ == "__main__":
    main()
