"""write_report: run folders in, `index.html`, `summary.json` and the figures out.

Everything the page shows is computed once into the summary dict (the numbers), then drawn and written from it, so
the JSON and the page cannot disagree.
"""

from __future__ import annotations

import csv
import datetime
import json
import re
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from rl.errors import ConfigError
from rl.report import scores
from rl.report.lines import Line, group_lines, value_text
from rl.report.runs import Run, natural_key, read_runs

TRAIN_LABELS = {"game_score_mean": "training game score (whole games, unclipped)",
                "episode_return_mean": "training episode return (last 100 episodes)"}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "env"


def _num(value):
    return None if value is None or not np.isfinite(value) else float(value)


def _run_summary(run: Run, line: Line, counted: bool) -> dict:
    final, final_step, source = run.final_score()
    best, best_step = run.best_score()
    refs = scores.references_for(run.hparams_set, run.hparams)
    ref = refs[0] if refs else None
    return {
        "name": run.name, "path": str(run.path), "line": line.label, "hparams_set": run.hparams_set,
        "env": run.env, "seed": run.seed, "status": run.status(), "env_steps": run.last_step,
        "train_steps": run.train_steps, "wall_time_s": run.wall_time_s, "final_score": final,
        "final_step": final_step, "final_source": source, "best_score": best, "best_step": best_step,
        "human_normalized_final": None if final is None else scores.human_normalized(run.env, final),
        "reference": ref, "reached_final": scores.reached(final, ref) if ref else None,
        "reached_best": scores.reached(best, ref) if ref else None, "notes": run.notes, "control": run.control,
        "counted": counted and final is not None,  # in its line's mean, aggregates and reference count
    }


def _curves(line: Line, counted: list[Run], reps: int) -> tuple[dict, dict]:
    """Every run's curves (drawn faintly) and the mean of the counted ones."""
    from rl.report.plots import PANELS
    from rl.report.stats import mean_curve

    runs, means = {}, {}
    for score, x in PANELS:
        key = f"{score}/{x}"
        runs[key] = [run.curve(score, x) for run in line.runs]
        means[key] = mean_curve([run.curve(score, x) for run in counted], reps=reps)
    return runs, means


def _control_marks(line: Line) -> list[dict]:
    """Where --control changed a setting in one of the line's runs: its step, its wall time and what changed."""
    marks = []
    for run in line.runs:
        for entry in run.control:
            replaced = entry.get("overridden", ())  # a --hparam_override at a later resume set it again
            text = ", ".join(f"{k}={value_text(v)}" + (" (replaced at a resume)" if k in replaced else "")
                             for k, v in entry.get("settings", {}).items())
            marks.append({"run": run.name, "step": entry["step"], "wall_time_s": run.wall_time_at(entry["step"]),
                          "text": text})
    return marks


def _wall_time_ends(line: Line, counted: list[Run]) -> str | None:
    """A note when the line's wall-time mean stops before its slowest copy: the mean is drawn where every copy has
    data, so it ends with the fastest one."""
    ends = sorted(run.wall_time_s for run in counted if run.wall_time_s is not None)
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return (f"{line.label}: on the wall-time axes the mean stops at {ends[0]:.3g} s, where the fastest of its "
            f"{len(ends)} copies ended (the others at {', '.join(f'{e:.3g}' for e in ends[1:])} s); "
            f"x marks where each copy ends")


def counted_runs(line: Line) -> list[Run]:
    """The runs a line's numbers are made of: its finished runs, or while none has finished, all of them (a copy
    still at 20% would otherwise cut every mean curve short and drag down the final score)."""
    return [run for run in line.runs if run.finished] or line.runs


def _lists(curve: dict | None) -> dict | None:
    return None if curve is None else {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in curve.items()}


def _score_matrix(columns: list[list[float]]) -> tuple[np.ndarray, int]:
    """Columns (one per task) of run scores -> a (runs x tasks) matrix, cut to the fewest runs of any task (rliable's
    stratified bootstrap needs the same count per task); returns it and how many scores were cut."""
    fewest = min(len(c) for c in columns)
    return np.array([c[:fewest] for c in columns], dtype=float).T, sum(len(c) - fewest for c in columns)


def compute(runs: list[Run], reps: int = 2000, at: tuple[int, ...] = (),
            ignore: frozenset[str] = frozenset()) -> tuple[dict, list[Line], dict]:
    """The summary dict (numbers only, JSON-ready), the lines, and the curves for drawing; `at`: agent steps at which
    the aggregates are also taken (fixed budgets), beside the final ones; `ignore`: settings that do not set runs
    apart into lines."""
    lines = group_lines(runs, ignore)
    notes: list[str] = []
    for number, line in enumerate(lines, 1):
        if len(budgets := _budgets(line)) > 1:
            notes.append(f"line {number} ({line.label}): its runs trained for different budgets "
                         f"({', '.join(str(b) for b in budgets)} steps; train_steps ignored), so its final mean mixes "
                         f"them; its aggregates compare its runs at {budgets[0]} steps")
    run_rows, line_rows, drawn = [], [], {}
    single: list[str] = []  # the numbers of the lines of one run
    for number, line in enumerate(lines, 1):
        counted = counted_runs(line)
        rows = [_run_summary(run, line, run in counted) for run in line.runs]
        run_rows += rows
        finals = [r["final_score"] for r in rows if r["counted"]]
        refs = scores.references_for(line.hparams_set, line.runs[0].hparams)
        runs_xy, means = _curves(line, counted, reps=1000)
        drawn[line.label] = {"runs": runs_xy, "mean": means, "key": number, "control": _control_marks(line)}
        line_rows.append({
            "key": number, "label": line.label, "method": line.method, "hparams_set": line.hparams_set, "env": line.env,
            "settings": line.settings, "train_steps": _budget(line), "runs": [r.name for r in line.runs],
            "copies": len(line.runs),
            "scored_copies": len(finals), "finished_copies": sum(r.finished for r in line.runs),
            "final_mean": _num(np.mean(finals)) if finals else None,
            "final_std": _num(np.std(finals)) if finals else None,
            "best_mean": _num(np.mean([r["best_score"] for r in rows if r["counted"]])) if finals else None,
            "human_normalized_final_mean": scores.human_normalized(line.env, float(np.mean(finals)))
            if finals else None,
            "references": refs,
            "reached_final": sum(bool(r["reached_final"]) for r in rows if r["counted"]) if refs else None,
            "curves": {k: _lists(v) for k, v in means.items()},
            "control": drawn[line.label]["control"],
        })
        if note := _wall_time_ends(line, counted):
            notes.append(note)
        if len(counted) < len(line.runs):
            notes.append(f"{line.label}: {len(line.runs) - len(counted)} unfinished run(s) left out of its mean curves "
                         f"and scores, which are of its {len(counted)} finished one(s); the runs table has their "
                         f"latest evaluation")
        if len(line.runs) == 1:
            single.append(str(number))
    if single:
        notes.append(f"line{'s' if len(single) > 1 else ''} {', '.join(single)} (numbered as in the Lines table): "
                     f"one run each, so no band and a zero-width interval (use --copies N)")
    spaces = []
    for env in dict.fromkeys(line.env for line in lines):  # per game, on raw final scores
        members = [line for line in lines if line.env == env]
        matrix, title, common = _env_scores(env, members, notes, {row["label"]: row["key"] for row in line_rows})
        if matrix:
            spaces.append(_space(env, title, matrix, reps, profile=len(matrix) > 1, step=common))
        for step in at:
            matrix = _scores_at(env, members, step, notes)
            if matrix:
                spaces.append(_space(f"{env} at {step}", f"evaluation return at step {step} on {env} (a fixed budget)",
                                     matrix, reps, profile=len(matrix) > 1, step=step, env=env))
    atari = [(line, row) for line, row in zip(lines, line_rows) if scores.human_normalized(line.env, 0.0) is not None]
    if len({line.env for line, _ in atari}) > 1:  # several games: human-normalised, across games
        by_method: dict[str, dict[str, list[float]]] = {}
        for line, row in atari:
            hns = [r["human_normalized_final"] for r in run_rows if r["line"] == row["label"] and r["counted"]]
            if hns:
                by_method.setdefault(line.method, {})[line.env] = hns
        matrix = {}
        for method, games in by_method.items():  # columns in the games' order, the same for every method
            matrix[method], cut = _score_matrix([games[g] for g in sorted(games)])
            if cut:
                notes.append(f"{method}: its games have different numbers of copies; {cut} score(s) left out of the "
                             f"aggregates across games (the stratified bootstrap needs the same count per game)")
        if len({tuple(sorted(g)) for g in by_method.values()}) > 1:
            notes.append("the methods in the Atari aggregates were run on different games: compare with care")
        if matrix:
            spaces.append(_space("atari", "human-normalised final score, across Atari games", matrix, reps,
                                 profile=True, games={m: sorted(g) for m, g in by_method.items()}))
    number = {row["label"]: str(row["key"]) for row in line_rows}  # a method across games has no number
    few = sorted({number.get(m, m) for space in spaces for m, n in space["runs"].items() if n < 4}, key=natural_key)
    if few:
        notes.append(f"IQM trims a quarter of the runs from each end, which is none below 4 runs: with fewer, it is "
                     f"the mean (line{'s' if len(few) > 1 else ''} {', '.join(few)}); more copies narrow every "
                     f"interval")
    summary = {"runs": run_rows, "lines": line_rows, "aggregates": spaces, "notes": notes}
    return summary, lines, drawn


def _budgets(line: Line) -> list[int]:
    """The train_steps of a line's runs: one, or several where `--ignore train_steps` let them into one line."""
    return sorted({run.train_steps for run in line.runs if run.train_steps})


def _budget(line: Line) -> int | None:
    """A line's training budget: the least of its runs' (the one they all reached)."""
    return next(iter(_budgets(line)), line.runs[0].train_steps)


def _env_scores(env: str, members: list[Line], notes: list[str], numbers: dict) -> tuple[dict, str, int | None]:
    """The lines' scores on one env for the aggregates: their final evaluations, or, where the lines trained for
    different budgets or a line has no finished run yet, every run's latest evaluation at the smallest budget or
    the least step an unfinished run has reached (a longer run's final score is not comparable with a shorter or
    unfinished one's). Returns {label: (runs x 1) scores}, the title, and the common step (None when it is the
    final evaluation). `numbers`: each line's number on the page, for the note."""
    counted = {line.label: [run for run in counted_runs(line) if run.final_score()[0] is not None]
               for line in members}
    spans = {line.label: _budgets(line) for line in members}
    known = {b for span in spans.values() for b in span}
    reached = {run.name: run.final_score()[1] for runs in counted.values() for run in runs if not run.finished}
    if len(known) < 2 and not reached:
        matrix = {label: np.array([[run.final_score()[0]] for run in runs]) for label, runs in counted.items()}
        return {k: v for k, v in matrix.items() if len(v)}, f"final evaluation return on {env}", None
    common = min(known | set(reached.values()))
    matrix, missing = {}, []
    for label, runs in counted.items():
        values = [run.score_at(common)[0] for run in runs]
        missing += [run.name for run, v in zip(runs, values) if v is None]
        if any(v is not None for v in values):
            matrix[label] = np.array([[v] for v in values if v is not None])
    why = []
    if len(known) > 1:
        why.append("the lines trained for different budgets (" + ", ".join(
            f"line {numbers[label]}: {span[0]}" + (f" to {span[-1]}" if len(span) > 1 else "") + " steps"
            for label, span in spans.items() if span) + ")")
    if reached:
        why.append("unfinished runs are compared where they are (" + ", ".join(
            f"{name}: evaluated at step {step}" for name, step in reached.items()) + ")")
    notes.append(f"{env}: {' and '.join(why)}; its aggregates and probabilities of improvement compare every run at "
                 f"step {common} with its latest evaluation at or before it; the lines table keeps each line's final "
                 f"score" + (f"; no evaluation by then in {', '.join(missing)}, left out" if missing else ""))
    what = "the smallest budget of its lines" if common in known else "the least step an unfinished run has reached"
    return matrix, f"evaluation return at step {common} on {env} ({what})", common


def _scores_at(env: str, members: list[Line], step: int, notes: list[str]) -> dict:
    """Every run's latest evaluation at or before `step`, of the runs that have trained that far (finished or not),
    as {label: (runs x 1) scores}; the runs not there yet are left out, with a note."""
    matrix, short = {}, []
    for line in members:
        values = []
        for run in line.runs:
            if max(run.last_step, run.final_score()[1] or 0) < step:
                short.append(run.name)
            elif (value := run.score_at(step)[0]) is not None:
                values.append([value])
        if values:
            matrix[line.label] = np.array(values)
    if short:
        notes.append(f"{env} at step {step}: {', '.join(short)} not there yet, left out")
    return matrix


def _space(key: str, title: str, matrix: dict, reps: int, profile: bool, games: dict | None = None,
           step: int | None = None, env: str | None = None) -> dict:
    """One table of aggregates: `matrix` holds each method's (runs x tasks) scores, final ones or, with `step`,
    those at that common step."""
    from rl.report.stats import aggregates, median_definition, performance_profiles, probabilities_of_improvement

    space = {"key": key, "env": env or key, "title": title, "step": step,
             "runs": {m: int(v.shape[0]) for m, v in matrix.items()},
             "methods": aggregates(matrix, reps=reps), "games": games, "profile": None,
             "median": median_definition(next(iter(matrix.values())).shape[1]),
             "probability_of_improvement": probabilities_of_improvement(_same_games(matrix, games), reps=reps)}
    if profile:
        prof = performance_profiles(matrix, reps=reps)
        space["profile"] = {"tau": prof["tau"].tolist(),
                            "profiles": {m: v.tolist() for m, v in prof["profiles"].items()},
                            "bands": {m: np.asarray(v).tolist() for m, v in prof["bands"].items()}}
    return space


def _same_games(matrix: dict, games: dict | None) -> dict:
    """The methods that probability of improvement can compare: across games, those run on the commonest set of
    games (P(X > Y) is averaged over tasks both ran)."""
    if not games:
        return matrix
    sets = [tuple(games[m]) for m in matrix]
    commonest = max(set(sets), key=sets.count)
    return {m: v for m, v in matrix.items() if tuple(games[m]) == commonest}


def draw(summary: dict, lines: list[Line], drawn: dict, output: Path) -> dict:
    """Every figure, into `output`; returns {what: [file names]} and records it in the summary."""
    from rl.report import plots

    colour = dict(zip([line.label for line in lines], plots.colours(len(lines))))
    for row in summary["lines"]:  # the page's key beside each line's number
        row["colour"] = plots.hex_colour(colour[row["label"]])
    method_colour = {}
    for line in lines:
        method_colour.setdefault(line.method, colour[line.label])
    figures: dict[str, dict] = {"curves": {}, "aggregates": {}, "profiles": {}}
    by_label = {row["label"]: row for row in summary["lines"]}
    for env in dict.fromkeys(line.env for line in lines):
        members = [line for line in lines if line.env == env]
        if len(members) > plots.MAX_LINES:
            members.sort(key=lambda ln: -(by_label[ln.label]["final_mean"] or -np.inf))
            summary["notes"].append(f"{env}: {len(members)} lines; the curves show the {plots.MAX_LINES} with the "
                                    f"best final score, the tables all of them")
            members = members[:plots.MAX_LINES]
        train_columns = {run.train_score_column for line in members for run in line.runs} - {None}
        train_label = TRAIN_LABELS["game_score_mean" if "game_score_mean" in train_columns else "episode_return_mean"]
        references: dict[float, list[str]] = {}
        for line in members:
            refs = by_label[line.label]["references"]
            if refs:
                ref = refs[0]
                references.setdefault(ref["mean"], []).append(f"{ref['source']} {ref['algo']}")
        marks = [(value, f"reference {value:g} ({', '.join(dict.fromkeys(who))})") for value, who in references.items()]
        fig = plots.curves_figure(env, [{"label": line.label, "colour": colour[line.label], **drawn[line.label]}
                                        for line in members], train_label, marks)
        figures["curves"][env] = plots.save(fig, output, f"curves_{_slug(env)}")
    shown = {row["label"]: f"{row['key']}: {row['label']}" for row in summary["lines"]}
    for space in summary["aggregates"]:
        stem = _slug(space["key"])
        colours = method_colour if space["key"] == "atari" else colour
        fig = plots.intervals_figure(space["title"], space["methods"], ("IQM", "median", "mean"), colours, shown)
        figures["aggregates"][space["key"]] = plots.save(fig, output, f"aggregates_{stem}")
        if space["profile"]:
            prof = {"tau": np.array(space["profile"]["tau"]),
                    "profiles": {m: np.array(v) for m, v in space["profile"]["profiles"].items()},
                    "bands": {m: np.array(v) for m, v in space["profile"]["bands"].items()}}
            xlabel = ("human-normalised score (tau)" if space["key"] == "atari" else f"final return on {space['env']}"
                      if space["step"] is None else f"return at step {space['step']} on {space['env']}")
            figures["profiles"][space["key"]] = plots.save(
                plots.profile_figure(space["title"], xlabel, prof, colours, shown), output, f"profile_{stem}")
    summary["figures"] = figures
    return figures


def write_report(paths: list[Path], output: Path, quiet: bool = False, reps: int = 2000,
                 at: tuple[int, ...] = (), ignore: tuple[str, ...] = ()) -> dict:
    """Read the runs under `paths`, write `output/index.html`, `output/summary.json` and the figures, with the
    aggregates also at the agent steps `at`, and the settings `ignore` not setting runs apart into lines; return the
    summary. No runs at all, a path that does not exist, an output that is a file or a setting to ignore that no
    run has: ConfigError."""
    from rl.report.page import write_page

    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("give at least one run or folder of runs")
    runs, notes = read_runs(paths)
    if not runs:
        raise ConfigError(f"no runs found in {', '.join(str(p) for p in paths)} (a run folder holds hparams.json "
                          f"and progress.csv, as train.py writes them)")
    if unknown := sorted(set(ignore) - {k for run in runs for k in run.hparams}):
        raise ConfigError(f"--ignore {', '.join(unknown)}: no run has that setting (the runs' settings that differ: "
                          f"{', '.join(sorted({k for line in group_lines(runs) for k in line.settings})) or 'none'})")
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise ConfigError(f"--output {output} is a file, not a folder")
    output.mkdir(parents=True, exist_ok=True)
    with threadpool_limits(1):  # small arrays: one BLAS/OpenMP thread, beside the runs that may share the machine
        summary, lines, drawn = compute(runs, reps=reps, at=tuple(at), ignore=frozenset(ignore))
        summary = {"generated": datetime.datetime.now().isoformat(timespec="seconds"),
                   "inputs": [str(p) for p in paths], **summary, "notes": notes + summary["notes"],
                   "reference_sources": scores.SOURCES}
        draw(summary, lines, drawn, output)
    (output / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False, default=_json_default))
    write_runs_csv(summary, output / "runs.csv")
    write_page(summary, output / "index.html")
    if not quiet:
        print(f"report of {len(runs)} run(s) in {len(lines)} line(s): {output / 'index.html'}", flush=True)
    return summary


RUNS_CSV = ("name", "line", "hparams_set", "env", "seed", "status", "env_steps", "train_steps", "wall_time_s",
            "final_score", "final_step", "final_source", "best_score", "best_step", "human_normalized_final",
            "reference_mean", "reference_std", "reference_source", "reached_final", "reached_best", "counted",
            "control_changes", "path")


def write_runs_csv(summary: dict, path: Path) -> None:
    """The runs table as CSV, one row a run (for a spreadsheet or pandas): the page's columns and the published
    reference each was measured against."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, RUNS_CSV)
        writer.writeheader()
        for run in summary["runs"]:
            ref = run["reference"] or {}
            writer.writerow({**{k: run.get(k) for k in RUNS_CSV}, "reference_mean": ref.get("mean"),
                             "reference_std": ref.get("std"), "reference_source": ref.get("source"),
                             "control_changes": len(run["control"])})


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
