"""index.html: one self-contained page over the summary: notes first, then the lines, curves, aggregates and runs.

No server and no scripts: the figures sit beside the page and are referenced relatively, so the folder can be copied,
zipped or opened from a file browser; every table is plain HTML built from the same summary as summary.json.
"""

from __future__ import annotations

import html
from pathlib import Path

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1500px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.nowrap { white-space: nowrap; } .scroll { overflow-x: auto; }
.yes { color: #1a7f37; font-weight: 600; } .no { color: #b42318; } .muted { color: #777; }
.notes li { margin: 0.15em 0; } img { max-width: 100%; border: 1px solid #eee; }
.key { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.3em; vertical-align: -0.1em; }
"""


MAX_PAIRS = 45  # the pairs of 10 lines: beyond that the page shows those among the best MAX_PAIR_LINES
MAX_PAIR_LINES = 10


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if abs(value) >= 1e4:  # 35000.0 as 35000, not 3.5e+04
            return f"{value:.0f}" if abs(value) < 1e9 else f"{value:.3e}"
        return f"{value:.{digits}g}"
    return str(value)


def interval(result: dict) -> str:
    return f"{fmt(result['value'])} [{fmt(result['low'])}, {fmt(result['high'])}]"


def table(header: list[str], rows: list[list[str]], numeric: set[int] = frozenset(),
          nowrap: set[int] = frozenset()) -> str:
    """Cells are HTML already (escaped by the caller); `numeric` columns are right-aligned, they and `nowrap` ones
    kept on one line."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    kind = {**{i: " class=nowrap" for i in nowrap}, **{i: " class=num" for i in numeric}}
    body = "".join("<tr>" + "".join(f"<td{kind.get(i, '')}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def yes_no(value) -> str:
    if value is None:
        return "<span class=muted>–</span>"
    return "<span class=yes>yes</span>" if value else "<span class=no>no</span>"


def figure(names: list[str], alt: str) -> str:
    png, svg = names
    return (f'<figure><img src="{esc(png)}" alt="{esc(alt)}"><figcaption class=muted>{esc(alt)} '
            f'(<a href="{esc(svg)}">SVG</a>)</figcaption></figure>')


def notes_section(summary: dict) -> str:
    items = [esc(n) for n in summary["notes"]]
    items += [f"<b>{esc(r['name'])}</b>: {esc(n)}" for r in summary["runs"] for n in r["notes"]]
    if not items:
        return ""
    return "<h2>Notes</h2><ul class=notes>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _iqm_of(summary: dict, label: str) -> str:
    for space in summary["aggregates"]:
        if space["key"] != "atari" and label in space["methods"]:
            at = "" if space["step"] is None else f" <span class=muted>at {steps(space['step'])}</span>"
            return interval(space["methods"][label]["IQM"]) + at
    return "–"


def key_cell(line: dict) -> str:
    """The line's number in the figures, with its colour."""
    swatch = f"<span class=key style=\"background:{esc(line['colour'])}\"></span>" if line.get("colour") else ""
    return f"{swatch}{line['key']}"


def shown(summary: dict, label: str) -> str:
    """A line as the figures name it: its number, then its label (a method across games: its name)."""
    number = {line["label"]: line["key"] for line in summary["lines"]}.get(label)
    return esc(label) if number is None else f"{number}: {esc(label)}"


def steps(value) -> str:
    """100000 -> 100k, 10000000 -> 10M."""
    if not isinstance(value, (int, float)):
        return "?"
    if value == 0:
        return "0"
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.4g}{unit}"
    return str(value)


def reference_cell(ref: dict | None, train_steps) -> str:
    """Its score, then its source (named in full under Sources), its budget beside the line's, and how it matched
    when that was not exact."""
    if ref is None:
        return "–"
    match = "" if ref["match"] == "same algorithm" else f"; {esc(ref['match'])}"
    return (f"{fmt(ref['mean'])} ± {fmt(ref['std'], 3)} <span class=muted title=\"{esc(ref['source_name'])}\">"
            f"({esc(ref['source'])} {esc(ref['where'])}, {steps(ref['steps'])} steps; this line "
            f"{steps(train_steps)}{match})</span>")


def lines_section(summary: dict) -> str:
    rows = []
    atari = any(line["human_normalized_final_mean"] is not None for line in summary["lines"])
    for line in summary["lines"]:
        ref = line["references"][0] if line["references"] else None
        final = ("–" if line["final_mean"] is None
                 else f"{fmt(line['final_mean'])} ± {fmt(line['final_std'], 3)}")
        row = [key_cell(line), esc(line["label"]), esc(line["env"]),
               f"{line['copies']} ({line['finished_copies']} finished)", final, _iqm_of(summary, line["label"]),
               fmt(line["best_mean"]), reference_cell(ref, line["train_steps"]),
               "–" if ref is None else f"{line['reached_final']} of {line['scored_copies']}"]
        if atari:
            row.append(fmt(line["human_normalized_final_mean"]))
        rows.append(row)
    header = ["#", "line", "env", "copies", "final score (mean ± std over copies)", "IQM [95% CI]", "best (mean)",
              "published reference", "copies reaching it"] + (["human-normalised final"] if atari else [])
    return ("<h2>Lines</h2><p>Runs that differ only in their seed are copies of one line; # is its number and colour "
            "in the figures. Final score: the evaluation at the end of training (eval.json) of its finished copies; "
            "while none has finished, their latest evaluations. IQM: as in the aggregates below (at a common step "
            "where lines trained for different budgets or a line is still training). A run reaches the reference "
            "when its score is at least the reference mean minus its std.</p>"
            + table(header, rows, {4, 5, 6}, nowrap={0, 2, 3}))


def curves_section(summary: dict) -> str:
    parts = ["<h2>Learning curves</h2><p>Evaluation: the greedy evaluation return logged at each evaluation. Training: "
             "the mean return of the last 100 training episodes (on Atari the whole-game score). The mean over a "
             "line's copies (its finished ones, once any has finished) is drawn where all of them have data, with a "
             "95% percentile-bootstrap band over copies (an error bar where there is one evaluation); each copy is a "
             "faint line. On the wall-time panels the mean therefore stops where the fastest copy ended, and an x "
             "ends each copy. A dotted vertical line, labelled with the new value, marks a <code>--control</code> "
             "change in a run of that colour (a run's hparams.json, and so its line's label, holds the settings "
             "after such changes). Lines are numbered as in the Lines table.</p>"]
    for env, names in summary["figures"]["curves"].items():
        parts.append(f"<h3>{esc(env)}</h3>" + figure(names, f"learning curves on {env}"))
    return "".join(parts)


def aggregates_section(summary: dict) -> str:
    if not summary["aggregates"]:
        return ""
    parts = ["<h2>Aggregates (rliable)</h2><p>IQM: the mean of the middle 50% of all runs' final scores. On one game "
             "the median is the median over runs; across Atari games it is rliable's, the median of the per-game "
             "means, and the mean is the mean of the per-game means. Intervals: 95% stratified bootstrap over runs "
             "(Agarwal et al. 2021). Games other than Atari have no shared normalisation here, so they are "
             "aggregated per game. Probability of improvement P(X &gt; Y): rliable's, the chance that a run of X "
             "scores above a run of Y (ties count half), averaged over games; above 0.5 favours X, and an interval "
             "that holds 0.5 does not tell them apart. With few runs the interval can be narrow for want of runs "
             "to resample (3 runs against 3, every pair ordered: [1, 1]); p says how often a P(X &gt; Y) at least "
             "as far from 0.5 comes from splitting the two lines' runs (within each game) at random, as if they "
             "were interchangeable: every split where there are at most 20,000, else 2,000 random ones (3 against "
             "3, every pair ordered: p = 0.1).</p>"]
    for space in summary["aggregates"]:
        rows = [[shown(summary, m), str(space["runs"][m])] + [interval(r[name]) for name in ("IQM", "median", "mean")]
                + ([esc(", ".join(space["games"][m]))] if space["games"] else [])
                for m, r in space["methods"].items()]
        header = ["method", "runs", "IQM [95% CI]", f"{space['median']} [95% CI]", "mean [95% CI]"] + (
            ["games"] if space["games"] else [])
        parts.append(f"<h3>{esc(space['title'])}</h3>" + table(header, rows, {1, 2, 3, 4}))
        pairs, shown_pairs = space["probability_of_improvement"], ""
        if len(pairs) > MAX_PAIRS:  # a search's hundreds of pairs: those among its best lines
            best = sorted(space["methods"], key=lambda m: -space["methods"][m]["IQM"]["value"])[:MAX_PAIR_LINES]
            shown_pairs = (f"<p class=muted>{len(pairs)} pairs (all in summary.json); shown: those among the "
                           f"{MAX_PAIR_LINES} with the best IQM.</p>")
            pairs = [p for p in pairs if p["x"] in best and p["y"] in best]
        if pairs:
            parts.append(shown_pairs + table(["X", "Y", "P(X > Y) [95% CI]", "p"], [
                [shown(summary, p["x"]), shown(summary, p["y"]), interval(p), fmt(p["p"], 2)] for p in pairs],
                {2, 3}))
        parts.append(figure(summary["figures"]["aggregates"][space["key"]], f"aggregates: {space['title']}"))
        if space["key"] in summary["figures"]["profiles"]:
            parts.append(figure(summary["figures"]["profiles"][space["key"]], f"performance profile: {space['title']}"))
    return "".join(parts)


def control_text(change: dict) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in change.get("settings", {}).items())
    return f"at {steps(change['step'])}: {esc(settings)}"


def runs_section(summary: dict) -> str:
    atari = any(r["human_normalized_final"] is not None for r in summary["runs"])
    controlled = any(r["control"] for r in summary["runs"])
    rows = []
    for r in summary["runs"]:
        ref = r["reference"]
        done = f"{steps(r['env_steps'])}" + (f" of {steps(r['train_steps'])}" if r["train_steps"] else "")
        source = {"eval.json": "", "final evaluation in progress.csv": "", "no evaluation yet": ""}.get(
            r["final_source"], " <span class=muted>(latest)</span>")
        rows.append([esc(r["name"]), shown(summary, r["line"]), esc(r["seed"]), esc(r["status"]), done,
                     fmt(r["wall_time_s"]), fmt(r["final_score"]) + source,
                     f"{fmt(r['best_score'])}" + (f" <span class=muted>at {steps(r['best_step'])}</span>"
                                                  if r["best_step"] is not None else ""),
                     "–" if ref is None else f"{fmt(ref['mean'])} <span class=muted>({esc(ref['source'])})</span>",
                     yes_no(r["reached_final"]), yes_no(r["reached_best"])]
                    + ([fmt(r["human_normalized_final"])] if atari else [])
                    + (["<br>".join(control_text(c) for c in r["control"]) or "–"] if controlled else []))
    header = ["run", "line", "seed", "status", "agent steps", "wall time (s)", "final score", "best score",
              "reference", "final reached", "best reached"] + (["human-normalised final"] if atari else []) + (
              ["--control changes"] if controlled else [])
    return ("<h2>Runs</h2><p>Final score: the evaluation at the end of training (eval.json's; progress.csv's where "
            "an evaluation run replaced eval.json), or, marked <i>latest</i>, the latest evaluation of a run that has "
            "not finished (an eval.json left by an earlier sitting of a resumed run is not its end). Best: the best "
            "evaluation, periodic or final. The same table as CSV: "
            "<a href=\"runs.csv\">runs.csv</a>.</p>"
            + table(header, rows, {4, 5, 6, 7, 8}, nowrap={0, 3}))


def sources_section(summary: dict) -> str:
    items = "".join(f"<li><b>{esc(k)}</b>: {esc(v)}</li>" for k, v in summary["reference_sources"].items())
    return ("<h2>Sources</h2><ul>" + items + "<li>Atari random and human scores: DQN Zoo's atari_data.py "
            "(human-normalised = (score − random) / (human − random))</li></ul><p class=muted>All numbers are in "
            "<a href=\"summary.json\">summary.json</a>.</p>")


def write_page(summary: dict, path: Path) -> None:
    inputs = ", ".join(esc(p) for p in summary["inputs"])
    body = (f"<h1>Run comparison</h1><p class=muted>{len(summary['runs'])} run(s) in {len(summary['lines'])} line(s) "
            f"from {inputs}; generated {esc(summary['generated'])} by <code>python -m rl.report</code>.</p>"
            + notes_section(summary) + lines_section(summary) + curves_section(summary)
            + aggregates_section(summary) + runs_section(summary) + sources_section(summary))
    path.write_text(f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>Run comparison</title>"
                    f"<style>{STYLE}</style></head><body>{body}</body></html>\n")
