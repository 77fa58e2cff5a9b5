"""Build a large Kineto trace by tiling a real one in time, for the load benchmark.

    python bench/make_big_trace.py [SRC] OUT [--min-events N] [--min-bytes N] [--gzip]

Replica k of every non-metadata event is the source event shifted by
``k * (span + gap)``, where ``span`` runs from the first event's start to the last
event's end. Positive integer ids are shifted by ``k * id_stride`` (one power of ten
above the largest id in the source), so every link stays unique and consistent across
replicas: ``args.correlation`` and the ac2g flow ``id`` that repeats it, External ids,
fwdbwd flow ids, Python (parent) ids, Record function ids, ``Ev Idx`` and
``Sequence number``. Zero and negative ids mean "no link" in Kineto and are kept.
``ProfilerStep#N`` names are renumbered so step numbers keep counting up. Metadata
(``M``) events and the top-level keys are written once. Replicas are added until both
minimums are reached (bytes counted uncompressed).

Timestamps stay exact: the source is parsed with ``decimal.Decimal``, shifted in
integer nanoseconds and written back as 3-decimal microseconds; every other number is
written exactly as it was read. The output is streamed, one event per line, with
``distributedInfo.rank`` on its own line before ``traceEvents`` (HTA finds the rank by
a line-by-line regex ``"rank":\\s+N``). A sidecar ``OUT.stats`` records the event
count and size for ``bench_load.py``.
"""

import argparse
import decimal
import gzip
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SRC = REPO.parent / "shared" / "traces" / "hta" / "v100_ns_resolution.json.gz"

ID_ARGS = (
    "correlation",
    "External id",
    "external id",
    "Python id",
    "Python parent id",
    "Record function id",
    "Ev Idx",
    "Sequence number",
)
STEP_RE = re.compile(r"ProfilerStep#(\d+)$")
MIN_EVENTS, MIN_BYTES = 1_000_000, 300_000_000
# Kineto's key order; any other top-level key keeps its side of traceEvents.
HEAD_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo")
TAIL_KEYS = ("traceName", "displayTimeUnit", "baseTimeNanoseconds")

# A placeholder string that json.dumps renders as "\u0000tk<i>\u0000"; each one is
# swapped for verbatim text (an exact number) or a per-replica format field.
_MARK = "\x00tk{}\x00"
_MARK_RE = re.compile(r'"\\u0000tk(\d+)\\u0000"')


def to_ns(us):
    """Exact integer nanoseconds of a microsecond value read as int or Decimal."""
    ns = decimal.Decimal(us) * 1000
    if ns != ns.to_integral_value():
        raise ValueError(f"timestamp {us} has sub-nanosecond digits")
    return int(ns)


def us_text(ns):
    """Microseconds with exactly three decimals, e.g. 1712195495406752.797."""
    q, r = divmod(abs(ns), 1000)
    return f"{'-' if ns < 0 else ''}{q}.{r:03d}"


class _Marker:
    """Collects placeholders while an event is prepared for json.dumps."""

    def __init__(self):
        # Per placeholder: (verbatim text, None) or (format, (base, stride, is_ts)).
        self.fields = []

    def _add(self, field):
        self.fields.append(field)
        return _MARK.format(len(self.fields) - 1)

    def exact(self, obj):
        """obj with every Decimal replaced by a placeholder for its source text."""
        if isinstance(obj, decimal.Decimal):
            return self._add((str(obj), None))
        if isinstance(obj, dict):
            return {k: self.exact(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.exact(v) for v in obj]
        return obj

    def var(self, fmt, base, stride, is_ts=False):
        """A placeholder for ``fmt.format(base + k * stride)`` in replica k."""
        return self._add((fmt, (base, stride, is_ts)))

    def render(self, obj):
        """(str.format template, [(base, stride, is_ts)]) for the prepared obj."""
        pieces = _MARK_RE.split(json.dumps(obj, ensure_ascii=False))
        out, variables = [], []
        for i, piece in enumerate(pieces):
            text, variable = self.fields[int(piece)] if i % 2 else (piece, None)
            if variable is None:
                out.append(text.replace("{", "{{").replace("}", "}}"))
            else:
                out.append(text)
                variables.append(variable)
        return "".join(out), variables


def dumps_exact(obj):
    """JSON text of obj with Decimals written exactly as read."""
    marker = _Marker()
    template, _ = marker.render(marker.exact(obj))
    return template.format()


def is_link_id(value):
    """Kineto ids that link events are positive ints; 0 and -1 mean "none"."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def compile_event(event, period_ns, id_stride, step_stride):
    """One event as a format template plus the (base, stride, is_ts) of its fields."""
    marker = _Marker()
    ev = marker.exact(event)
    ev["ts"] = marker.var("{}", to_ns(event["ts"]), period_ns, is_ts=True)
    if is_link_id(event.get("id")):
        ev["id"] = marker.var("{}", event["id"], id_stride)
    args = event.get("args")
    if isinstance(args, dict):
        for key in ID_ARGS:
            if is_link_id(args.get(key)):
                ev["args"][key] = marker.var("{}", args[key], id_stride)
    step = STEP_RE.match(str(event.get("name", "")))
    if step:
        ev["name"] = marker.var('"ProfilerStep#{}"', int(step.group(1)), step_stride)
    return marker.render(ev)


def max_id(events):
    """The largest link id (flow id or id arg) in the events, 0 if none."""
    biggest = 0
    for e in events:
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        for value in [e.get("id"), *(args.get(k) for k in ID_ARGS)]:
            if is_link_id(value) and value > biggest:
                biggest = value
    return biggest


def read_trace(path):
    """The trace as a dict, numbers with a fraction as Decimal."""
    with gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb") as f:
        trace = json.loads(f.read(), parse_float=decimal.Decimal)
    return {"traceEvents": trace} if isinstance(trace, list) else trace


def key_order(trace):
    """Top-level keys to write before and after traceEvents, Kineto's order first."""
    keys = list(trace)
    pos = keys.index("traceEvents")
    if "distributedInfo" not in keys:
        keys.insert(0, "distributedInfo")
        pos += 1
    own = HEAD_KEYS + TAIL_KEYS
    head = [k for k in HEAD_KEYS if k in keys] + [k for k in keys[:pos] if k not in own]
    tail = [k for k in keys[pos + 1 :] if k not in own] + [k for k in TAIL_KEYS if k in keys]
    return head, tail


def tile(src, out, min_events=MIN_EVENTS, min_bytes=MIN_BYTES, gap_us=1000, use_gzip=False):
    """Write the tiled trace to out, its stats to OUT.stats, and return the stats."""
    trace = read_trace(src)
    head, tail = key_order(trace)
    # HTA needs a rank; keep the source's when it has one.
    trace["distributedInfo"] = {"rank": 0, **(trace.get("distributedInfo") or {})}
    events = trace["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]

    start = min(to_ns(e["ts"]) for e in timed)
    end = max(to_ns(e["ts"]) + to_ns(e.get("dur", 0)) for e in timed)
    period_ns = end - start + round(gap_us * 1000)
    id_stride = 10 ** len(str(max_id(events)))
    steps = [int(m.group(1)) for e in timed if (m := STEP_RE.match(str(e.get("name", ""))))]
    step_stride = max(steps) - min(steps) + 1 if steps else 0
    compiled = [compile_event(e, period_ns, id_stride, step_stride) for e in timed]

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if use_gzip else open
    stats = {"events": len(meta), "bytes": 0, "replicas": 0}
    with opener(out, "wt", encoding="utf-8", newline="\n") as f:

        def emit(text):
            f.write(text)
            stats["bytes"] += len(text.encode("utf-8"))

        emit("{\n")
        for k in head:
            emit(f"  {json.dumps(k)}: {dumps_exact(trace[k])},\n")
        emit('  "traceEvents": [\n  ')
        emit(",\n  ".join(dumps_exact(e) for e in meta))
        sep = ",\n  " if meta else ""
        while stats["replicas"] == 0 or stats["events"] < min_events or stats["bytes"] < min_bytes:
            k = stats["replicas"]
            for template, variables in compiled:
                values = [
                    us_text(base + k * stride) if is_ts else base + k * stride for base, stride, is_ts in variables
                ]
                emit(sep + template.format(*values))
                sep = ",\n  "
            stats["events"] += len(compiled)
            stats["replicas"] += 1
        emit("\n  ]")
        for k in tail:
            emit(f",\n  {json.dumps(k)}: {dumps_exact(trace[k])}")
        emit("\n}\n")

    stats.update(
        source=str(src),
        source_events=len(events),
        period_us=period_ns / 1000,
        id_stride=id_stride,
        gzip=use_gzip,
    )
    Path(f"{out}.stats").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def main(argv=None):
    """Command line: tile SRC into OUT (and OUT.stats)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?", default=str(DEFAULT_SRC), help="source trace (.json or .json.gz)")
    parser.add_argument("out", help="output trace (.json; .json.gz with --gzip)")
    parser.add_argument("--min-events", type=int, default=MIN_EVENTS)
    parser.add_argument("--min-bytes", type=int, default=MIN_BYTES, help="uncompressed")
    parser.add_argument("--gap-us", type=float, default=1000.0, help="idle time between replicas")
    parser.add_argument("--gzip", action="store_true", help="gzip the output")
    args = parser.parse_args(argv)

    stats = tile(args.src, args.out, args.min_events, args.min_bytes, args.gap_us, args.gzip)
    print(
        f"{args.out}: {stats['events']:,} events, {stats['bytes'] / 1e6:.1f} MB "
        f"({stats['replicas']} replicas of {stats['source_events']:,})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
