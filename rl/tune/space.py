"""`--tune_space`: the settings a search varies, each with its distribution, checked against the set's settings.

    lr=loguniform(1e-4,1e-2),ent_coef=uniform(0,0.02),batch_size=choice(64,128,256),epochs=intuniform(4,20)

A distribution must fit the setting's type (rl/hparams.py): uniform and loguniform take float settings, intuniform
int settings, choice any setting (its values are parsed as an override of that setting would be, lists included).
Every mistake is one ConfigError line: an unknown setting or distribution (naming close matches), a distribution
the type cannot take, an empty or reversed range, loguniform with low <= 0, a range or a choice reaching outside the
setting's bound (rl/hparams.py: `lr=uniform(0,0.1)` is refused, since lr must be > 0), malformed text.

A trial's values go into its run as `--hparam_override` text (`override`). Floats are written with `repr`, the
shortest text that `float()` reads back to the same number, so the printed string reproduces the trial exactly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from rl.errors import ConfigError
from rl.hparams import HParams, Range
from rl.overrides import split_top_level
from rl.registry import closest

RANGES = ("uniform", "loguniform", "intuniform")
KINDS = RANGES + ("choice",)
ITEM = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(\w+)\s*\((.*)\)$", re.DOTALL)
EXAMPLE = 'e.g. "lr=loguniform(1e-4,1e-2),ent_coef=uniform(0,0.02),batch_size=choice(64,128,256)"'


@dataclass(frozen=True)
class Param:
    """One searched setting: `low`/`high` for the ranges; for choice, `values` (typed for the setting) and
    `choices`, what Optuna stores for them: the same values, or their override text for a list setting (Optuna's
    categorical choices are scalars)."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    values: tuple = ()
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        """The trial's value, typed for the setting (an enqueued trial gets its fixed value)."""
        if self.kind == "choice":
            return self.value(trial.suggest_categorical(self.name, list(self.choices)))
        if self.kind == "intuniform":
            return trial.suggest_int(self.name, int(self.low), int(self.high))
        return trial.suggest_float(self.name, self.low, self.high, log=self.kind == "loguniform")

    def value(self, stored: Any) -> Any:
        """The setting's value from what Optuna stored for this parameter."""
        return self.values[self.choices.index(stored)] if self.kind == "choice" else stored


def format_value(value: Any) -> str:
    """Override text that rl/hparams.py parses back to exactly `value`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # the shortest text float() reads back to the same number
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value)
    if text and text == text.strip() and not any(c in text for c in ",[]{}()\"'"):
        return text
    if '"' not in text:
        return f'"{text}"'
    if "'" not in text:
        return f"'{text}'"
    raise ConfigError(f"the value {text!r} holds both kinds of quote and cannot be written as an override")


def override(params: list[Param], values: dict[str, Any]) -> str:
    """`name=value,...` for `--hparam_override`, in the order of the space."""
    return ",".join(f"{p.name}={format_value(p.value(values[p.name]))}" for p in params)


def parse_space(text: str, hp: HParams) -> list[Param]:
    """The `--tune_space` text as Params, checked against the settings `hp` (the set with the run's overrides)."""
    if not text.strip():
        raise ConfigError(f"--tune needs --tune_space, the settings to search: {EXAMPLE}")
    try:
        items = split_top_level(text)
    except ConfigError:
        raise ConfigError(f"--tune_space {text!r}: unbalanced brackets or quotes") from None
    params: list[Param] = []
    for item in items:
        param = _parse_item(item, hp)
        if any(p.name == param.name for p in params):
            raise ConfigError(f"--tune_space names {param.name!r} twice")
        params.append(param)
    return params


def _parse_item(item: str, hp: HParams) -> Param:
    match = ITEM.match(item)
    if not match:
        raise ConfigError(f"--tune_space item {item!r} is not name=distribution(...): use uniform(low,high), "
                          f"loguniform(low,high), intuniform(low,high) or choice(a,b,...); {EXAMPLE}")
    name, kind, inner = match.group(1), match.group(2), match.group(3).strip()
    settings = hp.to_dict()
    if name not in settings:
        raise ConfigError(f"--tune_space: unknown setting {name!r}: {closest(name, list(settings))}")
    if kind not in KINDS:
        raise ConfigError(f"--tune_space {item!r}: unknown distribution {kind!r}: {closest(kind, list(KINDS))}")
    try:
        raw = split_top_level(inner)
    except ConfigError:
        raise ConfigError(f"--tune_space {item!r}: unbalanced brackets or quotes") from None
    setting = type(settings[name])
    if kind == "choice":
        return _choice(item, name, raw, hp)
    param = _range(item, name, kind, raw, setting)
    _check_bound(item, param, hp.bound(name))
    return param


def _check_bound(item: str, param: Param, bound) -> None:
    """Every value the range can draw must be a value the setting may take (rl/hparams.py): a range bound holds for
    the whole range when it holds at both ends; any other rule is tried at both ends and 999 points between."""
    if bound is None:
        return
    if isinstance(bound, Range):
        points = [param.low, param.high]
    elif param.kind == "intuniform":
        points = range(int(param.low), int(param.high) + 1, max(1, int(param.high - param.low) // 1000))
    else:
        points = [param.low + (param.high - param.low) * i / 1000 for i in range(1001)]
    for value in points:
        if not bound.holds(int(value) if param.kind == "intuniform" else float(value)):
            raise ConfigError(f"--tune_space {item!r}: setting {param.name!r} must be {bound}, and this range "
                              f"reaches {value:g}")


def _choice(item: str, name: str, raw: list[str], hp: HParams) -> Param:
    if not raw:
        raise ConfigError(f"--tune_space {item!r}: choice() needs at least one value")
    values = []
    for text in raw:
        try:  # parsed exactly as an override of this setting would be
            values.append(getattr(hp.copy().parse(f"{name}={text}"), name))
        except ConfigError as exc:
            raise ConfigError(f"--tune_space {item!r}: {exc}") from None
    texts = [format_value(v) for v in values]
    twice = sorted({t for t in texts if texts.count(t) > 1})
    if twice:
        raise ConfigError(f"--tune_space {item!r}: choice() lists {', '.join(twice)} more than once")
    stored = tuple(texts) if isinstance(values[0], list) else tuple(values)
    return Param(name, "choice", values=tuple(values), choices=stored)


def _range(item: str, name: str, kind: str, raw: list[str], setting: type) -> Param:
    want = int if kind == "intuniform" else float
    if setting is not want:
        fits = ("intuniform(low,high) or choice(...)" if setting is int else
                "uniform(low,high), loguniform(low,high) or choice(...)" if setting is float else "only choice(...)")
        article = "an" if setting is int else "a"
        raise ConfigError(f"--tune_space {item!r}: {name!r} is {article} {setting.__name__} setting: {fits} fits it")
    if len(raw) != 2:
        raise ConfigError(f"--tune_space {item!r}: {kind}() takes two bounds, low and high, got {len(raw)}")
    try:
        low, high = (float(t) for t in raw)
    except ValueError:
        raise ConfigError(f"--tune_space {item!r}: the bounds must be numbers") from None
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ConfigError(f"--tune_space {item!r}: the bounds must be finite")
    if want is int and (low != int(low) or high != int(high)):
        raise ConfigError(f"--tune_space {item!r}: intuniform() takes whole-number bounds")
    if low >= high:
        what = "empty" if low == high else "reversed"
        raise ConfigError(f"--tune_space {item!r}: the range is {what} (low must be below high; a fixed value "
                          f"belongs in --hparam_override)")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"--tune_space {item!r}: loguniform() needs low > 0, got {raw[0]}")
    return Param(name, kind, low=low, high=high)
