"""Errors raised by the capture library, and the lazy import of optional dependencies.

The command line turns every `CaptureError` into a single ``Error: ...`` line, so
messages are one line and say what to do next.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class CaptureError(Exception):
    """Base class for errors the capture command reports without a traceback."""


class MissingDependencyError(CaptureError, ImportError):
    """A package capture needs (torch, transformers) is not installed."""


class UnavailableError(CaptureError):
    """An attention implementation cannot run on this device, torch build or input."""

    def __init__(self, impl: str, reason: str) -> None:
        self.impl = impl
        self.reason = one_line(reason)
        super().__init__(f"{impl}: {self.reason}")


_INSTALL_HINTS = {
    "torch": "pip install torch (or pip install 'tracekit-attn[capture]')",
    "transformers": "pip install transformers",
}


def require(module: str) -> ModuleType:
    """Import `module` or raise `MissingDependencyError` naming the install command.

    Capture imports torch and transformers here, at first use, rather than at import
    time, so that `import capture` and `python -m capture --help` work without them.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            # The package is there but one of its own imports failed: say so instead of
            # telling the user to install what they already have.
            raise MissingDependencyError(f"importing {module} failed: {one_line(str(exc))}") from exc
        hint = _INSTALL_HINTS.get(top, f"pip install {top}")
        raise MissingDependencyError(f"{top} is not installed; capture needs it: {hint}") from exc


def one_line(text: str, limit: int = 300) -> str:
    """Collapse `text` to one line of at most `limit` characters for error output."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
