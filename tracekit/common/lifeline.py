"""Worker processes that end with the tracekit process that started them.

``load --jobs`` and ``--parquet`` run their tasks in a pool of worker
processes, ``--dask local:N`` in a local cluster's. Killed with SIGKILL, the
parent cannot stop them, and they (and the resource tracker they share) kept
running and held the caller's stdout and stderr open. So every worker asks
the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG`` on Linux;
elsewhere a thread watches the parent), as early as it can: a worker started
inside ``workers_die_with_me`` (or a Dask worker given ``spawn_environ``
and this module as its preload) does it when it first imports ``tracekit``
(``TRACEKIT_WORKER_OF`` in its environment names the parent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

ENV = "TRACEKIT_WORKER_OF"
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies
_armed = False


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` ends, even by SIGKILL (once per process)."""
    global _armed
    if _armed:
        return
    done = False
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            done = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            done = False
    if os.getppid() != parent:  # already gone before the request took effect
        os._exit(1)
    if not done:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(1)

        threading.Thread(target=watch, name="tracekit-parent-watch", daemon=True).start()
    _armed = True


def worker_init(parent: int) -> None:
    """A pool worker's initializer: die with ``parent``; Ctrl-C is the parent's to handle (it stops the
    pool; a terminal sends SIGINT to the whole process group)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


def arm_from_environment() -> None:
    """In a process started inside ``workers_die_with_me``: die with the parent named by ``TRACEKIT_WORKER_OF``."""
    try:
        parent = int(os.environ.get(ENV, ""))
    except ValueError:
        return
    if os.getppid() == parent:
        die_with_parent(parent)


def dask_setup(worker=None) -> None:
    """Dask's preload hook (``distributed.worker.preload``): a local cluster's worker dies with the parent."""
    arm_from_environment()


def spawn_environ() -> dict[str, str]:
    """The environment a worker process needs to die with this one (for a spawner that takes one: Dask's)."""
    return {ENV: str(os.getpid())}


@contextlib.contextmanager
def workers_die_with_me() -> Iterator[None]:
    """Within: the processes this process starts die with it (from their first ``import tracekit``)."""
    # The resource tracker (started with the pool's first semaphore) cleans up what killed workers left;
    # its warnings about it are no news to a user who pressed Ctrl-C.
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    saved = {name: os.environ.get(name) for name in (ENV, "PYTHONWARNINGS")}
    os.environ[ENV] = str(os.getpid())
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [saved["PYTHONWARNINGS"], quiet]))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
