"""tracekit: static analysis of PyTorch profiler (Kineto / Chrome-JSON) traces.

``tracekit.load(paths)`` reads traces into a DuckDB database and returns a
``Trace``; ``Trace.sql(...)`` and ``Trace.query(...)`` answer with a ``Result``
(``.pl()``, ``.arrow()``, ``.df()``, ``.fetchall()``). The analyzer's
dependencies are imported lazily so that ``tracekit.capture`` (which needs
only torch) works on machines without them.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"


def _is_the_command() -> bool:
    """Whether this process is the ``tracekit`` command (``python -m tracekit``, or the console script)."""
    command = list(getattr(_sys, "orig_argv", []))
    if "-m" in command:
        return command[command.index("-m") + 1 : command.index("-m") + 2] == ["tracekit"]
    return _os.path.basename(_sys.argv[0] if _sys.argv else "") == "tracekit"


if _is_the_command():
    # The tracekit command (python -m tracekit, or the console script) as it starts: Ctrl-C while its
    # modules import ends it as at any later moment (cli.run then takes SIGINT over), not in a traceback.
    import signal as _signal

    def _interrupted_at_start(signum, frame):
        _sys.stderr.write("\nInterrupted.\n")
        _sys.stderr.flush()
        _os._exit(130)

    _signal.signal(_signal.SIGINT, _interrupted_at_start)

if _os.environ.get("TRACEKIT_WORKER_OF"):  # a load's worker process: it dies with its parent (common/lifeline)
    from tracekit.common import lifeline as _lifeline

    _lifeline.arm_from_environment()


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
