"""Reading trace files: cut the events array out of a trace without parsing it.

A Kineto trace is one JSON object whose ``traceEvents`` array holds almost all
of the bytes. Parsing the whole object in Python (or as one DuckDB JSON value)
is the slow path: it holds every event as an object at once, many times the
file's size in memory, and takes far longer than the parse of its parts below.
Instead we stream the file once: the small keys before the array are parsed
with ``json``, the array's bytes are copied into part files of about
``PART_BYTES`` each (split between two events, so DuckDB can read the parts
in parallel), and the keys after the array are parsed from the tail. An
uncompressed file is not streamed through Python: its tail and one block at
each split point are read, and the kernel copies the bytes between them
(``_stage_plain``, ``os.copy_file_range``).

Splitting and the end of the array are found by cheap byte searches, not by
a full parse; DuckDB's parse of the parts validates them. If that parse fails,
``stage_exact`` re-stages the file with an exact (slow) parse, which either
succeeds or reports the JSON error with its line and column.

The parts are parsed by one of two SELECTs, both the SQL module
``ingest/read/events`` (``tracekit/ingest/sql/read/``; Python only binds its
values: the files, ``EVENT_SPEC``, the centers of ts). ``typed_sql`` parses
each event once, straight into typed columns (``read_json`` with ``columns``):
the fast path, but ``read_json`` silently skips keys it was not given, and
nothing a user loaded may be dropped. ``select_sql`` reads each event as JSON
text, types it and checks its keys (three parses): exact whatever the input.
The typed read is kept only when a count proves it dropped nothing: staging
counts the ``:`` bytes of the parts (``count_colons``; an uncompressed file's
parts are copied and counted two at a time), every key of every event is
followed by one, and the typed read's ``_colons`` column accounts for them key
by key (see ``ingest/read/typed_rows``). When the two sums differ (a key
``EVENT_SPEC`` does not name, a known key holding ``null``) or the typed read
fails (a value of the wrong type, an element that is not an object, a
duplicate key), ``ingest`` reads the parts again with ``select_sql``.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.common import sqlmodules
from tracekit.errors import NotATraceError, TraceFormatError
from tracekit.schema import fields

BLOCK_BYTES = 4 << 20
PART_BYTES = 32 << 20
STAGE_THREADS = 2  # parts of an uncompressed file copied (and counted) at once
# Keys before traceEvents are small in practice; past this the file is
# treated as malformed rather than buffered without bound.
MAX_HEAD_BYTES = 256 << 20
# How many non-matching "]" to scan past once a candidate end of the events
# array was found (arrays of later top-level keys end in "]" too).
_TAIL_PATIENCE = 256

_WHITESPACE = " \t\n\r"
_SPLIT = re.compile(rb"\}\s*,\s*\{")
_DECODER = json.JSONDecoder()


@dataclass
class StagedTrace:
    """One input file whose events now sit in JSON-array part files."""

    path: Path
    form: str  # "object" (Kineto) or "array" (bare Chrome array)
    header: dict = field(default_factory=dict)  # top-level keys except traceEvents
    parts: list[Path] = field(default_factory=list)
    body_bytes: int = 0  # bytes of the events array as written in the file
    exact: bool = False  # staged by the slow exact parser
    # ':' bytes in the parts (count_colons): what proves the typed read dropped no key. None: not
    # counted (the typed read is not tried), or a \u003 escape could write a ':' the count misses.
    colons: int | None = None
    # Whether the parts may hold the legacy args key "external id" (_Scan.legacy): the typed read
    # looks it up only then. True unless staging's scan of the bytes proved otherwise.
    legacy_ids: bool = True


def open_stream(path: Path):
    """Open ``path`` for binary reading, decompressing gzip transparently."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise TraceFormatError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror or exc}") from None
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    return fh


def _read(stream, path: Path, n: int) -> bytes:
    try:
        return stream.read(n)
    except EOFError:
        raise TraceFormatError(path, "truncated gzip stream (the file ends before the compressed data does)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceFormatError(path, f"corrupt gzip data ({exc})") from None
    except OSError as exc:
        raise TraceFormatError(path, f"read error: {exc}") from None


_WS_RUN = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, i: int) -> int:
    """The index of the first non-whitespace character at or after ``i`` (a regex: C speed, for hostile runs
    of white space hundreds of MB long)."""
    match = _WS_RUN.match(text, i)  # (always matches: the run may be empty)
    return match.end() if match else i


class _NeedMore(Exception):
    """The head of the file is incomplete in the buffer read so far."""


_TOO_DEEP = "JSON nested too deeply (arrays or objects hundreds of levels deep)"


def _json_error(path: Path, text: str, exc: json.JSONDecodeError, offset: int = 0) -> TraceFormatError:
    # Report the position in the whole file, not in our buffer.
    line = text.count("\n", 0, exc.pos) + 1
    return TraceFormatError(path, f"invalid JSON near byte {offset + exc.pos} (line {line} of the header): {exc.msg}")


def _parse_head(text: str, at_eof: bool, path: Path):
    """Parse up to the opening ``[`` of the events array.

    Returns ``(form, header, index_after_bracket)``; raises ``_NeedMore`` when
    the buffer ends first and more data exists.
    """
    i = _skip_ws(text, 0)
    if text.startswith("\ufeff", i):
        i = _skip_ws(text, i + 1)
    if i >= len(text):
        if at_eof:
            raise TraceFormatError(path, "empty file")
        raise _NeedMore
    first = text[i]
    if first == "[":
        return "array", {}, i + 1
    if first != "{":
        raise TraceFormatError(path, f"not JSON: the file starts with {text[i : i + 20]!r}")
    i += 1
    header: dict = {}
    try:
        while True:
            i = _skip_ws(text, i)
            if i >= len(text):
                raise IndexError
            if text[i] == "}":
                raise NotATraceError(path, "JSON without events: no 'traceEvents' array")
            if text[i] != '"':
                raise json.JSONDecodeError("expected a quoted key", text, i)
            key, i = _DECODER.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i] != ":":
                raise json.JSONDecodeError("expected ':'", text, i)
            i = _skip_ws(text, i + 1)
            if key == "traceEvents":
                if text[i] != "[":
                    raise TraceFormatError(path, f"'traceEvents' is not an array (starts with {text[i : i + 20]!r})")
                return "object", header, i + 1
            header[key], i = _DECODER.raw_decode(text, i)
            i = _skip_ws(text, i)
            if text[i] == ",":
                i += 1
            elif text[i] == "}":
                raise NotATraceError(path, "JSON without events: no 'traceEvents' array")
            else:
                raise json.JSONDecodeError("expected ',' or '}'", text, i)
    except (IndexError, json.JSONDecodeError) as exc:
        if not at_eof:
            raise _NeedMore from None
        if isinstance(exc, IndexError):
            raise TraceFormatError(path, "truncated JSON: the file ends inside the top-level object") from None
        raise _json_error(path, text, exc) from None
    except RecursionError:
        raise TraceFormatError(path, f"{_TOO_DEEP} before the 'traceEvents' array") from None


def _tail_object(text: str, i: int) -> dict | None:
    """Parse ``(, "key": value)* }`` followed only by whitespace, or None."""
    out: dict = {}
    try:
        j = _skip_ws(text, i)
        while text[j] == ",":
            j = _skip_ws(text, j + 1)
            if text[j] != '"':
                return None
            key, j = _DECODER.raw_decode(text, j)
            j = _skip_ws(text, j)
            if text[j] != ":":
                return None
            out[key], j = _DECODER.raw_decode(text, _skip_ws(text, j + 1))
            j = _skip_ws(text, j)
        if text[j] != "}" or _skip_ws(text, j + 1) != len(text):
            return None
    except (IndexError, json.JSONDecodeError, RecursionError):
        return None
    return out


def _find_array_end(tail: str, form: str) -> tuple[int, dict] | None:
    """Find where the events array ends in ``tail`` (index of its ``]``).

    Every "]" inside an event is followed by more of the array, so the
    earliest "]" followed by a valid end of the top-level object is the end
    of the events array; later ones close arrays of keys written after it.
    Returns ``(index, trailing_keys)`` or None when no end is in the tail.
    """
    if form == "array":
        j = len(tail.rstrip(_WHITESPACE))
        if j and tail[j - 1] == "]":
            return j - 1, {}
        return None
    best = None
    misses = 0
    before = len(tail)
    while True:
        bracket = tail.rfind("]", 0, before)
        if bracket < 0:
            break
        rest = _tail_object(tail, bracket + 1)
        if rest is not None:
            best, misses = (bracket, rest), 0
        elif best is not None:
            misses += 1
            if misses >= _TAIL_PATIENCE:
                break
        before = bracket
    return best


class _PartWriter:
    """Writes the events array's bytes into JSON-array part files."""

    def __init__(self, workdir: Path, stem: str, split: bool):
        self.workdir, self.stem, self.split = workdir, stem, split
        self.parts: list[list] = []  # [path, body offset of first byte, content bytes]
        self.fh: Any = None
        self._open(0)

    def _open(self, body_offset: int):
        path = self.workdir / f"{self.stem}.{len(self.parts):04d}.json"
        self.fh = open(path, "wb")
        self.fh.write(b"[")
        self.parts.append([path, body_offset, 0])

    def write(self, data: bytes, body_offset: int):
        part = self.parts[-1]
        while self.split and part[2] + len(data) > PART_BYTES:
            m = _SPLIT.search(data, max(0, PART_BYTES - part[2]))
            if m is None:
                break
            cut = m.start() + 1  # keep the closing "}" of the event
            self.fh.write(data[:cut])
            part[2] += cut
            self.fh.write(b"]")
            self.fh.close()
            next_event = m.end() - 1  # the next event's "{"
            data, body_offset = data[next_event:], body_offset + next_event
            self._open(body_offset)
            part = self.parts[-1]
        self.fh.write(data)
        part[2] += len(data)

    def finish(self, end: int, strip_comma: bool) -> list[Path]:
        """Cut the content at body offset ``end`` and close every part."""
        self.fh.close()
        while len(self.parts) > 1 and self.parts[-1][1] >= end:
            os.unlink(self.parts.pop()[0])
        path, start, _ = self.parts[-1]
        keep = 1 + end - start
        with open(path, "r+b") as fh:
            if strip_comma:
                # An unterminated Chrome array may end with "," after the last event.
                fh.seek(1)
                content = fh.read(keep - 1).rstrip()
                if content.endswith(b","):
                    content = content[:-1]
                keep = 1 + len(content)
            fh.truncate(keep)
            fh.seek(keep)
            fh.write(b"]")
        return [p[0] for p in self.parts]


def stage(path: Path, workdir: Path, stem: str, split: bool = True) -> StagedTrace:
    """Copy the events array of ``path`` into part files under ``workdir``.

    Raises ``TraceFormatError`` for unreadable or structurally bad files.
    """
    path = Path(path)
    with open_stream(path) as stream:
        head = b""
        at_eof = False
        while True:
            # Each try parses the head from its start: reading as much again as is buffered keeps the
            # tries' total work linear in the head's size (a fixed block made it quadratic).
            chunk = _read(stream, path, max(BLOCK_BYTES, len(head)))
            at_eof = not chunk
            head += chunk
            text = head.decode("utf-8", "surrogateescape")
            try:
                form, header, events_start = _parse_head(text, at_eof, path)
                break
            except _NeedMore:
                if len(head) > MAX_HEAD_BYTES:
                    raise TraceFormatError(
                        path, f"no 'traceEvents' array in the first {MAX_HEAD_BYTES >> 20} MB of the top-level object"
                    ) from None
        start = len(text[:events_start].encode("utf-8", "surrogateescape"))
        if not isinstance(stream, gzip.GzipFile):
            staged = _stage_plain(path, stream, form, header, start, workdir, stem, split)
            if staged is not None:
                return staged
        writer = _PartWriter(workdir, stem, split)
        counted = _Scan()  # as the blocks are written, not by reading the parts back
        body = head[start:]
        offset = 0
        recent = [b"", b""]  # the last two blocks: where the array usually ends
        while True:
            if body:
                writer.write(body, offset)
                counted.add(body)
                offset += len(body)
                recent = [recent[1], body]
            if at_eof:
                break
            body = _read(stream, path, BLOCK_BYTES)
            at_eof = not body
    # The array ends in the last blocks unless the keys after it are huge.
    last_blocks = b"".join(recent)
    tail_start = offset - len(last_blocks)
    tail = last_blocks.decode("utf-8", "surrogateescape")
    found = _find_array_end(tail, form)
    if found is None:
        if form == "array":
            # Chrome's array format allows the closing bracket to be missing.
            # What finish cuts after the last event is white space and a comma: no ':'.
            parts = writer.finish(offset, strip_comma=True)
            return StagedTrace(path, form, {}, parts, offset, colons=counted.colons, legacy_ids=counted.legacy)
        writer.finish(offset, strip_comma=False)
        raise TraceFormatError(path, "truncated JSON: the 'traceEvents' array is never closed")
    array_end, trailing = found
    end = tail_start + len(tail[:array_end].encode("utf-8", "surrogateescape"))
    header.update(trailing)
    parts = writer.finish(end, strip_comma=False)
    # The bytes from the array's end on were counted too, and finish cut them: they lie in the tail.
    colons = None if counted.colons is None else counted.colons - last_blocks[end - tail_start :].count(b":")
    # (The tail after the array may hold "external id" too: legacy_ids errs on the safe side.)
    return StagedTrace(path, form, header, parts, end, colons=colons, legacy_ids=counted.legacy)


def _stage_plain(
    path: Path, fh, form: str, header: dict, start: int, workdir: Path, stem: str, split: bool
) -> StagedTrace | None:
    """``stage`` for an uncompressed file: the end of the array from the file's tail, the split
    points from a block read at each ``PART_BYTES`` boundary, and each part's bytes copied file
    to file by the kernel (``os.copy_file_range``) rather than read into Python and written back
    (a fraction of the time and CPU), two parts at
    a time, each then read back for ``count_colons``. The parts are those ``_PartWriter`` would
    write. None when the array's end is not in the tail: the streaming path then reports the
    problem (or reads an unterminated Chrome array).
    """
    size = os.fstat(fh.fileno()).st_size
    read_to = fh.tell()
    tail_start = max(start, size - 2 * BLOCK_BYTES)
    fh.seek(tail_start)
    tail = _read(fh, path, size - tail_start).decode("utf-8", "surrogateescape")
    found = _find_array_end(tail, form)
    if found is None:
        fh.seek(read_to)  # the streaming path reads on from where the head's reading stopped
        return None
    array_end, trailing = found
    end = tail_start + len(tail[:array_end].encode("utf-8", "surrogateescape"))  # file offset of the closing "]"
    header.update(trailing)
    ranges = []  # (first byte, end) of each part's content, file offsets
    first = start
    while split and end - first > PART_BYTES:
        cut = _split_after(fh, path, first + PART_BYTES, end)
        if cut is None:
            break
        ranges.append((first, cut[0]))
        first = cut[1]
    ranges.append((first, end))
    parts = [workdir / f"{stem}.{n:04d}.json" for n in range(len(ranges))]
    # Two parts at a time, one per core: the kernel copies while the other thread counts.
    with ThreadPoolExecutor(STAGE_THREADS) as pool:
        scans = list(pool.map(lambda job: _copy_part(path, *job), zip(parts, ranges)))
    return StagedTrace(
        path,
        form,
        header,
        parts,
        end - start,
        colons=_sum_or_none([scan.colons for scan in scans]),
        legacy_ids=any(scan.legacy for scan in scans),
    )


def _copy_part(path: Path, part: Path, span: tuple[int, int]) -> _Scan:
    """Write bytes ``span`` of ``path`` as the part file ``part`` (a JSON array); the scan of its bytes."""
    first, end = span
    with open(path, "rb") as src, open(part, "wb") as out:  # its own handles: parts are copied side by side
        out.write(b"[")
        out.flush()
        _copy_range(src, out, first, end - first, path)
        out.write(b"]")
    return _scan(path, first, end - first)


# A \u0030-\u003f escape (\u003a is ':') in the raw bytes: a ':' the byte count would miss.
_COLON_ESCAPE = b"\\u003"
# The legacy args key (2021 traces) as its bytes: without them (and without a \u escape, which
# could spell it) no event of the parts can hold the key.
_LEGACY_KEY = b'"external id"'


class _Scan:
    """What the typed read needs to know of consecutive blocks of bytes (also across their
    boundaries): ``colons``, their ``:`` bytes, None once they hold a ``\\u003`` escape, which may write
    a ``:`` that has no byte of its own; ``legacy``, whether they may hold the legacy key
    ``"external id"``: its bytes, or a ``\\u`` escape (which may spell any key). Once ``colons`` is
    None the typed read is not tried: ``legacy`` is then True and the blocks are not looked at."""

    def __init__(self) -> None:
        self.colons: int | None = 0
        self.legacy = False
        self._prev = b""

    def add(self, block: bytes) -> None:
        if self.colons is None:
            return
        keep = len(_LEGACY_KEY) - 1  # the bytes before a block that a pattern across its start may need
        seam = self._prev + block[:keep]
        self._prev = (self._prev + block)[-keep:]
        # A backslash is rare, and looking for one costs a tenth of looking for an escape.
        escaped = b"\\" in block or b"\\" in seam
        if escaped and (_COLON_ESCAPE in block or _COLON_ESCAPE in seam):
            self.colons, self.legacy = None, True
            return
        self.colons += block.count(b":")
        if not self.legacy:
            self.legacy = (
                (escaped and (b"\\u" in block or b"\\u" in seam)) or _LEGACY_KEY in block or _LEGACY_KEY in seam
            )


def _scan(path: Path, offset: int = 0, length: int | None = None) -> _Scan:
    """``_Scan`` of ``length`` bytes (default: all) of the file ``path`` from ``offset``."""
    scanned = _Scan()
    with open(path, "rb") as fh:
        end = os.fstat(fh.fileno()).st_size if length is None else offset + length
        fh.seek(offset)
        while offset < end and scanned.colons is not None:
            block = _read(fh, path, min(BLOCK_BYTES, end - offset))
            if not block:
                raise TraceFormatError(path, "the file shrank while it was read")
            scanned.add(block)
            offset += len(block)
    return scanned


def count_colons(path: Path, offset: int = 0, length: int | None = None) -> int | None:
    """The ``:`` bytes among ``length`` bytes (default: all) of the file ``path`` from ``offset``;
    None when they hold a ``\\u003`` escape (``_Scan``)."""
    return _scan(path, offset, length).colons


def _sum_or_none(counts: list[int | None]) -> int | None:
    """The sum of ``counts``; None when any of them is None (not counted)."""
    return None if None in counts else sum(c for c in counts if c is not None)


def _split_after(fh, path: Path, at: int, end: int) -> tuple[int, int] | None:
    """The first split between two events at or after file offset ``at`` and before ``end``:
    (end of one event's content, start of the next), or None."""
    while at < end:
        fh.seek(at)
        data = _read(fh, path, min(BLOCK_BYTES, end - at))
        m = _SPLIT.search(data)
        if m is not None:
            return at + m.start() + 1, at + m.end() - 1  # keep the "}"; the next part starts at its "{"
        at += max(1, len(data) - 64)  # overlap: a split may straddle two blocks
    return None


def _copy_range(src, dst, offset: int, length: int, path: Path) -> None:
    """Copy ``length`` bytes of ``src`` from ``offset`` to the end of ``dst``: in the kernel where it can."""
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src.fileno(), dst.fileno(), length - done, offset + done)
            if n == 0:
                break  # the file is shorter than it was: the loop below says so
            done += n
    except (AttributeError, OSError):
        pass  # no copy_file_range here (not Linux, an old kernel, some filesystems): copy through Python
    src.seek(offset + done)
    while done < length:
        data = _read(src, path, min(BLOCK_BYTES, length - done))
        if not data:
            raise TraceFormatError(path, "the file shrank while it was read")
        dst.write(data)
        done += len(data)


def stage_exact(path: Path, workdir: Path, stem: str) -> StagedTrace:
    """Stage ``path`` by a full JSON parse: slow, but exact about every byte.

    Used when the fast staging produced parts DuckDB could not parse: either
    the file is malformed (this reports where) or a split point guessed by
    ``stage`` was wrong. Each event is copied as its original text, so no
    number is re-rounded.
    """
    path = Path(path)
    with open_stream(path) as stream:
        raw = _read(stream, path, -1)
    text = raw.decode("utf-8", "surrogateescape")
    del raw
    form, header, i = _parse_head(text, True, path)
    out_path = workdir / f"{stem}.exact.json"
    try:
        with open(out_path, "w", encoding="utf-8", errors="surrogateescape") as out:
            out.write("[")
            i = _skip_ws(text, i)
            first = True
            if i < len(text) and text[i] == "]":
                i += 1
            else:
                while True:
                    if i >= len(text) and form == "array":
                        break  # unterminated Chrome array
                    _, j = _DECODER.raw_decode(text, i)
                    if not first:
                        out.write(",")
                    out.write(text[i:j])
                    first = False
                    i = _skip_ws(text, j)
                    if i >= len(text) and form == "array":
                        break
                    if text[i] == "]":
                        i += 1
                        break
                    if text[i] != ",":
                        raise json.JSONDecodeError("expected ',' or ']' between events", text, i)
                    i = _skip_ws(text, i + 1)
                    if form == "array" and i >= len(text):
                        break
            out.write("]")
        if form == "object":
            trailing = _tail_object(text, i)
            if trailing is None:
                raise json.JSONDecodeError("invalid JSON after the 'traceEvents' array", text, i)
            header.update(trailing)
        elif _skip_ws(text, i) != len(text):
            raise json.JSONDecodeError("extra data after the events array", text, i)
    except json.JSONDecodeError as exc:
        line = text.count("\n", 0, exc.pos) + 1
        col = exc.pos - text.rfind("\n", 0, exc.pos)
        raise TraceFormatError(path, f"invalid JSON at line {line} column {col}: {exc.msg}") from None
    except IndexError:
        raise TraceFormatError(path, "truncated JSON: the file ends inside the events array") from None
    except RecursionError:
        raise TraceFormatError(path, f"{_TOO_DEEP} in the events array") from None
    return StagedTrace(path, form, header, [out_path], len(text), exact=True)


# The largest event (one JSON object) the parse accepts.
MAX_EVENT_BYTES = 64 << 20

# Event keys read into typed columns; any other key puts the event in `extra`.
EVENT_SPEC = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    # Exact decimal microseconds: a float64 loses nanoseconds at epoch scale.
    "ts": "DECIMAL(24,3)",
    "dur": "DECIMAL(24,3)",
    "id": "VARCHAR",
    "bp": "VARCHAR",
    "s": "VARCHAR",
    "args": "JSON",
}


def select_sql(parts: list[Path]) -> str:
    """The exact SELECT: every event of the staged ``parts`` parsed and typed, in file order.

    Each event is read as JSON text, typed, and its keys checked: an event
    with a key ``EVENT_SPEC`` does not name, or an element that is not an
    object, is kept whole in ``extra``. Slower than ``typed_sql`` (three
    parses of each event) but right whatever the input (``ingest/read/exact_rows``).
    """
    return _events_sql(parts, typed=False, legacy_ids=True)


def typed_sql(staged: list[StagedTrace]) -> str:
    """The fast SELECT: ``select_sql``'s rows, each event parsed once into typed columns, and ``_colons``.

    ``read_json`` skips keys its ``columns`` do not name, so these rows are
    kept only when ``_colons`` proves it skipped none (``ingest``; the proof:
    ``ingest/read/typed_rows``). The legacy args key ``"external id"`` is
    looked up only when staging's scan says the bytes may hold it
    (``StagedTrace.legacy_ids``).
    """
    parts = [p for trace in staged for p in trace.parts]
    return _events_sql(parts, typed=True, legacy_ids=any(trace.legacy_ids for trace in staged))


def _events_sql(parts: list[Path], typed: bool, legacy_ids: bool) -> str:
    """The read of ``parts`` (``ingest/read/events``): the SQL is there; here, what it is given."""
    c1, c2, c3 = [*ts_centers(parts), None, None, None][:3]
    return sqlmodules.text(
        "ingest/read/events",
        typed=typed,
        files=[str(p) for p in parts],
        multi=_multi(parts),
        trace_id=_trace_of(parts[0]),
        spec=EVENT_SPEC,
        keys=list(EVENT_SPEC),
        max_event_bytes=MAX_EVENT_BYTES,
        c1=c1,
        c2=c2,
        c3=c3,
        legacy_ids=legacy_ids,
        args_spec=fields.spec_json(fields.EVENT),
    )


_PART_NAME = re.compile(r"t(\d+)\.[^/]*$")


def _trace_of(part: Path) -> int:
    """The trace id in a part file's name (``t<trace_id>.<n>.json``)."""
    m = _PART_NAME.match(part.name)
    if m is None:
        raise ValueError(f"not a part file name: {part.name}")
    return int(m.group(1))


def _multi(parts: list[Path]) -> bool:
    """Whether ``parts`` hold more than one trace: each row then takes its trace from its file's name
    (one trace: a constant, and no file name column to read)."""
    return len({_trace_of(p) for p in parts}) > 1


# The short path of the nanoseconds conversion (``ingest/read/nanoseconds``) takes values within 10^12 us
# of a center; centers are multiples of this, at most 9 * 10^15 us: center*1000 plus a window's ns fits an int64.
_CENTER_STEP_US = 10**11
_MAX_CENTER_US = 9 * 10**15
_TS_SAMPLE = re.compile(rb'"ts"\s*:\s*"?(-?\d{1,20})')
SAMPLE_BYTES = 1 << 16


def ts_centers(parts: list[Path]) -> list[int]:
    """Centers of ts for ``ingest/read/nanoseconds`` (which adds 0): the integer microseconds of the ``"ts"``
    values in the first ``SAMPLE_BYTES`` of each part, rounded to ``_CENTER_STEP_US``, most frequent first (at
    most three). Which centers only decides how many rows take the short path, never a value."""
    seen: dict[int, int] = {}
    for part in parts:
        try:
            with open(part, "rb") as fh:
                head = fh.read(SAMPLE_BYTES)
        except OSError:
            continue
        for m in _TS_SAMPLE.finditer(head):
            c = round(int(m.group(1)) / _CENTER_STEP_US) * _CENTER_STEP_US
            if 0 < abs(c) <= _MAX_CENTER_US:
                seen[c] = seen.get(c, 0) + 1
    return sorted(seen, key=lambda c: -seen[c])[:3]
