"""Errors that radT reports to the user in one line, without a traceback."""


class RadtError(Exception):
    """An error with a one-line, actionable message."""

    exit_code = 2


class UsageError(RadtError):
    """Bad input on the command line or in a plan."""


class TrackingUnreachable(RadtError):
    """The tracking server does not answer."""


class AnalysisError(RadtError):
    """A question the analysis cannot answer (no such experiment or run, no store, too many
    samples to load, a bad argument); a notebook gets it as it is, the command line as one line."""
