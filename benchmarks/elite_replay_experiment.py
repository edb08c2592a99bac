"""elite_buffer_vtrace's claim tested as published: uniform against elite replay, and the ablation that ranks by the
sampling counter only, on elite_buffer_vtrace's games with its network, schedule and settings (`hparams/scheme.py`: the
`*_impala_seaquest` and `*_impala_breakout` sets), several seeds an arm, with the volatility the claim speaks of.

Training: every arm with every seed, `train.py --hparams SET --seed S --train_steps STEPS` into
OUTPUT_DIR/GAME/ARM_seedS (log beside it, ARM_seedS.log), `--jobs` runs at once (1 on a 2-core machine; several on a
16-core GPU machine). A finished run (eval.json at STEPS) is skipped and an unfinished one resumes from its newest
checkpoint, so the driver can be stopped (Ctrl-C or SIGTERM: every run checkpoints and exits) and started again.
Speed: `elite_impala_seaquest` ran at about 6,500 agent steps/s on a lent H200 with 16 cores (`--override
device=cuda`: 400k steps in 140 s, start-up included; 2026-11-26), so a 2M-step run takes about 6 minutes there;
two Breakout runs side by side on a lent H100 with 16 cores took 5-6.5 minutes for 1M steps each (about 4,000 agent
steps/s each with 7 workers x 5 envs: `--game breakout --seeds 1 --jobs 2 --steps 1000000 --override
device=cuda,eval_interval=250000`; 2026-11-26); on
this project's 2-core VM with `--num_workers 2`, `uniform_impala_seaquest` ran 2M steps in 49 minutes (770-950 agent
steps/s; 2026-11-26). To free the cores for a while, stop the driver with SIGTERM and start it again later (a
SIGSTOPped run's wall clock would count the pause; a resumed one's continues from its checkpoint).
On a 2-core AMD EPYC without bf16 units (fp32 learner), it ran at about 250 agent steps/s in training: 2.2 hours a run.
`--keep results/elite_replay` copies each finished run's record (what rl.report reads) into
results/elite_replay/GAME, to commit.
A finished run's checkpoint keeps its replay (about 5 GB); `--prune_finished` deletes finished runs' training
checkpoints (best.pt and the logs stay), which Breakout's runs need on a disk that holds Seaquest's nine.
`--num_workers` and `--override` pass on to every run alike (e.g. fewer workers than the sets' 7 on a small machine:
say so beside the results).

Report (also `--report_only`): per arm, the 100-game mean score against agent steps and against wall time (one colour
per arm, the mean over seeds with a band from the lowest to the highest seed), the per-update policy KL on the probe
set, the behaviour-vs-target KL on the replayed steps, and lambda, to OUTPUT_DIR/GAME/elite_replay_experiment.png; and
the volatility test as the claim states it, defined here before any run: each run's training is cut into windows of
`--window` agent steps; a window is high-volatility when its mean volatility/policy_kl is at or above the median of
all windows of all runs of the game (one threshold for every arm); the score slope of a window is the change of the
100-game mean score across it, per million agent steps. Added after Seaquest's seed 1 showed the training score
following the policy's entropy: the same slope of the greedy evaluation, where the run evaluated at both ends of the
window. Printed, for each of the two: each arm's mean slope in high- and in low-volatility windows, and elite's
(and the ablation's) difference to uniform in each, seed by seed; and, added after Seaquest's three seeds, the same
difference with each window classed once for both twin runs, by their mean policy KL (`twin_differences`). rliable's
IQM with intervals at fixed budgets and the probability that elite beats uniform come from `python -m rl.report` over
the same folder (printed at the end).

    nice -n 10 .venv/bin/python benchmarks/elite_replay_experiment.py --game seaquest --seeds 1 2 3 --steps 2000000
    .venv/bin/python benchmarks/elite_replay_experiment.py --game seaquest --seeds 1 2 3 --report_only
    .venv/bin/python -m rl.report runs/elite_replay_experiment/seaquest \
        --output runs/elite_replay_experiment/seaquest/report --at 500000 1000000 2000000
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, print_table  # noqa: E402
from elite_replay import finished  # noqa: E402

from rl.checkpoint import list_checkpoints  # noqa: E402
from rl.report.keep import keep_records  # noqa: E402
from rl.report.runs import read_progress  # noqa: E402

ARMS = {"seaquest": {"uniform": "uniform_impala_seaquest", "elite": "elite_impala_seaquest",
                     "counter": "counter_impala_seaquest"},
        "breakout": {"uniform": "uniform_impala_breakout", "elite": "elite_impala_breakout"}}
COLOURS = {"uniform": "tab:blue", "elite": "tab:red", "counter": "tab:green"}
COLUMNS = {"score": "game_score_mean", "policy_kl": "volatility_policy_kl", "replay_kl": "volatility_replay_kl",
           "lambda": "replay_lambda", "eval": "eval_return_mean"}
MEASURES = {"slope": "100-game training score", "eval_slope": "greedy evaluation"}  # the slopes of a window


# ---------------------------------------------------------------------------------------------- training
def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / f"{arm}_seed{seed}"


def command(args, set_name: str, run: Path, seed: int) -> list[str]:
    cmd = ["nice", "-n", str(args.nice), sys.executable, "train.py", "--hparams", set_name, "--output_dir", str(run),
           "--seed", str(seed), "--train_steps", str(args.steps)]
    if args.num_workers is not None:
        cmd += ["--num_workers", str(args.num_workers)]
    if args.override:
        cmd += ["--hparam_override", args.override]
    return cmd


def prune(run: Path) -> None:
    """Delete a finished run's training checkpoints (each holds the replay: about 5 GB at 10,000 sequences), keeping
    best.pt (the agent of its best evaluation), eval.json and the logs; it cannot be trained further."""
    freed = 0
    for _, path in list_checkpoints(run):
        freed += path.stat().st_size
        path.unlink()
    if freed:
        print(f"{run.name}: finished; its training checkpoints deleted ({freed / 2**30:.1f} GiB)", flush=True)


def finish(args, run: Path) -> None:
    """A finished run: its record kept (`--keep`), its checkpoints freed (`--prune_finished`)."""
    if args.keep:
        keep_records([run], Path(args.keep) / args.game)
    if args.prune_finished:
        prune(run)


def train(args, out: Path, arms: dict[str, str]) -> None:
    """Every arm x seed not finished yet, `--jobs` at a time, seeds outermost (the arms of a seed run together)."""
    todo = [(arm, seed) for seed in args.seeds for arm in arms if not finished(run_dir(out, arm, seed), args.steps)]
    for seed in args.seeds:
        for arm in arms:
            if (arm, seed) not in todo:
                print(f"{run_dir(out, arm, seed).name}: finished, skipped", flush=True)
                finish(args, run_dir(out, arm, seed))
    running: list[tuple[str, subprocess.Popen, float]] = []

    def stop(signum, frame):  # every run checkpoints and exits, then so does the driver
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                arm, seed = todo.pop(0)
                run = run_dir(out, arm, seed)
                cmd = command(args, arms[arm], run, seed)
                print(f"{run.name}: training ({' '.join(cmd)})", flush=True)
                with open(out / f"{run.name}.log", "a") as log:
                    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
                running.append((run.name, proc, time.perf_counter()))
            time.sleep(1)
            for item in [r for r in running if r[1].poll() is not None]:
                name, proc, start = item
                running.remove(item)
                if proc.returncode != 0:
                    sys.exit(f"{name}: train.py exited with {proc.returncode}; see {out / (name + '.log')}")
                print(f"{name}: done in {(time.perf_counter() - start) / 60:.1f} min", flush=True)
                finish(args, out / name)
    finally:
        for _, proc, _ in running:  # runs never outlive the driver: each saves a checkpoint on SIGTERM
            proc.terminate()
        for _, proc, _ in running:
            proc.wait()
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------------------------------- reading
def read(run: Path) -> dict[str, np.ndarray]:
    """progress.csv's agent steps, wall minutes (the run's clock over all its sittings, as rl.report reads it) and
    the COLUMNS, as arrays (NaN where a row lacks one)."""
    table = read_progress(run / "progress.csv", [])
    n = len(table.get("env_steps", []))
    column = lambda name: table.get(name, np.full(n, np.nan))  # noqa: E731
    return {"steps": column("env_steps"), "minutes": column("wall_time_s") / 60,
            **{k: column(c) for k, c in COLUMNS.items()}}


def on_grid(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """y interpolated at `grid` along x, NaN beyond the run's logged range."""
    keep = ~np.isnan(y)
    if keep.sum() < 2:
        return np.full(len(grid), np.nan)
    out = np.interp(grid, x[keep], y[keep])
    out[(grid < x[keep][0]) | (grid > x[keep][-1])] = np.nan
    return out


def windows(data: dict[str, np.ndarray], width: float) -> list[dict]:
    """The run's windows of `width` agent steps: mean policy KL of the rows inside, and per 1M steps the slope of the
    100-game training score across (interpolated at the ends) and of the greedy evaluation (NaN unless the run
    evaluated at both ends: the evaluations are too few to interpolate)."""
    out = []
    evaluated = dict(zip(data["steps"][~np.isnan(data["eval"])], data["eval"][~np.isnan(data["eval"])]))
    for start in np.arange(0, np.nanmax(data["steps"], initial=0) - width + 1, width):
        inside = (data["steps"] > start) & (data["steps"] <= start + width)
        kl = data["policy_kl"][inside]
        ends = on_grid(data["steps"], data["score"], np.array([start, start + width]))
        if np.isnan(kl).all() or np.isnan(ends).any():
            continue
        evals = evaluated.get(start, np.nan), evaluated.get(start + width, np.nan)
        out.append({"start": start, "policy_kl": float(np.nanmean(kl)), "slope": (ends[1] - ends[0]) / width * 1e6,
                    "eval_slope": (evals[1] - evals[0]) / width * 1e6})
    return out


# ---------------------------------------------------------------------------------------------- reporting
def plot(runs: dict[str, dict[int, dict]], path: Path, game: str) -> None:
    """Score against agent steps and wall time, policy KL, replay KL and lambda: per arm the mean over seeds and a
    band from the lowest to the highest seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("steps", "score", "100-game mean score"), ("minutes", "score", "100-game mean score"),
              ("steps", "policy_kl", "policy KL per update (probe set)"),
              ("steps", "replay_kl", "KL(target || behaviour), replayed steps"), ("steps", "lambda", "lambda")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2))
    for ax, (x, y, label) in zip(axes, panels):
        for arm, seeds in runs.items():
            top = max(np.nanmax(d[x], initial=0) for d in seeds.values())
            grid = np.linspace(0, top, 200)
            curves = np.array([on_grid(d[x], d[y], grid) for d in seeds.values()])
            seen = ~np.isnan(curves).all(axis=0)
            if not seen.any():
                continue
            scale = 1e6 if x == "steps" else 60
            with np.errstate(all="ignore"):
                mean, low, high = (f(curves[:, seen], axis=0) for f in (np.nanmean, np.nanmin, np.nanmax))
            count = f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
            ax.plot(grid[seen] / scale, mean, color=COLOURS[arm], label=f"{arm} ({count})")
            ax.fill_between(grid[seen] / scale, low, high, color=COLOURS[arm], alpha=0.2)
        ax.set_xlabel("agent steps (millions)" if x == "steps" else "wall time (hours)")
        ax.set_ylabel(label)
        if y.endswith("_kl"):  # an early spike would flatten the rest on a linear axis
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"elite_buffer_vtrace's experiment on {game}: mean over seeds, band lowest to highest seed")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def volatility_table(runs: dict[str, dict[int, dict]], width: float) -> None:
    per_run = {(arm, seed): windows(d, width) for arm, seeds in runs.items() for seed, d in seeds.items()}
    kls = [w["policy_kl"] for ws in per_run.values() for w in ws]
    if not kls:
        print(f"\nvolatility: no window of {width:,.0f} agent steps with both a policy KL and a score yet")
        return
    threshold = float(np.median(kls))
    print(f"\nslopes (points per 1M agent steps) in windows of {width:,.0f} agent steps, high volatility: policy KL >= "
          f"{threshold:.3g} (the median of all {len(kls)} windows); (n): windows with that slope")
    for measure, name in MEASURES.items():
        def by_volatility(ws: list[dict], measure: str = measure) -> tuple[float, float, int, int]:
            """Mean slope in high- and in low-volatility windows, and how many windows each."""
            high = [w[measure] for w in ws if w["policy_kl"] >= threshold and not np.isnan(w[measure])]
            low = [w[measure] for w in ws if w["policy_kl"] < threshold and not np.isnan(w[measure])]
            return np.mean(high) if high else np.nan, np.mean(low) if low else np.nan, len(high), len(low)

        def text(slope: float, count: int) -> str:
            return f"{slope:+.1f} ({count})" if count else "- (0)"

        slopes = {key: by_volatility(ws) for key, ws in per_run.items()}
        if not any(nh + nl for *_, nh, nl in slopes.values()):
            print(f"\n{name}: no window with a slope (a greedy evaluation at both ends of a window)")
            continue
        rows = [{"run": f"{arm}_seed{seed}", "high-volatility slope": text(h, nh), "low-volatility slope": text(lo, nl)}
                for (arm, seed), (h, lo, nh, nl) in slopes.items()]
        print(f"\n{name}:")
        print_table(rows, ["run", "high-volatility slope", "low-volatility slope"])
        for arm in [a for a in runs if a != "uniform"]:  # seed by seed, over the windows both runs trained through
            diffs, twins = [], {}
            for s in runs[arm]:
                if ("uniform", s) in per_run:
                    ours, theirs = per_run[(arm, s)], per_run[("uniform", s)]
                    both = {w["start"] for w in ours} & {w["start"] for w in theirs}
                    (h, lo, *_), (uh, ulo, *_) = (by_volatility([w for w in ws if w["start"] in both])
                                                  for ws in (ours, theirs))
                    diffs.append((h - uh, lo - ulo))
                    mine, twin = ({w["start"]: w for w in ws} for ws in (ours, theirs))
                    twins[s] = [((mine[t]["policy_kl"] + twin[t]["policy_kl"]) / 2, mine[t][measure] - twin[t][measure])
                                for t in sorted(both)]
            if diffs:
                high, low = np.array(diffs).T
                print(f"{arm} - uniform, seed by seed: high-volatility {seed_differences(high)}, low-volatility "
                      f"{seed_differences(low)}")
                high, low = twin_differences(twins)
                print(f"{arm} - uniform, windows classed by the two runs' mean KL: high-volatility "
                      f"{seed_differences(high)}, low-volatility {seed_differences(low)}")


def twin_differences(twins: dict[int, list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the mean slope difference of two twin runs in high- and in low-volatility windows, where a window is
    classed once for both runs, by their mean policy KL against the median of all twin windows' means. The test above
    classes each run's windows by that run's own KL, so an arm whose policy moves more per update has more (and
    flatter) high-volatility windows than its twin; this reading, added after Seaquest's three seeds showed elite's runs
    with more such windows, compares the two runs window for window. `twins`: seed -> [(mean KL, difference)]."""
    kls = [kl for windows in twins.values() for kl, _ in windows]
    threshold = float(np.median(kls)) if kls else np.nan

    def mean(values: list[float]) -> float:
        values = [v for v in values if not np.isnan(v)]
        return float(np.mean(values)) if values else np.nan

    high = [mean([d for kl, d in windows if kl >= threshold]) for windows in twins.values()]
    low = [mean([d for kl, d in windows if kl < threshold]) for windows in twins.values()]
    return np.array(high), np.array(low)


def seed_differences(values: np.ndarray, reps: int = 2000) -> str:
    """Per-seed differences, their mean with a 95% percentile-bootstrap interval over seeds, and how many are above
    0: with 3 seeds the interval is wide, and that width is the answer at this budget."""
    seen = values[~np.isnan(values)]
    text = f"{np.round(values, 1).tolist()}"
    if not len(seen):
        return text + " (no seed with such windows)"
    if len(seen) == 1:  # a bootstrap over one seed is that seed: no interval, not a zero-width one
        return f"{text} (one seed: no interval over seeds, {'above' if seen[0] > 0 else 'not above'} 0)"
    means = np.random.default_rng(0).choice(seen, size=(reps, len(seen))).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return (f"{text} (mean {seen.mean():+.1f} [{low:+.1f}, {high:+.1f}] over seeds, above 0 in {(seen > 0).sum()} "
            f"of {len(seen)})")


def report(args, out: Path, arms: dict[str, str]) -> None:
    runs = {arm: {seed: read(run_dir(out, arm, seed)) for seed in args.seeds} for arm in arms}
    runs = {arm: {s: d for s, d in seeds.items() if len(d["steps"])} for arm, seeds in runs.items()}
    runs = {arm: seeds for arm, seeds in runs.items() if seeds}
    if not runs:
        print(f"no run in {out} has logged a row yet")
        return
    rows = []
    for arm, seeds in runs.items():
        for seed, d in seeds.items():
            path = run_dir(out, arm, seed) / "eval.json"
            final = json.loads(path.read_text()) if path.exists() else {}
            last = {k: d[k][~np.isnan(d[k])][-1] if (~np.isnan(d[k])).any() else np.nan for k in d}
            rows.append({"run": f"{arm}_seed{seed}", "agent steps": f"{last['steps']:,.0f}",
                         "wall min": f"{last['minutes']:.0f}", "score": f"{last['score']:+.1f}",
                         "policy KL": f"{last['policy_kl']:.3g}", "lambda": f"{last['lambda']:.3f}",
                         "final eval": final_cell(final)})
    print_table(rows, ["run", "agent steps", "wall min", "score", "policy KL", "lambda", "final eval"])
    volatility_table(runs, args.window)
    plot(runs, out / "elite_replay_experiment.png", args.game)
    print(f"\nplot: {out / 'elite_replay_experiment.png'}")
    print(f"IQM and probability of improvement: .venv/bin/python -m rl.report {out} --output {out / 'report'} "
          f"--at 500000 1000000 {args.steps}")


def final_cell(final: dict) -> str:
    """eval.json's mean, and how many of its games the time limit ended: a greedy Breakout policy that stops serving
    scores the bricks it broke before that, a number that reads like a finished game's."""
    if "mean_return" not in final:
        return "not finished"
    cut = final.get("time_limited", 0)
    return f"{final['mean_return']:+.1f}" + (f" ({cut} of {final['episodes']} at the time limit)" if cut else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--game", choices=sorted(ARMS), default="seaquest")
    p.add_argument("--arms", nargs="+", help="a subset of the game's arms (default: all: uniform, elite[, counter])")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=2_000_000, help="agent steps per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at once")
    p.add_argument("--num_workers", type=int, help="collection workers of every run (default: the sets' 7)")
    p.add_argument("--override", default="", help="--hparam_override for every run alike")
    p.add_argument("--output_dir", default=str(ROOT / "runs" / "elite_replay_experiment"))
    p.add_argument("--window", type=float, default=100_000, help="agent steps per volatility window")
    p.add_argument("--nice", type=int, default=10, help="niceness of the training runs")
    p.add_argument("--report_only", action="store_true", help="report the runs there, train nothing")
    p.add_argument("--keep", metavar="DIR", help="copy each finished run's record (hparams.json, progress.csv, "
                   "eval.json) into DIR/GAME, e.g. results/elite_replay: the evidence outlives the run folders")
    p.add_argument("--prune_finished", action="store_true",
                   help="delete finished runs' training checkpoints (about 5 GB each: the replay); best.pt and the "
                        "logs stay, and such a run cannot be trained further")
    args = p.parse_args()
    arms = ARMS[args.game]
    unknown = [a for a in args.arms or () if a not in arms]
    if unknown:
        sys.exit(f"unknown arm {unknown[0]!r} for {args.game}: valid: {', '.join(arms)}")
    arms = {a: s for a, s in arms.items() if not args.arms or a in args.arms}
    out = Path(args.output_dir).expanduser() / args.game
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        try:
            train(args, out, arms)
        except KeyboardInterrupt:
            sys.exit("stopped: every run checkpointed; run the same command again to resume")
    report(args, out, arms)


if __name__ == "__main__":
    main()
