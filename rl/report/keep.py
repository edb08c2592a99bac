"""A run's record, kept: the three files `rl.report` reads (hparams.json, progress.csv, eval.json) copied without the
checkpoints, replay, videos and event files beside them, so that a report can be rebuilt after the run folders are
gone (a machine handed back, a cluster's volume deleted). A record is tens of kB: small enough to commit beside the
figures it backs (results/ in this repository)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rl.report.runs import find_runs

RECORD = ("hparams.json", "progress.csv", "eval.json")


def keep_records(paths: list[Path], dest: Path) -> list[Path]:
    """Copy the record of every run under `paths` into `dest`, at the run's path relative to the parent of the path
    it was found under (the name the report gives it), each file written beside and renamed into place; return the
    folders written. A run's missing files (no eval.json before training ends) are left out, not invented."""
    written, dest = [], Path(dest)
    for path in paths:
        base = Path(path).resolve().parent
        for run in find_runs(Path(path)):
            if dest.resolve() in run.resolve().parents:  # a record kept earlier inside the folder read
                continue
            target = dest / run.resolve().relative_to(base)
            target.mkdir(parents=True, exist_ok=True)
            for name in RECORD:
                if (run / name).is_file():
                    tmp = target / f".{name}.tmp"
                    shutil.copyfile(run / name, tmp)
                    os.replace(tmp, target / name)
            written.append(target)
    return written
