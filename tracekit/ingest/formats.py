"""The reader seam: how a trace format gets into the ``events`` table.

A reader turns one input file into staged parts (``stage``; ``stage_exact``
when the fast path's guess fails) and gives the one SELECT that parses the
staged parts of a batch into rows of ``events``' raw columns, in file order
(``select_sql``: trace_id, ph, cat, name, pid, tid, ts_ns, dur_ns, end_ns,
flow_id, bp, scope, correlation, external_id, args, extra). A reader may
also give a faster SELECT that is not exact for every input (``typed_sql``):
its rows carry ``_colons``, and ingest keeps them only for a batch whose
sum of ``_colons`` per trace equals the ``StagedTrace.colons`` staging
counted, else it reads the batch with ``select_sql``. Everything after
that is format-independent and stays in ``ingest``: numbering (id, ordinal),
value checks, the ``kind`` of each event and the ``traces`` row.

Kineto / Chrome JSON (``reader``) is the first reader. A second format
(Perfetto protobuf, an Nsight export, rocprofv3 JSON) is one more entry in
``READERS``: its suffixes make ``tracekit load DIR`` find its files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TraceFormatError
from tracekit.ingest import scan
from tracekit.ingest.scan import StagedTrace

__all__ = ["READERS", "Reader", "StagedTrace", "for_path", "is_trace_name", "suffixes"]


@dataclass(frozen=True)
class Reader:
    """One trace format."""

    name: str
    suffixes: tuple[str, ...]  # lower-case file name endings this reader takes
    stage: Callable[[Path, Path, str], StagedTrace]  # (file, work folder, part-file stem) -> staged parts
    stage_exact: Callable[[Path, Path, str], StagedTrace]  # the slow, exact fallback (or the same as stage)
    select_sql: Callable[[list[Path]], str]  # staged parts -> SELECT of events' raw columns, in file order
    # The same rows plus `_colons`, faster; exact only when its sums match StagedTrace.colons (see above).
    # It is given the staged traces, not only their parts: what staging learned of the bytes.
    typed_sql: Callable[[list[StagedTrace]], str] | None = None

    def matches(self, path: Path) -> bool:
        """Whether this reader takes the file ``path`` (by its name)."""
        name = path.name.lower()
        return name.endswith(self.suffixes) and not name.startswith(".")


# Looked up at call time, so a patched scan.stage (tests) takes effect.
JSON = Reader(
    "kineto-json",
    (".json", ".json.gz"),
    lambda path, workdir, stem: scan.stage(path, workdir, stem),
    lambda path, workdir, stem: scan.stage_exact(path, workdir, stem),
    lambda parts: scan.select_sql(parts),
    lambda staged: scan.typed_sql(staged),
)

# The registry, most specific first: the first reader that matches a file reads it.
READERS: tuple[Reader, ...] = (JSON,)


def suffixes() -> tuple[str, ...]:
    """Every file name ending some reader takes."""
    return tuple(suffix for reader in READERS for suffix in reader.suffixes)


def is_trace_name(name: str) -> bool:
    """True for file names some reader takes (``*.json``, ``*.json.gz``, ``*.pt.trace.json*``)."""
    return any(reader.matches(Path(name)) for reader in READERS)


def for_path(path: Path) -> Reader:
    """The reader for ``path``: by name, else the JSON reader (a trace given by name is read whatever it is called)."""
    for reader in READERS:
        if reader.matches(path):
            return reader
    if not READERS:  # pragma: no cover - the registry always holds JSON
        raise TraceFormatError(path, "no reader for this file")
    return JSON
