"""`--copies N`: independent runs of one set with seeds seed..seed+N-1, in parallel processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from rl.logger import log_final_hparams


def _copy_worker(args, index: int) -> dict:
    from rl.run import run_one

    out = Path(args.output_dir) / f"copy_{index}"
    return {"copy": index, **run_one(args, out, seed_offset=index, quiet=True)}


def run_copies(args) -> list[dict]:
    """`--copies N`: N independent seeds (seed + i) in `output_dir/copy_<i>`, up to one process per core.
    Forked, so the children inherit the filled registries (including the sets that train.py imported)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = min(args.copies, os.cpu_count() or 1)
    print(f"running {args.copies} copies in {out}/copy_<i> with {workers} processes", flush=True)
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        results = list(pool.map(_copy_worker, [args] * args.copies, range(args.copies)))
    means = [r["mean_return"] for r in results]
    summary = {"copies": results, "mean_of_means": float(np.mean(means)), "std_of_means": float(np.std(means))}
    (out / "copies_summary.json").write_text(json.dumps(summary, indent=2))
    for r in results:  # TensorBoard's HParams view: each copy's settings beside its final score
        log_final_hparams(out / f"copy_{r['copy']}", {"final_return_mean": r["mean_return"],
                                                      "final_return_std": r["std_return"]})
    for r in results:
        print(f"copy {r['copy']}: {r['mean_return']:.2f} ± {r['std_return']:.2f}")
    print(f"over {args.copies} copies: {summary['mean_of_means']:.2f} ± {summary['std_of_means']:.2f} "
          f"(written to {out / 'copies_summary.json'})")
    write_copies_report(out)
    return results


def write_copies_report(out: Path) -> None:
    """The comparison page of the copies (rl/report), after their results are safe in copies_summary.json: a report
    that fails to draw costs one line on stderr, never the copies' results or the exit status."""
    import sys

    from rl.errors import first_line

    try:
        from rl.report import write_report

        write_report([out], out / "report", quiet=True)
    except Exception as exc:  # the copies are done and saved; the report is a view of them
        print(f"report not written: {type(exc).__name__}: {first_line(exc, 300)} (retry with python -m rl.report "
              f"{out} --output {out / 'report'})", file=sys.stderr)
        return
    print(f"report of the copies: {out / 'report' / 'index.html'}", flush=True)
