"""How far the stages tracekit decides on a stripped trace agree with those it decides on its scoped twin.

A scoped trace (recorded with ``with_stack`` / ``with_modules``: ``nn.Module`` scopes) and its stripped
twin (the same recording without ``python_function`` events, what the profiler records by default) hold
the same ops at the same times. What the analyzer decides with the scopes is the truth; `agreement`
measures, per pair of traces, how much of it survives without them:

- ``other_pct``: of the scoped copy's attention-scope time (ops inside an attention call whose stage is not
  ``other``: what the attention modules hold; a model-level rotary table outside them, rope by its module
  rule, is not the attention modules' time), the share the stripped copy calls ``other`` (lost to attention);
- ``extra_pct``: the other direction, time the stripped copy puts in an attention call with a stage other
  than ``other`` that the scoped copy leaves out, as a share of the same scoped attention time (reported, no
  bar: a model-level op next to a block, such as BERT's extended attention mask, can join it);
- ``core_right_pct``: of the scoped copy's core-stage time (qk_matmul, scale, mask, softmax, dropout,
  pv_matmul, fused_attention: the stages ``capture/stages.csv`` marks core), the share the stripped copy
  gives the same stage.

CPU ops (``cpu_stages`` of ``cpu_op`` slices) are matched by (ts_ns, name, tid) and weighted by their
self time; GPU ops (``gpu_op_stages``) by (ts_ns, stream, name), weighted by duration. Ops whose key
repeats (zero-length ops at one timestamp) are paired in order of depth. The issue's bar: at most 5 %
other and at least 95 % core right (`Agreement.meets`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.schema import stages

OTHER_MAX_PCT = 5.0
CORE_MIN_PCT = 95.0

# Each op: the trace's file, its match key, its stage and weight. Duplicate keys get an index by depth.
_CPU_ROWS = """
SELECT t.path, s.ts_ns, s.name, s.tid,
       row_number() OVER (PARTITION BY s.trace_id, s.ts_ns, s.name, s.tid ORDER BY s.depth, s.id) AS dup,
       c.call_id IS NOT NULL AS in_call, c.stage, {weight} AS weight_ns
FROM cpu_stages c JOIN cpu_slices s USING (id) JOIN traces t ON t.trace_id = s.trace_id
WHERE s.kind = 'cpu_op'
"""
_GPU_ROWS = """
SELECT t.path, g.ts_ns, g.stream, g.name,
       row_number() OVER (PARTITION BY g.trace_id, g.ts_ns, g.stream, g.name ORDER BY g.id) AS dup,
       st.call_id IS NOT NULL AS in_call, st.stage, {weight} AS weight_ns
FROM gpu_op_stages st JOIN gpu_ops g USING (id) JOIN traces t ON t.trace_id = g.trace_id
"""
# The weights: each op's own time, or (robust) the least time of the trace's ops of its name and input
# shapes. Descheduling only adds time, and one op the OS preempted (a CPU op's self time of tens of
# milliseconds among microseconds, on a busy machine) would otherwise decide the shares.
_CPU_WEIGHT = {
    False: "c.self_ns",
    True: "min(c.self_ns) OVER (PARTITION BY s.trace_id, s.name, CAST(s.input_dims AS VARCHAR))",
}
_GPU_WEIGHT = {False: "g.dur_ns", True: "min(g.dur_ns) OVER (PARTITION BY g.trace_id, g.name, CAST(g.grid AS VARCHAR))"}
_CALLS = """
SELECT t.path, count(c.call_id) AS calls, count(*) FILTER (WHERE direction = 'forward') AS forward
FROM traces t LEFT JOIN attention_calls c ON c.trace_id = t.trace_id
GROUP BY t.path
"""


@dataclass
class Agreement:
    """One scoped/stripped pair: matched ops, the time compared (ns) and the attention calls of each."""

    scoped: str
    stripped: str
    matched: int = 0
    unmatched: int = 0  # scoped ops the stripped copy lacks (none when it is a true twin)
    attention_ns: int = 0  # scoped time inside a call with a stage other than other
    lost_ns: int = 0  # of it, what the stripped copy calls other
    extra_ns: int = 0  # stripped time inside a call with a stage other than other that the scoped copy leaves out
    core_ns: int = 0  # scoped time with a core stage
    core_right_ns: int = 0  # of it, what the stripped copy gives the same stage
    calls_scoped: int = 0
    calls_stripped: int = 0
    forward_calls_scoped: int = 0
    forward_calls_stripped: int = 0
    # (scoped stage, stripped stage) -> ns, for the stages that differ: where the time went.
    confusion: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def other_pct(self) -> float:
        """Share of the scoped attention time the stripped copy calls other, percent (0 without any)."""
        return 100.0 * self.lost_ns / self.attention_ns if self.attention_ns else 0.0

    @property
    def extra_pct(self) -> float:
        """The other direction: time the stripped copy adds to attention that the scoped copy leaves out, as a
        percent of the scoped attention time (0 without any)."""
        return 100.0 * self.extra_ns / self.attention_ns if self.attention_ns else 0.0

    @property
    def core_right_pct(self) -> float:
        """Share of the scoped core-stage time with the same stage in the stripped copy, percent (100 without any)."""
        return 100.0 * self.core_right_ns / self.core_ns if self.core_ns else 100.0

    def meets(self, other_max: float = OTHER_MAX_PCT, core_min: float = CORE_MIN_PCT) -> bool:
        """The issue's bar: at most `other_max` % other and at least `core_min` % core right."""
        return self.other_pct <= other_max and self.core_right_pct >= core_min

    def worst(self, n: int = 3) -> list[tuple[str, str, int]]:
        """The `n` largest disagreements as (scoped stage, stripped stage, ns)."""
        ranked = sorted(self.confusion.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(a, b, ns) for (a, b), ns in ranked[:n]]

    def row(self) -> str:
        """One line for a table: the pair, the two shares and the calls."""
        return (
            f"{Path(self.scoped).name}: other {self.other_pct:.1f} %, core right {self.core_right_pct:.1f} %, "
            f"calls {self.calls_scoped} scoped / {self.calls_stripped} stripped"
        )


def _by_file(trace, sql: str) -> dict[str, dict[tuple, tuple[str, int, bool]]]:
    ops: dict[str, dict[tuple, tuple[str, int, bool]]] = defaultdict(dict)
    for path, *key, in_call, stage, weight in trace.rows(sql):
        ops[Path(path).name][tuple(key)] = (stage, int(weight or 0), bool(in_call))
    return ops


def _calls(trace) -> dict[str, tuple[int, int]]:
    return {Path(path).name: (calls, forward) for path, calls, forward in trace.rows(_CALLS)}


def agreement(
    scoped, stripped, *, gpu: bool = False, robust: bool = False, pairs: Mapping[str, str] | None = None
) -> list[Agreement]:
    """Compare the stages of `scoped` (a loaded `tracekit.Trace`) with those of `stripped`, per pair of traces.

    `pairs` maps a scoped trace's file name to its stripped twin's (both may hold several traces); without
    it each side must hold one trace. ``gpu=True`` compares GPU ops (by ts_ns, stream and name, weighted by
    duration) instead of CPU ops (by ts_ns, name and tid, weighted by self time). ``robust=True`` weights
    each op by the least time of the scoped trace's ops of the same name and input shapes (GPU: name and
    grid) instead of its own: CPU self times on a busy machine carry the OS's preemptions. Returns one
    `Agreement` per pair, in the order of `pairs`.
    """
    sql = (_GPU_ROWS if gpu else _CPU_ROWS).format(weight=(_GPU_WEIGHT if gpu else _CPU_WEIGHT)[robust])
    truth, seen = _by_file(scoped, sql), _by_file(stripped, sql)
    calls_a, calls_b = _calls(scoped), _calls(stripped)
    if pairs is None:
        if len(calls_a) != 1 or len(calls_b) != 1:
            raise ValueError("pairs is needed when either side holds more than one trace")
        pairs = {next(iter(calls_a)): next(iter(calls_b))}
    core = set(stages.core())
    results = []
    for a, b in pairs.items():
        if a not in calls_a or b not in calls_b:
            raise ValueError(f"no trace {a if a not in calls_a else b} on its side")
        result = Agreement(a, b)
        result.calls_scoped, result.forward_calls_scoped = calls_a[a]
        result.calls_stripped, result.forward_calls_stripped = calls_b[b]
        twins = seen.get(b, {})
        confusion: dict[tuple[str, str], int] = defaultdict(int)
        for key, (stage, ns, in_call) in truth.get(a, {}).items():
            twin = twins.get(key)
            if twin is None:
                result.unmatched += 1
                continue
            result.matched += 1
            other = twin[0]
            if other != "other" and twin[2] and not (stage != "other" and in_call):
                result.extra_ns += ns
            if stage != "other" and in_call:
                result.attention_ns += ns
                result.lost_ns += ns if other == "other" else 0
            if stage in core:
                result.core_ns += ns
                result.core_right_ns += ns if other == stage else 0
            if other != stage:
                confusion[(stage, other)] += ns
        result.confusion = dict(confusion)
        results.append(result)
    return results


def record_scoped(path: Path, run: Callable[[], object]) -> None:
    """A scoped twin recorded on CPU: `run` once to warm up, then once under the profiler with shapes, module
    scopes and Python stacks, without grad; written gzipped to `path` (``capture.zoo.strip_python_functions``
    makes its stripped twins)."""
    import gzip
    import shutil

    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        run()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=True, with_stack=True) as p:
            run()
    raw = path.with_suffix(".json")
    p.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
