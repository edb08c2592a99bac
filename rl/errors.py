"""User-facing errors: bad input that train.py reports in one line and exits with status 2."""


class ConfigError(Exception):
    """Raised for anything the user can fix: a bad name, setting, value, flag or run folder."""


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """An exception in one line for a one-line error: the first line of its message (at most `limit` characters), or
    its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0][:limit] if text else type(exc).__name__
