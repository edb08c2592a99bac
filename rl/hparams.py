"""HParams: a closed, typed bag of settings with one line of help each.

Sets (in `hparams/`) are functions that build a fresh HParams: `base()` defines the common settings, a family adds
its own, and a derived set calls its parent and assigns. Each setting belongs to a section (`d = hp.section("atari",
when=is_atari)`, then `d(name, default, help)`), and a section belongs to whoever reads it: an env family, an agent
family, the Scheme's workers, Ray. A run's record (`hparams.json`) and `describe()` hold, grouped by section, only the
sections the run reads: those without a `when`, those whose `when(hp)` holds, and any holding a value other than its
default; every setting still reads as its value, so a part that looks at a setting of a section left out sees that
section's default, which is all the section holds. Reading or assigning an unknown key is an
error naming the close matches; an assigned value must have the type of the default (ints widen to floats) and
lie within the setting's bound, if `define` gave one (`bound=above(0)`, `between(0, 1)`, `one_of(...)`, `each(...)`,
`either(...)`, `where(...)`; all of them pickle, since settings travel to worker processes).
Every way a value arrives (a set, `--hparam_override`, `--control`, a resumed hparams.json, a search's choice) passes
that one check, which refuses in one line naming the setting, the value and the bound.
Overrides (`"lr=1e-3,hidden_sizes=[64,64],dueling=true"`) are parsed by the type of the existing value
(rl/overrides.py), and every int fits in 64 bits, as numpy and torch take it.
A run's settings from the command's arguments (the set, a resumed record, overrides, flags) are rl/resolve.py's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rl.errors import ConfigError
from rl.overrides import a_type, parse_value, split_top_level, type_name
from rl.registry import closest

SCALARS = (bool, int, float, str)


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
        object.__setattr__(self, "_defaults", {})  # name -> the value `define` gave
        object.__setattr__(self, "_section_of", {})  # name -> its section's name
        object.__setattr__(self, "_when", {})  # section -> None (always recorded) or when(hp) -> bool

    # ------------------------------------------------------------------ sections
    def section(self, name: str, when: Callable[[HParams], bool] | None = None) -> Callable[..., None]:
        """Open section `name` and return its `define`. `when(hp)` says whether a run reads it (None: every run);
        a module-level function, since settings travel to worker processes by pickle."""
        if name in self._when and self._when[name] is not when:
            raise ConfigError(f"section {name!r} is declared twice with different conditions")
        self._when[name] = when

        def define(setting: str, default: Any, doc: str, elem: type | None = None, bound=None) -> None:
            self.define(setting, default, doc, elem=elem, bound=bound, section=name)

        return define

    def sections(self, recorded_only: bool = True) -> dict[str, dict[str, Any]]:
        """Settings grouped by section, in the order the sections were declared; `recorded_only`: only the sections
        this run reads (no `when`, `when(hp)` true, or a value off its default)."""
        grouped: dict[str, dict[str, Any]] = {}
        for name, value in self._values.items():
            grouped.setdefault(self._section_of[name], {})[name] = value
        if not recorded_only:
            return grouped
        return {section: values for section, values in grouped.items() if self._reads(section, values)}

    def _reads(self, section: str, values: dict[str, Any]) -> bool:
        when = self._when.get(section)
        return when is None or bool(when(self)) or any(v != self._defaults[k] for k, v in values.items())

    def record(self) -> dict[str, dict[str, Any]]:
        """What hparams.json keeps: the sections this run reads, grouped (`flat` reads it back)."""
        return self.sections()

    # ------------------------------------------------------------------ definition and access
    def define(self, name: str, default: Any, doc: str, elem: type | None = None, bound=None,
               section: str = "settings") -> None:
        """Add a setting; `elem` is the element type of a list setting whose default is empty; `bound` the values it
        may take (every assignment is checked against it); `section` its group (`section()` declares one)."""
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
        self._defaults[name] = self._values[name]
        self._section_of[name] = section
        self._when.setdefault(section, None)

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
            raise ConfigError(f"setting {name!r} must be {a_type(kind)}, got {value!r} ({type(value).__name__})")
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
            raise ConfigError(f"setting {name!r} holds {type_name(elem)} items, got {v!r}")
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
        """Assign many settings, flat or grouped by section (a saved hparams.json); unknown keys and bad types are
        errors."""
        for key, value in flat(values).items():
            setattr(self, key, value)
        return self

    def doc(self, name: str) -> str:
        return self._docs[name]

    def bound(self, name: str):
        """The values `name` may take (None: any of its type)."""
        return self._bounds.get(name)

    def describe(self) -> str:
        """The settings this run reads, by section, each with its help line."""
        grouped = self.sections()
        width = max(len(k) for values in grouped.values() for k in values)
        lines = []
        for section, values in grouped.items():
            lines.append(f"[{section}]")
            lines += [f"  {k:<{width}} = {v!r:<24} # {self._docs[k]}" for k, v in values.items()]
        return "\n".join(lines)

    def copy(self) -> HParams:
        new = HParams()
        for d in ("_values", "_types", "_docs", "_bounds", "_defaults", "_section_of", "_when"):
            object.__setattr__(new, d, dict(getattr(self, d)))
        return new

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HParams) and self._values == other._values

    def __repr__(self) -> str:
        return f"HParams({self._values})"


def flat(values: dict[str, Any]) -> dict[str, Any]:
    """Settings as one flat dict, from a record grouped by section (`HParams.record`) or an older flat one. No setting
    holds a dict, so a dict value is a section."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(value)
        else:
            out[key] = value
    return out
