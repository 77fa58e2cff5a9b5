"""Locks between tracekit processes that build or link the same database.

Several processes may query one trace at once (a notebook and a shell, a
job array). Two kinds of work must happen once: building the cached
database of a raw trace, and linking a database on first use. Each runs
under an exclusive ``flock``; the others wait (``waiting`` shows a status
line) and then find the work done. Readers take no lock: the linked
database is built into a copy and renamed over the file, so a query that
needs no linked table never waits and never sees a half-built file.

``TRACEKIT_LOCK_TIMEOUT`` (seconds, default 1800) bounds the wait.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tracekit.errors import TracekitError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; the copy-and-rename still keeps readers safe
    fcntl = None  # type: ignore[assignment]

DEFAULT_TIMEOUT = 1800.0
_POLL = 0.05


def timeout() -> float:
    """Seconds to wait for another process's build or link: $TRACEKIT_LOCK_TIMEOUT or 1800."""
    raw = os.environ.get("TRACEKIT_LOCK_TIMEOUT")
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise TracekitError(f"TRACEKIT_LOCK_TIMEOUT={raw!r}: expected a number of seconds (e.g. 600)")
    return value


def _acquire(fd: int, path: Path, what: str, waiting: Callable[[float], None] | None, limit: float) -> bool:
    """Take an exclusive flock on ``fd``; False when this file system has no flock."""
    if fcntl is None:
        return False
    start = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                return False  # e.g. some network file systems: go on unlocked (renames still keep readers safe)
            raise
        waited = time.monotonic() - start
        if waited > limit:
            raise TracekitError(
                f"{path}: another tracekit process has been {what} for {waited:.0f} s; gave up waiting "
                "(retry later, or raise TRACEKIT_LOCK_TIMEOUT)"
            )
        if waiting is not None:
            waiting(waited)
        time.sleep(min(_POLL * (1 + waited), 0.5))


@contextmanager
def exclusive(lock_file: Path, what: str, waiting: Callable[[float], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock named by ``lock_file`` (created if needed; left in place, empty).

    ``what`` says what the holder does ("building the cache entry"), for the
    timeout message; ``waiting(seconds)`` is called while another process holds it.
    """
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _acquire(fd, lock_file, what, waiting, timeout())
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def exclusive_file(path: Path, what: str, waiting: Callable[[float], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` itself, as it is named when the lock is taken.

    A holder may rename a new file over ``path``; a waiter that then gets the
    lock of the old file notices and locks the new one instead. No lock file
    is left beside the user's database. DuckDB's own locks (fcntl) are
    independent of flock.
    """
    limit = timeout()
    start = time.monotonic()
    while True:
        fd = os.open(path, os.O_RDONLY)
        try:
            remaining = max(0.0, limit - (time.monotonic() - start))
            locked = _acquire(fd, path, what, waiting, remaining)
            if locked and os.fstat(fd).st_ino != os.stat(path).st_ino:
                continue  # replaced while we waited: lock the new file
            yield
            return
        finally:
            os.close(fd)
