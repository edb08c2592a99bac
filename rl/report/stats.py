"""The numbers: mean curves over copies with a bootstrap band, and rliable's aggregates with stratified-bootstrap
intervals (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice", arXiv 2108.13264).

A few copies give a wide interval, and the page should say so rather than hide it: IQM (the mean of the middle 50%
of all runs' scores) is robust to one outlying copy, where a mean of three is not.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np

from rl.errors import ConfigError

CONFIDENCE = 0.95
MAX_CURVE_POINTS = 300  # curves are drawn, not read point by point: enough for a smooth line, cheap to bootstrap


def bootstrap_band(values: np.ndarray, reps: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean over runs at each point: `values` is (runs, points); runs are
    resampled with replacement. One run gives a band of zero width."""
    values = np.asarray(values, dtype=float)
    n = values.shape[0]
    if n == 1:
        return values[0].copy(), values[0].copy()
    rng = np.random.default_rng(seed)
    low, high = np.empty(values.shape[1]), np.empty(values.shape[1])
    chunk = max(1, 2_000_000 // max(values.size, 1))  # bounded memory for many runs x points
    for start in range(0, values.shape[1], chunk):
        part = values[:, start:start + chunk]
        means = part[rng.integers(0, n, (reps, n))].mean(axis=1)  # (reps, points)
        alpha = (1 - CONFIDENCE) / 2 * 100
        low[start:start + chunk], high[start:start + chunk] = np.percentile(means, [alpha, 100 - alpha], axis=0)
    return low, high


def mean_curve(curves: list[tuple[np.ndarray, np.ndarray]], reps: int = 1000) -> dict | None:
    """The mean of several runs' curves with a bootstrap band, on the x where every run has data (from the latest
    first point to the earliest last point), each run linearly interpolated there; runs of one point each (one
    evaluation) at the mean of their x. None when they do not overlap."""
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        return None
    if all(len(x) == 1 for x, _ in curves):  # one evaluation each (at slightly different wall times): at their mean x
        curves = [(np.array([np.mean([x[0] for x, _ in curves])]), y) for _, y in curves]
    start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if start > end:
        return None
    grid = np.unique(np.concatenate([x[(x >= start) & (x <= end)] for x, _ in curves]))
    if len(grid) > MAX_CURVE_POINTS:
        grid = np.unique(np.r_[grid[np.linspace(0, len(grid) - 1, MAX_CURVE_POINTS).round().astype(int)], end])
    values = np.stack([np.interp(grid, x, y) for x, y in curves])
    low, high = bootstrap_band(values, reps)
    return {"x": grid, "mean": values.mean(axis=0), "low": low, "high": high, "runs": len(curves)}


AGGREGATES = ("IQM", "median", "mean")


def _rliable():
    """rliable's library module; a broken install (arch < 8 with pandas >= 3 fails to import) is one line."""
    try:
        from rliable import library
    except Exception as exc:  # any import failure of a dependency means the same to the user
        raise ConfigError(f"rliable cannot be imported ({type(exc).__name__}: {exc}); rliable 1.2 needs arch < 8, "
                          f"which needs pandas < 3: pip install 'pandas<3'") from None
    return library


def _aggregate_all(scores: np.ndarray) -> np.ndarray:
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_median(scores), metrics.aggregate_mean(scores)])


def _aggregate_one_task(scores: np.ndarray) -> np.ndarray:
    """On one task rliable's median (of the per-task means) is the mean again: the median over runs says more."""
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), float(np.median(scores)), metrics.aggregate_mean(scores)])


def median_definition(tasks: int) -> str:
    """What the "median" of `aggregates` is for a matrix of `tasks` columns."""
    return "median over runs" if tasks == 1 else "median of the per-game means (rliable's)"


def _bootstrap(score_dict: dict, func, reps: int, seed: int):
    rly = _rliable()
    with warnings.catch_warnings():  # arch wants a Generator; rliable 1.2 passes a RandomState
        warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
        return rly.get_interval_estimates(score_dict, func, reps=reps, random_state=np.random.RandomState(seed))


def aggregates(score_dict: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict[str, dict]:
    """IQM, median and mean of each method's (runs x tasks) score matrix, with stratified-bootstrap 95% intervals:
    runs are resampled within each task. rliable's metrics; the median is rliable's (of the per-task means) across
    tasks, and the median over runs on one task (`median_definition`)."""
    result = {}
    for method, scores in score_dict.items():  # one at a time, each with the same seed: adding a method moves no other
        scores = np.asarray(scores, dtype=float)
        func = _aggregate_one_task if scores.shape[1] == 1 else _aggregate_all
        point, interval = _bootstrap({method: scores}, func, reps, seed)
        result[method] = {name: {"value": float(point[method][i]), "low": float(interval[method][0][i]),
                                 "high": float(interval[method][1][i])} for i, name in enumerate(AGGREGATES)}
    return result


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) over the last two axes' pairs of runs, ties counting half: Mann-Whitney's U / (runs_x * runs_y)."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))


def probabilities_of_improvement(score_dict: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> list[dict]:
    """rliable's probability of improvement P(X > Y) (the chance that a run of X scores above a run of Y, ties
    counting half, averaged over tasks) for every pair of methods with the same tasks, each pair once with X before
    Y in `score_dict`'s order (P(Y > X) = 1 - P(X > Y)). The point is rliable's function; its 95% interval is
    rliable's stratified independent bootstrap (each method's runs resampled within each task, percentile
    interval), vectorised here: rliable's loops over Mann-Whitney tests take a second per pair at 2000 reps, and a
    search has hundreds of pairs."""
    _rliable()
    from rliable import metrics

    names = list(score_dict)
    result = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            sx, sy = (np.asarray(score_dict[k], dtype=float) for k in (x, y))
            if sx.shape[1] != sy.shape[1]:
                continue
            rng = np.random.default_rng(seed)
            boot = np.mean([_improvement(sx[rng.integers(0, len(sx), (reps, len(sx))), task],
                                         sy[rng.integers(0, len(sy), (reps, len(sy))), task])
                            for task in range(sx.shape[1])], axis=0)
            alpha = (1 - CONFIDENCE) / 2 * 100
            low, high = np.percentile(boot, [alpha, 100 - alpha])
            result.append({"x": x, "y": y, "value": float(metrics.probability_of_improvement(sx, sy)),
                           "low": float(low), "high": float(high), "p": no_difference_p(sx, sy, seed=seed)})
    return result


def no_difference_p(sx: np.ndarray, sy: np.ndarray, exact_up_to: int = 20_000, draws: int = 2_000,
                    seed: int = 0) -> float:
    """Two-sided permutation p-value of P(X > Y) for (runs, tasks) score arrays: the share of the ways to split each
    task's pooled runs into groups of X's and Y's sizes whose P(X > Y) is at least as far from 0.5 as the observed one,
    the chance of a gap this large if the two lines' runs were interchangeable. The bootstrap interval cannot say
    this with few runs: 3 runs against 3, every pair ordered, give P = 1 with the interval [1, 1], where the p-value
    is 2 splits of 20 = 0.1. Every split when there are at most `exact_up_to`, else `draws` random ones (the
    observed split counted in, so p >= 1 / (draws + 1))."""
    n, m = len(sx), len(sy)
    pooled = np.concatenate([sx, sy]).T  # (tasks, runs)
    tasks, everyone = pooled.shape[0], np.arange(n + m)
    exact = math.comb(n + m, n) ** tasks <= exact_up_to
    if exact:
        combos = np.array(list(itertools.combinations(everyone, n)))
        xs = combos[np.array(list(itertools.product(range(len(combos)), repeat=tasks)))]  # (splits, tasks, n)
    else:
        shuffled = np.random.default_rng(seed).permuted(np.broadcast_to(everyone, (draws, tasks, n + m)), axis=-1)
        xs = shuffled[..., :n]
    in_x = np.zeros(xs.shape[:2] + (n + m,), dtype=bool)
    np.put_along_axis(in_x, xs, True, axis=-1)
    ys = np.argsort(in_x, axis=-1, kind="stable")[..., :m]  # the runs not in X
    runs = np.broadcast_to(pooled, xs.shape[:2] + (n + m,))
    split = _improvement(np.take_along_axis(runs, xs, -1), np.take_along_axis(runs, ys, -1)).mean(axis=-1)
    observed = _improvement(sx.T, sy.T).mean()
    extreme = np.abs(split - 0.5) >= abs(observed - 0.5) - 1e-9
    return float(extreme.mean()) if exact else float((extreme.sum() + 1) / (draws + 1))


def performance_profiles(score_dict: dict[str, np.ndarray], points: int = 101, reps: int = 2000) -> dict:
    """rliable's performance profile (the fraction of runs, over all tasks, scoring above tau) with 95% bands, on
    a tau grid that spans every score."""
    rly = _rliable()
    every = np.concatenate([np.ravel(s) for s in score_dict.values()])
    low, high = float(every.min()), float(every.max())
    pad = (high - low) * 0.02 or max(abs(high) * 0.02, 1e-3)
    taus = np.linspace(low - pad, high + pad, points)
    profile, bands = rly.create_performance_profile({k: np.asarray(v, float) for k, v in score_dict.items()}, taus,
                                                    custom_profile_func=score_distribution, reps=reps)
    return {"tau": taus, "profiles": profile, "bands": bands}


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's default profile (`run_score_deviation`: the fraction of all runs' scores above each tau) in one
    comparison over the grid; rliable's own calls np.mean once per tau and bootstrap draw, 20 s of a search's
    4-trial report (2,000 draws x 101 taus x methods)."""
    return (np.ravel(scores)[:, None] > taus).mean(axis=0)
