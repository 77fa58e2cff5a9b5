"""tracekit: static analysis of PyTorch profiler (Kineto / Chrome-JSON) traces.

``tracekit.load(paths)`` reads traces into a DuckDB database and returns a
``Trace``; ``Trace.sql(...)`` and ``Trace.query(...)`` answer with a ``Result``
(``.pl()``, ``.arrow()``, ``.df()``, ``.fetchall()``). The analyzer's
dependencies are imported lazily so that ``tracekit.capture`` (which needs
only torch) works on machines without them.
"""

__version__ = "0.1.0"

__all__ = ["load", "open", "Trace", "Result", "TracekitError", "__version__", "report", "diff", "export", "dataset"]

# The modules the README names after ``import tracekit``, imported on first use (``import tracekit`` stays
# cheap): ``tracekit.report.build(...)``, ``tracekit.diff.compare(...)``, ``tracekit.export.export_perfetto(...)``,
# ``tracekit.dataset.build(...)``.
MODULES = {
    "report": "tracekit.analysis.report",
    "diff": "tracekit.diff",
    "export": "tracekit.present.export",
    "dataset": "tracekit.store.dataset",
}


def __getattr__(name):
    import importlib
    import importlib.util

    if name in MODULES:
        module = importlib.import_module(MODULES[name])
        if name != "diff":  # tracekit.diff is the submodule itself (the import set it)
            globals()[name] = module
        return module
    if not name.startswith("_") and importlib.util.find_spec(f"tracekit.{name}") is not None:
        return importlib.import_module(f"tracekit.{name}")  # a subpackage: tracekit.analysis.report.build(...)
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
