"""Learning Pong per agent step: `ppo_atari` (one process), `appo_atari` (Sample Factory's APPO: 2 async workers,
V-trace) and `impala_pong` (elite_buffer_vtrace's V-trace agent: 2 async workers), each a whole `train.py` run, compared
on the same axis: agent steps (env frames / 4).

For every set, from its progress.csv: the mean score of the last 100 whole games (`game_score_mean`, unclipped;
random play is about -20.3), the policy's entropy (max ln 6 = 1.792 for Pong's 6 actions: a policy that never
leaves the maximum learns nothing) and the value head's explained variance, at every `--every` steps; and the first
agent step at which the 100-game mean reached each of `--thresholds`. "As fast per agent step" means reaching each
threshold at no more steps than `ppo_atari`.

Beside each first step, the wall time the run had taken to reach it (its progress.csv's `wall_time_s`, summed over
its sittings): the comparison per wall minute, which means something only between runs on the same machine with the
same company on its cores. `--override SET SETTINGS` passes `--hparam_override SETTINGS` to one set's run, e.g. to
keep a 10M-step set's exploration schedule in absolute steps at a shorter `--steps`:

    nice python benchmarks/pong_learning.py --sets dqn_atari qrdqn_atari --seed 0 --parallel --output_dir runs/pong_q \
        --override dqn_atari exploration_fraction=0.5 --override qrdqn_atari exploration_fraction=0.125

Runs resume: the same `--output_dir` continues each run where it stopped (train.py resumes from its newest
checkpoint), so a long comparison can be built up over several sittings; `--report_only` prints the table of what is
there. `--parallel` runs the sets at the same time (they share the cores: fair per agent step, slower per set).

    nice -n 5 python benchmarks/pong_learning.py --steps 2000000 --output_dir ~/pong_learning --parallel
    python benchmarks/pong_learning.py --output_dir ~/pong_learning --report_only
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, print_table  # noqa: E402

SETS = ("ppo_atari", "appo_atari", "impala_pong")


def read_progress(run: Path) -> list[dict]:
    path = run / "progress.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)]


def value(row: dict, name: str) -> float | None:
    text = row.get(name, "")
    try:
        return float(text) if text not in ("", None) else None
    except ValueError:
        return None


def _num(x: float | None, fmt: str) -> str:
    """A figure, or "-" where the row has none (the final evaluation's row logs no losses)."""
    return "-" if x is None else format(x, fmt)


def summarize(rows: list[dict], every: int, thresholds: list[float]) -> dict:
    """Score, entropy and explained variance at each multiple of `every` (the last row before it), and the first
    step at which the 100-game mean score reached each threshold."""
    points: dict[int, dict] = {}
    first: dict[float, int | None] = {t: None for t in thresholds}
    first_wall: dict[float, float | None] = {t: None for t in thresholds}
    for row in rows:
        step = int(float(row["env_steps"]))
        score = value(row, "game_score_mean")
        mark = -(-step // every) * every  # the multiple this row is the last before (or at)
        if mark - step < every // 10:  # a row near the mark, not the last row of an unfinished stretch
            points[mark] = {"step": step, "score": score, "entropy": value(row, "losses_entropy"),
                            "explained_variance": value(row, "losses_explained_variance"),
                            "games": value(row, "games")}
        for t in thresholds:
            if first[t] is None and score is not None and score >= t:
                first[t], first_wall[t] = step, value(row, "wall_time_s")
    last = int(float(rows[-1]["env_steps"])) if rows else 0
    return {"points": points, "first_step_at": first, "first_wall_s_at": first_wall, "last_step": last}


def reached(summary: dict, threshold: float) -> str:
    """'1,234,567 (27.0 min)': the first step at the threshold and the wall time it had taken, or 'not by N'."""
    step, wall = summary["first_step_at"][threshold], summary["first_wall_s_at"][threshold]
    if step is None:
        return f"not by {summary['last_step']:,}"
    return f"{step:,}" + ("" if wall is None else f" ({wall / 60:.1f} min)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", nargs="+", default=list(SETS))
    p.add_argument("--steps", type=int, default=2_000_000, help="agent steps per set")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--every", type=int, default=250_000, help="report every this many steps")
    p.add_argument("--thresholds", type=float, nargs="+", default=[-19.0, -15.0, -10.0, 0.0])
    p.add_argument("--output_dir", default=str(Path.home() / "pong_learning"))
    p.add_argument("--parallel", action="store_true", help="run the sets at the same time")
    p.add_argument("--report_only", action="store_true")
    p.add_argument("--override", nargs=2, action="append", default=[], metavar=("SET", "SETTINGS"),
                   help="--hparam_override SETTINGS for SET's run (repeatable)")
    args = p.parse_args()
    out = Path(args.output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        procs = []
        for name in args.sets:
            cmd = [sys.executable, "train.py", "--hparams", name, "--output_dir", str(out / name), "--seed",
                   str(args.seed), "--train_steps", str(args.steps), "--eval_episodes", "3"]
            overrides = ",".join(settings for set_name, settings in args.override if set_name == name)
            cmd += ["--hparam_override", overrides] if overrides else []
            log = open(out / f"{name}.log", "a")
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            procs.append((name, proc))
            if not args.parallel:
                proc.wait()
        for _, proc in procs:
            proc.wait()
    report = {name: summarize(read_progress(out / name), args.every, args.thresholds) for name in args.sets}
    (out / "pong_learning.json").write_text(json.dumps(report, indent=2, default=str))
    marks = sorted({m for r in report.values() for m in r["points"]})
    rows = []
    for mark in marks:
        row = {"agent steps": f"{mark:,}"}
        for name in args.sets:
            pt = report[name]["points"].get(mark)
            row[name] = ("-" if pt is None or pt["score"] is None else
                         f"{pt['score']:+.1f} / {_num(pt['entropy'], '.3f')} / {_num(pt['explained_variance'], '.2f')}")
        rows.append(row)
    if not rows:
        print(f"no run in {out} has reached {args.every:,} steps yet")
        return
    print("100-game mean score / entropy / explained variance at each step:")
    print_table(rows, ["agent steps", *args.sets])
    print("first agent step (and wall time) at which the 100-game mean score reached:")
    firsts = [{"score": f"{t:+.0f}", **{n: reached(report[n], t) for n in args.sets}} for t in args.thresholds]
    print_table(firsts, ["score", *args.sets])

if __name__ == "__main__":
    main()
