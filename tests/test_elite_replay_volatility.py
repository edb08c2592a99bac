"""The volatility test of elite_buffer_vtrace's experiment driver (benchmarks/elite_replay_experiment.py): elite against
uniform seed by seed, over the windows both runs trained through, so a run stopped short of its twin is compared where
they overlap, not dropped and not compared against windows it never reached."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import elite_replay_experiment as driver  # noqa: E402


def run(steps: int, kl: list[float], slope_per_window: list[float], evaluated_to: int) -> dict[str, np.ndarray]:
    """A run logged every 10k steps up to `steps`: window w (100k wide) has policy KL kl[w] and its score climbs by
    slope_per_window[w] points per 1M steps; greedy evaluations (of the same score) every 100k up to `evaluated_to`."""
    x = np.arange(0, steps + 1, 10_000, dtype=float)
    w = np.minimum((np.maximum(x - 1, 0) // 100_000).astype(int), len(kl) - 1)
    rate = np.array(slope_per_window)[w] / 1e6
    score = np.concatenate([[0.0], np.cumsum(rate[1:] * 10_000)])
    evaluation = np.where((x % 100_000 == 0) & (x <= evaluated_to), score, np.nan)
    return {"steps": x, "minutes": x / 1000, "score": score, "policy_kl": np.array(kl)[w],
            "replay_kl": np.zeros_like(x), "lambda": np.ones_like(x), "eval": evaluation}


def test_a_run_stopped_short_is_compared_over_the_windows_both_reached(capsys):
    kl = [0.1, 0.1, 0.001, 0.001]  # windows 0-1 high volatility, 2-3 low (the median is the threshold)
    uniform = run(400_000, kl, [100, 100, 50, 900], evaluated_to=400_000)
    elite = run(350_000, kl, [300, 300, 70, 0], evaluated_to=200_000)  # stopped before its last window
    driver.volatility_table({"uniform": {1: uniform}, "elite": {1: elite}}, 100_000)
    score, greedy = [t for t in capsys.readouterr().out.splitlines() if t.startswith("elite - uniform, seed by seed")]
    # high: 300 - 100; low over window 2 only (uniform's window 3, which elite never reached, is left out): 70 - 50
    assert "high-volatility [200.0]" in score and "low-volatility [20.0]" in score
    assert "(one seed: no interval over seeds, above 0)" in score  # not a zero-width interval
    # the greedy evaluations: elite was not evaluated at 300k, so its window 2 has no greedy slope (not interpolated)
    assert "high-volatility [200.0]" in greedy and "low-volatility [nan] (no seed with such windows)" in greedy


def test_twin_runs_class_each_window_once_by_their_mean_kl(capsys):
    """Elite's policy KL is high everywhere, uniform's only in windows 0-1: the test as defined classes all of
    elite's windows high, the twin reading classes windows 0-1 high for both runs (means 0.1 and 0.0505 around a
    median of 0.075) and 2-3 low, and differences them window for window."""
    uniform = run(400_000, [0.1, 0.1, 0.001, 0.001], [100, 100, 50, 900], evaluated_to=400_000)
    elite = run(400_000, [0.1, 0.1, 0.1, 0.1], [300, 500, 70, 0], evaluated_to=400_000)
    driver.volatility_table({"uniform": {1: uniform}, "elite": {1: elite}}, 100_000)
    lines = [t for t in capsys.readouterr().out.splitlines() if t.startswith("elite - uniform")]
    own, twin = lines[:2]  # the training score's two readings
    assert "high-volatility [117.5]" in own  # elite's 4 windows (mean 217.5) against uniform's windows 0-1 (100)
    assert "high-volatility [300.0]" in twin and "low-volatility [-440.0]" in twin  # (200 + 400) / 2, (20 - 900) / 2
    high, low = driver.twin_differences({1: [(0.1, 5.0), (0.01, np.nan)], 2: [(0.2, 1.0), (0.001, -3.0)]})
    assert high.tolist() == [5.0, 1.0] and np.isnan(low[0]) and low[1] == -3.0  # NaN slopes left out, not zeros


def test_seed_differences_give_a_bootstrap_interval_over_seeds():
    text = driver.seed_differences(np.array([10.0, 20.0, np.nan, 30.0]))
    assert text.startswith("[10.0, 20.0, nan, 30.0] (mean +20.0 [")  # the seed without windows left out
    low, high = (float(x) for x in text.split("[")[2].split("]")[0].split(", "))
    assert 10.0 <= low < 20.0 < high <= 30.0  # resampled means of 3 seeds lie between the lowest and the highest
    assert text.endswith("above 0 in 3 of 3)")
    one = driver.seed_differences(np.array([-5.0, np.nan]))
    assert one == "[-5.0, nan] (one seed: no interval over seeds, not above 0)"


def test_the_final_evaluation_says_how_many_games_the_time_limit_ended():
    assert driver.final_cell({}) == "not finished"
    assert driver.final_cell({"mean_return": 181.125, "episodes": 8, "time_limited": 0}) == "+181.1"
    cut = driver.final_cell({"mean_return": 303.75, "episodes": 8, "time_limited": 8})
    assert cut == "+303.8 (8 of 8 at the time limit)"
    assert driver.final_cell({"mean_return": 258.5, "episodes": 8}) == "+258.5"  # eval.json from before the count


def test_a_finished_run_keeps_its_record_and_frees_its_checkpoints(tmp_path):
    """--keep copies the three files rl.report reads into DIR/GAME/RUN; --prune_finished deletes the training
    checkpoints (each holds the replay) and leaves best.pt."""
    run_folder = tmp_path / "runs" / "seaquest" / "uniform_seed1"
    (run_folder / "checkpoints").mkdir(parents=True)
    for name, text in (("hparams.json", "{}"), ("progress.csv", "env_steps\n100\n"), ("eval.json", "{}")):
        (run_folder / name).write_text(text)
    (run_folder / "checkpoints" / f"ckpt_{100:012d}.pt").write_bytes(b"replay")
    (run_folder / "checkpoints" / "best.pt").write_bytes(b"agent")
    args = driver.argparse.Namespace(keep=str(tmp_path / "results"), game="seaquest", prune_finished=True)
    driver.finish(args, run_folder)
    kept = tmp_path / "results" / "seaquest" / "uniform_seed1"
    assert sorted(p.name for p in kept.iterdir()) == ["eval.json", "hparams.json", "progress.csv"]
    assert sorted(p.name for p in (run_folder / "checkpoints").iterdir()) == ["best.pt"]
