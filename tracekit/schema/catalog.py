"""The documented schema: every table, view and column, with units, declared once.

Each column's name, type and doc are written here and nowhere else: the base
tables' DDL (``ingest``) and the typed ``args`` fields (``fields``: a column
line ``name TYPE {args key}  doc`` is read from that key of ``args``) are
generated from these declarations; ``docs/schema.md`` is generated from them
(``python -m tracekit.docgen``), ``tracekit tables`` prints them, and a test
fails when a column of a loaded database is missing here, or documented here
but missing there.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tracekit.schema import stages


@dataclass(frozen=True)
class Col:
    """A documented column."""

    name: str
    type: str
    doc: str
    # The args key the column is typed from (None: computed, or not from args).
    arg: str | None = None
    # Perfetto-style constraints a test checks on every shared trace: "unique",
    # "not_null", "ref:table.column" (every non-NULL value exists there), "in:stages"
    # (a value of the stage vocabulary).
    checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    """A documented table or view."""

    name: str
    kind: str  # "table" or "view"
    group: str
    doc: str
    columns: tuple[Col, ...]


_LINE = re.compile(r"(\S+) +(\S+)(?: +\{([^}]+)\})?(?: +<([^>]+)>)? +(.+)")
# Placeholders a doc may use, filled from the stage vocabulary (stages.csv).
_VOCABULARY = {
    "STAGE_LIST": ", ".join(stages.names()),
    "KERNEL_LEVEL_LIST": "/".join(stages.kernel_level()),
}


def _cols(spec: str) -> tuple[Col, ...]:
    """Parse ``name TYPE [{args key}] [<check check ...>]  doc`` lines."""
    out = []
    for line in spec.strip().splitlines():
        if not line.strip():
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"bad column declaration: {line!r}")
        name, typ, arg, checks, doc = m.groups()
        for key, value in _VOCABULARY.items():
            doc = doc.replace(key, value)
        out.append(Col(name, typ, doc, arg, tuple(checks.split()) if checks else ()))
    return tuple(out)


_EVENT_COLS = """
id BIGINT <unique not_null>  Row id, unique across the database; GPU ops, launches and CPU slices join on it.
trace_id INTEGER <not_null ref:traces.trace_id>  The trace (input file) the event came from: traces.trace_id.
ordinal BIGINT  Position of the event in the file's traceEvents array, from 0.
ph VARCHAR  Phase as written: X (complete), i/I (instant), s/t/f (flow), C (counter), M (metadata), others kept as written (NULL when absent).
kind VARCHAR  Normalized category (cpu_op, user_annotation, python_function, runtime, driver, kernel, memcpy, memset, gpu_user_annotation, sync, ac2g, fwdbwd, cpu_instant, overhead, trace_span, metadata, marker, counter, unknown, ...): one kind for legacy, ROCm and MTIA names.
cat VARCHAR  Category exactly as written in the file (NULL when absent).
name VARCHAR  Event name as written.
pid VARCHAR  Process id as written (GPU events: the device; strings such as "Spans" are kept).
tid VARCHAR  Thread id as written (GPU events: the stream).
ts_ns BIGINT  Start, integer nanoseconds on the trace's clock (ts in µs x 1000, exact; NULL only for metadata events without ts).
dur_ns BIGINT  Duration, integer nanoseconds (exact); NULL when the event has no dur.
end_ns BIGINT  ts_ns + dur_ns (ts_ns when there is no dur).
flow_id VARCHAR  The event's id exactly as written (for ac2g flows: the correlation id); VARCHAR because some exceed int64.
bp VARCHAR  Flow binding point ("e": enclosing slice).
scope VARCHAR  Instant scope s ("g" global, "p" process, "t" thread).
correlation BIGINT {correlation}  args.correlation: links a GPU op to the runtime call that launched it (unique per trace, not across traces).
external_id BIGINT {External id}  args["External id"] (or legacy "external id"): links runtime calls and GPU ops to their CPU op.
args JSON  The event's complete args object, as written.
extra JSON  The whole event when it has keys beyond ph, cat, name, pid, tid, ts, dur, id, bp, s and args, or is not a JSON object (otherwise NULL).
"""
_EVENTS = _cols(_EVENT_COLS)
_RULE_COMMON = """
rule_file VARCHAR  The CSV the row came from.
rule_order INTEGER  Priority: lower wins (user folders first, then the shipped file, each in file order).
"""
_CPU_SLICE = """
id BIGINT <unique not_null ref:events.id>  slices.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  cpu_op, user_annotation, runtime, driver, overhead or profiler_range.
name VARCHAR  Name as written.
pid VARCHAR  Process id.
tid VARCHAR  Thread id.
ts_ns BIGINT  Start, ns.
dur_ns BIGINT  Duration, ns.
end_ns BIGINT  End, ns.
depth INTEGER  Number of enclosing slices on the same thread (0 = top level).
parent_id BIGINT <ref:cpu_slices.id>  Innermost enclosing slice (cpu_slices.id), NULL at top level.
root_id BIGINT <ref:cpu_slices.id>  Outermost enclosing slice (itself at top level).
children INTEGER  Number of direct children.
self_ns BIGINT  dur_ns minus the time covered by direct children (clipped to this slice), ns.
op_id BIGINT <ref:cpu_slices.id>  Innermost enclosing cpu_op (cpu_slices.id), itself excluded; NULL when none.
top_op_id BIGINT <ref:cpu_slices.id>  Outermost enclosing cpu_op, itself excluded.
annotation_id BIGINT <ref:cpu_slices.id>  Innermost enclosing user_annotation (record_function range), itself excluded.
annotation_ids BIGINT[] <ref:cpu_slices.id>  All enclosing user_annotations, outermost first.
annotations VARCHAR[]  Their names, outermost first (ProfilerStep#N, attn_fwd, stage:softmax, ...).
external_id BIGINT  slices.external_id.
correlation BIGINT  slices.correlation (runtime/driver calls).
input_dims JSON {Input Dims}  args["Input Dims"]: shapes of the op's inputs (record_shapes).
input_types JSON {Input type}  args["Input type"]: dtypes of the op's inputs.
input_strides JSON {Input Strides}  args["Input Strides"].
concrete_inputs JSON {Concrete Inputs}  args["Concrete Inputs"]: scalar argument values.
sequence_number BIGINT {Sequence number}  args["Sequence number"]: autograd sequence number (forward/backward pairing).
fwd_thread_id BIGINT {Fwd thread id}  args["Fwd thread id"].
record_function_id BIGINT {Record function id}  args["Record function id"].
"""

_TABLES = [
    Table(
        "traces",
        "table",
        "base",
        "One row per input file (a trace; a rank in a distributed run).",
        _cols("""
trace_id INTEGER <unique not_null>  Id of the trace within this database, from 1.
trace VARCHAR  Display label: the file name without .json/.gz/.pt.trace (with parent folders when names repeat); for a trace recorded by tracekit capture, its impl (impl-device or impl-rankN when that repeats).
path VARCHAR  The file as given.
form VARCHAR  "object" (Kineto: top-level object with traceEvents) or "array" (bare Chrome event array).
file_bytes BIGINT  Size of the file on disk (compressed size for .gz), bytes.
events_bytes BIGINT  Size of the traceEvents array, uncompressed bytes.
events BIGINT  Number of events in traceEvents (= sum of event_counts for the trace).
rank INTEGER  Distributed rank: distributedInfo.rank, else the rank tracekit's capture module recorded (tracekit_capture.rank), else a "rankN" in the file or folder name, else NULL.
rank_source VARCHAR  Where rank came from: "distributedInfo", "tracekit_capture", "file name" or NULL.
world_size INTEGER  distributedInfo.world_size (else tracekit_capture.world_size).
local_rank INTEGER  Rank within its host: tracekit_capture.local_rank (LOCAL_RANK, SLURM_LOCALID, ...), else NULL.
job VARCHAR  Job id the capture module recorded (tracekit_capture.job_id: Slurm, PBS, LSF, torchrun, ...), else NULL. Ranks are matched within a job; traces without one form one job.
host VARCHAR  Host that recorded the trace: tracekit_capture.host, else the top-level host_name Kineto writes, else the host field of a capture-layout file name (rank00003.HOST....json.gz), else NULL.
clock_offset_ns BIGINT  How far this trace's clock runs ahead of its job's reference rank (the lowest rank), ns: subtract it from ts_ns to put ranks on one time axis. 0 for the reference; NULL when not found (see clock_source).
clock_source VARCHAR  How clock_offset_ns was found: "reference" (the job's lowest rank), "collective ends" (median difference of the ends of the same collective kernels, which finish together on every rank of a group), or NULL (no collective shared with an aligned rank).
loaded_on VARCHAR  host:pid of the process that parsed the file (a worker of load --jobs or a Dask worker).
schema_version VARCHAR  Top-level schemaVersion.
trace_name VARCHAR  Top-level traceName (the path the profiler wrote to).
display_time_unit VARCHAR  Top-level displayTimeUnit (display only: ts is always in µs).
base_time_ns BIGINT  Top-level baseTimeNanoseconds: add to relative timestamps for wall-clock time (NULL when absent).
first_ts_ns BIGINT  Earliest event start (metadata events excluded), ns.
last_end_ns BIGINT  Latest event end (metadata events excluded), ns.
distributed_info JSON  Top-level distributedInfo object.
metadata JSON  Every top-level key of the file except traceEvents, as written (deviceProperties, user metadata, ...).
"""),
    ),
    Table(
        "devices",
        "table",
        "base",
        "GPU properties from the trace's deviceProperties, one row per device per trace.",
        _cols("""
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
device INTEGER  Device index (deviceProperties[].id; gpu_ops.device).
name VARCHAR  Device name, e.g. "NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X".
compute_capability VARCHAR  computeMajor.computeMinor (gfx major/minor on ROCm).
total_global_mem_bytes BIGINT  totalGlobalMem, bytes.
num_sms INTEGER  numSms: streaming multiprocessors (compute units on AMD).
warp_size INTEGER  warpSize (32 NVIDIA, 64 AMD).
max_threads_per_block INTEGER  maxThreadsPerBlock.
max_threads_per_sm INTEGER  maxThreadsPerMultiprocessor.
regs_per_block INTEGER  regsPerBlock.
regs_per_sm INTEGER  regsPerMultiprocessor (NULL when not reported).
shared_mem_per_block_bytes BIGINT  sharedMemPerBlock, bytes.
shared_mem_per_sm_bytes BIGINT  sharedMemPerMultiprocessor (or maxSharedMemoryPerMultiProcessor), bytes.
shared_mem_per_block_optin_bytes BIGINT  sharedMemPerBlockOptin, bytes.
props JSON  The full deviceProperties entry.
"""),
    ),
    Table(
        "events",
        "table",
        "base",
        "Every input event, one row each, whatever its phase: the single base table of events (event_counts counts it). The views below select by phase.",
        _EVENTS,
    ),
    Table(
        "slices",
        "view",
        "base",
        "Complete events (ph X): CPU ops, annotations, python functions, runtime calls, GPU ops, ...",
        _EVENTS,
    ),
    Table(
        "instants",
        "view",
        "base",
        "Instant events (ph i, I, R): memory events, markers such as 'Iteration Start'.",
        _EVENTS,
    ),
    Table(
        "flows",
        "view",
        "base",
        "Flow events (ph s, t, f): ac2g (launch -> GPU op), fwdbwd (forward -> backward), legacy async flows.",
        _EVENTS,
    ),
    Table(
        "counters",
        "view",
        "base",
        "Counter events (ph C); args holds the series values.",
        _EVENTS,
    ),
    Table(
        "metadata_events",
        "view",
        "base",
        "Metadata events (ph M): process/thread names, labels and sort indices (see the processes and threads views).",
        _EVENTS,
    ),
    Table(
        "other_events",
        "view",
        "base",
        "Events of any other phase (B/E, async b/e/n, samples, unknown) or without ph: kept, not dropped.",
        _EVENTS,
    ),
    Table(
        "tracekit_info",
        "table",
        "base",
        "How this database was made: schema_version, tracekit_version, created_at, inputs, linked.",
        _cols("""
key VARCHAR  schema_version, tracekit_version, created_at (UTC), inputs (JSON list of paths) or linked ("true" once the linked tables are built).
value VARCHAR  The value.
"""),
    ),
    Table(
        "rule_kernel_precision",
        "table",
        "rules",
        "Kernel-name patterns -> precision class (tensor_core, fp32_simt); the first matching row by rule_order wins, no match is 'other'. From tracekit/rules/kernel_precision.csv plus user folders (--rules, $TRACEKIT_RULES_PATH).",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against gpu_ops.name ((?i) for case-insensitive).
precision VARCHAR  tensor_core, fp32_simt or other (explicit exclusions listed before the broad patterns).
note VARCHAR  Why the pattern means this.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_label_stages",
        "table",
        "rules",
        "record_function label patterns -> attention stage and/or attention call (tracekit/rules/label_stages.csv plus user folders). The first matching row by rule_order wins.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the annotation's name ((?i) for case-insensitive).
stage VARCHAR  Stage the label means (\\1: the pattern's first group, e.g. stage:softmax -> softmax); empty: none.
call VARCHAR  yes: each range with this label is one attention call.
impl VARCHAR  Attention implementation the label names (\\1 allowed), used when no op says more.
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_op_stages",
        "table",
        "rules",
        "CPU op name patterns -> stage, attention call and impl (tracekit/rules/op_stages.csv plus user folders). The first matching row by rule_order wins.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the cpu_op's name.
stage VARCHAR  Stage of the GPU ops launched below the op (matmul and proj are resolved to qk_matmul/pv_matmul and qkv_proj/out_proj by position in the call); empty: none.
call VARCHAR  yes: the op is (or starts) one attention call.
impl VARCHAR  Attention implementation (flash, efficient, cudnn, math, flex, paged, ...).
context VARCHAR  any: applies everywhere; call: only inside an attention call (generic ops such as aten::mul).
scope VARCHAR  outer: the outermost such op below the call decides for its subtree; inner: the op decides for its own subtree wherever it sits.
causal_arg VARCHAR  Index of is_causal in the op's Concrete Inputs; marks the op whose Input Dims give the call's shapes.
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_module_stages",
        "table",
        "rules",
        "Python scope patterns (nn.Module classes, function names) -> attention call and/or stage of the scope's subtree (tracekit/rules/module_stages.csv plus user folders). The first matching row by rule_order wins, so an exclusion row (no call, no stage) listed first keeps a broader row from matching.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the module class (nn.Module: <Class>_<n> -> <Class>) or the function name (file.py(42): <function>).
frame VARCHAR  module: the row matches nn.Module scopes; function: other Python frames (with_stack).
stage VARCHAR  Stage of every CPU slice and GPU op launched inside the scope (proj and norm are resolved by position in the call); empty: none.
call VARCHAR  yes: the outermost such scope is one attention call (nested ones join it).
context VARCHAR  any: applies everywhere; call: only inside an attention call.
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_serving_steps",
        "table",
        "rules",
        "Serving engines' step annotations -> serving steps (tracekit/rules/serving_steps.csv plus user folders): the record_function ranges vLLM, SGLang and others write around one model step, graph captures, and the Python scopes whose calls repeat once per step. Read by the serving_steps query; the first matching row by rule_order wins.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against a user_annotation's name (applies_to annotation), a python_function's name (applies_to python) or a GPU op's name (applies_to kernel).
applies_to VARCHAR  annotation: record_function ranges; python: python_function frames (with_stack / with_modules); kernel: the GPU ops of a step whose name tells no phase.
engine VARCHAR  The serving engine that writes the name (vllm_v1, vllm, sglang, amd_profile, any, generic).
kind VARCHAR  step: one model step; capture: a graph capture pass (warm-up, never steady state); forward: a model forward, a step only where no step or capture range holds it; phase: a kernel that gives a step whose name tells no phase (a forward scope, a graph replay) its phase.
phase VARCHAR  prefill, decode or mixed when the name says so; empty: from the request counts (both: mixed), else from the name's words.
context_requests VARCHAR  Regex whose first group is the number of requests in prefill; empty: none.
generation_requests VARCHAR  Regex whose first group is the number of requests decoding; empty: none.
context_tokens VARCHAR  Regex whose first group is the prefill tokens; empty: none.
generation_tokens VARCHAR  Regex whose first group is the decode tokens; empty: none.
batch VARCHAR  Regex whose first group is the batch size, counted as the phase's requests when the name has no split; empty: none.
tokens VARCHAR  Regex whose first group is the step's tokens, counted as the phase's tokens; empty: none.
versions VARCHAR  Engine versions (or shared traces) the name was seen in.
note VARCHAR  What the range is.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_kernel_stages",
        "table",
        "rules",
        "Kernel name patterns -> stage (tracekit/rules/kernel_stages.csv plus user folders): used when labels and ops leave a GPU op undecided (graph replays, orphans). Patterns see the name without template and parameter lists.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the kernel's base name (the kernel_base macro: a wrapper's inner name, no return type, <...> or (...)).
stage VARCHAR  Stage of the kernel.
impl VARCHAR  Attention implementation, when the name tells.
context VARCHAR  any: applies everywhere; call: only to kernels launched inside an attention call.
attention VARCHAR  yes: an attention kernel (counted in kernel-level attention time); helper: one too, that never starts a call of its own but joins the adjacent attention kernel's (a scheduler, a split-KV combine).
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_device_peaks",
        "table",
        "rules",
        "Device name patterns -> peak dense TFLOP/s per dtype and memory bandwidth (tracekit/rules/device_peaks.csv plus user folders): the roofline of gemm_calls and conv_calls. The first matching row by rule_order wins.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against devices.name ((?i) for case-insensitive).
device VARCHAR  Short device name; the device parameter of a query matches its start (H100 -> H100 SXM).
dtype VARCHAR  fp8, bf16, fp16, tf32, fp32 or fp64.
peak_tflops VARCHAR  Peak dense TFLOP/s for the dtype (a number).
peak_tbps VARCHAR  Peak memory bandwidth, TB/s (a number).
source VARCHAR  Where the numbers come from (vendor data sheet).
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_link_peaks",
        "table",
        "rules",
        "Device name patterns -> the peak bandwidth of the GPU's link to its peers (tracekit/rules/link_peaks.csv plus user folders): what a collective's busbw is held against (collective_bandwidth, slow_collectives). The first matching row by rule_order wins.",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against devices.name ((?i) for case-insensitive).
device VARCHAR  Short device name.
link VARCHAR  The link the peak is of (NVLink 4, PCIe Gen5 x16, Infinity Fabric, ...).
peak_gbps VARCHAR  Peak bandwidth per direction, GB/s (a number): nccl-tests' busbw reaches towards it.
source VARCHAR  Where the number comes from (vendor data sheet).
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_library_frames",
        "table",
        "rules",
        "Python file patterns of library code (tracekit/rules/library_frames.csv plus user folders): a with_stack frame whose file matches one is not the user's line that issued an attention call or a kernel (call_sources, kernel_sources).",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the frame's file as the profiler wrote it (e.g. torch/nn/modules/module.py).
library VARCHAR  The library it belongs to.
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "rule_op_categories",
        "table",
        "rules",
        "CPU op and kernel name patterns -> op category (tracekit/rules/op_categories.csv plus user folders): op_summary and op_categories. A GPU op that the gpu_op_category macro calls memcpy or communication is that; else the first op rule matching the launching op wins, else the first kernel rule, else other (a memset is computation, as in gpu_breakdown).",
        _cols(
            """
pattern VARCHAR  RE2 regular expression matched against the CPU op's name (applies_to op) or the GPU op's name (kernel).
applies_to VARCHAR  op or kernel.
category VARCHAR  GEMM, attention, elementwise, reduce, norm, conv, memcpy, communication or other.
note VARCHAR  Why.
"""
            + _RULE_COMMON
        ),
    ),
    Table(
        "cpu_stage_decisions",
        "table",
        "attention",
        "The CPU slices the attribution decided (a rule gave a stage, or the slice lies in an attention call), one row each; cpu_stages is every slice, the others other/none. Most slices of a trace are undecided: stored, they only repeated cpu_slices.",
        _cols("""
id BIGINT <unique not_null ref:cpu_slices.id>  cpu_slices.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
stage VARCHAR <in:stages>  Attention stage (NULL: in a call, no rule decided; cpu_stages shows other).
source VARCHAR  label, module or op (NULL: in a call, no rule decided; cpu_stages shows none).
call_id BIGINT <ref:attention_calls.call_id>  The attention call the slice belongs to, NULL outside one.
decider_id BIGINT <ref:events.id>  The annotation, op or module scope whose rule decided.
rule VARCHAR  The pattern of the deciding rule.
"""),
    ),
    Table(
        "gpu_op_stage_decisions",
        "table",
        "attention",
        "The GPU ops the attribution decided (a stage other than other, a call, a rule, an attention kernel or a kernel implementation), one row each; gpu_op_stages is every GPU op, the others other/none.",
        _cols("""
id BIGINT <unique not_null ref:gpu_ops.id>  gpu_ops.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
stage VARCHAR <not_null in:stages>  Attention stage (see gpu_op_stages.stage).
source VARCHAR  What decided (see gpu_op_stages.source).
call_id BIGINT <ref:attention_calls.call_id>  Attention call (attention_calls.call_id).
rule VARCHAR  The pattern of the deciding rule.
attention_kernel BOOLEAN  Counted in kernel-level attention time (see gpu_op_stages.attention_kernel).
kernel_impl VARCHAR  Implementation the kernel name tells (flash, efficient, cudnn, paged, ...).
"""),
    ),
    Table(
        "cpu_stages",
        "view",
        "attention",
        "Attention stage of every CPU slice (cpu_slices), decided by labels, then module scopes, then op rules; the basis of CPU-time attribution. A view: cpu_slices with cpu_stage_decisions.",
        _cols("""
id BIGINT <unique not_null ref:cpu_slices.id>  cpu_slices.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  cpu_slices.kind.
name VARCHAR  Name.
stage VARCHAR <not_null in:stages>  Attention stage (STAGE_LIST; see docs/attribution.md).
source VARCHAR  What decided: label, module, op, backward (autograd's work for a decided forward op, paired by Sequence number: docs/attribution.md), or none (then stage is other).
call_id BIGINT <ref:attention_calls.call_id>  The attention call the slice belongs to (attention_calls.call_id), NULL outside one.
decider_id BIGINT <ref:events.id>  The annotation or op (cpu_slices.id) or module scope (python_functions.id) whose rule decided; for source backward, the forward op whose stage it took.
rule VARCHAR  The pattern of the deciding rule.
self_ns BIGINT  The slice's self time, ns (cpu_slices.self_ns).
"""),
    ),
    Table(
        "gpu_op_stages",
        "view",
        "attention",
        "Attention stage of every GPU op: from its launch's cpu_stages (label, module, op), else Kineto's gpu_user_annotation (orphans), else kernel-name rules. A view: gpu_ops with gpu_op_stage_decisions.",
        _cols("""
id BIGINT <unique not_null ref:gpu_ops.id>  gpu_ops.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  kernel, memcpy or memset.
name VARCHAR  Kernel name.
stage VARCHAR <not_null in:stages>  Attention stage (see cpu_stages.stage).
source VARCHAR  What decided: label, module, op, backward (launched by autograd for a decided forward op), gpu_annotation, kernel, sequence (its place in the stream's kernel order around an attention kernel no CPU op holds: tracekit/attribution/kernel_blocks.py), or none (then stage is other).
call_id BIGINT <ref:attention_calls.call_id>  Attention call (attention_calls.call_id); an attention kernel outside any call is a call of its own.
rule VARCHAR  The pattern of the deciding rule.
attention_kernel BOOLEAN  Counted in kernel-level attention time: an attention kernel by name, or a kernel of stage KERNEL_LEVEL_LIST.
kernel_impl VARCHAR  Implementation the kernel name tells (flash, efficient, cudnn, paged, ...).
orphan BOOLEAN  gpu_ops.orphan.
dur_ns BIGINT  Duration, ns.
"""),
    ),
    Table(
        "attention_calls",
        "table",
        "attention",
        "One row per attention call: a range labelled as a call, an attention module scope (nn.Module: *Attention), an attention op (SDPA, flash_attn, vLLM, ...), an eager matmul -> softmax -> matmul found by op order, or an attention kernel found by name outside any call.",
        _cols("""
call_id BIGINT <unique not_null ref:events.id>  The call's id: the labelled range's or op's cpu_slices.id, the module scope's python_functions.id, an eager call's QK^T op (cpu_slices.id), the kernel's gpu_ops.id, or for a backward call of its own its first autograd node (cpu_slices.id).
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
impl VARCHAR  naive, eager, math, efficient, flash, cudnn, flex, paged, aiter, sage, ... or unknown: from the innermost op that names one, else the kernel names, else the label, else eager (module and eager calls) or naive (labelled calls) when QK^T/softmax/PV run unfused.
op VARCHAR  Name of the label, op, module scope or kernel that defines the call (eager calls: the three ops, QK^T > softmax > PV; a backward call of its own: its forward call's).
call_source VARCHAR  label, module, op, eager or kernel (a backward call of its own: its forward call's).
gpu_ops BIGINT  GPU ops launched inside the call.
gpu_ns BIGINT  Their summed duration: op-level time (helper kernels included), ns.
attention_kernel_ns BIGINT  Summed duration of the attention kernels only: kernel-level time, ns.
cpu_ns BIGINT  CPU duration of the call's range, op or module scope (eager calls: the block's first op's start to its last op's end, QK^T to PV without shapes; a call op widened to its block: the block's; a backward call: its first autograd node's start to its last one's end), ns (NULL for kernel-defined calls).
orphan BOOLEAN  All the call's GPU ops were launched before the trace began.
ts_ns BIGINT  Start of the call on the CPU (or of the kernel), ns.
batch BIGINT  Batch size (Input Dims of the SDPA op's query, else of a 4-D QK^T product).
heads BIGINT  Query heads.
kv_heads BIGINT  Key/value heads.
seq_q BIGINT  Query length.
seq_kv BIGINT  Key/value length.
head_dim BIGINT  Head dimension.
batch_heads BIGINT  batch * heads, or the leading dim of a 3-D QK^T bmm ([B*H, Sq, D]), which does not tell B and H apart.
causal BOOLEAN  is_causal from the op's Concrete Inputs.
dtype VARCHAR  Query dtype as written (e.g. c10::BFloat16).
flops BIGINT  4*batch_heads*seq_q*seq_kv*head_dim (QK^T and PV), halved when causal; times 2.5 for a fused backward op (five products: the scores again, dV, dP, dQ, dK), times 2 for a backward call of its own (dV, dP, dQ, dK).
direction VARCHAR  forward, or backward: a fused backward op (aten::*_backward: its Input Dims start with grad_out, then query and key), or autograd's nodes for an unfused forward call (a backward call of its own, with the forward call's impl and shapes); NULL for a call defined by a kernel name alone.
"""),
    ),
    Table(
        "cpu_slices",
        "table",
        "linked",
        "CPU-side slices that nest by time on one thread (cpu_op, user_annotation, runtime, driver, overhead), with their place in the stack. python_function events nest by python_parent_id instead.",
        _cols(_CPU_SLICE),
    ),
    Table(
        "runtime_calls",
        "table",
        "linked",
        "Runtime and driver API calls (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, hipLaunchKernel, cudaMemcpyAsync, ...) with their enclosing CPU op stack.",
        _cols("""
id BIGINT <unique not_null ref:cpu_slices.id>  slices.id of the call.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  runtime or driver.
api VARCHAR  API name, e.g. cudaLaunchKernel.
pid VARCHAR  Process id.
tid VARCHAR  Thread id.
ts_ns BIGINT  Start, ns.
dur_ns BIGINT  Duration (CPU time of the call), ns.
end_ns BIGINT  End, ns.
correlation BIGINT  Correlation id shared with the GPU ops it launched.
external_id BIGINT  External id of the CPU op that made the call.
cbid INTEGER {cbid}  args.cbid: CUPTI callback id.
cpu_op_id BIGINT <ref:cpu_slices.id>  Innermost enclosing cpu_op (cpu_slices.id), NULL when none.
cpu_op_name VARCHAR  Its name, e.g. aten::_flash_attention_forward.
top_op_id BIGINT <ref:cpu_slices.id>  Outermost enclosing cpu_op.
top_op_name VARCHAR  Its name, e.g. aten::scaled_dot_product_attention.
annotation_id BIGINT <ref:cpu_slices.id>  Innermost enclosing user_annotation (record_function range).
annotation_name VARCHAR  Its name.
annotations VARCHAR[]  Names of all enclosing user_annotations, outermost first.
graph_launch BOOLEAN  The call is a CUDA/HIP graph launch (one correlation for many GPU ops).
flow_matches BOOLEAN  An ac2g flow with this correlation starts at this call (same thread and time); false if such flows exist but none does; NULL if the trace has no ac2g flow for it.
"""),
    ),
    Table(
        "gpu_ops",
        "table",
        "linked",
        "GPU ops (kernels, memcpys, memsets) linked to their launch and, through it, the CPU op stack. GPU ops whose launch is not in the trace are kept: orphan = true when launched before the trace began, orphan_cause says why.",
        _cols("""
id BIGINT <unique not_null ref:events.id>  slices.id of the GPU op.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  kernel, memcpy or memset.
name VARCHAR  Kernel name (or "Memcpy DtoD (Device -> Device)", ...), whole as written: a return type (`void `), launch wrapper (`cutlass::device_kernel<...>`) or mangled symbol stays; tables show it demangled without the return type, kernel rules read kernel_base(name).
device INTEGER {device}  GPU index (args.device, else pid).
stream BIGINT {stream}  Stream (args.stream, else tid).
pid VARCHAR  pid as written.
tid VARCHAR  tid as written.
ts_ns BIGINT  Start on the GPU, ns.
dur_ns BIGINT  Duration on the GPU, ns.
end_ns BIGINT  End on the GPU, ns.
correlation BIGINT  Correlation id.
external_id BIGINT  External id.
launch_id BIGINT <ref:runtime_calls.id>  The runtime call that launched it (runtime_calls.id); NULL when its launch is not in the trace.
launch_api VARCHAR  API of the launch (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, hipExtModuleLaunchKernel, ...).
launch_tid VARCHAR  Thread of the launch.
launch_ts_ns BIGINT  Start of the launch call, ns (ts_ns - launch_ts_ns is the queueing delay).
orphan BOOLEAN  Launched before the trace began (orphan_cause = launched_before_trace): kept, and each query says whether it counts them.
orphan_cause VARCHAR  Why the op has no launch in the trace: launched_before_trace (a correlation id whose launch is not in the trace: queued before profiling began), no_correlation (no correlation id recorded: device-side work such as MTIA dma_request, counted like a linked op); NULL when linked.
via_graph BOOLEAN  Launched by a graph launch (one launch, many GPU ops).
launch_candidates INTEGER  Runtime calls in the trace with this correlation (more than 1: the one that began last before the GPU op was chosen).
cpu_op_id BIGINT <ref:cpu_slices.id>  Innermost cpu_op enclosing the launch (cpu_slices.id).
cpu_op_name VARCHAR  Its name, e.g. aten::_flash_attention_forward.
top_op_id BIGINT <ref:cpu_slices.id>  Outermost cpu_op enclosing the launch.
top_op_name VARCHAR  Its name, e.g. aten::scaled_dot_product_attention.
annotation_id BIGINT <ref:cpu_slices.id>  Innermost user_annotation enclosing the launch.
annotation_name VARCHAR  Its name, e.g. attn_fwd.
annotations VARCHAR[]  All user_annotations enclosing the launch, outermost first (ProfilerStep#N, ...).
grid INTEGER[] {grid}  args.grid: kernel grid dimensions [x, y, z].
block INTEGER[] {block}  args.block: kernel block dimensions [x, y, z].
registers_per_thread INTEGER {registers per thread}  args["registers per thread"].
shared_memory_bytes BIGINT {shared memory}  args["shared memory"]: static + dynamic shared memory per block, bytes.
blocks_per_sm DOUBLE {blocks per SM}  args["blocks per SM"] as reported by CUPTI.
warps_per_sm DOUBLE {warps per SM}  args["warps per SM"] as reported by CUPTI.
est_occupancy_pct DOUBLE {est. achieved occupancy %}  args["est. achieved occupancy %"] as reported by CUPTI (0 for cuLaunchKernelEx launches).
bytes BIGINT {bytes}  args.bytes: bytes moved by a memcpy or set by a memset.
memory_bandwidth_gbps DOUBLE {memory bandwidth (GB/s)}  args["memory bandwidth (GB/s)"] of a memcpy/memset.
"""),
    ),
    Table(
        "python_functions",
        "table",
        "linked",
        "python_function events (with_stack) with their Python ids and parent.",
        _cols("""
id BIGINT <unique not_null ref:events.id>  events.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
name VARCHAR  Python frame, e.g. "nn.Module: Attention_0" or "model.py(42): forward".
pid VARCHAR  Process id.
tid VARCHAR  Thread id.
ts_ns BIGINT  Start, ns.
dur_ns BIGINT  Duration, ns.
end_ns BIGINT  End, ns.
python_id BIGINT {Python id}  args["Python id"].
python_parent_id BIGINT {Python parent id}  args["Python parent id"]: the enclosing frame's python_id.
parent_id BIGINT <ref:python_functions.id>  The enclosing frame's id (python_functions.id): the frame with python_parent_id whose time contains this one (ids repeat in long recordings), NULL at the top.
"""),
    ),
    Table(
        "collectives",
        "table",
        "linked",
        "CPU ops and kernels carrying collective-communication args (record_param_comms, NCCL/RCCL kernels).",
        _cols("""
id BIGINT <unique not_null ref:events.id>  events.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  cpu_op or kernel.
name VARCHAR  Name as written.
pid VARCHAR  Process id (device for kernels).
tid VARCHAR  Thread id (stream for kernels).
ts_ns BIGINT  Start, ns.
dur_ns BIGINT  Duration, ns.
end_ns BIGINT  End, ns.
collective_name VARCHAR {Collective name}  args["Collective name"] (allreduce, allgather, ...).
in_msg_nelems BIGINT {In msg nelems}  args["In msg nelems"].
out_msg_nelems BIGINT {Out msg nelems}  args["Out msg nelems"].
group_size INTEGER {Group size}  args["Group size"].
dtype VARCHAR {dtype}  args.dtype.
in_split_size VARCHAR {In split size}  args["In split size"].
out_split_size VARCHAR {Out split size}  args["Out split size"].
pg_name VARCHAR {Process Group Name}  args["Process Group Name"].
pg_desc VARCHAR {Process Group Description}  args["Process Group Description"].
pg_ranks VARCHAR {Process Group Ranks}  args["Process Group Ranks"].
seq BIGINT {Seq}  args.Seq: the collective's sequence number within its process group (PyTorch 2.4 and later; NULL before).
"""),
    ),
    Table(
        "cpu_ops",
        "view",
        "linked",
        "cpu_slices of kind cpu_op (aten:: and other operators).",
        _cols(_CPU_SLICE),
    ),
    Table(
        "python_frames",
        "view",
        "linked",
        "The with_stack Python frames that name a file and a line, parsed, with the library their file belongs to (rule_library_frames; NULL: user code): what call_sources and kernel_sources read the issuing line from.",
        _cols("""
id BIGINT <unique not_null ref:python_functions.id>  python_functions.id.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
pid VARCHAR  Process id.
tid VARCHAR  Thread id.
ts_ns BIGINT  Start, ns.
end_ns BIGINT  End, ns.
file VARCHAR  The file as the profiler wrote it, e.g. transformers/models/bert/modeling_bert.py.
line BIGINT  The line.
function VARCHAR  The function.
library VARCHAR  The library of the first rule_library_frames row whose pattern matches the file; NULL: user code.
"""),
    ),
    Table(
        "annotations",
        "view",
        "linked",
        "cpu_slices of kind user_annotation (record_function ranges, ProfilerStep#N).",
        _cols(_CPU_SLICE),
    ),
    Table(
        "profiler_steps",
        "view",
        "linked",
        "The profiler steps: one row per ProfilerStep#N range (the user_annotation prof.step() records). "
        "The one definition of a step that queries share (see the step_of macro).",
        _cols("""
id BIGINT <unique ref:cpu_slices.id>  cpu_slices.id of the range.
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
pid VARCHAR  Process id.
tid VARCHAR  Thread id (the thread that called prof.step()).
step_name VARCHAR  The range's name, e.g. ProfilerStep#4.
step BIGINT  N of ProfilerStep#N (NULL if the name has no number).
ts_ns BIGINT  Start, ns.
end_ns BIGINT  End, ns.
dur_ns BIGINT  Duration (CPU time of the step), ns.
"""),
    ),
    Table(
        "kernel_precision_classes",
        "view",
        "rules",
        "Every distinct kernel name with its precision class: the first rule_kernel_precision row (by rule_order) whose pattern matches, else other. The queries kernel_precision, kernel_classes and findings.fp32_simt_gemm read it.",
        _cols("""
name VARCHAR  Kernel name (gpu_ops.name of kind kernel).
precision VARCHAR  tensor_core, fp32_simt or other.
rule VARCHAR  Pattern of the deciding row (NULL: none matched).
rule_note VARCHAR  That row's note.
rule_order INTEGER  That row's rule_order.
"""),
    ),
    Table(
        "gpu_op_events",
        "view",
        "base",
        "GPU ops (kernels, memcpys, memsets) straight from events, with whether a runtime call of the same "
        "correlation is in the trace: the rows of gpu_ops and its orphan_cause, there from the load "
        "on, before the linked model is built. gpu_timeline and top_kernels read it.",
        _cols("""
id BIGINT <unique not_null>  events.id (= gpu_ops.id).
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
kind VARCHAR  kernel, memcpy or memset.
name VARCHAR  Name as written.
pid VARCHAR  pid as written (the device).
tid VARCHAR  tid as written (the stream).
ts_ns BIGINT  Start on the GPU, ns.
dur_ns BIGINT  Duration on the GPU, ns.
end_ns BIGINT  End, ns.
correlation BIGINT  args.correlation.
linked BOOLEAN  A runtime/driver call of the trace has this correlation (gpu_ops.launch_id IS NOT NULL).
orphan_cause VARCHAR  gpu_ops.orphan_cause: launched_before_trace, no_correlation, or NULL when linked (the orphan_cause macro).
orphan BOOLEAN  gpu_ops.orphan: launched before the trace began (the is_orphan macro).
"""),
    ),
    Table(
        "collective_kernels",
        "view",
        "base",
        "The device side of every collective and point-to-point transfer: GPU kernels that is_collective_kernel "
        "says are communication (NCCL ncclKernel_*/ncclDevKernel_*, RCCL, ...), and on CPU Gloo's gloo:* ranges "
        "(from the op's enqueue to the collective's completion), with their process group and "
        "the key and instance that identify the same transfer on every rank taking part. There from the load "
        "on; clock alignment and the cluster queries read it.",
        _cols("""
id BIGINT <unique not_null>  events.id (= gpu_ops.id; of a gloo:* range, cpu_slices.id).
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
name VARCHAR  Kernel (or gloo:* range) name as written.
pid VARCHAR  pid as written (the device).
tid VARCHAR  tid as written (the stream).
ts_ns BIGINT  Start on the GPU, ns (the trace's own clock; see traces.clock_offset_ns).
dur_ns BIGINT  Duration, ns: on a rank that arrived early it includes the wait for the last rank.
end_ns BIGINT  End, ns.
collective VARCHAR  args["Collective name"] of the kernel, else of the record_param_comms op of its External id (which launched it), else the collective the name says (gloo:all_reduce -> allreduce; collective_of_kernel).
pg_name VARCHAR  args["Process Group Name"] of the kernel, else of its record_param_comms op (NULL when neither says).
pg_desc VARCHAR  args["Process Group Description"] (kernel, else its op).
pg_ranks VARCHAR  args["Process Group Ranks"] (kernel, else its op).
group_size INTEGER  args["Group size"] (kernel, else its op).
seq BIGINT  args.Seq (kernel, else its op): sequence number within the process group (PyTorch 2.4 and later).
pg VARCHAR  The process group as matched across ranks: pg_name and pg_ranks ("?" for the name when not recorded).
p2p BOOLEAN  Point-to-point (send, recv, SendRecv kernels): matched by its two ranks and order, not as a collective.
peer INTEGER  Of a point-to-point kernel, the other rank (global): args "Dst Rank" of a send or "Src Rank" of a recv, else the group rank "Rank" names in pg_ranks, else the other rank of a two-rank group or a two-rank job; NULL when none says (not matched).
match_key VARCHAR  What the same transfer is found by on every rank, with pg and instance: the collective, or for point-to-point "p2p 0->1" (send/recv, sender first) or "p2p 0<->1" (SendRecv); NULL for a point-to-point kernel whose peer is not known.
matched_on VARCHAR  How instance is numbered: Seq (args Seq), order (order of occurrence in the group: assumes the ranks' profiling windows start at the same collective), peer and order (point-to-point: order among the transfers between the two ranks); NULL when not matchable.
instance BIGINT  seq, else the order of occurrence of this collective in this group on this trace, from 0; point-to-point: the order among this trace's kernels of the same match_key, from 0.
part BIGINT  Order among kernels of the same instance on this trace (coalesced collectives), from 0.
"""),
    ),
    Table(
        "processes",
        "view",
        "base",
        "Process names, labels and sort order from metadata events.",
        _cols("""
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
pid VARCHAR  Process id.
name VARCHAR  process_name.
labels VARCHAR  process_labels (e.g. "CPU", "GPU 0").
sort_index BIGINT  process_sort_index.
"""),
    ),
    Table(
        "threads",
        "view",
        "base",
        "Thread (and GPU stream) names and sort order from metadata events.",
        _cols("""
trace_id INTEGER <ref:traces.trace_id>  traces.trace_id.
pid VARCHAR  Process id.
tid VARCHAR  Thread id.
name VARCHAR  thread_name (e.g. "stream 7").
sort_index BIGINT  thread_sort_index.
"""),
    ),
]

TABLES: dict[str, Table] = {t.name: t for t in _TABLES}


def args_fields(table: str) -> list[tuple[str, str, str]]:
    """``(args key, column, type)`` of the columns of ``table`` typed from ``args``, in column order."""
    return [(c.arg, c.name, c.type) for c in TABLES[table].columns if c.arg is not None]


# The id spaces a merge of separately loaded traces renumbers: each is the column other ids refer to.
ID_SPACES = ("events.id", "traces.trace_id")


@functools.cache  # a dataset's views ask it of every column of every table, at each open
def id_space(table: str, column: str) -> str | None:
    """The id space (``ID_SPACES``) of a column: the root of its ``<ref:...>`` checks, followed
    transitively (``gpu_ops.launch_id`` -> ``runtime_calls.id`` -> ``cpu_slices.id`` -> ``events.id``);
    None for a column that holds no id of this database (a count, or an id as the file writes it,
    such as ``correlation`` or ``python_id``)."""
    seen: list[str] = []
    at = f"{table}.{column}"
    while at not in ID_SPACES:
        if at in seen:
            raise ValueError(f"circular <ref:> checks: {' -> '.join(seen)}")
        seen.append(at)
        t, c = at.split(".")
        col = next(x for x in TABLES[t].columns if x.name == c)
        refs = [k[4:] for k in col.checks if k.startswith("ref:")]
        if not refs:
            return None
        at = refs[0]
    return at


def id_columns(table: str) -> dict[str, str]:
    """The columns of ``table`` that hold ids of this database, with their id space (``id_space``):
    what a merge of traces loaded apart shifts by the events (or traces) before each trace."""
    spaces = {c.name: id_space(table, c.name) for c in TABLES[table].columns}
    return {name: space for name, space in spaces.items() if space is not None}


def per_trace(table: str) -> bool:
    """Whether ``table`` holds rows of each trace (a column of trace ids): a merge appends every
    trace's rows, a dataset partitions it by trace. The others (the rule tables) are global."""
    return "traces.trace_id" in id_columns(table).values()


def ddl(table: str) -> str:
    """The column list of ``CREATE TABLE table (...)`` for a base table."""
    return ", ".join(f"{c.name} {c.type}" for c in TABLES[table].columns)


def comments(names) -> str:
    """``COMMENT ON`` statements (one string) documenting the tables and views ``names`` and
    their columns in the database itself, so other DuckDB tools (the CLI's ``.schema``,
    ``duckdb_columns().comment``, DBeaver, ...) show the docs of docs/schema.md."""
    from tracekit.common.sqltext import literal

    out = []
    for name in names:
        t = TABLES.get(name)
        if t is None:
            continue
        out.append(f"COMMENT ON {'VIEW' if t.kind == 'view' else 'TABLE'} {name} IS {literal(t.doc)}")
        out += [f"COMMENT ON COLUMN {name}.{c.name} IS {literal(c.doc)}" for c in t.columns]
    return ";\n".join(out)
