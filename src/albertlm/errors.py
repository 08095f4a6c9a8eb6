"""Exceptions that carry a message meant for the user (the CLI prints them on one line)."""


class AlbertlmError(Exception):
    """Bad input or an impossible request; the message names the file, line or field."""


class ConfigError(AlbertlmError, ValueError):
    """An invalid configuration; the message names the offending field."""
