"""Shared helpers for the side-by-side benchmarks: run a command as a whole process, measure wall time and peak
memory (the child's max RSS from wait4), and print a table with our/peer ratios."""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_process(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd`; return wall time (s), peak RSS (MiB), kernel CPU time (s, its children's included) and stdout.
    Fails loudly if the command fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{out[-3000:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "kernel_s": usage.ru_stime, "stdout": out}


def run_ours(set_name: str, seed: int, steps: int, starts: int, threads: int, override: str, out: Path, env_id: str,
             device: str) -> dict:
    """Our `set_name` through train.py as a whole process, learning from step `starts`, without periodic
    evaluations: the training loop's seconds (progress.csv's last wall time) and the process's."""
    values = ",".join(x for x in [f"learning_starts={starts}", "eval_interval=0", f"torch_threads={threads}",
                                  f"env={env_id}", f"device={device}", override] if x)
    res = run_process([sys.executable, "train.py", "--hparams", set_name, "--output_dir", str(out), "--seed",
                       str(seed), "--train_steps", str(steps), "--eval_episodes", "1", "--hparam_override", values])
    with (out / "progress.csv").open() as f:
        train_s = float(list(csv.DictReader(f))[-1]["wall_time_s"])
    return {"train_s": train_s, "wall_s": res["wall_s"]}


def last_json_line(text: str) -> dict:
    """The last line of `text` that parses as a JSON object (the peer scripts print their result that way)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON result in output:\n{text[-2000:]}")


def median_range(values: list[float]) -> str:
    """'median [min-max]' of a benchmark's rounds."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(fmt(r.get(c))) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-+-".join("-" * widths[c] for c in columns))
    for r in rows:
        print(" | ".join(fmt(r.get(c)).ljust(widths[c]) for c in columns))


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 1e4 else f"{v:.0f}"
    return "" if v is None else str(v)


def compare_with_sb3(hparams_set: str, sb3_script: str, title: str, seeds: list[int], steps: int, episodes: int,
                     skip_peer: bool = False, ours_args: tuple = (), peer_prefix: tuple = (),
                     peer_suffix: tuple = ()) -> list[dict]:
    """Per seed, run `train.py --hparams hparams_set [ours_args]` and then the SB3 script (argv: peer_prefix, seed,
    steps, episodes, peer_suffix; it prints a JSON line with mean_return and train_s) as whole processes; print a
    table and the ours/peer ratios."""
    import tempfile

    import numpy as np

    py, rows = sys.executable, []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            out = Path(tmp) / f"ours_{seed}"
            ours = run_process([py, "train.py", "--hparams", hparams_set, "--output_dir", str(out), "--seed",
                                str(seed), "--train_steps", str(steps), "--eval_episodes", str(episodes),
                                *ours_args])
            ev = json.loads((out / "eval.json").read_text())
            rows.append({"impl": "rl", "seed": seed, "wall_s": ours["wall_s"], "train_s": ev["wall_time_s"],
                         "steps_per_s": steps / ours["wall_s"], "peak_mib": ours["peak_rss_mib"],
                         "eval_return": ev["mean_return"], "best_eval": best_evaluation(out / "progress.csv")})
            if not skip_peer:
                sb3 = run_process([py, "-c", sb3_script, *peer_prefix, str(seed), str(steps), str(episodes),
                                   *peer_suffix])
                res = last_json_line(sb3["stdout"])
                rows.append({"impl": "sb3", "seed": seed, "wall_s": sb3["wall_s"], "train_s": res["train_s"],
                             "steps_per_s": steps / sb3["wall_s"], "peak_mib": sb3["peak_rss_mib"],
                             "eval_return": res["mean_return"], "best_eval": None})
            print_table(rows[-2:], list(rows[0]))
    print(f"\n{title}, {steps} steps, whole processes")
    print_table(rows, list(rows[0]))
    ours = [r for r in rows if r["impl"] == "rl"]
    peer = [r for r in rows if r["impl"] == "sb3"]
    for name, group in (("rl ", ours), ("sb3", peer)):
        if group:
            print(f"{name}: mean wall {np.mean([r['wall_s'] for r in group]):.1f} s, "
                  f"{np.mean([r['steps_per_s'] for r in group]):.0f} steps/s, "
                  f"final evals {[round(r['eval_return']) for r in group]}"
                  + (f", best periodic evals {[round(r['best_eval']) for r in group]}" if name == "rl " else ""))
    if peer:
        print(f"speed ratio (sb3 wall / rl wall): "
              f"{np.mean([r['wall_s'] for r in peer]) / np.mean([r['wall_s'] for r in ours]):.2f}x")
        print(f"training-time ratio (sb3 train_s / rl train_s): "
              f"{np.mean([r['train_s'] for r in peer]) / np.mean([r['train_s'] for r in ours]):.2f}x")
    return rows


def best_evaluation(progress_csv: Path) -> float:
    """The best greedy evaluation of a run (its periodic ones, every `eval_interval` steps, and the final one), from
    progress.csv. The peer runs without periodic evaluations (they would cost it time), so it has only its final
    one."""
    import csv

    with progress_csv.open() as f:
        return max(float(row["eval_return_mean"]) for row in csv.DictReader(f) if row.get("eval_return_mean"))


def benchmark_parser(description: str, steps: int | None, episodes: int | None = 10) -> argparse.ArgumentParser:
    """The options every benchmark takes: seeds, env steps, evaluation episodes and --skip_peer (None defaults: the
    benchmark picks them)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=steps, help="env steps (default: %(default)s)")
    p.add_argument("--episodes", type=int, default=episodes, help="final evaluation episodes (default: %(default)s)")
    p.add_argument("--skip_peer", action="store_true", help="run only ours")
    return p
