"""`--hparam_override` text (`"lr=1e-3,hidden_sizes=[64,64],dueling=true"`) as typed values: `split_top_level` cuts
it at the commas outside brackets and quotes, `parse_value` reads each value as the type of the setting it names. An
int takes whole-number text only (`1000000` or `1_000_000`; `1e6` is refused, naming the number to write).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from rl.errors import ConfigError


def type_name(t: type) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}[t]


def a_type(t: type) -> str:
    """The type's name with its article: "an int", "a float"."""
    name = type_name(t)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


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
    raise ConfigError(f"setting {key!r} expects {a_type(kind)}{f' of {type_name(elem)}' if kind is list else ''}, "
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
