"""`replay_parameters`: the list of buffers a batch is composed from, one JSON string, parsed here into frozen, typed
specs (one per buffer, in the listed order) for both kinds of item a buffer can hold:

- transitions: the `mixed` memory of the DQN family (rl/memory/mixed.py; with a fresh `queue` and a `replay`, CLEAR's
  half-fresh, half-replayed batches, Rolnick et al. 2019). A type is a transition memory of the memory registry
  (replay, prioritized, attentive, queue); any key but type, capacity and sample_ratio is a setting for that buffer
  alone (e.g. "per_alpha": 0.7).
- sequences: the V-trace agent's replay (agent=impala, rl/memory/sequence_buffers.py), elite_buffer_vtrace's
  `--replay_parameters` as its commands write it, e.g.
  `[{"type":"custom","capacity":1000,"sample_ratio":0.5,"dist_function":"ln_norm","sample_strategy":"elite_sampling",
  "lambda_batch_multiplier":6,"alfa_annealing_factor":2.0},{"type":"queue","capacity":1,"sample_ratio":0.5}]`.
  Keys, defaults and ranges follow the published schema (`utils/parameter_schema.py`): `queue` and `standard` take
  `type`, `capacity`, `sample_ratio`; `custom` also needs `dist_function` (ln_norm, cos_dist, kl_div; or `random`,
  ours: the ablation that ranks by the sampling counter only) and takes `p` (2), `sample_strategy` (absent: uniform),
  `insert_strategy` (absent: FIFO), `lambda_batch_multiplier` (1), `alfa_annealing_factor` (1.0),
  `elite_sampling_strategy` (strategy3), `elite_batch_size` (20).

One parser, one table of buffer types per kind of item (`buffer_types`), each kind taking the other's name for the
uniform buffer (`standard` is `replay` for transitions, `replay` is `standard` for sequences). JSON, or a Python literal
(single quotes) as the published `literal_eval` reads it; names are case-insensitive, as there. Stricter than the
published schema, which coerces: a value of the wrong type (a string capacity, 6.5 for an integer) is an error, not
truncated. The ratios sum to 1. Every problem is one `ConfigError` line naming the buffer and what is valid.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field

from rl.errors import ConfigError
from rl.registry import memory

ITEMS = ("transitions", "sequences")
DIST_FUNCTIONS = ("ln_norm", "cos_dist", "kl_div", "random")  # random: ours, the ablation (no features read)
SAMPLE_STRATEGIES = ("elite_sampling", "attentive_sampling")
INSERT_STRATEGIES = ("elite_insertion",)
ELITE_STRATEGIES = ("strategy1", "strategy2", "strategy3", "strategy4")
TOLERANCE = 1e-6


@dataclass(frozen=True)
class ReplaySpec:
    """A buffer: sequences' `queue` (FIFO of the freshest rollouts) or `standard` (uniform with replacement)."""

    type: str
    capacity: int  # items held
    sample_ratio: float  # its share of each batch


@dataclass(frozen=True)
class CustomReplaySpec(ReplaySpec):
    """A `custom` sequence buffer: uniform, elite or attentive sampling, FIFO or elite insertion, with stored
    features."""

    dist_function: str = "ln_norm"  # the distance of target to behaviour features (required in the JSON)
    p: int = 2  # the norm of `ln_norm`
    sample_strategy: str | None = None  # elite_sampling, attentive_sampling, or None: uniform
    insert_strategy: str | None = None  # elite_insertion, or None: FIFO
    lambda_batch_multiplier: int = 1  # the pool is lambda * k candidates, lambda annealed to 1
    alfa_annealing_factor: float = 1.0  # lambda reaches 1 after alfa * lr_scheduler_steps batches
    elite_sampling_strategy: str = "strategy3"
    elite_batch_size: int = 20  # elite insertion's candidates per insert


@dataclass(frozen=True)
class TransitionReplaySpec(ReplaySpec):
    """A transition buffer of the mixed memory: `type` a memory registry key, `settings` its own settings."""

    settings: dict = field(default_factory=dict, hash=False)  # e.g. {"per_alpha": 0.7}, over the run's settings


# key: (kind, choices or None, lowest allowed value, whether the lowest is allowed)
_COMMON = {"type": (str, None, None, True), "capacity": (int, None, 1, True),
           "sample_ratio": (float, None, 0.0, True)}
_CUSTOM = {**_COMMON, "dist_function": (str, DIST_FUNCTIONS, None, True), "p": (int, None, 1, True),
           "sample_strategy": (str, SAMPLE_STRATEGIES, None, True),
           "insert_strategy": (str, INSERT_STRATEGIES, None, True),
           "lambda_batch_multiplier": (int, None, 1, True), "alfa_annealing_factor": (float, None, 0.0, False),
           "elite_sampling_strategy": (str, ELITE_STRATEGIES, None, True), "elite_batch_size": (int, None, 1, True)}
_BASIC = ("type", "capacity", "sample_ratio")


@dataclass(frozen=True)
class BufferType:
    """What a buffer of one type is parsed into: its record, its keys (and their checks), the keys it needs, and
    whether any other key is a setting for that buffer alone."""

    spec: type
    keys: dict
    required: tuple = _BASIC
    settings: bool = False


SEQUENCE_BUFFERS = {"queue": BufferType(ReplaySpec, _COMMON), "standard": BufferType(ReplaySpec, _COMMON),
                    "custom": BufferType(CustomReplaySpec, _CUSTOM, (*_BASIC, "dist_function"))}
TRANSITION_BUFFER = BufferType(TransitionReplaySpec, _COMMON, settings=True)
NOT_TRANSITION_BUFFERS = ("mixed", "rollout")  # the memory composed of buffers, and the on-policy rollout
DEFAULTS = {"transitions": '[{"type": "queue", "capacity": 1, "sample_ratio": 0.5}, '
                            '{"type": "replay", "capacity": 1000, "sample_ratio": 0.5}]',
            "sequences": '[{"type": "queue", "capacity": 1, "sample_ratio": 1}]'}  # elite_buffer_vtrace's "no replay"
ALIASES = {"transitions": {"standard": "replay"}, "sequences": {"replay": "standard"}}


def buffer_types(items: str) -> dict[str, BufferType]:
    """The buffer types of a kind of item: for sequences elite_buffer_vtrace's three, for transitions every memory of
    the registry that stores transitions (one registered later is a buffer type too)."""
    if items == "sequences":
        return SEQUENCE_BUFFERS
    if items == "transitions":
        return {name: TRANSITION_BUFFER for name in sorted(memory.names()) if name not in NOT_TRANSITION_BUFFERS}
    raise ValueError(f"unknown kind of replay item {items!r}: valid: {', '.join(ITEMS)}")


def _value(where: str, key: str, value, kind, choices, lowest, inclusive):
    """One checked value: the right type, a valid name (lower-cased), at or above its lowest value."""
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        value = value.lower()
        if choices is not None and value not in choices:
            raise ConfigError(f"{where}: unknown {key} {value!r}: valid: {', '.join(choices)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
    if value < lowest or (value == lowest and not inclusive):
        raise ConfigError(f"{where}: {key} must be {'>=' if inclusive else '>'} {lowest}, got {value!r}")
    return value


def _type_of(i: int, item: dict, items: str) -> str:
    """The buffer's type, its kind's name for an alias; one line naming the valid types otherwise."""
    types, aliases = buffer_types(items), ALIASES[items]
    if "type" not in item:
        raise ConfigError(f"replay_parameters[{i}]: missing key 'type' (one of {', '.join(types)})")
    name = _value(f"replay_parameters[{i}]", "type", item["type"], *_COMMON["type"])
    name = aliases.get(name, name)
    if name not in types:
        also = "; ".join(f"{alias} means {target}" for alias, target in aliases.items())
        raise ConfigError(f"replay_parameters[{i}]: unknown type {item['type']!r}: valid: {', '.join(types)} "
                          f"({items[:-1]} buffers; {also})")
    return name


def _spec(i: int, item, items: str, hp) -> ReplaySpec:
    if not isinstance(item, dict):
        raise ConfigError(f"replay_parameters[{i}]: each buffer must be an object, got {item!r}")
    name = _type_of(i, item, items)
    buffer = buffer_types(items)[name]
    where = f"replay_parameters[{i}] ({name})"
    settings = {key: value for key, value in item.items() if key not in buffer.keys}
    for key in settings:
        if not buffer.settings:
            raise ConfigError(f"{where}: unknown key {key!r}: valid: {', '.join(buffer.keys)}")
        if hp is not None and key not in hp:
            raise ConfigError(f"{where}: unknown key {key!r}: valid: {', '.join(buffer.keys)}, or a setting for "
                              f"this buffer alone (e.g. per_alpha)")
    for key in buffer.required:
        if key not in item:
            raise ConfigError(f"{where}: missing key {key!r}")
    values = {key: _value(where, key, value, *buffer.keys[key]) for key, value in item.items() if key not in settings}
    if values["sample_ratio"] > 1:
        raise ConfigError(f"{where}: sample_ratio must be <= 1, got {values['sample_ratio']!r}")
    values["type"] = name
    if buffer.settings:
        values["settings"] = settings
    return buffer.spec(**values)


def parse_replay_parameters(text: str | list, items: str = "sequences", hp=None) -> tuple[ReplaySpec, ...]:
    """The buffers of `replay_parameters` (a JSON list, or the list itself) holding `items` (transitions or
    sequences), in listed order; '' is `DEFAULTS[items]`. `hp`: the run's settings, which a transition buffer's own
    settings must name."""
    data = text if text != "" else DEFAULTS[items]
    if isinstance(text, str):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            try:
                data = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ConfigError(f"replay_parameters is not valid JSON: {exc}") from None
    if not isinstance(data, list | tuple):
        raise ConfigError(f"replay_parameters must be a list of buffers, got {type(data).__name__}")
    if not data:
        raise ConfigError("replay_parameters must list at least one buffer")
    specs = tuple(_spec(i, item, items, hp) for i, item in enumerate(data))
    total = sum(spec.sample_ratio for spec in specs)
    if abs(total - 1.0) > TOLERANCE:
        ratios = " + ".join(f"{spec.sample_ratio:g}" for spec in specs)
        raise ConfigError(f"replay_parameters: the sample_ratios must sum to 1, got {ratios} = {total:g}")
    return specs


def shares(specs: tuple[ReplaySpec, ...], batch_size: int) -> list[int]:
    """Each buffer's sequences per batch, batch_size * sample_ratio. elite_buffer_vtrace's learner refuses a share that
    is not a whole number ("Only whole number mini-batch size is allowed!"), and so does this, in one line; a share
    of zero (a buffer never sampled) is refused too."""
    counts = []
    for i, spec in enumerate(specs):
        share = batch_size * spec.sample_ratio
        k = round(share)
        if abs(share - k) > TOLERANCE * max(1, batch_size):
            raise ConfigError(f"replay_parameters[{i}] ({spec.type}): sample_ratio {spec.sample_ratio:g} of "
                              f"batch_rollouts {batch_size} is {share:g} sequences: a share must be a whole number "
                              f"of sequences (change sample_ratio or batch_rollouts)")
        if k == 0:
            raise ConfigError(f"replay_parameters[{i}] ({spec.type}): sample_ratio {spec.sample_ratio:g} of "
                              f"batch_rollouts {batch_size} is 0 sequences: raise it to at least {1 / batch_size:g}")
        counts.append(k)
    return counts


def fill_in_amount(spec: ReplaySpec, batch_size: int, training_fill_in_factor: float = 0.2) -> int:
    """The sequences a buffer must hold before training starts (elite_buffer_vtrace's fill-in rule).

    `standard`/`custom`: max(training_fill_in_factor * capacity, 10 * batch_size), rounded up, and at most the
    capacity: the published buffer also signals when it is full (so capacity 50 with batch_size 10 starts at 50), and
    compares `position % threshold == 0`, so a fractional threshold there only fires when the buffer fills; we take
    the first whole count at or above it. `queue`: its capacity, with no factor (the published queue signals when
    full).
    """
    if spec.type == "queue":
        return spec.capacity
    threshold = max(training_fill_in_factor * spec.capacity, 10 * batch_size)
    return min(spec.capacity, math.ceil(threshold - 1e-9))
