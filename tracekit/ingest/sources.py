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
    that does not exist is an error naming it; so is an empty directory.
    """
    out: list[Source] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and is_trace_name(p.name) and not is_capture_side_file(p)
            )
            if not found:
                raise TraceFormatError(path, "directory holds no *.json or *.json.gz files")
            items = [Source(p, True) for p in found]
        elif path.is_file():
            items = [Source(path, False)]
        elif path.exists():
            # Reading a FIFO or a device could block forever or never end.
            raise TraceFormatError(path, "not a regular file (a FIFO, device or socket): give a trace file")
        else:
            raise TraceFormatError(path, "no such file or directory")
        for item in items:
            key = item.path.resolve()
            if key not in seen:
                seen.add(key)
                out.append(item)
    if not out:
        raise TraceFormatError("<inputs>", "no trace files given")
    return out


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
