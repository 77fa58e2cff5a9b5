"""Writing outputs so that they never destroy what was there.

Every file tracekit writes (a database, a cache entry, a report, an export,
``-o`` of query/sql) goes through here: it is written to a temporary file
in the target's folder and renamed over the target only when complete, so
a failure (disk full, file too large, a kill) leaves the previous file as
it was. Targets that are not regular files (``/dev/null``, a FIFO) and the
inputs of the same command are refused. Temporary names carry the host and
process id, so the leftovers of a killed process are removed by the next
run that writes into the same folder (the part files of a killed
``load --jobs`` included).
"""

from __future__ import annotations

import contextvars
import ctypes
import errno
import os
import re
import shutil
import socket
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tracekit.errors import TracekitError

_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname() or "host")
# .NAME.tk-HOST-PID-RANDOM.tmp, what DuckDB adds to it (.wal, and a .tmp spill folder), and the
# folder of a load's parts (.parts: parallel.build_file).
_TEMP = re.compile(r"^\..*\.tk-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)-[0-9a-f]{8}\.tmp(\.wal|\.tmp|\.parts)?$")
_STAGE = re.compile(r"^tracekit-stage-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)-")
SPACE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def temp_name(target: Path) -> Path:
    """A fresh temporary name beside ``target``, tagged with this host and process."""
    return target.with_name(f".{target.name}.tk-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def stage_prefix() -> str:
    """Prefix of a staging folder in TMPDIR (``ingest``), tagged like ``temp_name``."""
    return f"tracekit-stage-{_HOST}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def clean_leftovers(folder: Path, pattern: re.Pattern = _TEMP, mine: bool = False) -> list[Path]:
    """Remove what dead tracekit processes of this host left in ``folder`` (with ``mine``, this process's
    too: an interrupted command's last cleanup); return what went."""
    gone: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return gone
    for entry in entries:
        m = pattern.match(entry.name)
        if not m or m["host"] != _HOST:
            continue
        if _alive(int(m["pid"])) and not (mine and int(m["pid"]) == os.getpid()):
            continue
        path = Path(entry.path)
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path)
            else:
                path.unlink()
            gone.append(path)
        except OSError:
            pass  # another process cleaned it, or not ours to remove
    return gone


def clean_staging(tmp_dir: str | None = None, mine: bool = False) -> list[Path]:
    """Remove staging folders that killed loads left in TMPDIR (with ``mine``, this process's too)."""
    import tempfile

    return clean_leftovers(Path(tmp_dir or tempfile.gettempdir()), _STAGE, mine)


def target(path, inputs: Iterable = ()) -> Path:
    """Check that ``path`` may be written: refuse non-regular files and the inputs themselves.

    A symbolic link is followed: the file it points to is replaced, the link stays.
    """
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise TracekitError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
            raise TracekitError(f"{path}: is {kind}; tracekit writes only regular files")
        for item in inputs:
            try:
                if os.path.samefile(item, path):
                    raise TracekitError(f"{path}: is an input of this command; write the output to another file")
            except OSError:
                continue
    if not path.parent.is_dir():
        raise TracekitError(f"{path}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise TracekitError(f"{path}: cannot write into {path.parent} (permission denied)")
    return path


def space_error(path: Path, exc: BaseException, what: str = "writing") -> TracekitError:
    """The one-line error of a full disk or a too-large file."""
    reason = getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0]
    return TracekitError(f"{path}: {what} failed: {reason}; nothing was replaced (free space in {path.parent})")


def is_space_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
        return True
    text = str(exc).lower()
    return "no space left" in text or "file too large" in text or "disk quota" in text


# The targets this context may create but not replace (``create_only``: ``load -o`` without --force).
_CREATE_ONLY: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "tracekit_create_only", default=frozenset()
)


@contextmanager
def create_only(path) -> Iterator[None]:
    """Within the block, ``path`` is created but never replaced: "exists" is decided at the rename.

    ``load -o X`` without --force checks that X does not exist before it starts,
    but another process may create X meanwhile; the final step then links the
    new file into place (``os.link`` fails when the name exists), so of several
    loads to one new name exactly one wins and the others end with "already exists".
    """
    key = os.path.abspath(path)
    token = _CREATE_ONLY.set(_CREATE_ONLY.get() | {key})
    try:
        yield
    finally:
        _CREATE_ONLY.reset(token)


def exists_error(path) -> TracekitError:
    return TracekitError(f"{path}: already exists (use --force to replace it)")


def _publish(tmp: Path, path: Path) -> None:
    """Give ``tmp`` the permissions a new file gets (umask) and rename it to ``path`` (link it there, for
    a ``create_only`` target: an existing ``path`` is then an error, decided atomically)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    if os.path.abspath(path) in _CREATE_ONLY.get():
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise exists_error(path) from None
        except OSError:  # a file system without hard links: checked, then renamed (not atomic there)
            if os.path.lexists(path):
                raise exists_error(path) from None
            os.replace(tmp, path)
            return
        os.unlink(tmp)
        return
    os.replace(tmp, path)


def _named(exc: BaseException, tmp: Path, path: Path) -> BaseException:
    """``exc`` as a one-line error naming ``path`` when its message names the temporary file ``tmp``."""
    if isinstance(exc, TracekitError) or str(tmp) not in str(exc):
        return exc
    first = str(exc).strip().splitlines()[0].replace(str(tmp), str(path))
    return TracekitError(f"{path}: cannot write it: {first}")


@contextmanager
def replacing(path, inputs: Iterable = ()) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed to ``path``.

    For writers that want a file name (DuckDB, Parquet). On any error the
    temporary file (and DuckDB's .wal / spill folder) is removed and ``path``
    is left as it was.
    """
    path = target(path, inputs)
    clean_leftovers(path.parent)
    tmp = temp_name(path)
    try:
        yield tmp
        if not tmp.exists():
            raise TracekitError(f"{path}: nothing was written")
        _publish(tmp, path)
    except Exception as exc:  # OSError, or DuckDB's IOException naming the temporary file
        if is_space_error(exc):
            raise space_error(path, exc) from None
        named = _named(exc, tmp, path)
        if named is not exc:
            raise named from None
        raise
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
        shutil.rmtree(tmp.with_name(tmp.name + ".tmp"), ignore_errors=True)


def write(path, write_to: Callable[[BinaryIO], None], inputs: Iterable = ()) -> Path:
    """Run ``write_to(binary_file)`` into a temporary file beside ``path``, then rename it to ``path``."""
    path = target(path, inputs)
    with replacing(path, inputs) as tmp:
        try:
            with open(tmp, "xb") as fh:
                write_to(fh)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and not tmp.exists():
                raise TracekitError(f"{path}: cannot write there ({exc.strerror or exc})") from None
            raise
    return path


def write_text(path, text: str, inputs: Iterable = ()) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    data = text.encode("utf-8")

    def put(fh: BinaryIO) -> None:
        fh.write(data)

    return write(path, put, inputs)


# ---- folders (a Parquet dataset): built beside, swapped in whole ------------------------------

_RENAME_EXCHANGE = 2  # renameat2(2)'s flag: swap two names atomically (Linux 3.15+)
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step; False where the system cannot (then rename twice)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive flock on ``folder`` itself (no lock file): one swap at a time into it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock: the renames alone
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise  # else a file system without flock (some network ones): the renames alone
        yield
    finally:
        os.close(fd)


def publish_folder(work: Path, path: Path, force: bool, replaceable: Callable[[Path], bool], what: str) -> None:
    """Put the complete folder ``work`` (built beside ``path``) at ``path``.

    Decided under a lock on the parent folder, at the swap, so concurrent
    writers cannot both see "not there": a missing or empty ``path`` is
    taken; an existing one only with ``force`` and when ``replaceable(path)``
    (else "use --force", or "not ``what``"). The old folder is swapped out
    in one step (``renameat2``) and then removed, so ``path`` is never missing
    nor half written.
    """
    path = Path(path)
    with _folder_lock(path.parent):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and not any(os.scandir(path)):
            os.rmdir(path)
            st = None
        if st is None:
            os.rename(work, path)
            return
        if not force:
            raise exists_error(path)
        if not stat.S_ISDIR(st.st_mode) or not replaceable(path):
            raise TracekitError(f"{path}: not {what}; --force replaces only {what}")
        if not _exchange(work, path):
            old = temp_name(path)
            os.rename(path, old)
            os.rename(work, path)
            work = old
    shutil.rmtree(work, ignore_errors=True)  # the old folder, now at the temporary name
