"""A run's settings, resolved from what the command gives: the set, then the `hparams.json` of a run being resumed
(`read_record` refuses one of another structure in one line), then `--hparam_override`, then the flags; then every
part the settings name is looked up (`check_assembly`). Used by one run (rl/command.py), a search (rl/tune) and the
cluster path (rl/cloud); the settings themselves are rl/hparams.py's `HParams`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl.errors import ConfigError
from rl.hparams import HParams, flat
from rl.overrides import split_top_level

FLAG_SETTINGS = ("env", "seed", "train_steps", "eval_episodes", "test_episodes", "num_workers", "ray_address")
MACHINE_SETTINGS = ("ray_address",)  # where this invocation runs, not what the run is: never taken from hparams.json


def _override_values(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in split_top_level(text or "") if "=" in part)


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "true or false", type(None): "null"}
    return kinds.get(type(value), "a number")


def _record_problem(record: Any) -> str | None:
    """What in a run record's structure is not what `train.py` writes (None: nothing): `{"hparams_set": name,
    "hparams": {setting: value}, "flags": {flag: value}, "control": [{"settings": {...}, "overridden": [...]}]}`."""
    if not isinstance(record, dict):
        return f"expected an object with hparams_set, hparams and flags, found {_json_kind(record)}"
    if not isinstance(record.get("hparams_set"), str):
        return (f"expected \"hparams_set\": the name of an hparams set, found "
                f"{_json_kind(record['hparams_set']) if 'hparams_set' in record else 'none'}")
    if not isinstance(record.get("hparams"), dict):
        return (f"expected \"hparams\": an object of settings, found "
                f"{_json_kind(record['hparams']) if 'hparams' in record else 'none'}")
    flags = record.get("flags", {})
    if not isinstance(flags, dict):
        return f"expected \"flags\": an object of train.py's flags, found {_json_kind(flags)}"
    if not isinstance(flags.get("hparam_override") or "", str):
        return f"expected flags' \"hparam_override\": a string, found {_json_kind(flags['hparam_override'])}"
    control = record.get("control", [])
    if not isinstance(control, list):
        return f"expected \"control\": a list of --control changes, found {_json_kind(control)}"
    for i, entry in enumerate(control):
        if not isinstance(entry, dict):
            return f"expected \"control\"[{i}]: an object with step and settings, found {_json_kind(entry)}"
        if not isinstance(entry.get("settings", {}), dict):
            return (f"expected \"control\"[{i}].settings: an object of settings, found "
                    f"{_json_kind(entry['settings'])}")
        if not isinstance(entry.get("overridden", []), list):
            return (f"expected \"control\"[{i}].overridden: a list of setting names, found "
                    f"{_json_kind(entry['overridden'])}")
    return None


def read_record(path: Path) -> dict:
    """A run record (hparams.json) of the structure `train.py` writes, or one ConfigError line naming the file and
    what it expected: a hand-edited record of another shape ends here, not in a traceback where a part is read. Its
    settings come back flat, whether the file groups them by section or is an older flat record."""
    try:
        record = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not JSON, or not UTF-8 text
        raise ConfigError(f"{path} is corrupt ({exc}); fix or delete it, or use another --output_dir") from None
    problem = _record_problem(record)
    if problem:
        raise ConfigError(f"{path} is corrupt: {problem}; fix or delete it, or use another --output_dir")
    return {**record, "hparams": flat(record["hparams"])}


def _keep_control_changes(hp: HParams, saved: dict, override: str) -> None:
    """A resumed run keeps the settings `train.py --control` changed while it ran (rl/control.py), over the
    --hparam_override it was started with; a setting this command's override gives a new value wins (and the record
    marks that change `overridden`, rl/control.py `carry_changes`). `saved` has `read_record`'s structure."""
    started_with = _override_values(saved.get("flags", {}).get("hparam_override") or "")
    typed_now = _override_values(override)
    for entry in saved.get("control", []):
        for key, value in entry.get("settings", {}).items():
            if key in entry.get("overridden", ()):  # a --hparam_override at an earlier resume replaced it
                continue
            if key in typed_now and typed_now[key].strip() != started_with.get(key, "").strip():
                continue
            setattr(hp, key, value)


def resolve_hparams(args, output_dir: Path) -> HParams:
    """The set, then the `hparams.json` of a resumed run, then `--hparam_override`, then flags; then the agent and
    env family are looked up and the family checks the env id (`rl.envs.resolve_env`). A run on this machine
    (not `--sys k8s`, whose pods check it where they run) must name a torch device that this machine has."""
    from rl.registry import hparams as sets

    hp = sets[args.hparams]()
    saved_path = output_dir / "hparams.json"
    if saved_path.exists():
        saved = read_record(saved_path)
        saved_set, saved_values = saved["hparams_set"], saved["hparams"]
        if saved_set != args.hparams or saved_values.get("agent") != hp.agent:
            raise ConfigError(f"{output_dir} holds a run of hparams set {saved_set!r} (agent "
                              f"{saved_values.get('agent')!r}); refusing to mix it with {args.hparams!r}. "
                              f"Use another --output_dir")
        try:
            hp.update({k: v for k, v in saved_values.items() if k not in MACHINE_SETTINGS})
        except ConfigError as exc:
            raise ConfigError(f"{saved_path}: {exc}; fix or delete it, or use another --output_dir") from None
    if args.hparam_override:
        try:
            hp.parse(args.hparam_override)
        except ConfigError as exc:
            raise ConfigError(f"--hparam_override: {exc}") from None
    if saved_path.exists():
        try:
            _keep_control_changes(hp, saved, args.hparam_override)
        except ConfigError as exc:
            raise ConfigError(f"{saved_path} (a --control change): {exc}; fix or delete it") from None
    for name in FLAG_SETTINGS:
        value = getattr(args, name, None)
        if value is not None:
            try:
                setattr(hp, name, value)
            except ConfigError as exc:
                raise ConfigError(f"--{name}: {exc}") from None
    if "ray_address" in hp and not hp.ray_address:
        hp.ray_address = os.environ.get("RAY_ADDRESS", "")
    if getattr(args, "sys", "local") == "local":
        from rl.agents.base import check_device

        check_device(hp.device)
    check_assembly(hp)
    return hp


REGISTRY_SETTINGS = {"agent": "agents", "model": "models", "torso": "models", "critic": "models", "memory": "memory",
                     "act_select": "act_select", "grad_comp": "grad_comp"}


def check_assembly(hp: HParams) -> None:
    """Fail early, in one line, on a part `hp` names that does not exist: a registry key (agent, model, torso,
    memory ...), a loss the agent does not call (`rl.grad_comp.contracts.check_loss`: its kind, its parameters, its
    per-sample errors) or an env id no env family accepts (`rl.envs.resolve_env`, which may set `env_type`)."""
    from rl.envs import resolve_env  # the registries' members import this module: look them up when called
    from rl.grad_comp.contracts import check_loss
    from rl.registry import ALL

    for setting, kind in REGISTRY_SETTINGS.items():
        if setting in hp:
            ALL[kind][getattr(hp, setting)]
    if "agent" in hp and "grad_comp" in hp:
        memory = hp.memory if "memory" in hp else None
        check_loss(hp.grad_comp, hp.agent, ALL["agents"][hp.agent], memory,
                   None if memory is None else ALL["memory"][memory])
    resolve_env(hp)
