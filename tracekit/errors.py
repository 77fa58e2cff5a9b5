"""Exceptions raised by tracekit.

The library raises these; the CLI turns each into a one-line ``Error: ...``
message and a non-zero exit in one place (``tracekit.cli``).
"""


class TracekitError(Exception):
    """Base class of every error tracekit raises on purpose."""


class TraceFormatError(TracekitError):
    """An input file is missing, unreadable or not a usable Kineto/Chrome trace."""

    def __init__(self, path, problem):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class NotATraceError(TraceFormatError):
    """A JSON file that holds no trace events (e.g. a manifest beside traces)."""


class QueryError(TracekitError):
    """A named query is unknown, malformed, or failed to run."""


class ParameterError(QueryError):
    """A query parameter is undeclared, missing, or of the wrong type."""


def first_line(exc: BaseException) -> str:
    """An exception's first line, for a one-line report; its type's name when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
