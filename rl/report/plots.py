"""The figures, each written as PNG (for the page and the README) and SVG (to zoom or put in a paper).

Figures are drawn on `matplotlib.figure.Figure` with the Agg canvas, never through pyplot: no backend is chosen for
the process that calls the report (train.py's parent, a search), nothing is left open, and no window can appear.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

MAX_LINES = 10  # more lines than colours in one panel cannot be told apart; the tables still hold them all
PANELS = (("eval", "env_steps"), ("eval", "wall_time_s"), ("train", "env_steps"), ("train", "wall_time_s"))
X_LABELS = {"env_steps": "agent steps (environment steps, summed over envs)", "wall_time_s": "wall time (s)"}


def colours(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(count)]


def save(fig: Figure, folder: Path, stem: str) -> list[str]:
    """`stem.png` and `stem.svg` in `folder`; returns their names, relative to it."""
    FigureCanvasAgg(fig)
    names = [f"{stem}.png", f"{stem}.svg"]
    fig.savefig(folder / names[0], dpi=90)
    fig.savefig(folder / names[1])
    return names


def curves_figure(title: str, lines: list[dict], train_label: str, references: list[tuple[float, str]]) -> Figure:
    """Four panels: the evaluation and training score against agent steps and wall time. Each line is its copies'
    mean with a 95% bootstrap band, and each copy faintly behind it. `lines`: dicts with `label`, `colour`, `runs`
    (per panel key: list of (x, y)) and `mean` (per panel key: mean_curve's dict or None)."""
    fig = Figure(figsize=(13, 8.5), layout="constrained")
    axes = fig.subplots(2, 2)
    for ax, (score, x) in zip(axes.flat, PANELS):
        key = f"{score}/{x}"
        for line in lines:
            for xs, ys in line["runs"][key]:
                ax.plot(xs, ys, color=line["colour"], alpha=0.25, linewidth=0.8)
            mean = line["mean"][key]
            if mean is not None:
                few = len(mean["x"]) <= 30  # a handful of evaluations: show where they were
                ax.plot(mean["x"], mean["mean"], color=line["colour"], linewidth=2, marker="o" if few else None,
                        markersize=4, label=f"{line['label']} (n={mean['runs']})")
                ax.fill_between(mean["x"], mean["low"], mean["high"], color=line["colour"], alpha=0.2, linewidth=0)
        if score == "eval":
            for value, text in references:
                ax.axhline(value, color="0.4", linestyle="--", linewidth=1)
                ax.annotate(text, (0.01, value), xycoords=("axes fraction", "data"), fontsize=8, color="0.3",
                            va="bottom")
        ax.set_xlabel(X_LABELS[x])
        ax.set_ylabel("evaluation return" if score == "eval" else train_label)
        ax.grid(alpha=0.3)
        if not ax.has_data():
            ax.text(0.5, 0.5, "no data yet", transform=ax.transAxes, ha="center", va="center", color="0.5")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3), frameon=False)
    fig.suptitle(f"{title}: mean over copies, 95% bootstrap band; faint lines are single copies")
    return fig


def intervals_figure(title: str, results: dict[str, dict], names: tuple[str, ...], colour_of: dict) -> Figure:
    """rliable's interval-estimate plot: one panel per aggregate, a bar per method spanning its 95% interval."""
    methods = list(results)
    fig = Figure(figsize=(4 * len(names) + 2, 0.6 * len(methods) + 1.6), layout="constrained")
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
    axes[0].set_yticks(range(len(methods)), methods)
    axes[0].invert_yaxis()
    fig.suptitle(f"{title}: point estimate and 95% stratified-bootstrap interval")
    return fig


def profile_figure(title: str, xlabel: str, profile: dict, colour_of: dict) -> Figure:
    """rliable's performance profile: the fraction of runs scoring above tau, with its 95% band."""
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.subplots()
    for method, values in profile["profiles"].items():
        ax.plot(profile["tau"], values, color=colour_of.get(method), linewidth=2, label=method)
        low, high = profile["bands"][method]
        ax.fill_between(profile["tau"], low, high, color=colour_of.get(method), alpha=0.2, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    fig.legend(frameon=False, fontsize=9, loc="outside lower center", ncol=min(len(profile["profiles"]), 3))
    ax.set_title(f"{title}: performance profile")
    return fig
