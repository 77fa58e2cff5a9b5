"""Imports started on a background thread while DuckDB works.

DuckDB releases the GIL while a statement runs, so a module imported on
another thread meanwhile costs the critical path nothing. The module that
will need the imports names them (``link`` the sweep's, ``humanize`` rich);
Python's import lock makes a later ``import`` of the same module wait for
the thread instead of importing it twice.
"""

from __future__ import annotations

import contextlib
import importlib
import threading

_started: dict[tuple[str, ...], threading.Thread] = {}


def imports(*modules: str) -> None:
    """Start importing ``modules`` on a daemon thread (once per list)."""
    if modules not in _started:
        thread = threading.Thread(target=_import, args=modules, name=f"tracekit-import-{modules[0]}", daemon=True)
        _started[modules] = thread
        thread.start()


def wait(*modules: str) -> None:
    """Wait for ``imports(*modules)`` to finish, if it was started."""
    thread = _started.get(modules)
    if thread is not None:
        thread.join()


def _import(*modules: str) -> None:
    for module in modules:
        # A failed import is left for the caller's own import to report.
        with contextlib.suppress(Exception):
            importlib.import_module(module)
