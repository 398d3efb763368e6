"""The PerfCIError family: every error a user can see, with its exit code and what to do."""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INFRASTRUCTURE = 3


class PerfCIError(Exception):
    """Base class. ``str(err)`` is one line: what went wrong and what to do about it."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} ({hint})")


class UsageError(PerfCIError):
    """Bad option, bad marker argument, bad call of the fixture."""

    exit_code = EXIT_USAGE


class BadInputError(PerfCIError):
    """A file perfci was asked to read is missing, unreadable, of another schema or another GPU."""

    exit_code = EXIT_USAGE


class InfrastructureError(PerfCIError):
    """A GPU, profiler or tool that the request needs is missing or failing."""

    exit_code = EXIT_INFRASTRUCTURE


class RegressionError(PerfCIError):
    """A benchmark regressed; raised inside the offending test only."""

    exit_code = EXIT_REGRESSION
