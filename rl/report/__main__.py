"""CLI: `python -m rl.report RUN_OR_FOLDER... --output report/`. A user's mistake (a bad path, no runs) is one
`error:` line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rl.errors import ConfigError, first_line


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m rl.report", description=(
        "Compare runs written by train.py: learning curves, IQM/median/mean with stratified-bootstrap intervals "
        "(rliable), human-normalised Atari scores and published reference scores, in OUTPUT/index.html and "
        "OUTPUT/summary.json."))
    p.add_argument("paths", nargs="+", type=Path, metavar="RUN_OR_FOLDER",
                   help="a run folder, a folder of copy_<i> or trial_<i> runs, or a folder of several of those")
    p.add_argument("--output", type=Path, default=Path("report"), help="folder for the page (default: report)")
    p.add_argument("--reps", type=int, default=2000, help="bootstrap replications for the intervals (default 2000)")
    p.add_argument("--at", type=int, nargs="+", default=[], metavar="STEP",
                   help="agent steps at which to take the aggregates too (fixed budgets), beside the final ones")
    p.add_argument("--ignore", nargs="+", default=[], metavar="SETTING",
                   help="settings that do not set runs apart into lines, e.g. train_steps where a longer run's "
                        "first steps are a shorter run's (no schedule of the set reads it); compare them --at a step")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="also copy each run's record (hparams.json, progress.csv, eval.json; no checkpoints) into "
                        "DIR, so the report can be rebuilt from DIR once the run folders are gone")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from rl.report import write_report

    try:
        if args.reps < 100:
            raise ConfigError(f"--reps must be at least 100 for a 95% interval, got {args.reps}")
        if any(step <= 0 for step in args.at):
            raise ConfigError(f"--at takes agent steps above 0, got {min(args.at)}")
        write_report(args.paths, args.output, quiet=args.quiet, reps=args.reps, at=tuple(sorted(set(args.at))),
                     ignore=tuple(args.ignore))
        if args.keep:
            from rl.report.keep import keep_records

            kept = keep_records(args.paths, args.keep)
            if not args.quiet:
                print(f"kept the records of {len(kept)} run(s) in {args.keep}", flush=True)
    except ConfigError as exc:
        print(f"error: {first_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output folder that cannot be written, a file that vanished while read
        print(f"error: {exc.filename or ''}: {exc.strerror or first_line(exc)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
