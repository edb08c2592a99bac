"""User-facing errors: bad input that train.py reports in one line and exits with status 2."""


class ConfigError(Exception):
    """Raised for anything the user can fix: a bad name, setting, value, flag or run folder."""
