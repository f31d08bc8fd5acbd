"""Errors that radT reports to the user in one line, without a traceback."""


class RadtError(Exception):
    """An error with a one-line, actionable message."""

    exit_code = 2


class UsageError(RadtError):
    """Bad input on the command line or in a plan."""


class TrackingUnreachable(RadtError):
    """The tracking server does not answer."""
