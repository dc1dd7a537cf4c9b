"""Exception hierarchy: everything sapporo raises derives from :class:`SapporoError`."""

from __future__ import annotations


class SapporoError(Exception):
    """Base class of every error raised by sapporo."""


class InputError(SapporoError, ValueError):
    """An argument has the wrong shape, dtype, length or value (the message names it)."""


class ConfigError(SapporoError, ValueError):
    """A ``SAPPORO_*`` environment variable or a configuration file is malformed."""


class BackendError(SapporoError, RuntimeError):
    """No usable compute backend or device, or a device operation failed."""


class BuildError(BackendError):
    """A kernel failed to compile; the message carries the options and the compiler log.

    Attributes
    ----------
    options : list of str
        The compiler options used.
    log : str
        The compiler log.
    source_path : str or None
        Where the exact source that failed was saved.
    """

    def __init__(self, message: str, options: list[str], log: str, source_path: str | None):
        super().__init__(message)
        self.options = options
        self.log = log
        self.source_path = source_path


class NonFiniteError(SapporoError, ArithmeticError):
    """A force result is not finite (e.g. coincident particles with eps2 = 0)."""
