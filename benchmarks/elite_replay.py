"""Elite replay against uniform replay in elite_buffer_vtrace's V-trace agent (agent=impala, rl/agents/impala.py) on
Pong.

Cost per batch (the default mode): what elite sampling adds to a learner step. Three agents in this process, on
real PongNoFrameskip-v4 (2 envs, one process, one torch thread): `uniform` (impala_pong: queue 1 @0.5 + standard
1000 @0.5), `elite` (elite_impala_pong: custom 1000 @0.5 with elite sampling + queue 1 @0.5) and `elite+caching`
(the same with replay_caching=True: the replayed share of the next batch is drawn in a thread while the learner
steps). Each agent fills its buffers from its own rollouts, through its own `update()`, until training has started
and its replay buffer holds `--fill` sequences; then each timed step is the sequence `update()` runs,
`_compose()`, `_prepare()`, `learn()`, `join()`, each part timed. Between steps (untimed) the agent collects fresh
rollouts into its queue only, so the replay buffer stays at `--fill` sequences while it is measured. The variants
take turns over `--rounds` rounds (the machine is noisy); the table gives medians and interquartile ranges of all
timed steps, and each variant's step time against uniform's (the goal: elite at most 15% on top). Elite
sampling ranks a pool of int(lambda x share) sequences by the current model's features; lambda starts at 6 and
anneals to 1 over 2 x lr_scheduler_steps batches, so the few batches learned here keep it near 6 (printed).

    nice -n 10 .venv/bin/python benchmarks/elite_replay.py
    nice -n 10 .venv/bin/python benchmarks/elite_replay.py --batches 10 --rounds 1   # a quick look

Measured (1 torch thread, Nature CNN, the sets' bf16 autocast and NHWC convs), 2026-11-25 on this project's idle
2-core machine (Xeon with AMX), 3 rounds x 15 batches: uniform 33.7 ms a step, elite 56.7 ms (+68%: ranking its
pool, 29 sequences x 10 frames through the torso, costs two thirds of learning from the batch's 10 x 11 frames),
elite+caching 35.6 ms (+5%, CPU/wall 1.64: the pool is ranked on the second core while the learner steps). In
float32 (before 2026-11-25, a Pong run beside it): uniform 80 ms, elite +84%, elite+caching +78% (no free core). On
16 idle cores (float32, CPU learner): elite +85%, elite+caching +2%. With the learner on an H200 (float32): 9.0 ms,
elite +60%, elite+caching +62%.

Speed (`--speed`, minutes): whole `train.py` runs of appo_atari, impala_pong, elite_impala_pong and
elite_impala_pong with replay_caching=True, `--speed_steps` agent steps each (workers included, as the sets define
them), the sets taking turns over `--rounds` rounds; agent steps/s from the first progress row at a fifth of the
budget to the last. On the idle 2-core machine, 3 rounds of 20k steps (2026-11-25): appo_atari 677 (651-705),
impala_pong 670 (648-696, 0.99x), elite_impala_pong 562 (558-562, 0.83x), with caching 569 (553-575, 0.84x: the
workers hold the second core, so the ranking has no idle core to hide on). Lambda is near 6 in so short a run.
2 rounds of 60k steps (`--speed_steps 60000 --rounds 2`, the same day): appo_atari 857 (823-891), impala_pong 897
(893-900, 1.05x), elite_impala_pong 702 (700-704, 0.82x), with caching 740 (738-741).

    .venv/bin/python benchmarks/elite_replay.py --speed --rounds 3

Learning (`--learning`, hours): `train.py --hparams impala_pong` and `--hparams elite_impala_pong` (their workers
included) with the same seeds, one run after the other, each `--steps` agent steps into OUTPUT_DIR/SET_seedS (a run
that has finished is skipped, an unfinished one resumes). Printed: the 100-game mean score (game_score_mean,
unclipped) at every `--every` agent steps and every `--every_minutes` of wall time (summed over the sittings of a
resumed run), and the final evaluation; a plot of score against agent steps and wall time goes to
OUTPUT_DIR/elite_replay.png.

    nice -n 10 .venv/bin/python benchmarks/elite_replay.py --learning --steps 1000000 --seeds 1 2

Measured so (bf16, idle 2-core VM, 2026-11-25): 100-game mean at 1M agent steps, uniform -6.8 / -4.3 (seeds 1 / 2)
in 20.5 / 19.3 min, elite -2.9 / -7.2 in 23.2 / 21.0 min; the curves against agent steps overlap from -20 to -5.
    .venv/bin/python benchmarks/elite_replay.py --learning --report_only --seeds 1 2
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import hparams  # noqa: F401  (fills the hparams registry)
import rl  # noqa: F401  (fills the other registries)
from rl.agents.impala import ImpalaAgent
from rl.collector import Collector
from rl.envs import make_env
from rl.memory.sequence_buffers import ready
from rl.memory.sequence_store import naive_bytes_per_step
from rl.registry import hparams as sets
from rl.report.runs import read_progress
from rl.trainer import configure_torch, seed_everything

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, print_table  # noqa: E402

VARIANTS = {"uniform": ("impala_pong", False), "elite": ("elite_impala_pong", False),
            "elite+caching": ("elite_impala_pong", True)}
SETS = ("impala_pong", "elite_impala_pong")
PARTS = ("compose", "prepare", "learn", "join")  # a learner step, in update()'s order


# ---------------------------------------------------------------------------------------------- cost per batch
def build(variant: str, args):
    """An agent of `variant` on real Pong with the Collector that feeds it (one process, one torch thread)."""
    set_name, caching = VARIANTS[variant]
    hp = sets[set_name]()
    hp.num_workers, hp.num_envs, hp.env_threads, hp.torch_threads = 0, 2, 1, 1
    hp.replay_caching, hp.device = caching, args.device
    if args.capacity:  # the same override for every variant; queues keep theirs
        specs = json.loads(hp.replay_parameters)
        for spec in specs:
            spec["capacity"] = spec["capacity"] if spec["type"] == "queue" else args.capacity
        hp.replay_parameters = json.dumps(specs)
    configure_torch(hp)
    torch.set_num_threads(1)
    seed_everything(args.seed)
    env = make_env(hp)
    agent = ImpalaAgent(hp, env.single_observation_space, env.single_action_space, hp.num_envs, seed=args.seed)
    return agent, Collector(env, agent, args.seed)


def replay_buffer(agent):
    """The buffer replayed sequences come from (standard or custom): the one elite sampling changes."""
    return next(b for b in agent.buffers if b.spec.type != "queue")


def fill(agent, collector, held: int) -> None:
    """Collect and learn through the agent's own update() until training has started and the replay buffer holds
    `held` sequences."""
    while agent.buffers is None or agent.updates == 0 or len(replay_buffer(agent)) < held:
        collector.step()
        agent.update()


def store_fresh(agent, collector) -> None:
    """Collect rollouts and store their sequences in the queue only (as update() stores them, without learning),
    until the next batch can be composed: the replay buffer keeps the size it was filled to."""
    hp = agent.hp
    while not ready(agent.buffers, hp.batch_rollouts, hp.training_fill_in_factor):
        while not agent.memory.full:
            collector.step()
        for column in range(agent.memory.num_envs):
            item = agent._sequences(column)
            for buf in agent.buffers:
                if buf.spec.type == "queue":
                    buf.add(item)
        agent.memory.reset()


def timed_step(agent) -> tuple[dict, float]:
    """One learner step as update() takes it (compose, start preparing the next replayed share, learn, join), each
    part's seconds, the process's CPU seconds per wall second over the step (above 1: the preparing thread ran
    beside the learner on another core); and the lambda it learned with."""
    def now() -> float:  # a GPU's queued kernels belong to the part that queued them
        if agent.device.type == "cuda":
            torch.cuda.synchronize(agent.device)
        return time.perf_counter()

    cpu, t = time.process_time(), [now()]
    batch = agent._compose()
    t.append(now())
    preparing = agent._prepare()
    t.append(now())
    info = agent.learn(batch)
    t.append(now())
    if preparing is not None:
        preparing.join()
    t.append(now())
    parts = {name: t[i + 1] - t[i] for i, name in enumerate(PARTS)}
    cpu = (time.process_time() - cpu) / (t[-1] - t[0])
    return {**parts, "step": t[-1] - t[0], "cpu/wall": cpu}, info["replay/lambda"]


def measure(args) -> dict:
    """Build and fill the three agents, then time `--batches` steps of each, variant after variant, `--rounds`
    times; each round starts with `--warmup` untimed steps."""
    agents, times = {}, {v: [] for v in VARIANTS}
    for variant in VARIANTS:
        start = time.perf_counter()
        agents[variant] = build(variant, args)
        fill(*agents[variant], args.fill)
        agent = agents[variant][0]
        print(f"{variant}: filled in {time.perf_counter() - start:.0f} s ({agent.env_steps} agent steps, "
              f"{agent.updates} batches learned, replay buffer {len(replay_buffer(agent))} of "
              f"{replay_buffer(agent).capacity} sequences)", flush=True)
    lambdas = {}
    for r in range(args.rounds):
        for variant, (agent, collector) in agents.items():
            for i in range(args.warmup + args.batches):
                store_fresh(agent, collector)
                parts, lambdas[variant] = timed_step(agent)
                if i >= args.warmup:
                    times[variant].append({**parts, "round": r})
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    return {"agents": agents, "times": times, "lambdas": lambdas}


def ms(values) -> str:
    """Median [first quartile - third quartile] in milliseconds."""
    q1, med, q3 = np.percentile(np.asarray(values) * 1e3, [25, 50, 75])
    return f"{med:.1f} [{q1:.1f}-{q3:.1f}]"


def cost_table(times: dict) -> list[dict]:
    """Per variant: each part's and the whole step's milliseconds, the composing share of a step, and the step
    against uniform's (median of all steps, and the spread of the rounds' own ratios)."""
    def median(variant, part="step", r=None):
        return statistics.median(t[part] for t in times[variant] if r is None or t["round"] == r)

    rounds = sorted({t["round"] for t in times["uniform"]})
    rows = []
    for variant, steps in times.items():
        ratios = [median(variant, r=r) / median("uniform", r=r) for r in rounds]
        rows.append({"variant": variant, "step ms": ms([t["step"] for t in steps]),
                     **{f"{p} ms": ms([t[p] for t in steps]) for p in PARTS},
                     "compose share": f"{statistics.median(t['compose'] / t['step'] for t in steps):.0%}",
                     "CPU/wall": f"{statistics.median(t['cpu/wall'] for t in steps):.2f}",
                     "vs uniform": f"{median(variant) / median('uniform'):.2f}x",
                     "rounds' ratios": " ".join(f"{x:.2f}" for x in ratios)})
    return rows


def bytes_table(agents: dict) -> list[dict]:
    """Bytes per stored step of each set's replay buffer (every field) against elite_buffer_vtrace's whole
    observations."""
    rows = []
    for variant in ("uniform", "elite"):
        agent = agents[variant][0]
        store = replay_buffer(agent).store
        naive = naive_bytes_per_step(agent.obs_space.shape, agent.obs_space.dtype, store.T)
        rows.append({"variant": variant, "buffer": replay_buffer(agent).spec.type,
                     "stored bytes/step": f"{store.bytes_per_step():,.0f}",
                     "naive obs bytes/step": f"{naive:,.0f}", "stored / naive": f"{store.bytes_per_step() / naive:.2f}",
                     "feature width": store.data["features"].shape[-1]})
    return rows


def cost(args) -> None:
    torch.set_num_threads(1)
    result = measure(args)
    times, agents = result["times"], result["agents"]
    hp = agents["uniform"][0].hp
    print(f"\nms per learner step, median [interquartile range] of {args.rounds} rounds x {args.batches} batches "
          f"of {hp.batch_rollouts} sequences x {hp.num_steps} steps; replay buffer held at {args.fill} sequences "
          f"(capacity {replay_buffer(agents['uniform'][0]).capacity}), {torch.get_num_threads()} torch thread(s), "
          f"device {hp.device}; CPU/wall: the process's CPU seconds per wall second over a step (above 1: the "
          "preparing thread ran beside the learner)")
    print_table(cost_table(times), ["variant", "step ms", *(f"{p} ms" for p in PARTS), "compose share",
                                    "CPU/wall", "vs uniform", "rounds' ratios"])
    sampler = replay_buffer(agents["elite"][0]).sampler
    print(f"elite lambda while timed: {result['lambdas']['elite']:.4f} (elite+caching "
          f"{result['lambdas']['elite+caching']:.4f}; lr_scheduler_steps {hp.lr_scheduler_steps}): a pool of "
          f"int(lambda x {sampler.k}) = {int(sampler.lam * sampler.k)} sequences ranked for a share of {sampler.k}")
    uniform = statistics.median(t["step"] for t in times["uniform"])
    for variant in ("elite", "elite+caching"):
        extra = statistics.median(t["step"] for t in times[variant]) / uniform - 1
        print(f"{variant}: {extra:+.0%} on top of uniform's step (goal: at most +15%): "
              f"{'met' if extra <= 0.15 else 'not met'}")
    print("\nbytes per stored step (the sequence store: observation rows kept once, ids, every other field; naive: "
          "T+1 whole observations per sequence, as elite_buffer_vtrace stores them)")
    print_table(bytes_table(agents), ["variant", "buffer", "stored bytes/step", "naive obs bytes/step",
                                      "stored / naive", "feature width"])
    for _, collector in agents.values():
        collector.close()


# ---------------------------------------------------------------------------------------------- speed
SPEED = {"appo_atari": ("appo_atari", ""), "impala_pong": ("impala_pong", ""),
         "elite_impala_pong": ("elite_impala_pong", ""),
         "elite+caching": ("elite_impala_pong", "replay_caching=True")}


def speed_run(name: str, seed: int, args, out: Path) -> float:
    """Agent steps/s of one whole `train.py` run of `name` (its workers included), steady: from the first
    progress.csv row at a fifth of the budget to the last row."""
    set_name, override = SPEED[name]
    run = out / f"{name}_seed{seed}"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [sys.executable, "train.py", "--hparams", set_name, "--output_dir", str(run), "--seed", str(seed),
           "--train_steps", str(args.speed_steps), "--eval_episodes", "1"]
    if override:
        cmd += ["--hparam_override", override]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: train.py exited with {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    with open(run / "progress.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if number(r, "steps_per_s")]
    first = next(r for r in rows if number(r, "env_steps") >= args.speed_steps / 5)
    last = rows[-1]
    return ((number(last, "env_steps") - number(first, "env_steps"))
            / (number(last, "wall_time_s") - number(first, "wall_time_s")))


def speed(args) -> None:
    out = Path(args.output_dir).expanduser() / "speed"
    out.mkdir(parents=True, exist_ok=True)
    rates: dict[str, list[float]] = {name: [] for name in SPEED}
    for r in range(args.rounds):
        for name in SPEED:
            rates[name].append(speed_run(name, r, args, out))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), flush=True)
    base = statistics.median(rates["appo_atari"])
    print(f"\nagent steps/s of whole train.py runs ({args.speed_steps:,} steps each, steady from a fifth of the "
          f"budget; {args.rounds} rounds, the sets taking turns; {torch.get_num_threads()} cores seen by torch)")
    print_table([{"set": n, "steps/s median": f"{statistics.median(v):.0f}",
                  "range": f"{min(v):.0f}-{max(v):.0f}", "vs appo_atari": f"{statistics.median(v) / base:.2f}x"}
                 for n, v in rates.items()], ["set", "steps/s median", "range", "vs appo_atari"])


# ---------------------------------------------------------------------------------------------- learning
def run_dir(out: Path, set_name: str, seed: int) -> Path:
    return out / f"{set_name}_seed{seed}"


def finished(run: Path, steps: int) -> bool:
    """Whether the run wrote its final evaluation at `steps` or more (train.py writes eval.json when it ends)."""
    path = run / "eval.json"
    return path.exists() and json.loads(path.read_text()).get("env_steps", 0) >= steps


def train_runs(args, out: Path) -> None:
    """Each set with each seed, one run after the other, nice'd; a finished run is skipped, an unfinished one
    resumes (train.py continues a run folder from its newest checkpoint)."""
    for seed in args.seeds:
        for set_name in SETS:
            run = run_dir(out, set_name, seed)
            if finished(run, args.steps):
                print(f"{run.name}: finished, skipped", flush=True)
                continue
            cmd = ["nice", "-n", str(args.nice), sys.executable, "train.py", "--hparams", set_name, "--output_dir",
                   str(run), "--seed", str(seed), "--train_steps", str(args.steps), "--eval_episodes",
                   str(args.eval_episodes)]
            print(f"{run.name}: training ({' '.join(cmd)}), log in {out / (run.name + '.log')}", flush=True)
            start = time.perf_counter()
            with open(out / f"{run.name}.log", "a") as log:
                code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
            if code != 0:
                sys.exit(f"{run.name}: train.py exited with {code}; see {out / (run.name + '.log')}")
            print(f"{run.name}: done in {(time.perf_counter() - start) / 60:.1f} min", flush=True)


def number(row: dict, name: str) -> float | None:
    try:
        return float(row[name]) if row.get(name) not in ("", None) else None
    except ValueError:
        return None


def curve(run: Path) -> list[dict]:
    """Agent steps, wall time (minutes: the run's clock over all its sittings, as rl.report reads it) and the 100-game
    mean score of each row of progress.csv (episode_return_mean where the run logs no games)."""
    table = read_progress(run / "progress.csv", [])
    steps = table.get("env_steps", np.array([]))

    def column(name: str) -> list[float | None]:
        values = table.get(name, np.full(len(steps), np.nan))
        return [None if np.isnan(v) else float(v) for v in values]

    scores, fallback = column("game_score_mean"), column("episode_return_mean")
    return [{"steps": int(step), "minutes": float(wall) / 60, "score": score if score is not None else other,
             "entropy": entropy, "eval": evaluation}
            for step, wall, score, other, entropy, evaluation in zip(
                steps, table.get("wall_time_s", np.zeros(len(steps))), scores, fallback, column("losses_entropy"),
                column("eval_return_mean"))]


def at_marks(points: list[dict], key: str, every: float) -> dict[float, dict]:
    """The last row at or before each multiple of `every` along `key` that the run has reached."""
    if not points:
        return {}
    out = {}
    for i in range(1, int(points[-1][key] // every) + 1):
        before = [p for p in points if p[key] <= i * every]
        if before:
            out[i * every] = before[-1]
    return out


def score_text(point: dict | None, extra: str) -> str:
    if point is None:
        return "-"
    score = "-" if point["score"] is None else f"{point['score']:+.1f}"
    return f"{score} ({extra.format(**point)})"


def marks_table(runs: dict[str, list], key: str, every: float, label: str, extra: str) -> list[dict]:
    """One row per mark along `key` (agent steps or minutes), one column per run."""
    marks = {name: at_marks(points, key, every) for name, points in runs.items()}
    rows = []
    for mark in sorted({m for per_run in marks.values() for m in per_run}):
        text = f"{mark:,.0f}" if float(mark).is_integer() else f"{mark:g}"
        rows.append({label: text, **{name: score_text(marks[name].get(mark), extra) for name in runs}})
    return rows


def print_marks(runs: dict[str, list], key: str, every: float, label: str, extra: str, title: str) -> None:
    rows = marks_table(runs, key, every, label, extra)
    print(f"\n100-game mean score {title}:")
    if rows:
        print_table(rows, [label, *runs])
    else:
        print("  none reached yet")


def plot(runs: dict[str, list], path: Path) -> None:
    """Score against agent steps and against wall time, one line per run, one colour per set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for name, points in runs.items():
        kept = [p for p in points if p["score"] is not None]
        colour = "tab:red" if name.startswith("elite") else "tab:blue"
        for ax, key, scale in ((axes[0], "steps", 1e6), (axes[1], "minutes", 60)):
            ax.plot([p[key] / scale for p in kept], [p["score"] for p in kept], color=colour, label=name,
                    alpha=0.85)
    axes[0].set_xlabel("agent steps (millions)")
    axes[1].set_xlabel("wall time (hours)")
    axes[0].set_ylabel("100-game mean score")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("impala_pong (uniform replay) vs elite_impala_pong (elite replay)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def learning(args) -> None:
    out = Path(args.output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        train_runs(args, out)
    runs = {f"{s}_seed{seed}": curve(run_dir(out, s, seed)) for seed in args.seeds for s in SETS}
    runs = {name: points for name, points in runs.items() if points}
    if not runs:
        print(f"no run in {out} has logged a row yet")
        return
    print_marks(runs, "steps", args.every, "agent steps", "{minutes:.0f} min",
                f"(wall minutes) every {args.every:,} agent steps")
    print_marks(runs, "minutes", args.every_minutes, "minutes", "{steps:,} steps",
                f"(agent steps) every {args.every_minutes:g} minutes of wall time")
    print("\nlast row (entropy: the last logged) and final evaluation:")
    rows = []
    for name, points in runs.items():
        path = out / name / "eval.json"
        final = json.loads(path.read_text()) if path.exists() else {}
        last = points[-1]
        entropy = next((p["entropy"] for p in reversed(points) if p["entropy"] is not None), None)
        rows.append({"run": name, "agent steps": f"{last['steps']:,}", "wall min": f"{last['minutes']:.0f}",
                     "score": "-" if last["score"] is None else f"{last['score']:+.1f}",
                     "entropy": "-" if entropy is None else f"{entropy:.3f}",
                     "final eval": f"{final['mean_return']:+.1f}" if "mean_return" in final else "not finished"})
    print_table(rows, ["run", "agent steps", "wall min", "score", "entropy", "final eval"])
    plot(runs, out / "elite_replay.png")
    print(f"plot: {out / 'elite_replay.png'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cost_args = p.add_argument_group("cost per batch (the default)")
    cost_args.add_argument("--batches", type=int, default=30, help="timed batches per variant and round")
    cost_args.add_argument("--rounds", type=int, default=3, help="rounds, the variants taking turns")
    cost_args.add_argument("--warmup", type=int, default=3, help="untimed batches at the start of each turn")
    cost_args.add_argument("--fill", type=int, default=300, help="sequences in the replay buffer while timed")
    cost_args.add_argument("--capacity", type=int, default=0,
                           help="replay buffer capacity for every variant (default 0: the sets' 1000)")
    cost_args.add_argument("--seed", type=int, default=0)
    cost_args.add_argument("--device", default="auto", help="the learner's device (default: the sets' auto, a GPU "
                                                            "where there is one)")
    speed_args = p.add_argument_group("speed (--speed)")
    speed_args.add_argument("--speed", action="store_true", help="whole train.py runs of impala_pong, "
                                                                 "elite_impala_pong (also with replay_caching) and "
                                                                 "appo_atari instead, agent steps/s (--rounds rounds)")
    speed_args.add_argument("--speed_steps", type=int, default=20_000, help="agent steps per speed run")
    learn_args = p.add_argument_group("learning (--learning)")
    learn_args.add_argument("--learning", action="store_true", help="the learning comparison instead (hours)")
    learn_args.add_argument("--report_only", action="store_true", help="report the runs there, train nothing")
    learn_args.add_argument("--seeds", type=int, nargs="+", default=[1])
    learn_args.add_argument("--steps", type=int, default=1_000_000, help="agent steps per run")
    learn_args.add_argument("--output_dir", default=str(ROOT / "runs" / "elite_replay"))
    learn_args.add_argument("--every", type=int, default=100_000, help="a table row every this many agent steps")
    learn_args.add_argument("--every_minutes", type=float, default=60, help="a table row every this many minutes")
    learn_args.add_argument("--eval_episodes", type=int, default=3, help="episodes per evaluation")
    learn_args.add_argument("--nice", type=int, default=10, help="niceness of the training runs")
    args = p.parse_args()
    if args.learning:
        learning(args)
    elif args.speed:
        speed(args)
    else:
        cost(args)


if __name__ == "__main__":
    main()
