"""Normalized event kinds: one vocabulary for every category name in the wild.

Kineto renamed its categories over the years (2021's ``Operator`` /
``Runtime`` / ``Kernel`` became ``cpu_op`` / ``cuda_runtime`` / ``kernel``;
2021's record_function ranges were ``Operator`` too, and ingest tells them
apart by name and shapes),
ROCm keeps CUDA's names, and MTIA has its own. Queries use ``kind`` and never
the raw ``cat``; the raw ``cat`` stays in every table for ``event_counts``.
"""

from __future__ import annotations

# lower(cat) -> kind
CATEGORY_KINDS: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "hip_runtime": "runtime",
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "hip_driver": "driver",
    "xpu_driver": "driver",
    "privateuse1_driver": "driver",
    "kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "gpu_user_annotation": "gpu_user_annotation",
    "cuda_sync": "sync",
    "ac2g": "ac2g",
    "async": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "async_gpu": "ac2g",
    "fwdbwd": "fwdbwd",
    "cpu_instant_event": "cpu_instant",
    "gpu_instant_event": "gpu_instant",
    "overhead": "overhead",
    "trace": "trace_span",
    "cuda_profiler_range": "profiler_range",
}

# Kinds that run on a GPU stream (pid = device, tid = stream).
# GPU ops: the work whose intervals make up GPU busy time.
GPU_OP_KINDS = ("kernel", "memcpy", "memset")
# CPU-side slices that nest by time on one thread (python_function nests by
# its own explicit parent ids instead, and would multiply the nesting pairs).
CPU_NEST_KINDS = ("cpu_op", "user_annotation", "runtime", "driver", "overhead", "profiler_range")
LAUNCH_KINDS = ("runtime", "driver")

# Why a GPU op has no launch in the trace. A correlation id whose runtime
# call is not in the trace: the op was queued before profiling began (an
# orphan; queries leave it out unless include_orphans). No correlation id at
# all (NULL, or CUPTI's 0): the device recorded work that no host call
# launched (MTIA dma_request, ...); it is real work inside the window and
# counts like a linked op.
ORPHAN_CAUSES = ("launched_before_trace", "no_correlation")
