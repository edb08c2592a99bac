"""The figures, each written as PNG (for the page and the docs) and SVG (to zoom or put in a paper).

Figures are drawn on `matplotlib.figure.Figure` with the Agg canvas, never through pyplot: no backend is chosen for
the process that calls the report (train.py's parent, a search), nothing is left open, and no window can appear.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

MAX_LINES = 10  # more lines than colours in one panel cannot be told apart; the tables still hold them all
PANELS = (("eval", "env_steps"), ("eval", "wall_time_s"), ("train", "env_steps"), ("train", "wall_time_s"))
X_LABELS = {"env_steps": "agent steps (environment steps, summed over envs)", "wall_time_s": "wall time (s)"}


LEGEND_FONT = 9
CHARS_PER_INCH = 13  # at LEGEND_FONT points, with room for the handle and the gap between columns


def wrapped(text: str, width: int) -> str:
    """A label on lines of at most `width` characters, broken at spaces: a long label grows down, never past the
    figure's edge."""
    return textwrap.fill(text, width, break_long_words=True, break_on_hyphens=False)


def legend_below(fig: Figure, handles: list, texts: list[str]) -> None:
    """A legend under the panels, outside them, in as many columns as the longest label lets fit the figure's
    width (labels wrapped to fit a column): it covers no data and no label is cut."""
    if not handles:
        return
    room = int(fig.get_figwidth() * CHARS_PER_INCH)
    width = min(max(len(t) for t in texts), room - 6)
    columns = max(1, min(len(texts), room // (width + 6)))
    width = room // columns - 6
    fig.legend(handles, [wrapped(t, width) for t in texts], loc="outside lower center", ncol=columns,
               frameon=False, fontsize=LEGEND_FONT)


def colours(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(count)]


def hex_colour(colour) -> str:
    from matplotlib.colors import to_hex

    return to_hex(colour)


def save(fig: Figure, folder: Path, stem: str) -> list[str]:
    """`stem.png` and `stem.svg` in `folder`; returns their names, relative to it."""
    FigureCanvasAgg(fig)
    names = [f"{stem}.png", f"{stem}.svg"]
    fig.savefig(folder / names[0], dpi=90)
    fig.savefig(folder / names[1])
    return names


NO_DATA = {"eval": "no evaluation logged yet", "train": "no training episode finished yet"}


def curves_figure(title: str, lines: list[dict], train_label: str, references: list[tuple[float, str]]) -> Figure:
    """Four panels: the evaluation and training score against agent steps and wall time. Each line is its copies'
    mean with a 95% bootstrap band (an error bar where it is one point), and each copy faintly behind it; on the
    wall-time panels an x ends each copy, a dotted line marks each --control change. `lines`: dicts with `label`,
    `key` (its number on the page), `colour`, `runs` (per panel key: list of (x, y)), `mean` (per panel key:
    mean_curve's dict or None) and `control` (dicts with `step`, `wall_time_s`, `text`)."""
    fig = Figure(figsize=(13, 8.5), layout="constrained")
    axes = fig.subplots(2, 2)
    legend: dict[int, tuple[str, object]] = {}
    has_data: dict[str, bool] = {}
    for ax, (score, x) in zip(axes.flat, PANELS):
        key = f"{score}/{x}"
        drawn = False
        for index, line in enumerate(lines):
            for xs, ys in line["runs"][key]:
                ax.plot(xs, ys, color=line["colour"], alpha=0.25, linewidth=0.8)
                if x == "wall_time_s" and len(line["runs"][key]) > 1 and len(xs):
                    ax.plot(xs[-1], ys[-1], "x", color=line["colour"], markersize=6)
                drawn = drawn or bool(len(xs))
            mean = line["mean"][key]
            if mean is not None:
                drawn = True
                few = len(mean["x"]) <= 30  # a handful of evaluations: show where they were
                text = f"{line['key']}: {line['label']} (n={mean['runs']})"
                one = len(mean["x"]) == 1  # one evaluation: a band of one point would not show; an error bar does
                # lines evaluated once at the same step would hide each other's bars: each is moved a few points
                # sideways on the page (not in the data)
                shift = offset_copy(ax.transData, fig=fig, units="points",
                                    x=7.0 * (index - (len(lines) - 1) / 2) if one else 0.0)
                handle = ax.plot(mean["x"], mean["mean"], color=line["colour"], linewidth=2,
                                 marker="o" if few else None, markersize=4, transform=shift)[0]
                legend.setdefault(line["key"], (text, handle))
                if one:
                    ax.errorbar(mean["x"], mean["mean"], yerr=[np.subtract(mean["mean"], mean["low"]),
                                                                np.subtract(mean["high"], mean["mean"])],
                                color=line["colour"], capsize=6, linewidth=2, alpha=0.8, transform=shift)
                else:
                    ax.fill_between(mean["x"], mean["low"], mean["high"], color=line["colour"], alpha=0.2,
                                    linewidth=0)
            for mark in line["control"] if drawn else ():
                where = mark["step"] if x == "env_steps" else mark["wall_time_s"]
                if where is not None:
                    ax.axvline(where, color=line["colour"], linestyle=":", linewidth=1.2)
                    ax.annotate(mark["text"], (where, 0.98), xycoords=("data", "axes fraction"), rotation=90,
                                fontsize=7, color=line["colour"], ha="right", va="top",
                                bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1})
        has_data[key] = drawn
        if not drawn:
            why = NO_DATA[score] if x == "env_steps" or not has_data[f"{score}/env_steps"] else "no wall time logged"
            ax.text(0.5, 0.5, f"no data: {why}", transform=ax.transAxes, ha="center", va="center", color="0.4")
        if score == "eval":
            for i, (value, text) in enumerate(sorted(references)):  # close values: labels at alternate ends
                ax.axhline(value, color="0.4", linestyle="--", linewidth=1)
                ax.annotate(text, (0.99 if i % 2 else 0.01, value), xycoords=("axes fraction", "data"), fontsize=8,
                            color="0.3", va="bottom", ha="right" if i % 2 else "left")
        ax.set_xlabel(X_LABELS[x])
        ax.set_ylabel("evaluation return" if score == "eval" else train_label)
        ax.grid(alpha=0.3)
    legend_below(fig, [handle for _, handle in legend.values()], [text for text, _ in legend.values()])
    fig.suptitle(f"{title}: mean over copies, 95% bootstrap band; faint lines are single copies")
    return fig


def intervals_figure(title: str, results: dict[str, dict], names: tuple[str, ...], colour_of: dict,
                     shown: dict[str, str]) -> Figure:
    """rliable's interval-estimate plot: one panel per aggregate, a bar per method spanning its 95% interval, named
    by `shown[method]` wrapped to a column beside the panels."""
    methods = list(results)
    ticks = [wrapped(shown.get(m, m), 40) for m in methods]
    height = sum(0.2 * t.count("\n") + 0.45 for t in ticks) + 1.6
    fig = Figure(figsize=(4 * len(names) + 4, height), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(names), sharey=True))
    for ax, name in zip(axes, names):
        for i, method in enumerate(methods):
            r = results[method][name]
            ax.barh(i, r["high"] - r["low"], left=r["low"], height=0.6, color=colour_of.get(method), alpha=0.75)
            ax.vlines(r["value"], i - 0.3, i + 0.3, color="black", linewidth=2)
        ax.set_title(name)
        ax.use_sticky_edges = False  # a bar of zero width (all copies equal) would pin the axis to its value
        ax.margins(x=0.08)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(methods)), ticks, fontsize=LEGEND_FONT)
    axes[0].invert_yaxis()
    fig.suptitle(wrapped(f"{title}: point estimate and 95% stratified-bootstrap interval",
                         int(fig.get_figwidth() * CHARS_PER_INCH * 0.9)))
    return fig


def profile_figure(title: str, xlabel: str, profile: dict, colour_of: dict, shown: dict[str, str]) -> Figure:
    """rliable's performance profile: the fraction of runs scoring above tau, with its 95% band."""
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.subplots()
    handles = []
    for method, values in profile["profiles"].items():
        handles += ax.plot(profile["tau"], values, color=colour_of.get(method), linewidth=2)
        low, high = profile["bands"][method]
        ax.fill_between(profile["tau"], low, high, color=colour_of.get(method), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    legend_below(fig, handles, [shown.get(m, m) for m in profile["profiles"]])
    ax.set_title(wrapped(f"{title}: performance profile", int(fig.get_figwidth() * CHARS_PER_INCH * 0.8)))
    return fig
