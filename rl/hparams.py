"""HParams: a closed, typed bag of settings with one line of help each.

Sets (in `hparams/`) are functions that build a fresh HParams: `base()` defines every common setting, a family adds
its own with `define`, and a derived set calls its parent and assigns. Reading or assigning an unknown key is an
error naming the close matches; an assigned value must have the type of the default (ints widen to floats) and
lie within the setting's bound, if `define` gave one (`bound=above(0)`, `between(0, 1)`, `one_of(...)`, `each(...)`,
`either(...)`, `where(...)`; all of them pickle, since settings travel to worker processes).
Every way a value arrives (a set, `--hparam_override`, `--control`, a resumed hparams.json, a search's choice) passes
that one check, which refuses in one line naming the setting, the value and the bound.
Overrides (`"lr=1e-3,hidden_sizes=[64,64],dueling=true"`) are parsed by the type of the existing value; an int takes
whole-number text only (`1000000` or `1_000_000`; `1e6` is refused, naming the number to write), and every int fits
in 64 bits, as numpy and torch take it.
`resolve_hparams` builds a run's settings from the CLI's arguments (set, saved run, overrides, flags); `read_record`
reads a run's hparams.json, refusing one of another structure in one line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from rl.errors import ConfigError
from rl.registry import closest

SCALARS = (bool, int, float, str)


def _type_name(t: type) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}[t]


def _a(t: type) -> str:
    """The type's name with its article: "an int", "a float"."""
    name = _type_name(t)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


INT64 = 2**63  # ints travel to numpy and torch as 64-bit integers: a setting's int lies in [-INT64, INT64)


def _number(x: float) -> str:
    """A bound's end as the user would type it: whole numbers in full (1_000_000_000, which an int setting parses;
    never 1e+09, which it refuses), others as %g."""
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):_}" if abs(x) >= 10_000 else str(int(x))
    return f"{x:g}"


# ---------------------------------------------------------------------------------------------------- bounds
@dataclass(frozen=True)
class Range:
    """A numeric interval, each end open or closed or absent: `above(0)` is "> 0", `between(0, 1)` "in [0, 1]"."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: Any) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        if self.low is None and self.high is None:
            return "a finite number"
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_number(self.high)}"
        return (f"in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}"
                f"{')' if self.high_open else ']'}")


@dataclass(frozen=True)
class Where:
    """Any other rule: `test(value)` must be true; `text` says what it asks and why. `test` must be a module-level
    function, not a lambda: settings travel to worker processes by pickle."""

    test: Callable[[Any], bool]
    text: str

    def holds(self, value: Any) -> bool:
        return bool(self.test(value))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class OneOf:
    """A value from a closed list (a string setting's choices)."""

    values: tuple

    def holds(self, value: Any) -> bool:
        return value in self.values

    def __str__(self) -> str:
        return f"one of {', '.join(map(str, self.values))}"


@dataclass(frozen=True)
class Each:
    """A list setting whose every item keeps `bound`."""

    bound: Any

    def holds(self, value: Any) -> bool:
        return all(self.bound.holds(v) for v in value)

    def __str__(self) -> str:
        return f"a list whose items are each {self.bound}"


@dataclass(frozen=True)
class Either:
    """A value that keeps any one of `bounds` (sticky_actions: -1, or a probability)."""

    bounds: tuple

    def holds(self, value: Any) -> bool:
        return any(b.holds(value) for b in self.bounds)

    def __str__(self) -> str:
        return " or ".join(map(str, self.bounds))


def above(low: float) -> Range:
    return Range(low=low, low_open=True)


def at_least(low: float) -> Range:
    return Range(low=low)


def between(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low, high, low_open, high_open)


def where(test: Callable[[Any], bool], text: str) -> Where:
    return Where(test, text)


def one_of(*values: Any) -> OneOf:
    return OneOf(tuple(values))


def each(bound) -> Each:
    return Each(bound)


def either(*bounds) -> Either:
    return Either(tuple(bounds))


PROBABILITY = between(0, 1)
FINITE = Range()  # any real number: not nan or inf


class HParams:
    """Closed settings: `define` adds one, attribute access reads and (type-checked) assigns it."""

    def __init__(self):
        object.__setattr__(self, "_values", {})
        object.__setattr__(self, "_types", {})  # name -> (type, element type for lists)
        object.__setattr__(self, "_docs", {})
        object.__setattr__(self, "_bounds", {})  # name -> Range or Where, for the settings defined with one

    # ------------------------------------------------------------------ definition and access
    def define(self, name: str, default: Any, doc: str, elem: type | None = None, bound=None) -> None:
        """Add a setting; `elem` is the element type of a list setting whose default is empty; `bound` the values it
        may take (every assignment is checked against it)."""
        if name in self._values:
            raise ConfigError(f"setting {name!r} is defined twice")
        kind = type(default)
        if kind not in SCALARS + (list,):
            raise ConfigError(f"setting {name!r}: only bool/int/float/str/list values are allowed, got {kind.__name__}")
        if kind is list:
            elem = elem or (type(default[0]) if default else str)
        self._types[name] = (kind, elem)
        self._docs[name] = doc
        if bound is not None:
            if getattr(getattr(bound, "test", None), "__name__", "") == "<lambda>":
                raise ConfigError(f"setting {name!r}: its where() test is a lambda, which cannot travel to worker "
                                  f"processes (pickle): use a module-level function, or one_of/either/each")
            self._bounds[name] = bound
        self._values[name] = self._check(name, default)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        if name.startswith("__"):
            raise AttributeError(name)
        raise ConfigError(f"unknown setting {name!r}: {closest(name, list(values))}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._values:
            raise ConfigError(f"unknown setting {name!r}: {closest(name, list(self._values))}")
        self._values[name] = self._check(name, value)

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def _check(self, name: str, value: Any) -> Any:
        kind, elem = self._types[name]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if kind is list and ok:
            value = [self._check_elem(name, v, elem) for v in value]
        if not ok:
            raise ConfigError(f"setting {name!r} must be {_a(kind)}, got {value!r} ({type(value).__name__})")
        bound = self._bounds.get(name)
        if bound is not None and not bound.holds(value):
            raise ConfigError(f"setting {name!r} must be {bound}, got {value!r}")
        if kind is int and not -INT64 <= value < INT64:
            raise ConfigError(f"setting {name!r} must fit in 64 bits, as numpy and torch take it: in "
                              f"[-2**63, 2**63), got {value!r}")
        return value

    def _check_elem(self, name: str, v: Any, elem: type) -> Any:
        if elem is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if not isinstance(v, elem) or (elem is int and isinstance(v, bool)):
            raise ConfigError(f"setting {name!r} holds {_type_name(elem)} items, got {v!r}")
        if elem is int and not -INT64 <= v < INT64:
            raise ConfigError(f"setting {name!r} holds 64-bit int items, as numpy and torch take them: in "
                              f"[-2**63, 2**63), got {v!r}")
        return v

    # ------------------------------------------------------------------ overrides
    def parse(self, overrides: str) -> HParams:
        """Apply `"k=v,k2=[1,2]"`; each value is parsed by the type of the current value."""
        for item in split_top_level(overrides):
            if "=" not in item:
                raise ConfigError(f"malformed override {item!r}: expected key=value pairs separated by commas, "
                                  f"e.g. \"lr=1e-3,hidden_sizes=[64,64]\"")
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in self._values:
                raise ConfigError(f"unknown setting {key!r} in override: {closest(key, list(self._values))}")
            kind, elem = self._types[key]
            setattr(self, key, parse_value(key, raw, kind, elem))
        return self

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def to_json(self) -> str:
        return json.dumps(self._values, indent=2, sort_keys=True)

    def update(self, values: dict[str, Any]) -> HParams:
        """Assign many settings (e.g. a saved hparams.json); unknown keys and bad types are errors."""
        for key, value in values.items():
            setattr(self, key, value)
        return self

    def doc(self, name: str) -> str:
        return self._docs[name]

    def bound(self, name: str):
        """The values `name` may take (None: any of its type)."""
        return self._bounds.get(name)

    def describe(self) -> str:
        width = max(map(len, self._values))
        return "\n".join(f"  {k:<{width}} = {self._values[k]!r:<24} # {self._docs[k]}" for k in sorted(self._values))

    def copy(self) -> HParams:
        new = HParams()
        for d in ("_values", "_types", "_docs", "_bounds"):
            object.__setattr__(new, d, dict(getattr(self, d)))
        return new

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HParams) and self._values == other._values

    def __repr__(self) -> str:
        return f"HParams({self._values})"


def split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets, braces or quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"malformed override {text!r}: unbalanced {ch!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ConfigError(f"malformed override {text!r}: unclosed bracket or quote")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_value(key: str, raw: str, kind: type, elem: type | None = None) -> Any:
    """Parse the text `raw` as a `kind` (with `elem` items for lists)."""
    try:
        if kind is bool:
            low = raw.lower()
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise ValueError
        if kind is int:
            return int(raw)  # digits only ("1_000_000" too): float text such as 1e30 is refused below
        if kind is float:
            return float(raw)
        if kind is str:
            return raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'" else raw
        if kind is list:
            if not (raw.startswith("[") and raw.endswith("]")):
                raise ValueError
            inner = raw[1:-1].strip()
            return [parse_value(key, item, elem) for item in split_top_level(inner)] if inner else []
    except (ValueError, ConfigError):
        pass
    raise ConfigError(f"setting {key!r} expects {_a(kind)}{f' of {_type_name(elem)}' if kind is list else ''}, "
                      f"could not parse {raw!r}{_whole_number_hint(raw) if kind is int else ''}")


def _whole_number_hint(raw: str) -> str:
    """For float text given to an int setting ("1e6", "2.0"): the whole number to write instead. Float text is not
    read as an int, as 1e30 became an evaluation of 10^30 episodes that never ended, and 1.5 has no int to become."""
    try:
        number = Decimal(raw.strip())
    except InvalidOperation:
        return ""
    if not number.is_finite() or number != number.to_integral_value() or abs(number) >= Decimal(10) ** 40:
        return ""
    return f" (write it as a whole number: {int(number)})"


# ---------------------------------------------------------------------------------------------------- a run's settings
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
    what it expected: a hand-edited record of another shape ends here, not in a traceback where a part is read."""
    try:
        record = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not JSON, or not UTF-8 text
        raise ConfigError(f"{path} is corrupt ({exc}); fix or delete it, or use another --output_dir") from None
    problem = _record_problem(record)
    if problem:
        raise ConfigError(f"{path} is corrupt: {problem}; fix or delete it, or use another --output_dir")
    return record


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
