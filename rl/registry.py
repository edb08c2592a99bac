"""One Registry class and the seven registries that train.py assembles an agent from.

Modelled on tensor2tensor's `utils/registry.py`: register with a decorator (optional name, snake_case default),
duplicates are an error, and a miss lists the valid names with the closest match. The same definition registered again
(same module and qualified name: a notebook cell run twice, `importlib.reload`) replaces the old one with a warning.

A registry whose members are called in more than one way (`grad_comp`: a TD loss is not called as a policy-gradient
loss) has member kinds: each registration declares its kind and what else its callers need to know
(`register("td", kind="td", targets=td_targets, per_sample_error=True)`), kept beside the member and read with
`kind_of` and `declared`, so that nothing is told apart by attributes set on the function.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from rl.errors import ConfigError


def snake_case(name: str) -> str:
    """`DoubleTD` -> `double_td`, `ReplayMemory` -> `replay_memory`."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def closest(name: str, valid: list[str]) -> str:
    """A sentence naming the closest valid names, or all of them when nothing is close."""
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}? Valid: {', '.join(sorted(valid))}"
    return f"valid: {', '.join(sorted(valid))}"


def where_defined(obj) -> str:
    """`module.qualname` of a registered class or function (its repr for anything else)."""
    qualname = getattr(obj, "__qualname__", None)
    return f"{getattr(obj, '__module__', '?')}.{qualname}" if qualname else repr(obj)


def same_definition(old, new) -> bool:
    """Whether `new` is `old` defined again: the same module and qualified name, as when a notebook cell or
    `importlib.reload` runs the definition a second time. Lambdas do not count: every lambda of a scope is called
    `<lambda>`, so two of them under one key are two things."""
    qualname = getattr(new, "__qualname__", None)
    return (isinstance(qualname, str) and not qualname.endswith("<lambda>")
            and qualname == getattr(old, "__qualname__", None)
            and getattr(new, "__module__", None) == getattr(old, "__module__", None))


class RegistryError(ConfigError, KeyError):
    """A name that is not in a registry (or registered twice)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class Registry:
    """A named map from string keys to classes or functions, filled by the `register` decorator.

    `member_kinds`: the kinds a member must declare one of at registration (none: members take no kind);
    `declarations`: the other facts a registration may declare (`declared(name)` gives them back)."""

    def __init__(self, kind: str, member_kinds: tuple[str, ...] = (), declarations: tuple[str, ...] = ()):
        self.kind = kind
        self.member_kinds = member_kinds
        self.declarations = declarations
        self._items: dict[str, Any] = {}
        self._declared: dict[str, dict[str, Any]] = {}

    def register(self, name: str | Callable | None = None, *, kind: str | None = None, **declared):
        """Use as `@reg.register` or `@reg.register("name")`; the default key is the snake_case object name. In a
        registry with member kinds: `@reg.register("name", kind=..., **declared)`."""

        def add(obj, key: str | None = None):
            key = key or snake_case(obj.__name__)
            self._check_declaration(key, kind, declared)
            if key in self._items:
                old = self._items[key]
                if not same_definition(old, obj):
                    raise RegistryError(f"{self.kind} {key!r} is already registered (by {where_defined(old)}; "
                                        f"this one: {where_defined(obj)})")
                warnings.warn(f"{self.kind} {key!r} registered again by {where_defined(obj)}: the new definition "
                              f"replaces the old one (a notebook cell run again, or importlib.reload)", stacklevel=3)
            self._items[key] = obj
            self._declared[key] = {"kind": kind, **declared} if self.member_kinds else {}
            return obj

        if callable(name):
            return add(name)
        return lambda obj: add(obj, name)

    def _check_declaration(self, key: str, kind: str | None, declared: dict) -> None:
        """A registration's kind and declarations, refused in one line before anything is added."""
        if not self.member_kinds:
            if kind is not None or declared:
                raise RegistryError(f"{self.kind} {key!r}: a {self.kind} registration takes no kind or declarations "
                                    f"(got {', '.join(['kind'] * (kind is not None) + sorted(declared))})")
            return
        if kind not in self.member_kinds:
            got = "no kind" if kind is None else f"kind {kind!r}"
            raise RegistryError(f"{self.kind} {key!r} is registered with {got}: declare one, "
                                f"register({key!r}, kind=...), of {', '.join(self.member_kinds)}")
        unknown = sorted(set(declared) - set(self.declarations))
        if unknown:
            raise RegistryError(f"{self.kind} {key!r}: unknown declaration {', '.join(unknown)}: valid: "
                                f"{', '.join(self.declarations)}")

    def unregister(self, name: str) -> None:
        """Remove `name` (a test's temporary entry); an unknown name is a RegistryError."""
        self[name]  # a miss raises, naming the closest names
        del self._items[name]
        del self._declared[name]

    def kind_of(self, name: str) -> str | None:
        """The kind `name` was registered with (None in a registry without member kinds)."""
        return self.declared(name).get("kind")

    def declared(self, name: str) -> Mapping[str, Any]:
        """What the registration of `name` declared, its kind included (read-only)."""
        self[name]  # a miss raises, naming the closest names
        return MappingProxyType(self._declared[name])

    def names_of_kind(self, *kinds: str) -> list[str]:
        """The members registered with any of `kinds`, sorted."""
        return [name for name in self if self._declared[name].get("kind") in kinds]

    def __getitem__(self, name: str):
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(f"unknown {self.kind} {name!r}: {closest(name, list(self._items))}") from None

    get = __getitem__

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def names(self) -> list[str]:
        return sorted(self._items)


memory = Registry("memory")
hparams = Registry("hparams")
envs = Registry("envs")
models = Registry("models")
agents = Registry("agents")
act_select = Registry("act_select")
# the loss kinds, one call each: their contracts (what goes in, what comes back) are rl/grad_comp/contracts.py's
LOSS_KINDS = ("td", "policy_gradient", "vtrace", "actor_critic", "soft_actor_critic", "q_lambda")
# what a loss's registration may declare besides its kind: `targets`, a TD loss's hook computing its targets ahead;
# `per_sample_error`, whether its diagnostics hold `td_error` (True/False; undeclared: unknown until it runs);
# `distributional`, what of a distributional network it reads: True for C51's `log_probs` and `support`, or the name
# of the network's method (QR-DQN's "quantiles")
grad_comp = Registry("grad_comp", member_kinds=LOSS_KINDS,
                     declarations=("targets", "per_sample_error", "distributional"))

ALL = {r.kind: r for r in (memory, hparams, envs, models, agents, act_select, grad_comp)}
