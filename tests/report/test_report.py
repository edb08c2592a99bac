"""rl.report on run folders written by hand with known numbers: curves, rliable's aggregates, human-normalised
scores, reference rows, broken and partial folders, the page and summary.json; and one train.py --copies run."""

from __future__ import annotations

import csv
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from scipy.stats import trim_mean

from rl.errors import ConfigError
from rl.report import write_report
from rl.report.__main__ import main as report_main
from rl.report.build import compute
from rl.report.runs import read_runs
from rl.report.scores import ATARI_RANDOM_HUMAN, atari_game, human_normalized, references_for
from rl.report.stats import aggregates


def make_run(folder: Path, *, set_name: str = "ppo_cartpole", env: str = "CartPole-v1", seed: int = 0,
             evals: dict | None = None, train: dict | None = None, final: float | None = None,
             train_steps: int = 100, best: float | None = None, **hparams) -> Path:
    """A run folder as train.py writes it: `evals` and `train` map env_steps to the evaluation and training score;
    `final` writes eval.json."""
    folder.mkdir(parents=True, exist_ok=True)
    hp = {"agent": set_name.split("_")[0], "env": env, "seed": seed, "train_steps": train_steps, "lr": 1e-3,
          **hparams}
    (folder / "hparams.json").write_text(json.dumps({"hparams_set": set_name, "hparams": hp, "flags": {}}))
    evals, train = evals or {}, train or {}
    steps = sorted(set(evals) | set(train))
    with open(folder / "progress.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_steps", "wall_time_s", "episode_return_mean", "eval_return_mean", "eval_return_std"])
        for s in steps:
            w.writerow([s, s / 10, train.get(s, ""), evals.get(s, ""), 0.0 if s in evals else ""])
    if final is not None:
        record = {"mode": "final_training_evaluation", "mean_return": final, "std_return": 0.0,
                  "env_steps": max([train_steps, *steps])}  # the end of training: its budget, or its last row past it
        if best is not None:
            record["best"] = {"step": 50, "mean_return": best, "path": "x"}
        (folder / "eval.json").write_text(json.dumps(record))
    return folder


def copies(root: Path, finals: list[float], **kwargs) -> Path:
    for i, value in enumerate(finals):
        make_run(root / f"copy_{i}", seed=i, final=value, evals={100: value}, train={100: value}, **kwargs)
    return root


def line_of(summary: dict, label: str) -> dict:
    return next(line for line in summary["lines"] if line["label"] == label)


def test_mean_curve_is_over_copies_with_a_bootstrap_band(tmp_path):
    """Copies logged at different steps are interpolated to each other's steps, averaged per step over copies; two
    copies give a 95% band from the lower to the higher one."""
    make_run(tmp_path / "c" / "copy_0", seed=0, evals={10: 0.0, 20: 10.0}, train={10: 1.0, 20: 3.0})
    make_run(tmp_path / "c" / "copy_1", seed=1, evals={10: 4.0, 15: 8.0, 20: 30.0}, train={10: 5.0, 20: 7.0})
    summary, _, _ = compute(read_runs([tmp_path / "c"])[0], reps=200)
    (line,) = summary["lines"]
    curve = line["curves"]["eval/env_steps"]
    assert curve["x"] == [10, 15, 20]
    np.testing.assert_allclose(curve["mean"], [2.0, (5.0 + 8.0) / 2, 20.0])
    np.testing.assert_allclose(curve["low"], [0.0, 5.0, 10.0])
    np.testing.assert_allclose(curve["high"], [4.0, 8.0, 30.0])
    np.testing.assert_allclose(line["curves"]["train/env_steps"]["mean"], [3.0, 5.0])
    np.testing.assert_allclose(line["curves"]["eval/wall_time_s"]["x"], [1.0, 1.5, 2.0])


def test_the_band_is_the_bootstrap_of_the_mean_over_copies(tmp_path):
    """Copies 0, 0, 0, 4: a resample of four copies has mean k (k fours drawn, Binomial(4, 1/4)), and k <= 2 in
    95% of them, so the 95% band is [0, 3], not the range of the copies."""
    for i, value in enumerate([0.0, 0.0, 0.0, 4.0]):
        make_run(tmp_path / f"copy_{i}", seed=i, evals={10: value})
    curve = compute(read_runs([tmp_path])[0], reps=200)[0]["lines"][0]["curves"]["eval/env_steps"]
    assert (curve["low"], curve["mean"], curve["high"]) == ([0.0], [1.0], [3.0])


def test_iqm_is_the_trimmed_mean_of_the_scores_with_a_bracketing_interval(tmp_path):
    finals = [0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 9.0, 100.0]  # IQM 4.5, median 4, mean 16
    summary, _, _ = compute(read_runs([copies(tmp_path / "c", finals)])[0], reps=500)
    (space,) = summary["aggregates"]
    result = space["methods"]["ppo_cartpole"]
    assert result["IQM"]["value"] == trim_mean(finals, 0.25) == 4.5
    assert result["IQM"]["low"] < 4.5 < result["IQM"]["high"]
    assert result["mean"]["value"] == pytest.approx(np.mean(finals))
    # on one env the median over runs: rliable's median of the per-task means would repeat the mean (16)
    assert result["median"]["value"] == np.median(finals) == 4.0 and space["median"] == "median over runs"
    assert result["median"]["low"] <= 4.0 <= result["median"]["high"]
    assert space["runs"]["ppo_cartpole"] == 8


def test_the_interval_shrinks_with_more_runs():
    rng = np.random.default_rng(0)
    few, many = rng.normal(size=(5, 1)), rng.normal(size=(80, 1))
    result = aggregates({"few": few, "many": many}, reps=500)
    width = {k: v["IQM"]["high"] - v["IQM"]["low"] for k, v in result.items()}
    assert 0 < width["many"] < width["few"]
    assert result["many"]["IQM"]["value"] == trim_mean(many, 0.25, axis=None)


def test_iqm_across_atari_games_pools_human_normalised_scores(tmp_path):
    pong, breakout = [-20.7, 14.6, -3.05, 14.6], [1.7, 30.5, 16.1, 59.3]  # HNS 0, 1, 0.5, 1 and 0, 1, 0.5, 2
    copies(tmp_path / "pong", pong, set_name="ppo_atari", env="PongNoFrameskip-v4")
    copies(tmp_path / "breakout", breakout, set_name="ppo_atari", env="ALE/Breakout-v5")
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=300)
    atari = next(s for s in summary["aggregates"] if s["key"] == "atari")
    hns = [0, 1, 0.5, 1, 0, 1, 0.5, 2]
    assert atari["methods"]["ppo_atari"]["IQM"]["value"] == pytest.approx(trim_mean(hns, 0.25))
    assert atari["games"] == {"ppo_atari": ["ALE/Breakout-v5", "PongNoFrameskip-v4"]}
    assert atari["profile"] is not None
    pong_line = line_of(summary, "ppo_atari on PongNoFrameskip-v4")
    assert pong_line["human_normalized_final_mean"] == pytest.approx((np.mean(pong) + 20.7) / 35.3)


def test_human_normalised_score_of_known_games():
    assert human_normalized("PongNoFrameskip-v4", 14.6) == pytest.approx(1.0)
    assert human_normalized("ALE/Pong-v5", -20.7) == pytest.approx(0.0)
    assert human_normalized("ALE/MsPacman-v5", (307.3 + 6951.6) / 2) == pytest.approx(0.5)
    assert human_normalized("CartPole-v1", 500.0) is None
    assert atari_game("UpNDownNoFrameskip-v4") == "up_n_down" and atari_game("ALE/Jamesbond-v5") == "jamesbond"


def test_all_57_games_map_from_their_gymnasium_and_ale_ids():
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    v4 = {atari_game(i) for i in gym.envs.registry if i.endswith("NoFrameskip-v4") and "-ram" not in i}
    v5 = {atari_game(i) for i in gym.envs.registry if i.startswith("ALE/") and i.endswith("-v5") and "-ram" not in i}
    assert len(ATARI_RANDOM_HUMAN) == 57
    assert set(ATARI_RANDOM_HUMAN) <= v5
    assert set(ATARI_RANDOM_HUMAN) - v4 == {"surround"}  # newer than gym's v4 ids: ALE/Surround-v5 only
    assert set(ATARI_RANDOM_HUMAN) <= set(ale_py.roms.get_all_rom_ids())


def test_reference_rows_and_whether_runs_reached_them(tmp_path):
    make_run(tmp_path / "ppo" / "copy_0", final=500.0, evals={100: 500.0})
    make_run(tmp_path / "ppo" / "copy_1", seed=1, final=400.0, best=500.0, evals={50: 500.0, 100: 400.0})
    make_run(tmp_path / "a2c" / "copy_0", set_name="a2c_pendulum", env="Pendulum-v1", final=-200.0)
    make_run(tmp_path / "vpg" / "copy_0", set_name="vpg_cartpole", final=500.0)
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    runs = {r["name"]: r for r in summary["runs"]}
    first = runs[f"{tmp_path.name}/ppo/copy_0"]
    assert first["reference"]["mean"] == 500.0 and first["reference"]["source"] == "zoo"
    assert first["reference"]["where"] == "benchmark.md L96"
    assert first["reached_final"] is True
    second = runs[f"{tmp_path.name}/ppo/copy_1"]
    assert (second["reached_final"], second["reached_best"], second["best_score"]) == (False, True, 500.0)
    pendulum = runs[f"{tmp_path.name}/a2c/copy_0"]  # -162.965 ± 103.21: -200 is within one std
    assert pendulum["reference"]["mean"] == -162.965 and pendulum["reached_final"] is True
    assert runs[f"{tmp_path.name}/vpg/copy_0"]["reference"] is None
    assert line_of(summary, "ppo_cartpole")["reached_final"] == 1


def test_reference_matching_by_set_and_env():
    nearest = references_for("rainbow_cartpole", {"agent": "dqn", "env": "CartPole-v1"})
    assert nearest[0]["algo"] == "dqn" and nearest[0]["match"] == "nearest algorithm: dqn"
    assert [r["source"] for r in nearest] == ["zoo", "cleanrl"]
    lstm = references_for("ppo_gru_cartpole", {"agent": "ppo", "env": "CartPoleNoVel-v1", "recurrent": True})
    assert lstm[0]["algo"] == "ppo_lstm" and lstm[0]["mean"] == 500.0
    pong_v5 = references_for("ppo_atari", {"agent": "ppo", "env": "ALE/Pong-v5"})
    assert pong_v5[0]["env"] == "PongNoFrameskip-v4" and "this run: ALE/Pong-v5" in pong_v5[0]["match"]
    assert references_for("impala_cartpole", {"agent": "a2c", "env": "CartPole-v1"})[0]["algo"] == "a2c"
    cheetah = references_for("sac_halfcheetah", {"agent": "sac", "env": "HalfCheetah-v4"})  # the same id first
    assert [(r["source"], r["env"]) for r in cheetah] == [("cleanrl", "HalfCheetah-v4"), ("zoo", "HalfCheetah-v3")]


def test_lines_group_copies_and_name_their_differences(tmp_path):
    copies(tmp_path / "base", [1.0, 2.0])
    copies(tmp_path / "lr", [3.0, 4.0], lr=3e-4)
    make_run(tmp_path / "search" / "trial_0", final=5.0, lr=1e-2, ent_coef=0.01)
    copies(tmp_path / "search" / "trial_1", [6.0, 7.0], lr=2e-2)  # a search with --copies 2
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    labels = {line["label"]: line["copies"] for line in summary["lines"]}
    assert labels == {"ppo_cartpole lr=0.001": 2, "ppo_cartpole lr=0.0003": 2, "ppo_cartpole lr=0.01 (trial_0)": 1,
                      "ppo_cartpole lr=0.02 (trial_1)": 2}  # ent_coef: only trial_0 has it (a newer setting)
    assert line_of(summary, "ppo_cartpole lr=0.0003")["final_mean"] == 3.5


def test_partial_and_broken_runs_get_notes_not_errors(tmp_path):
    make_run(tmp_path / "done", final=500.0, evals={100: 500.0})
    cut = make_run(tmp_path / "cut", evals={50: 100.0}, train={50: 20.0, 60: 30.0})
    with open(cut / "progress.csv", "a") as f:
        f.write("70,7.0,99,15,0")  # a row being written, cut in its numbers: no newline yet
    make_run(tmp_path / "no_eval", train={10: 5.0, 20: 6.0})
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "hparams.json").write_text(json.dumps({"hparams_set": "ppo_cartpole", "hparams": {}}))
    summary = write_report([tmp_path], tmp_path / "out", quiet=True, reps=200)
    runs = {r["name"].split("/")[-1]: r for r in summary["runs"]}
    assert runs["cut"]["env_steps"] == 60 and runs["cut"]["status"] == "unfinished"
    assert any("cut off" in n for n in runs["cut"]["notes"]) and any("unfinished" in n for n in runs["cut"]["notes"])
    assert (runs["cut"]["final_score"], runs["cut"]["final_source"]) == (100.0, "last evaluation in progress.csv")
    assert runs["no_eval"]["final_score"] is None
    assert any("no evaluation yet" in n for n in runs["no_eval"]["notes"])
    assert runs["started"]["status"] == "not started"
    space = summary["aggregates"][0]  # the finished run alone makes its line's numbers
    assert space["runs"] == {"ppo_cartpole on CartPole-v1": 1}  # "started" has no env: a line of its own
    assert any("2 unfinished run(s) left out" in n for n in summary["notes"])
    page = (tmp_path / "out" / "index.html").read_text()
    assert "cut off" in page and "no evaluation yet" in page


def test_a_copy_in_progress_does_not_cut_its_finished_copies_short(tmp_path):
    for i, value in enumerate([400.0, 500.0]):
        make_run(tmp_path / f"copy_{i}", seed=i, final=value, evals={50: 100.0, 100: value})
    make_run(tmp_path / "copy_2", seed=2, evals={50: 0.0})  # at step 50 of 100, no eval.json yet
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    (line,) = summary["lines"]
    assert (line["final_mean"], line["scored_copies"], line["copies"]) == (450.0, 2, 3)
    assert line["curves"]["eval/env_steps"]["x"] == [50, 100] and line["curves"]["eval/env_steps"]["mean"] == [100,
                                                                                                             450]
    assert [r["counted"] for r in summary["runs"]] == [True, True, False]


def test_a_resumed_run_keeps_the_later_rows_and_a_running_clock(tmp_path):
    run = make_run(tmp_path / "r")
    (run / "progress.csv").write_text("env_steps,wall_time_s,episode_return_mean\n"
                                      "10,1.0,1\n20,2.0,2\n30,3.0,3\n"  # checkpoint at 20, killed after 30
                                      "30,0.5,7\n40,1.5,8\n")
    (only,) = read_runs([run])[0]
    x, y = only.curve("train")
    assert x.tolist() == [10, 20, 30, 40] and y.tolist() == [1, 2, 7, 8]
    assert only.curve("train", "wall_time_s")[0].tolist() == [1.0, 2.0, 2.5, 3.5]


def test_no_runs_and_bad_paths_are_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for args in ([str(tmp_path / "empty")], [str(tmp_path / "missing")]):
        assert report_main([*args, "--output", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
    with pytest.raises(ConfigError, match="no runs found"):
        write_report([tmp_path / "empty"], tmp_path / "out")


def test_an_empty_folder_beside_runs_is_a_note(tmp_path):
    copies(tmp_path / "runs", [1.0])
    (tmp_path / "empty").mkdir()
    summary = write_report([tmp_path / "runs", tmp_path / "empty"], tmp_path / "out", quiet=True, reps=200)
    assert any("empty: no runs found" in n for n in summary["notes"])


def test_page_references_files_that_exist_and_summary_holds_the_numbers(tmp_path):
    copies(tmp_path / "ppo", [480.0, 500.0, 500.0])
    copies(tmp_path / "a2c", [300.0, 350.0], set_name="a2c_cartpole")
    out = tmp_path / "report"
    returned = write_report([tmp_path / "ppo", tmp_path / "a2c"], out, quiet=True, reps=200)
    page = (out / "index.html").read_text()
    linked = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert {"curves_cartpole-v1.png", "curves_cartpole-v1.svg", "aggregates_cartpole-v1.png",
            "profile_cartpole-v1.png", "summary.json"} <= set(linked)
    assert all((out / name).is_file() for name in linked)
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads(json.dumps(returned))
    assert line_of(summary, "a2c_cartpole")["final_mean"] == 325.0
    assert summary["aggregates"][0]["methods"]["ppo_cartpole"]["IQM"]["value"] == pytest.approx(np.mean([480, 500,
                                                                                                          500]))
    assert "ppo_cartpole" in page and "a2c_cartpole" in page and "325" in page


def test_copies_keep_their_results_when_the_report_fails(tmp_path, monkeypatch, capsys):
    import rl.report
    from rl.copies import write_copies_report

    def broken(*args, **kwargs):
        raise RuntimeError("no fonts\nsecond line")

    monkeypatch.setattr(rl.report, "write_report", broken)
    write_copies_report(tmp_path)
    err = capsys.readouterr().err
    assert "report not written: RuntimeError: no fonts" in err and err.count("\n") == 1


def test_train_copies_writes_the_report(tmp_path, train_cli):
    out = tmp_path / "copies"
    result = train_cli("--hparams", "ppo_cartpole", "--train_steps", "1024", "--copies", "2", "--output_dir",
                       str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "report of the copies" in result.stdout, result.stdout[-2000:]
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["finished", "finished"]
    assert (out / "report" / "index.html").is_file() and (out / "report" / "curves_cartpole-v1.png").is_file()


def _panel(fig, row: int, col: int):
    return fig.axes[2 * row + col]  # curves_figure's panels: eval/steps, eval/wall time, train/steps, train/wall time


def _draw_curves(summary: dict, lines, drawn: dict):
    from rl.report import plots

    return plots.curves_figure("env", [{"label": ln.label, "colour": "C0", **drawn[ln.label]} for ln in lines],
                               "training return", [(500.0, "reference 500")])


def test_a_single_evaluation_run_draws_its_interval(tmp_path):
    """One evaluation per copy (the final one, eval_interval >= train_steps): the band is a single point, so it is
    drawn as an error bar spanning the interval that summary.json holds, on both evaluation panels."""
    for i, value in enumerate([100.0, 200.0, 400.0]):
        make_run(tmp_path / f"copy_{i}", seed=i, final=value, evals={100: value}, train={50: 1.0, 100: 2.0})
    summary, lines, drawn = compute(read_runs([tmp_path])[0], reps=300)
    curve = summary["lines"][0]["curves"]["eval/env_steps"]
    assert curve["x"] == [100] and curve["low"][0] < curve["mean"][0] < curve["high"][0]
    fig = _draw_curves(summary, lines, drawn)
    for col, key in ((0, "eval/env_steps"), (1, "eval/wall_time_s")):
        (bars,) = _panel(fig, 0, col).containers  # matplotlib's ErrorbarContainer
        ((low, high),) = [seg for seg in bars.lines[2][0].get_segments()]
        band = summary["lines"][0]["curves"][key]
        assert (low[1], high[1]) == pytest.approx((band["low"][0], band["high"][0]))


def test_a_panel_without_data_says_so(tmp_path):
    """Only training scores (and a reference line on the evaluation panels, which alone made matplotlib's
    has_data() true): both evaluation panels carry the note, the training panels do not."""
    make_run(tmp_path / "r", train={10: 1.0, 20: 2.0})
    summary, lines, drawn = compute(read_runs([tmp_path / "r"])[0], reps=100)
    fig = _draw_curves(summary, lines, drawn)
    notes = [[t.get_text() for t in _panel(fig, row, col).texts if t.get_text().startswith("no data")]
             for row in (0, 1) for col in (0, 1)]
    assert notes == [["no data: no evaluation logged yet"]] * 2 + [[], []]


def test_probability_of_improvement_equals_rliables(tmp_path):
    from rliable import library, metrics

    from rl.report.stats import probabilities_of_improvement

    x, y = np.array([[1.0], [2.0], [3.0]]), np.array([[0.0], [2.0], [4.0], [5.0]])
    (pair,) = probabilities_of_improvement({"x": x, "y": y}, reps=300)
    assert (pair["x"], pair["y"]) == ("x", "y")
    # of the 12 pairs of runs x wins 4 and ties 1: 4.5 / 12
    assert pair["value"] == metrics.probability_of_improvement(x, y) == 0.375
    assert 0 <= pair["low"] <= 0.375 <= pair["high"] <= 1
    with warnings.catch_warnings():  # its interval is rliable's bootstrap's, up to the random draws
        warnings.simplefilter("ignore", FutureWarning)
        x, y = np.arange(12.0).reshape(6, 2), np.arange(3.0, 13.0).reshape(5, 2)  # two tasks, 6 and 5 runs
        _, rliable_interval = library.get_interval_estimates({"k": (x, y)}, metrics.probability_of_improvement,
                                                             reps=2000, random_state=np.random.RandomState(0))
    (mine,) = probabilities_of_improvement({"x": x, "y": y}, reps=2000)
    assert mine["value"] == metrics.probability_of_improvement(x, y)
    assert [mine["low"], mine["high"]] == pytest.approx(np.ravel(rliable_interval["k"]), abs=0.05)
    copies(tmp_path / "a", [1.0, 2.0, 3.0])
    copies(tmp_path / "b", [0.0, 2.0, 4.0, 5.0], set_name="a2c_cartpole")
    copies(tmp_path / "c", [9.0, 9.5], set_name="dqn_cartpole")
    summary = write_report([tmp_path], tmp_path / "out", quiet=True, reps=300)
    pairs = {(p["x"], p["y"]): p["value"] for p in summary["aggregates"][0]["probability_of_improvement"]}
    assert pairs == {("ppo_cartpole", "a2c_cartpole"): 0.375, ("ppo_cartpole", "dqn_cartpole"): 0.0,
                     ("a2c_cartpole", "dqn_cartpole"): 0.0}
    assert "P(X &gt; Y)" in (tmp_path / "out" / "index.html").read_text()


def test_the_p_value_of_an_improvement_counts_the_splits_of_the_runs():
    """Three runs against three with every pair ordered: P = 1 and a bootstrap interval of [1, 1], but 2 of the 20
    ways to split the six runs are that extreme (this one and its mirror): p = 0.1, two-sided. Exact for one and
    for two tasks (20 x 20 splits: 2 of 400 that extreme in both), Monte Carlo beyond 20,000 splits; equal runs
    give p = 1."""
    from scipy.stats import mannwhitneyu

    from rl.report.stats import no_difference_p, probabilities_of_improvement

    high, low = np.array([[3.0], [4.0], [5.0]]), np.array([[0.0], [1.0], [2.0]])
    (pair,) = probabilities_of_improvement({"x": high, "y": low}, reps=300)
    assert (pair["value"], pair["low"], pair["high"], pair["p"]) == (1.0, 1.0, 1.0, 0.1)
    assert no_difference_p(low, high) == 0.1 and no_difference_p(high, high) == 1.0
    assert no_difference_p(np.hstack([high, high]), np.hstack([low, low])) == 2 / 400
    x, y = np.array([[1.0], [2.0], [3.0], [6.0]]), np.array([[0.0], [4.0], [5.0], [7.0], [8.0]])  # 126 splits: exact
    assert no_difference_p(x, y) == pytest.approx(mannwhitneyu(x[:, 0], y[:, 0], method="exact").pvalue)
    x, y = np.arange(10.0)[:, None] + 5, np.arange(10.0)[:, None]  # 184,756 splits: 2,000 random ones
    assert no_difference_p(x, y) == pytest.approx(mannwhitneyu(x[:, 0], y[:, 0], method="exact").pvalue, abs=0.01)


def test_performance_profile_equals_rliables_default():
    """The vectorised profile is rliable's `run_score_deviation` (the share of every run's score above tau),
    bootstrap bands included: rliable draws from numpy's global state, seeded alike for both."""
    from rliable import library

    from rl.report.stats import performance_profiles, score_distribution

    assert score_distribution(np.array([[1.0], [2.0], [3.0]]), np.array([2.0, 0.5])).tolist() == [1 / 3, 1.0]  # above
    scores = {"a": np.array([[1.0, 5.0], [2.0, 2.0], [3.0, 7.0]]), "b": np.array([[0.0, 4.0], [6.0, 1.0]])}
    np.random.seed(3)
    mine = performance_profiles(scores, points=11, reps=200)
    np.random.seed(3)
    profile, bands = library.create_performance_profile(scores, mine["tau"], reps=200)
    assert mine["profiles"]["a"][5] == np.mean(scores["a"] > mine["tau"][5])  # the definition, at one tau
    for k in scores:
        np.testing.assert_array_equal(mine["profiles"][k], profile[k])
        np.testing.assert_array_equal(mine["bands"][k], bands[k])


def test_a_damaged_eval_json_is_one_line_and_exit_2(tmp_path, capsys):
    make_run(tmp_path / "ok", final=500.0, evals={100: 500.0})
    bad = make_run(tmp_path / "bad", final=400.0)
    (bad / "eval.json").write_text('{"mean_ret')  # cut off
    assert report_main([str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith(f"error: {bad / 'eval.json'} is not valid JSON")
    assert not (tmp_path / "out" / "index.html").exists()


def test_lines_of_different_budgets_are_compared_at_the_smallest(tmp_path):
    """A 100-step line and a 200-step one: the aggregates take every run's latest evaluation at step 100 (the
    longer line's at 100, not its final at 200), and a note says so; the lines table keeps the final scores."""
    for i in range(2):
        make_run(tmp_path / "short" / f"copy_{i}", seed=i, final=10.0 + i, evals={50: 1.0, 100: 10.0 + i})
        make_run(tmp_path / "long" / f"copy_{i}", seed=i, train_steps=200, final=90.0 + i,
                 evals={60: 5.0 + i, 150: 50.0, 200: 90.0 + i})
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    (space,) = summary["aggregates"]
    assert space["step"] == 100 and "at step 100" in space["title"]
    assert space["methods"]["ppo_cartpole train_steps=100"]["mean"]["value"] == 10.5
    assert space["methods"]["ppo_cartpole train_steps=200"]["mean"]["value"] == 5.5  # its evaluations at 60
    assert any("different budgets" in n and "step 100" in n for n in summary["notes"])
    assert line_of(summary, "ppo_cartpole train_steps=200")["final_mean"] == 90.5


def test_a_line_still_training_is_compared_where_it_is_not_against_finished_scores(tmp_path):
    """The same budget, but one line has no finished run yet (its latest evaluations are at step 60): the aggregates
    compare every run at step 60 (the finished line's evaluation at 50, not its final at 100), and a note says so."""
    for i in range(2):
        make_run(tmp_path / "done" / f"copy_{i}", seed=i, final=10.0 + i, evals={50: 1.0, 100: 10.0 + i})
        make_run(tmp_path / "going" / f"copy_{i}", seed=i, evals={30: 2.0, 60: 5.0 + i}, lr=3e-4)
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    (space,) = summary["aggregates"]
    assert space["step"] == 60 and "unfinished run" in space["title"]
    assert space["methods"]["ppo_cartpole lr=0.001"]["mean"]["value"] == 1.0
    assert space["methods"]["ppo_cartpole lr=0.0003"]["mean"]["value"] == 5.5
    assert any("unfinished runs are compared" in n and "step 60" in n for n in summary["notes"])
    assert line_of(summary, "ppo_cartpole lr=0.001")["final_mean"] == 10.5


def test_a_trial_stopped_early_is_a_run_that_ended_not_one_still_training(tmp_path):
    """A search's pruned trial (eval.json of mode stopped_early at step 60) is listed as stopped early and compared
    by the evaluation it stopped at, as a search compares its trials: no common step is forced on the others."""
    make_run(tmp_path / "trial_0", final=10.0, evals={50: 1.0, 100: 10.0})
    pruned = make_run(tmp_path / "trial_1", evals={30: 2.0, 60: 3.0}, lr=0.5)
    (pruned / "eval.json").write_text(json.dumps({"mode": "stopped_early", "mean_return": 3.0, "std_return": 0.0,
                                                  "env_steps": 60, "stopped_early": True}))
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    assert sorted(r["status"] for r in summary["runs"]) == ["finished", "stopped early"]
    (space,) = summary["aggregates"]
    assert space["step"] is None and not any("unfinished runs" in n for n in summary["notes"])


def test_aggregates_at_fixed_budgets_take_each_run_there_and_leave_out_runs_not_there_yet(tmp_path, capsys):
    """`--at 50 100`: at 50 every run's latest evaluation at or before it (both lines' copies, the unfinished one
    too); at 100 the unfinished copy (at step 60) is left out with a note. A step of 0 is one line, exit 2."""
    for i in range(2):
        make_run(tmp_path / "a" / f"copy_{i}", seed=i, final=10.0 + i, evals={40: 1.0 + i, 100: 10.0 + i})
    make_run(tmp_path / "b" / "copy_0", seed=0, final=20.0, evals={50: 3.0, 100: 20.0}, lr=3e-4)
    make_run(tmp_path / "b" / "copy_1", seed=1, evals={50: 5.0, 60: 6.0}, lr=3e-4)
    summary = write_report([tmp_path], tmp_path / "out", quiet=True, reps=200, at=(50, 100))
    spaces = {space["step"]: space for space in summary["aggregates"] if space["key"].endswith((" at 50", " at 100"))}
    a, b = "ppo_cartpole lr=0.001", "ppo_cartpole lr=0.0003"
    assert spaces[50]["runs"] == {a: 2, b: 2} and spaces[100]["runs"] == {a: 2, b: 1}
    assert spaces[50]["methods"][a]["mean"]["value"] == 1.5 and spaces[50]["methods"][b]["mean"]["value"] == 4.0
    assert spaces[100]["methods"][b]["mean"]["value"] == 20.0
    assert (spaces[50]["probability_of_improvement"][0]["value"]
            == (1.0 if spaces[50]["probability_of_improvement"][0]["x"] == b else 0.0))
    assert any("at step 100" in n and "b/copy_1 not there yet" in n for n in summary["notes"])
    assert (tmp_path / "out" / "aggregates_cartpole-v1-at-50.png").is_file()
    assert report_main([str(tmp_path), "--output", str(tmp_path / "out2"), "--at", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --at takes agent steps above 0")


def test_ignoring_train_steps_makes_a_long_run_and_a_short_one_copies_compared_where_both_are(tmp_path, capsys):
    """`--ignore train_steps`: a 200-step run and a 100-step run of one set are one line of 2 copies, compared with
    a peer's 2 copies at step 100 (the long run's evaluation there, not its final); a note says the line mixes
    budgets. Without it they are two lines of one run. A setting no run has is one line, exit 2."""
    make_run(tmp_path / "ours_long", seed=0, train_steps=200, final=90.0, evals={100: 30.0, 200: 90.0})
    make_run(tmp_path / "ours_short", seed=1, final=32.0, evals={100: 32.0})
    for i in range(2):
        make_run(tmp_path / "peer" / f"copy_{i}", set_name="sb3_sac", seed=i, final=20.0 + i, evals={100: 20.0 + i})
    apart = write_report([tmp_path], tmp_path / "out", quiet=True, reps=200)
    assert {line["label"]: line["copies"] for line in apart["lines"]} == {
        "ppo_cartpole train_steps=200": 1, "ppo_cartpole train_steps=100": 1, "sb3_sac": 2}
    summary = write_report([tmp_path], tmp_path / "out", quiet=True, reps=200, ignore=("train_steps",))
    assert {line["label"]: line["copies"] for line in summary["lines"]} == {"ppo_cartpole": 2, "sb3_sac": 2}
    (space,) = summary["aggregates"]
    assert space["step"] == 100 and space["methods"]["ppo_cartpole"]["mean"]["value"] == 31.0
    (pair,) = space["probability_of_improvement"]
    assert pair["value"] == (1.0 if pair["x"] == "ppo_cartpole" else 0.0)
    assert any("different budgets (100, 200 steps; train_steps ignored)" in n for n in summary["notes"])
    assert report_main([str(tmp_path), "--output", str(tmp_path / "o2"), "--ignore", "train_step"]) == 2
    assert capsys.readouterr().err.startswith("error: --ignore train_step: no run has that setting")


def test_the_same_budget_compares_final_scores_without_a_note(tmp_path):
    copies(tmp_path / "a", [1.0, 2.0])
    copies(tmp_path / "b", [3.0, 4.0], lr=3e-4)
    summary, _, _ = compute(read_runs([tmp_path])[0], reps=200)
    assert summary["aggregates"][0]["step"] is None and not any("budget" in n for n in summary["notes"])


def test_control_changes_and_copy_ends_are_marked(tmp_path):
    """hparams.json's --control record becomes a dotted line at its step (and its wall time) on the curves; copies
    that end at different wall times get an x each and a note that the mean stops at the fastest."""
    run = make_run(tmp_path / "copy_0", evals={40: 1.0, 100: 2.0}, train={40: 1.0, 80: 2.0, 100: 3.0}, final=2.0)
    record = json.loads((run / "hparams.json").read_text())
    record["control"] = [{"step": 80, "settings": {"lr": 1e-4}}]
    (run / "hparams.json").write_text(json.dumps(record))
    other = make_run(tmp_path / "copy_1", seed=1, evals={40: 1.0, 120: 2.0}, train={40: 1.0, 120: 3.0}, final=2.0)
    record = json.loads((other / "hparams.json").read_text())
    record["control"] = [{"step": 30, "settings": {"lr": 1e-4}, "overridden": ["lr"]}]  # replaced at a resume
    (other / "hparams.json").write_text(json.dumps(record))
    summary, lines, drawn = compute(read_runs([tmp_path])[0], reps=100)
    mark, replaced = summary["lines"][0]["control"]
    assert (mark["step"], mark["wall_time_s"], mark["text"]) == (80, 8.0, "lr=0.0001")  # make_run: wall = step / 10
    assert (replaced["step"], replaced["wall_time_s"]) == (30, None)  # before its first log row: no wall time
    assert replaced["text"] == "lr=0.0001 (replaced at a resume)"
    assert any("the mean stops at 10 s" in n and "others at 12 s" in n for n in summary["notes"])
    fig = _draw_curves(summary, lines, drawn)
    for col, where in ((0, 80), (1, 8.0)):
        ax = _panel(fig, 1, col)
        dotted = [ln for ln in ax.lines if ln.get_linestyle() == ":"]
        assert [ln.get_xdata()[0] for ln in dotted] == ([where, 30] if col == 0 else [where])
        assert "lr=0.0001" in [t.get_text() for t in ax.texts]
    ends = [ln for ln in _panel(fig, 1, 1).lines if ln.get_marker() == "x"]
    assert sorted(ln.get_xdata()[0] for ln in ends) == [10.0, 12.0]


def test_long_labels_stay_inside_the_figure(tmp_path):
    """A search's labels carry settings: the legend is wrapped under the panels and every label fits the figure."""
    for i in range(4):
        make_run(tmp_path / f"trial_{i}", final=float(i), evals={100: float(i)}, lr=10.0 ** -i,
                 exploration_fraction_with_a_long_name=0.1 * i, another_setting_that_makes_the_label_long=i,
                 **{f"setting_number_{j}_of_a_search_space": i * j for j in range(4)})
    summary, lines, drawn = compute(read_runs([tmp_path])[0], reps=100)
    fig = _draw_curves(summary, lines, drawn)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (legend,) = fig.legends
    box, figure_box = legend.get_window_extent(renderer), fig.bbox
    assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and figure_box.y0 <= box.y0
    assert len(legend.get_texts()) == 4 and all(t.get_text()[0] in "1234" for t in legend.get_texts())
    assert len(summary["lines"][0]["label"]) > 200  # longer than the figure is wide


def test_the_runs_table_as_csv(tmp_path):
    copies(tmp_path / "ppo", [480.0, 500.0])
    write_report([tmp_path / "ppo"], tmp_path / "out", quiet=True, reps=200)
    with open(tmp_path / "out" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["name"], float(r["final_score"]), r["reference_source"]) for r in rows] == [
        ("ppo/copy_0", 480.0, "zoo"), ("ppo/copy_1", 500.0, "zoo")]


def test_copies_write_tensorboards_hparams_view(tmp_path):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
    from tensorboard.plugins.hparams import plugin_data_pb2

    from rl.logger import log_final_hparams

    run = make_run(tmp_path / "copy_0", final=480.0, lr=3e-4, net_arch=[64, 64])
    log_final_hparams(run, {"final_return_mean": 480.0})
    events = EventMultiplexer()
    events.AddRunsFromDirectory(str(tmp_path))
    events.Reload()
    content = events.PluginRunToTagToContent("hparams")["copy_0"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["lr"].number_value == 3e-4 and start.hparams["net_arch"].string_value == "[64, 64]"
    assert start.hparams["hparams_set"].string_value == "ppo_cartpole"
    assert [e.value for e in events.Scalars("copy_0", "hparams/final_return_mean")] == [480.0]


def test_evaluations_cut_short_by_the_time_limit_are_noted(tmp_path):
    """A greedy Atari policy that never serves again plays on to the time limit: its score is cut short, and the
    report says so for the periodic evaluations (progress.csv's eval_time_limited) and the final one (eval.json);
    not for a robot, whose good episodes end at the limit."""
    run = make_run(tmp_path / "stalled", final=20.0, evals={50: 10.0, 100: 20.0}, set_name="ppo_atari",
                   env="BreakoutNoFrameskip-v4")
    rows = list(csv.reader(open(run / "progress.csv")))
    rows[0].append("eval_time_limited")
    rows[1].append("2")  # step 50: 2 episodes cut short
    rows[2].append("0")
    with open(run / "progress.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    record = json.loads((run / "eval.json").read_text())
    (run / "eval.json").write_text(json.dumps({**record, "episodes": 8, "time_limited": 1}))
    make_run(tmp_path / "fine", final=20.0, evals={100: 20.0}, set_name="ppo_atari", env="BreakoutNoFrameskip-v4")
    robot = make_run(tmp_path / "robot", final=2000.0, evals={100: 2000.0}, set_name="sac_hopper_bullet",
                     env="HopperBulletEnv-v0")  # a hopper that stays up to the limit: nothing cut short
    (robot / "eval.json").write_text(json.dumps({**json.loads((robot / "eval.json").read_text()), "episodes": 10,
                                                 "time_limited": 10}))
    notes = {r["name"].split("/")[-1]: r["notes"] for r in write_report([tmp_path], tmp_path / "out", quiet=True,
                                                                         reps=200)["runs"]}
    assert any("time limit" in n and n.endswith("step(s) 50") for n in notes["stalled"])  # not step 100
    assert any("1 of 8 episodes ended by the time limit" in n for n in notes["stalled"])
    assert not any("time limit" in n for n in notes["fine"] + notes["robot"])


def test_keep_copies_only_the_record_and_the_report_rebuilds_from_it(tmp_path):
    """`--keep DIR` copies hparams.json, progress.csv and eval.json of every run (no checkpoints, no event files),
    under the names the report gives the runs; a report over DIR has the same runs and scores as over the runs."""
    runs = copies(tmp_path / "runs" / "ppo", [10.0, 30.0])
    make_run(tmp_path / "runs" / "unfinished", evals={50: 5.0}, train={50: 4.0})  # no eval.json yet
    (runs / "copy_0" / "checkpoints").mkdir()
    (runs / "copy_0" / "checkpoints" / "ckpt_100.pt").write_bytes(b"weights")
    (runs / "copy_0" / "events.out.tfevents.1.host").write_bytes(b"scalars")
    kept = tmp_path / "kept"
    assert report_main([str(tmp_path / "runs"), "--output", str(tmp_path / "r1"), "--keep", str(kept), "--reps", "200",
                        "--quiet"]) == 0
    assert sorted(p.name for p in (kept / "runs" / "ppo" / "copy_0").iterdir()) == ["eval.json", "hparams.json",
                                                                                   "progress.csv"]
    assert sorted(p.name for p in (kept / "runs" / "unfinished").iterdir()) == ["hparams.json", "progress.csv"]
    progress = "ppo/copy_1/progress.csv"
    assert (kept / "runs" / progress).read_text() == (tmp_path / "runs" / progress).read_text()
    assert report_main([str(kept / "runs"), "--output", str(tmp_path / "r2"), "--reps", "200", "--quiet"]) == 0
    before, after = (json.loads((tmp_path / r / "summary.json").read_text())["runs"] for r in ("r1", "r2"))
    assert [(r["name"], r["final_score"], r["final_source"]) for r in after] == \
        [(r["name"], r["final_score"], r["final_source"]) for r in before]
    # keeping again from a folder that holds the kept records copies nothing twice
    assert report_main([str(tmp_path), "--output", str(tmp_path / "r3"), "--keep", str(kept), "--reps", "200",
                        "--quiet"]) == 0
    assert not (kept / str(tmp_path.name) / "kept").exists()


def write_progress(folder: Path, rows: list[tuple[int, float | str]]) -> None:
    """progress.csv of (env_steps, eval_return_mean) rows in the order they were logged (a resume logs again from
    its checkpoint: its step goes back, and its wall clock restarts)."""
    with open(folder / "progress.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["env_steps", "wall_time_s", "episode_return_mean", "eval_return_mean", "eval_return_std"])
        for step, value in rows:
            w.writerow([step, step / 10, 1.0, value, 0.0 if value != "" else ""])


def test_a_run_is_finished_only_by_the_eval_json_of_its_end(tmp_path):
    """Each folder is a run of 20,000 steps. `past`: finished once with 5,000 steps (eval.json at 5,000), resumed
    with 20,000 and stopped at 9,000. `rewound`: finished at 20,000, then resumed from its 6,000 checkpoint and
    stopped at 9,000. `raised`: finished at 9,000, its budget raised to 20,000 at a resume stopped before its first
    row. All three are unfinished, say why, and score their last evaluation, not the stale eval.json's.
    `evaluated`: an evaluation run (--training False) replaced eval.json: finished, scored by progress.csv's final
    evaluation; `tested`: the same at 9,000 of 20,000, unfinished. `nan`: a finished run whose final evaluation was
    written as null (strict JSON's NaN): finished, no score from it. `done`: a proper end."""
    def run(name: str, rows, final: dict | None):
        folder = make_run(tmp_path / name, train_steps=20_000)
        write_progress(folder, rows)
        if final is not None:
            (folder / "eval.json").write_text(json.dumps({"std_return": 0.0, "mode": "final_training_evaluation",
                                                          **final}))

    run("past", [(2500, 1.0), (5000, 50.0), (5000, 50.0), (9000, 9.0)], {"mean_return": 50.0, "env_steps": 5000})
    run("rewound", [(6000, 6.0), (20_000, 200.0), (6000, 6.0), (9000, 9.0)],
        {"mean_return": 200.0, "env_steps": 20_000})
    run("raised", [(4500, 1.0), (9000, 9.0)], {"mean_return": 90.0, "env_steps": 9000})
    run("evaluated", [(10_000, 1.0), (20_000, 20.0)], {"mode": "test", "mean_return": 99.0, "env_steps": 20_000})
    run("tested", [(9000, 9.0)], {"mode": "test", "mean_return": 99.0, "env_steps": 9000})
    run("nan", [(10_000, 1.0), (20_000, 7.0)], {"mean_return": None, "env_steps": 20_000})
    run("done", [(10_000, 1.0), (20_000, 20.0)], {"mean_return": 21.0, "env_steps": 20_000})
    runs = {r.path.name: r for r in read_runs([tmp_path])[0]}
    status = {name: r.status() for name, r in runs.items()}
    assert status == {"past": "unfinished", "rewound": "unfinished", "raised": "unfinished", "evaluated": "finished",
                      "tested": "unfinished", "nan": "finished", "done": "finished"}
    scores = {name: r.final_score() for name, r in runs.items()}
    assert scores["past"] == (9.0, 9000, "last evaluation in progress.csv")
    assert scores["rewound"] == scores["raised"] == (9.0, 9000, "last evaluation in progress.csv")
    assert scores["evaluated"] == (20.0, 20_000, "final evaluation in progress.csv")
    assert scores["tested"] == (9.0, 9000, "last evaluation in progress.csv")
    assert scores["nan"][:2] == (7.0, 20_000) and scores["done"] == (21.0, 20_000, "eval.json")
    assert "eval.json is from step 5000, before the run's last logged step 9000 (stale: the run was resumed)" in \
        runs["past"].notes
    assert any("eval.json is from step 20000, past the run's last logged step 9000" in n for n in runs["rewound"].notes)
    assert any("before the run's budget of 20000 steps" in n for n in runs["raised"].notes)
    assert runs["past"].best_score() == (50.0, 5000)  # its evaluations happened, whichever sitting made them
    summary, _, _ = compute(list(runs.values()), reps=50)
    rows = {Path(r["name"]).name: r for r in summary["runs"]}
    assert [rows[n]["status"] for n in ("past", "rewound", "done")] == ["unfinished", "unfinished", "finished"]
    assert rows["past"]["final_score"] == 9.0 and rows["done"]["final_score"] == 21.0
    assert sum(line["finished_copies"] for line in summary["lines"]) == 3


def test_a_pruned_trial_resumed_past_its_stop_is_no_longer_stopped_early(tmp_path):
    """A stopped_early eval.json holds while its step is the run's last; a trial resumed past it is unfinished."""
    pruned = make_run(tmp_path / "trial_0", evals={30: 2.0, 60: 3.0})
    (pruned / "eval.json").write_text(json.dumps({"mode": "stopped_early", "mean_return": 3.0, "std_return": 0.0,
                                                  "env_steps": 60, "stopped_early": True}))
    assert read_runs([pruned])[0][0].status() == "stopped early"
    write_progress(pruned, [(30, 2.0), (60, 3.0), (90, 4.0)])
    (run,) = read_runs([pruned])[0]
    assert run.status() == "unfinished" and run.final_score() == (4.0, 90, "last evaluation in progress.csv")
