"""`python -m rl.cloud.entry ARGS`: `python train.py` with the arguments that ARGS carries (JSON, base64 in its
URL-safe alphabet).

A RayJob's entrypoint is a string that two shells read before train.py sees it: KubeRay's submitter runs it in
`bash -c` (`ray job submit ... -- ENTRYPOINT`), and `ray job submit` joins the words it got back into one string that
Ray's job supervisor runs with /bin/sh. No quoting survives both for every token (`x=(1,2)`, `a;b`, `$HOME`, quotes,
backslashes, spaces), so `--sys k8s` writes such a command in this form, whose one argument (letters, digits, `-`,
`_`, `=`) both shells leave as it is (rl/cloud/render.py `entrypoint`).
"""

from __future__ import annotations

import base64
import json
import runpy
import sys
from pathlib import Path


def encode(args: list[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(args)).encode()).decode()


def decode(text: str) -> list[str]:
    args = json.loads(base64.urlsafe_b64decode(text.encode()))
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("not a list of strings")
    return args


def main() -> None:
    try:
        (text,) = sys.argv[1:]
        args = decode(text)
    except ValueError as exc:
        print(f"error: python -m rl.cloud.entry takes one argument, train.py's arguments as base64 JSON "
              f"({exc})", file=sys.stderr)
        raise SystemExit(2) from None
    train = Path(__file__).resolve().parents[2] / "train.py"
    sys.argv = [str(train), *args]
    runpy.run_path(str(train), run_name="__main__")


if __name__ == "__main__":
    main()
