"""tracekit: static analysis of PyTorch profiler (Kineto / Chrome-JSON) traces.

``tracekit.load(paths)`` reads traces into a DuckDB database and returns a
``Trace``; ``Trace.sql(...)`` and ``Trace.query(...)`` answer with a ``Result``
(``.pl()``, ``.arrow()``, ``.df()``, ``.fetchall()``). The analyzer's
dependencies are imported lazily so that ``tracekit.capture`` (which needs
only torch) works on machines without them.
"""

__version__ = "0.1.0"

__all__ = ["load", "open", "Trace", "Result", "TracekitError", "__version__"]


def __getattr__(name):
    if name in ("load", "open", "Trace"):
        from tracekit import api

        return getattr(api, name)
    if name == "Result":
        from tracekit.result import Result

        return Result
    if name == "TracekitError":
        from tracekit.errors import TracekitError

        return TracekitError
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
