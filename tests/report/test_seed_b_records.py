"""The verdict on seed B's Seaquest experiment (README, docs/results.md) is what the tools read from the committed
records in results/seed_b/seaquest: rl.report's IQM, probability of improvement and its permutation p for elite
against uniform, and the driver's twin reading of the volatility test. Elite's and uniform's three seeds are
finished, so these figures stay as they are when the ablation's third seed is added (the driver's first reading
classes windows by a threshold over every arm's runs, so that one moves with it, and is left out here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rl.report.build import compute
from rl.report.runs import read_runs

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "results" / "seed_b" / "seaquest"
sys.path.insert(0, str(ROOT / "benchmarks"))
import seed_b_experiment as driver  # noqa: E402

ELITE, UNIFORM = "elite_impala_seaquest", "uniform_impala_seaquest"


def test_rl_report_reads_the_verdicts_figures_from_the_records():
    runs, _ = read_runs([RECORDS])
    summary, _, _ = compute(runs, reps=200, at=(1_000_000, 2_000_000))
    spaces = {sp["title"].split(" on ")[0]: sp for sp in summary["aggregates"]}
    final = spaces["final evaluation return"]
    assert final["runs"][ELITE] == final["runs"][UNIFORM] == 3
    assert final["methods"][ELITE]["IQM"]["value"] == pytest.approx((1512.5 + 1575.0 + 1287.5) / 3)
    assert final["methods"][UNIFORM]["IQM"]["value"] == pytest.approx((1327.5 + 1365.0 + 1520.0) / 3)
    for title, value, p in (("final evaluation return", 5 / 9, 1.0), ("evaluation return at step 1000000", 1.0, 0.1)):
        (pair,) = [q for q in spaces[title]["probability_of_improvement"] if {q["x"], q["y"]} == {ELITE, UNIFORM}]
        assert (pair["value"] if pair["x"] == ELITE else 1 - pair["value"]) == pytest.approx(value)
        assert pair["p"] == pytest.approx(p)


def test_the_drivers_twin_reading_of_the_records(capsys):
    runs = {arm: {s: driver.read(RECORDS / f"{arm}_seed{s}") for s in (1, 2, 3)} for arm in ("uniform", "elite")}
    driver.volatility_table(runs, 100_000)
    twin = [t for t in capsys.readouterr().out.splitlines() if t.startswith("elite - uniform, windows classed")][0]
    assert "high-volatility [171.1, 81.5, -430.0]" in twin and "low-volatility [113.3, 60.9, 189.1]" in twin
