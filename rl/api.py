"""rl from Python: `rl.make` opens a run (a folder made as train.py makes one), `rl.load` reopens a trained one.

    import rl
    with rl.make("ppo_cartpole", "runs/ppo", overrides={"lr": 1e-3}, seed=1) as run:
        run.train()                          # to the set's train_steps (or run.train(steps=10_000) at a time)
        print(run.evaluate(episodes=10))     # {"mean_return": ..., "returns": [...], ...}
    run = rl.load("runs/ppo")                # the newest checkpoint, for evaluation or inference
    action = run.agent.act(obs)              # one observation, or a batch

Both go through the command line's own path (rl/cli.py's flags, rl/run.py's `Run`), so the folder holds the same
hparams.json, checkpoints, progress.csv and eval.json, and `train.py --training False`, `rl.report` and
`--control` read it as they read one made by train.py (docs/python.md).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rl.errors import ConfigError


def overrides_text(overrides: dict | str | None) -> str:
    """`{"lr": 1e-3, "hidden_sizes": [64, 64]}` as `--hparam_override` text: `lr=0.001,hidden_sizes=[64, 64]`."""
    if overrides is None:
        return ""
    if isinstance(overrides, str):
        return overrides
    if not isinstance(overrides, dict):
        raise ConfigError(f"overrides must be a dict or --hparam_override text, got {type(overrides).__name__}")

    def text(value) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, tuple)):
            return "[" + ",".join(text(v) for v in value) + "]"
        if isinstance(value, str):
            return json.dumps(value)  # quoted: commas and brackets inside stay one value
        return repr(value)

    return ",".join(f"{key}={text(value)}" for key, value in overrides.items())


def _args(hparams: str, output_dir: Path, overrides, seed, env, training: bool = True):
    from rl.cli import parser

    if not isinstance(hparams, str):
        raise ConfigError(f"hparams must be the name of a set (train.py --list shows them), got "
                          f"{type(hparams).__name__}")
    argv = ["--hparams", hparams, "--output_dir", str(output_dir), "--training", str(training)]
    if overrides:
        argv += ["--hparam_override", overrides_text(overrides)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if env is not None:
        argv += ["--env", str(env)]
    return parser().parse_args(argv)


def make(hparams: str, output_dir: str | Path | None = None, overrides: dict | str | None = None,
         seed: int | None = None, env: str | None = None, quiet: bool = True):
    """Open a run of set `hparams` in `output_dir` (a new temporary folder when None): checked, owned (its lock
    held until `close`) and recorded as train.py does, resumed if the folder holds a run of the same set, env and
    seed. `overrides`: a dict or `--hparam_override` text. `quiet=False` prints the settings and a line per log row."""
    import hparams as _sets  # noqa: F401  (registers the sets)
    from rl.command import resolve_run
    from rl.folder import check_writable_folder
    from rl.run import Run

    out = Path(tempfile.mkdtemp(prefix="rl-run-")) if output_dir is None else Path(output_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir {out} is a file, not a folder: give a run folder")
    args = _args(hparams, out, overrides, seed, env)
    hp, record, fork = resolve_run(args, out)
    check_writable_folder(out, "training")
    return Run.open(hp, out, record, quiet=quiet, fork_from=fork)


def load(output_dir: str | Path, checkpoint: str = "latest"):
    """Reopen the run in `output_dir` for evaluation or inference: its settings from hparams.json, its agent from
    the `checkpoint` ("latest", "best" or a file's path). Reads the folder and writes nothing, so it works beside a
    run that is still training; `Run.train` is refused (use `make` to continue training)."""
    import hparams as _sets  # noqa: F401  (registers the sets)
    from rl.registry import hparams as sets
    from rl.resolve import MACHINE_SETTINGS, read_record
    from rl.run import Run
    from rl.trainer import evaluation_agent

    out = Path(output_dir)
    if not (out / "hparams.json").is_file():
        raise ConfigError(f"{out} holds no run (no hparams.json): train one first, with rl.make or train.py")
    record = read_record(out / "hparams.json")
    try:
        hp = sets[record["hparams_set"]]().update({k: v for k, v in record["hparams"].items()
                                                   if k not in MACHINE_SETTINGS})
    except ConfigError as exc:
        raise ConfigError(f"{out / 'hparams.json'}: {exc}") from None
    agent, _ = evaluation_agent(hp, out, checkpoint)
    return Run(hp, out, None, None, agent, None)
