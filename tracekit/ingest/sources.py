"""Finding trace files: paths, directories of ranks, and what their names say."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TraceFormatError
from tracekit.ingest.formats import is_trace_name

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_.]?(\d+)", re.IGNORECASE)
_STRIP = re.compile(r"(\.pt\.trace)?\.json(\.gz)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Source:
    """One input trace file and how the user named it."""

    path: Path
    from_directory: bool  # found by walking a directory (non-traces are skipped, not errors)


def discover(paths) -> list[Source]:
    """Expand files and directories into trace sources, in a stable order.

    Directories are walked recursively for ``*.json`` / ``*.json.gz``. A path
    that does not exist is an error naming it; so is an empty directory, one
    that cannot be read, and a symbolic link loop (each named as such). In a
    directory, a trace-named entry that cannot be read (a loop, a dangling
    link) is a source whose load task reports it, so the other files load.
    """
    out: list[Source] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        kind = _kind(path)
        if kind == "dir":
            found = sorted(
                p for p in _walk(path) if is_trace_name(p.name) and _listed(p) and not is_capture_side_file(p)
            )
            if not found:
                raise TraceFormatError(path, "directory holds no *.json or *.json.gz files")
            items = [Source(p, True) for p in found]
        elif kind == "file":
            items = [Source(path, False)]
        else:
            # Reading a FIFO or a device could block forever or never end.
            raise TraceFormatError(path, "not a regular file (a FIFO, device or socket): give a trace file")
        for item in items:
            key = _resolved(item.path)
            if key not in seen:
                seen.add(key)
                out.append(item)
    if not out:
        raise TraceFormatError("<inputs>", "no trace files given")
    return out


def _kind(path: Path) -> str:
    """ "dir", "file" or "other" for an input path; an error naming the cause when it cannot be read."""
    import errno
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceFormatError(path, "symbolic link loop (too many levels of symbolic links)") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise TraceFormatError(path, "permission denied") from None
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise TraceFormatError(path, "dangling symbolic link (its target does not exist)") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise TraceFormatError(path, "no such file or directory") from None
        raise TraceFormatError(path, f"cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        if not os.access(path, os.R_OK | os.X_OK):
            raise TraceFormatError(path, "directory cannot be read (permission denied)")
        return "dir"
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def _walk(folder: Path):
    """Every entry under ``folder`` (symbolic links to folders not followed, as ``Path.rglob``)."""
    import os

    def unreadable(exc: OSError) -> None:
        raise TraceFormatError(exc.filename or folder, f"directory cannot be read ({exc.strerror or exc})")

    for root, dirs, files in os.walk(folder, onerror=unreadable):
        dirs.sort()
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            yield Path(root) / name


def _listed(path: Path) -> bool:
    """Whether a trace-named entry of a directory is loaded: a regular file, or one that cannot be read (a
    link loop, a dangling link, no permission: its task names it); not a FIFO or a device."""
    import os
    import stat

    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return os.path.islink(path)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symbolic link loop
        return path.absolute()


def is_capture_side_file(path: Path) -> bool:
    """A file ``tracekit capture`` writes beside its traces (``NAME.key_averages.json``, the
    run's ``manifest.json``): not a trace, so a directory walk skips it without a warning."""
    if path.name.endswith(".key_averages.json"):
        return True
    if path.name == "manifest.json" and path.stat().st_size < (1 << 20):
        try:
            import json

            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and "label_scheme" in data and "traceEvents" not in data
    return False


def rank_from_name(path: Path) -> int | None:
    """Rank written in a file or directory name (``rank3``, ``rank-0003``), if any."""
    for part in reversed(path.parts):
        match = _RANK_IN_NAME.search(part)
        if match:
            return int(match.group(1))
    return None


def trace_labels(paths: list[Path]) -> list[str]:
    """Short, unique display names: the file name without its trace suffixes.

    When two files share a name (one directory per rank), the shortest
    distinguishing tail of their paths is used instead.
    """

    def label(path: Path, depth: int) -> str:
        parts = list(path.parts[-depth:])
        parts[-1] = _STRIP.sub("", parts[-1]) or parts[-1]
        return "/".join(parts)

    depth = {path: 1 for path in paths}
    for _ in range(64):
        labels = [label(path, depth[path]) for path in paths]
        shared = {shown for shown, uses in Counter(labels).items() if uses > 1}
        if not shared:
            return labels
        for path, shown in zip(paths, labels):
            if shown in shared and depth[path] < len(path.parts):
                depth[path] += 1
    return [str(path) for path in paths]
