"""Ctrl-C, remembered for the whole process.

The ``tracekit`` command's SIGINT handler raises ``KeyboardInterrupt`` and notes it here
(``note``). A library may catch that exception on the way (distributed can, while a local
Dask cluster starts); a load checks again before it writes anything (``check``), so an
interrupted load never goes on to write its output.
"""

from __future__ import annotations

_seen = False


def note() -> None:
    """Ctrl-C came (the command's signal handler)."""
    global _seen
    _seen = True


def seen() -> bool:
    """Whether Ctrl-C came in this process."""
    return _seen


def check() -> None:
    """Raise ``KeyboardInterrupt`` when Ctrl-C came, even if something caught it since."""
    if _seen:
        raise KeyboardInterrupt
