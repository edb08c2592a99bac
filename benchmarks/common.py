"""Shared helpers for the side-by-side benchmarks: run a command as a whole process, measure wall time and peak
memory (the child's max RSS from wait4), and print a table with our/peer ratios."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_process(cmd: list[str], env: dict | None = None) -> dict:
    """Run `cmd`; return wall time (s), peak RSS (MiB) and stdout. Fails loudly if the command fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{out[-3000:]}")
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "stdout": out}


def last_json_line(text: str) -> dict:
    """The last line of `text` that parses as a JSON object (the peer scripts print their result that way)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON result in output:\n{text[-2000:]}")


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max(len(c), *(len(fmt(r.get(c))) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-+-".join("-" * widths[c] for c in columns))
    for r in rows:
        print(" | ".join(fmt(r.get(c)).ljust(widths[c]) for c in columns))


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 1e4 else f"{v:.0f}"
    return "" if v is None else str(v)
