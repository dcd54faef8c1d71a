"""The error every ``gmpo-plugins`` command raises for a bad command-line value."""


class UsageError(Exception):
    """A bad command-line value: ``cli.main`` reports it in one line and exits with status 2."""
