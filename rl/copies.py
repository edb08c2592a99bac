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
    Forked, so the children inherit the filled registries (including the sets that train.py imported). A SIGTERM or
    SIGINT to this process (PID 1 of a container gets the pod's SIGTERM alone) is passed on to every copy, each of
    which checkpoints; then this process exits with 128 + the signal, and the same command resumes every copy."""
    import concurrent.futures as cf
    import multiprocessing as mp

    from rl import signals

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    workers = min(args.copies, os.cpu_count() or 1)
    print(f"running {args.copies} copies in {out}/copy_<i> with {workers} processes", flush=True)
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
        def send(signum: int) -> None:
            for pid in list(getattr(pool, "_processes", None) or {}):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:  # it ended just now
                    pass

        with signals.forwarding(send) as stop:
            futures = [pool.submit(_copy_worker, args, i) for i in range(args.copies)]
            if stop.signum:  # it came while the pool was starting its processes: they get it now
                send(stop.signum)
            cf.wait(futures)
            signum = stop.signum
        if signum:
            pool.shutdown(cancel_futures=True)
            saved = sum(1 for f in futures if f.done() and not f.cancelled() and isinstance(f.exception(), SystemExit))
            print(f"\n{signals.name(signum)}: passed on to the copies ({saved} saved a checkpoint); run the same "
                  f"command to resume them.", flush=True)
            raise SystemExit(signals.exit_code(signum))
        results = [f.result() for f in futures]
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
