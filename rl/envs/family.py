"""Env families: what the `envs` registry holds, and how a run's settings pick one.

A family is a subclass of `EnvFamily` registered under its `env_type` name, and owns everything about its ids:

    @envs.register("atari")
    class AtariFamily(EnvFamily):
        @classmethod
        def claims(cls, env_id): ...    # optional: ids that select this family whatever the set's env_type says
        @classmethod
        def check(cls, hp): ...         # is hp.env one of ours? Otherwise a one-line ConfigError
        @classmethod
        def make(cls, hp, num_envs, render_mode=None, vector_mode=None): ...  # the vector env

`resolve_env(hp)` is all that settings resolution knows of envs, so a new family needs no edit outside its own file.
"""

from __future__ import annotations

from rl.errors import ConfigError
from rl.registry import envs


class EnvFamily:
    """The interface of an `envs` registry entry (classes, not instances: every method is a classmethod)."""

    @classmethod
    def claims(cls, env_id: str) -> bool:
        """True for ids that only this family can run (Atari's `PongNoFrameskip-v4`): such an id sets `env_type`."""
        return False

    @classmethod
    def check(cls, hp) -> None:
        """Raise a one-line ConfigError unless `hp.env` is an id this family can make."""

    @classmethod
    def make(cls, hp, num_envs: int, render_mode: str | None = None, vector_mode: str | None = None):
        """A gymnasium vector env of `num_envs` copies of `hp.env`, with this family's settings from `hp`."""
        raise NotImplementedError


def resolve_env(hp) -> None:
    """Pick the family of `hp.env` and let it check the id: a family that claims the id becomes `env_type` (the set's
    own family wins if it claims it too); then `envs[env_type]` must exist and accept `hp.env`."""
    claimants = [name for name in envs if envs[name].claims(hp.env)]
    if claimants and hp.env_type not in claimants:
        if len(claimants) > 1:
            raise ConfigError(f"env {hp.env!r} is claimed by the env families {' and '.join(claimants)}: set "
                              f"env_type to one of them")
        hp.env_type = claimants[0]
    envs[hp.env_type].check(hp)
