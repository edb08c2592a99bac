"""User-facing errors: what train.py (and `rl.make`) reports in one line, exit status 2.

`ConfigError` is bad input the user can fix before a run starts (a name, a setting, a flag, a run folder).
`RunStopped` is a run that cannot go on (a non-finite loss or weight, an env whose `step` raised, a full disk, a worker
that keeps failing): its one line says what happened and which checkpoint is kept; nothing broken was saved.
"""


class ConfigError(Exception):
    """Raised for anything the user can fix: a bad name, setting, value, flag or run folder."""


class RunStopped(ConfigError):
    """A run ended by what it met while training (not a signal): its last good checkpoint stays, none newer is
    written of a broken state."""


class FolderBusy(ConfigError):
    """The run folder is owned by another live process (its lock is held)."""


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception in one line for a one-line error: the first line of its message (at most `limit` characters), or
    its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
