"""The verdict on elite_buffer_vtrace's Seaquest experiment (README, docs/results.md) is what the tools read from the
committed records in results/elite_replay/seaquest (three arms, three seeds each): rl.report's IQM, probability of
improvement and its permutation p, and the driver's two readings of the volatility test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rl.report.build import compute
from rl.report.runs import read_runs

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "results" / "elite_replay" / "seaquest"
sys.path.insert(0, str(ROOT / "benchmarks"))
import elite_replay_experiment as driver  # noqa: E402

ELITE, UNIFORM, COUNTER = "elite_impala_seaquest", "uniform_impala_seaquest", "counter_impala_seaquest"


def probability(space, x, y):
    (pair,) = [q for q in space["probability_of_improvement"] if {q["x"], q["y"]} == {x, y}]
    return (pair["value"] if pair["x"] == x else 1 - pair["value"]), pair["p"]


def test_rl_report_reads_the_verdicts_figures_from_the_records():
    runs, _ = read_runs([RECORDS])
    summary, _, _ = compute(runs, reps=200, at=(1_000_000, 2_000_000))
    spaces = {sp["title"].split(" on ")[0]: sp for sp in summary["aggregates"]}
    final = spaces["final evaluation return"]
    assert final["runs"][ELITE] == final["runs"][UNIFORM] == final["runs"][COUNTER] == 3
    assert final["methods"][ELITE]["IQM"]["value"] == pytest.approx((1512.5 + 1575.0 + 1287.5) / 3)
    assert final["methods"][UNIFORM]["IQM"]["value"] == pytest.approx((1327.5 + 1365.0 + 1520.0) / 3)
    assert final["methods"][COUNTER]["IQM"]["value"] == pytest.approx((1382.5 + 872.5 + 1355.0) / 3)
    at_1m = spaces["evaluation return at step 1000000"]
    for space, x, value, p in ((final, ELITE, 5 / 9, 1.0), (at_1m, ELITE, 1.0, 0.1), (at_1m, COUNTER, 1.0, 0.1)):
        assert probability(space, x, UNIFORM) == pytest.approx((value, p))


def test_the_drivers_two_readings_of_the_records(capsys):
    arms = ("uniform", "elite", "counter")
    runs = {arm: {s: driver.read(RECORDS / f"{arm}_seed{s}") for s in (1, 2, 3)} for arm in arms}
    driver.volatility_table(runs, 100_000)
    out = capsys.readouterr().out.splitlines()
    own = [t for t in out if t.startswith("elite - uniform, seed by seed")][0]  # the training score's, printed first
    twin = [t for t in out if t.startswith("elite - uniform, windows classed")][0]
    assert "(the median of all 171 windows)" in "\n".join(out)
    assert "high-volatility [-374.7, -123.5, -246.2]" in own and "low-volatility [-147.0, -24.5, 13.8]" in own
    assert "high-volatility [171.1, 81.5, -430.0]" in twin and "low-volatility [113.3, 60.9, 189.1]" in twin
