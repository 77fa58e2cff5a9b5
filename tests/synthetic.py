"""Synthetic Kineto traces whose ground truth is known by construction.

Stdlib only. ``TraceBuilder`` appends events exactly as PyTorch's Kineto writes
them (field order, categories, args keys, ``ts``/``dur`` as microseconds with a
3-decimal nanosecond fraction, GPU pid = device and tid = stream, ``ac2g`` flows
keyed by correlation id) and keeps a ``truth`` record computed by plain Python
from what it wrote, never by tracekit. ``post_variants`` builds one trace per
attention variant of the Hugging Face post "Profiling in PyTorch (Part 3):
Attention is all you profile" with its kernel names and structure, plus the
answers the post reads off each trace.

Times passed to the builder are integer nanoseconds relative to the builder's
``origin_ns``; everything written (and every ``ts_ns`` in a truth record) is
absolute: ``ts`` in the file = (origin_ns + t) / 1000 µs.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field

from tracekit.schema import stages

# A real A100-SXM4-80GB as cudaGetDeviceProperties reports it to Kineto.
A100_SXM4_80GB = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "totalGlobalMem": 84986691584,
    "computeMajor": 8,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 167936,
    "numSms": 108,
    "sharedMemPerBlockOptin": 166912,
}

# CUPTI callback ids (cbid) as they appear in real traces.
CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cuLaunchKernel": 307,
    "cuLaunchKernelEx": 652,
    "cudaGraphLaunch": 311,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaDeviceSynchronize": 165,
    "cudaEventRecord": 135,
    "cudaEventQuery": 138,
    "cudaStreamWaitEvent": 147,
    "cudaStreamIsCapturing": 317,
    "cudaFuncSetAttribute": 273,
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor": 210,
}

# 2021-era category names (torch 1.8/1.9 Kineto) for the modern ones.
LEGACY_CATS = {
    "cpu_op": "Operator",
    "user_annotation": "Operator",
    "cuda_runtime": "Runtime",
    "cuda_driver": "Runtime",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
    "ac2g": "async",
}

DEFAULT_ORIGIN_NS = 2_413_668_742_269_099  # a steady-clock µs value like real traces (2.4e12 µs)
BASE_TIME_NS = 1_751_410_836_000_000_000
# When the stream is idle a kernel starts this long after its launch call returns;
# back-to-back kernels on a busy stream are separated by GPU_GAP_NS.
LAUNCH_TO_GPU_NS = 1_024
GPU_GAP_NS = 1_536
# Kineto prints these two kernel args with C's "%f".
_SIX_DECIMALS = ("blocks per SM", "warps per SM")


def us(ns: int) -> str:
    """Integer ns -> Kineto's exact µs text with 3 decimals (its "{}.{:03}" format)."""
    if ns < 0:
        raise ValueError(f"negative time {ns} ns")
    return f"{ns // 1000}.{ns % 1000:03d}"


def theoretical_occupancy(
    registers_per_thread: int, threads_per_block: int, shared_memory: int = 0, device: dict = A100_SXM4_80GB
) -> dict:
    """Blocks/warps per SM and occupancy as the CUDA occupancy calculator derives them.

    Registers are allocated per warp in units of 256; each block also reserves
    1 KiB of shared memory on sm_80; an SM holds at most 32 blocks.
    """
    warps_per_block = math.ceil(threads_per_block / device["warpSize"])
    regs_per_warp = math.ceil(registers_per_thread * device["warpSize"] / 256) * 256
    max_warps = device["maxThreadsPerMultiprocessor"] // device["warpSize"]
    limits = [32, max_warps // warps_per_block]
    if registers_per_thread:
        limits.append(device["regsPerMultiprocessor"] // (regs_per_warp * warps_per_block))
    if shared_memory:
        limits.append(device["sharedMemPerMultiprocessor"] // (shared_memory + 1024))
    blocks = min(limits)
    warps = blocks * warps_per_block
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": warps,
        "max_warps_per_sm": max_warps,
        "occupancy_pct": 100.0 * warps / max_warps,
    }


@dataclass
class OpResult:
    """What ``op_with_kernels`` wrote: CPU extent and one entry per GPU op."""

    external_id: int
    start_ns: int
    end_ns: int
    gpu: list = field(default_factory=list)  # dicts: correlation, name, kind, api, ts_ns (relative), dur_ns


class TraceBuilder:
    """Appends Kineto events one call at a time and tracks their ground truth.

    ``legacy=True`` writes the 2021 schema instead: categories ``Operator`` /
    ``Runtime`` / ``Kernel`` / ``Memcpy`` / ``Memset``, flows ``async`` named
    ``launch``, lowercase ``external id`` on runtime and GPU events, CPU tids as
    strings and GPU tids as ``"stream N"``.
    """

    def __init__(
        self,
        *,
        pid: int = 3727853,
        tid: int | None = None,
        origin_ns: int = DEFAULT_ORIGIN_NS,
        legacy: bool = False,
        trace_name: str = "synthetic.json",
        process_name: str = "python3",
        devices: tuple = (0,),
        distributed_info: dict | None = None,
        base_time_ns: int = BASE_TIME_NS,
        metadata: dict | None = None,
    ):
        self.metadata = dict(metadata or {})  # extra top-level keys, written after deviceProperties
        self.pid, self.tid = pid, pid if tid is None else tid
        self.origin_ns, self.legacy = origin_ns, legacy
        self.trace_name, self.process_name = trace_name, process_name
        self.device_properties = [dict(A100_SXM4_80GB, id=d) for d in devices]
        self.distributed_info = distributed_info
        self.base_time_ns = base_time_ns
        self.events: list[dict] = []  # "ts"/"dur" hold absolute integer ns until rendered
        self._counts: Counter = Counter()
        self._gpu_ops: list[tuple] = []  # (device, start_ns, end_ns, name, correlation), absolute
        self._launch_corrs: set = set()
        self._open: dict = {}  # External id -> event whose dur is still unknown
        self._ext_ts: dict = {}  # External id -> ts (legacy "external ts")
        self._stream_free: dict = {}  # (device, stream) -> absolute ns when it is next idle
        self._cpu_tids: set = set()
        self._streams: set = set()
        self._next = {"ext": 1, "corr": 8192, "orphan_corr": 1, "ev_idx": 0, "py": 1}
        self._finished = False

    # ---- plumbing -------------------------------------------------------------

    def _new(self, key: str) -> int:
        self._next[key] += 1
        return self._next[key] - 1

    def _cat(self, cat: str) -> str:
        return LEGACY_CATS.get(cat, cat) if self.legacy else cat

    def _cpu_tid(self, tid):
        tid = self.tid if tid is None else tid
        self._cpu_tids.add(tid)
        return str(tid) if self.legacy else tid  # 2021 traces wrote CPU tids as strings

    def _gpu_tid(self, device, stream):
        self._streams.add((device, stream))
        return f"stream {stream}" if self.legacy else stream

    def _add(self, ev: dict) -> dict:
        self.events.append(ev)
        self._counts[(ev["ph"], ev.get("cat"))] += 1
        return ev

    def _flow(self, ph: str, corr: int, pid, tid, ts_abs: int) -> None:
        # Kineto links a launch to its GPU op(s) with one flow id = correlation:
        # "s" on the launch, "f" (binding "e") on every GPU op.
        if self.legacy:  # 2021: the "s" kept integer ids, the "f" sat on "stream N"
            ev = {
                "ph": ph,
                "id": corr,
                "pid": pid,
                "tid": int(tid) if ph == "s" else tid,
                "ts": ts_abs,
                "cat": "async",
                "name": "launch",
            }
        else:
            ev = {"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": ts_abs, "cat": "ac2g", "name": "ac2g"}
        if ph == "f":
            ev["bp"] = "e"
        self._add(ev)

    # ---- CPU side -----------------------------------------------------------

    def cpu_op(
        self,
        name: str,
        ts_ns: int,
        dur_ns: int | None,
        *,
        tid: int | None = None,
        args: dict | None = None,
        cat: str = "cpu_op",
    ) -> int:
        """Append a CPU op (``cat`` cpu_op) and return its External id.

        ``args`` (e.g. ``Input Dims`` / ``Input type`` / ``Concrete Inputs``) go
        between ``Record function id`` and ``Ev Idx`` as Kineto orders them.
        ``dur_ns=None`` leaves the op open until ``close(external_id, end_ns)``,
        so parents can be written before their children (as Kineto numbers them).
        """
        ext = self._new("ext")
        ts_abs = self.origin_ns + ts_ns
        if self.legacy:
            a = {
                "Device": self.pid,
                "External id": ext,
                "Trace name": "PyTorch Profiler",
                "Trace iteration": 0,
                **(args or {}),
            }
        else:
            a = {"External id": ext, "Record function id": 0, **(args or {}), "Ev Idx": self._new("ev_idx")}
        ev = self._add(
            {
                "ph": "X",
                "cat": self._cat(cat),
                "name": name,
                "pid": self.pid,
                "tid": self._cpu_tid(tid),
                "ts": ts_abs,
                "dur": dur_ns,
                "args": a,
            }
        )
        self._ext_ts[ext] = ts_abs
        if dur_ns is None:
            self._open[ext] = ev
        return ext

    def close(self, external_id: int, end_ns: int) -> None:
        """Set the end of an op opened with ``dur_ns=None``."""
        ev = self._open.pop(external_id)
        ev["dur"] = self.origin_ns + end_ns - ev["ts"]
        if ev["dur"] < 0:
            raise ValueError(f"{ev['name']} would end before it starts")

    def user_annotation(self, name: str, ts_ns: int, dur_ns: int | None, *, tid: int | None = None) -> int:
        """A ``record_function`` range (cat user_annotation); returns its External id."""
        return self.cpu_op(name, ts_ns, dur_ns, tid=tid, cat="user_annotation")

    def profiler_step(self, n: int, start_ns: int, dur_ns: int | None) -> int:
        """The ``ProfilerStep#n`` range that ``prof.step()`` records."""
        return self.user_annotation(f"ProfilerStep#{n}", start_ns, dur_ns)

    def python_function(
        self, name: str, ts_ns: int, dur_ns: int, *, parent_id: int | None = None, tid: int | None = None
    ) -> int:
        """A ``with_stack`` frame (cat python_function); returns its Python id."""
        py_id = self._new("py")
        self._add(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": self.pid,
                "tid": self._cpu_tid(tid),
                "ts": self.origin_ns + ts_ns,
                "dur": dur_ns,
                "args": {"Python parent id": parent_id, "Python id": py_id, "Ev Idx": self._new("ev_idx")},
            }
        )
        return py_id

    def runtime_call(
        self,
        api: str,
        ts_ns: int,
        dur_ns: int,
        *,
        correlation: int | None = None,
        external_id: int | None = None,
        tid: int | None = None,
        flow: str | None = None,
    ) -> int:
        """A CUDA runtime (``cuda*``) or driver (``cu*``) call; returns its correlation.

        ``flow="s"`` adds the ac2g flow start a GPU-launching call carries.
        """
        corr = self._new("corr") if correlation is None else correlation
        cat = "cuda_runtime" if api.startswith("cuda") else "cuda_driver"
        ts_abs = self.origin_ns + ts_ns
        if self.legacy:
            args = {
                "cbid": CBID.get(api, 0),
                "correlation": corr,
                "external id": external_id or 0,
                "external ts": self._ext_ts.get(external_id, 0) // 1000,
            }  # integer µs
        else:
            args = {} if external_id is None else {"External id": external_id}
            args.update({"cbid": CBID.get(api, 0), "correlation": corr})
        tid_v = self._cpu_tid(tid)
        self._add(
            {
                "ph": "X",
                "cat": self._cat(cat),
                "name": api,
                "pid": self.pid,
                "tid": tid_v,
                "ts": ts_abs,
                "dur": dur_ns,
                "args": args,
            }
        )
        self._launch_corrs.add(corr)
        if flow:
            self._flow(flow, corr, self.pid, tid_v, ts_abs)
        return corr

    def launch(
        self,
        api: str,
        ts_ns: int,
        dur_ns: int,
        correlation: int | None = None,
        *,
        tid: int | None = None,
        external_id: int | None = None,
    ) -> int:
        """A launch call (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaMemcpyAsync``...)
        with its ``ac2g`` flow start at the same pid/tid/ts; returns the correlation."""
        return self.runtime_call(
            api, ts_ns, dur_ns, correlation=correlation, external_id=external_id, tid=tid, flow="s"
        )

    # ---- GPU side -----------------------------------------------------------

    def _gpu_op(
        self, cat, name, ts_ns, dur_ns, correlation, device, stream, external_id, extra: dict, queued: bool
    ) -> dict:
        ts_abs = self.origin_ns + ts_ns
        base = {"queued": 0} if queued else {}
        base.update({"device": device, "context": 1, "stream": stream, "correlation": correlation})
        if self.legacy:
            args = {**base, "external id": external_id or 0, **extra}
        else:
            args = {**({} if external_id is None else {"External id": external_id}), **base, **extra}
        tid = self._gpu_tid(device, stream)
        ev = self._add(
            {
                "ph": "X",
                "cat": self._cat(cat),
                "name": name,
                "pid": device,
                "tid": tid,
                "ts": ts_abs,
                "dur": dur_ns,
                "args": args,
            }
        )
        self._flow("f", correlation, device, tid, ts_abs)
        self._gpu_ops.append((device, ts_abs, ts_abs + dur_ns, name, correlation))
        key = (device, stream)
        self._stream_free[key] = max(self._stream_free.get(key, 0), ts_abs + dur_ns)
        return ev

    def kernel(
        self,
        name: str,
        ts_ns: int,
        dur_ns: int,
        correlation: int,
        *,
        stream: int = 7,
        device: int = 0,
        external_id: int | None = None,
        grid=(1, 1, 1),
        block=(128, 1, 1),
        registers_per_thread: int = 32,
        shared_memory: int = 0,
        blocks_per_sm: float | None = None,
        warps_per_sm: float | None = None,
        est_occupancy: int | None = None,
    ) -> dict:
        """A kernel (cat kernel) plus its ``ac2g`` flow end.

        Unset ``blocks_per_sm`` / ``warps_per_sm`` follow CUPTI (grid blocks /
        SMs, times warps per block); unset ``est_occupancy`` is those warps
        capped by the theoretical occupancy, in % of the SM's warps.
        """
        props = self.device_properties[0]
        threads = block[0] * block[1] * block[2]
        warps_per_block = math.ceil(threads / props["warpSize"])
        blocks = grid[0] * grid[1] * grid[2]
        if blocks_per_sm is None:
            blocks_per_sm = round(blocks / props["numSms"], 6)
        if warps_per_sm is None:
            warps_per_sm = round(blocks * warps_per_block / props["numSms"], 6)
        if est_occupancy is None:
            th = theoretical_occupancy(registers_per_thread, threads, shared_memory, props)
            est_occupancy = int(100 * min(warps_per_sm, th["warps_per_sm"]) / th["max_warps_per_sm"])
        extra = {
            "registers per thread": registers_per_thread,
            "shared memory": shared_memory,
            "blocks per SM": blocks_per_sm,
            "warps per SM": warps_per_sm,
            "grid": list(grid),
            "block": list(block),
            "est. achieved occupancy %": est_occupancy,
        }
        return self._gpu_op("kernel", name, ts_ns, dur_ns, correlation, device, stream, external_id, extra, queued=True)

    def memcpy(
        self,
        name: str,
        ts_ns: int,
        dur_ns: int,
        correlation: int,
        *,
        bytes: int,
        stream: int = 7,
        device: int = 0,
        external_id: int | None = None,
    ) -> dict:
        """A copy (cat gpu_memcpy), e.g. ``Memcpy DtoD (Device -> Device)``."""
        extra = {"bytes": bytes, "memory bandwidth (GB/s)": bytes / dur_ns}  # bytes/ns == GB/s
        return self._gpu_op(
            "gpu_memcpy", name, ts_ns, dur_ns, correlation, device, stream, external_id, extra, queued=False
        )

    def memset(
        self,
        ts_ns: int,
        dur_ns: int,
        correlation: int,
        *,
        bytes: int,
        name: str = "Memset (Device)",
        stream: int = 7,
        device: int = 0,
        external_id: int | None = None,
    ) -> dict:
        """A memset (cat gpu_memset)."""
        extra = {"bytes": bytes, "memory bandwidth (GB/s)": bytes / dur_ns}
        return self._gpu_op(
            "gpu_memset", name, ts_ns, dur_ns, correlation, device, stream, external_id, extra, queued=False
        )

    def orphan_kernel(self, name: str, ts_ns: int, dur_ns: int, *, correlation: int | None = None, **kernel_kw) -> dict:
        """A kernel queued before profiling began: its correlation has no launch in
        the trace (and, as Kineto writes it, a flow end without a start)."""
        corr = self._new("orphan_corr") if correlation is None else correlation
        return self.kernel(name, ts_ns, dur_ns, corr, **kernel_kw)

    def gpu_user_annotation(
        self, name: str, ts_ns: int, dur_ns: int, external_id: int, *, device: int = 0, stream: int = 7
    ) -> dict:
        """Kineto's projection of a user_annotation onto a GPU stream. Not a GPU op."""
        if self.legacy:
            raise ValueError("2021 traces have no gpu_user_annotation")
        return self._add(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": name,
                "pid": device,
                "tid": self._gpu_tid(device, stream),
                "ts": self.origin_ns + ts_ns,
                "dur": dur_ns,
                "args": {"External id": external_id},
            }
        )

    def cuda_sync(
        self,
        kind: str,
        ts_ns: int,
        dur_ns: int,
        correlation: int,
        *,
        device: int = 0,
        stream: int = -1,
        external_id: int | None = None,
        wait_on_stream: int = -1,
        wait_event_corr: int = -1,
        event_id: int = -1,
    ) -> dict:
        """A CUPTI synchronization record (cat cuda_sync): ``Context Sync``,
        ``Stream Sync``, ``Event Sync`` or ``Stream Wait Event``. Not a GPU op."""
        args = {} if external_id is None else {"External id": external_id}
        args["cuda_sync_kind"] = kind
        if kind in ("Event Sync", "Stream Wait Event"):
            args.update(
                {
                    "wait_on_stream": wait_on_stream,
                    "wait_on_cuda_event_record_corr_id": wait_event_corr,
                    "wait_on_cuda_event_id": event_id,
                }
            )
        args.update({"stream": stream, "correlation": correlation, "device": device, "context": 1})
        return self._add(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": kind,
                "pid": device,
                "tid": self._gpu_tid(device, stream),
                "ts": self.origin_ns + ts_ns,
                "dur": dur_ns,
                "args": args,
            }
        )

    # ---- conveniences -------------------------------------------------------

    def gpu_start(self, ready_ns: int, *, device: int = 0, stream: int = 7) -> int:
        """When a GPU op issued at ``ready_ns`` starts on a FIFO stream (relative ns)."""
        free = self._stream_free.get((device, stream))
        start = self.origin_ns + ready_ns
        if free is not None:
            start = max(start, free + GPU_GAP_NS)
        return start - self.origin_ns

    def _emit_gpu(self, spec: tuple, corr: int, launch_ns: int, ready_ns: int, external_id) -> dict:
        name, start, dur, extra = (tuple(spec) + ({},))[:4]
        extra = dict(extra or {})
        for launch_only in ("api", "launch_ns"):  # used by the caller, not by the GPU event
            extra.pop(launch_only, None)
        where = {"device": extra.pop("device", 0), "stream": extra.pop("stream", 7)}
        if start is None:
            start = self.gpu_start(ready_ns, **where)
        elif start < launch_ns:
            raise ValueError(f"{name} would start before the call that launched it")
        if name.startswith("Memcpy"):
            kind = "memcpy"
            self.memcpy(name, start, dur, corr, external_id=external_id, **where, **extra)
        elif name.startswith("Memset"):
            kind = "memset"
            self.memset(start, dur, corr, name=name, external_id=external_id, **where, **extra)
        else:
            kind = "kernel"
            self.kernel(name, start, dur, corr, external_id=external_id, **where, **extra)
        return {"correlation": corr, "name": name, "kind": kind, "ts_ns": start, "dur_ns": dur}

    def op_with_kernels(
        self,
        op_name: str,
        start_ns: int,
        kernels,
        *,
        launch_api: str = "cudaLaunchKernel",
        tid: int | None = None,
        args: dict | None = None,
        children=(),
        pre_ns: int = 4_000,
        launch_ns: int = 5_200,
        launch_gap_ns: int = 1_100,
        post_ns: int = 2_300,
    ) -> OpResult:
        """A cpu_op that launches one GPU op per entry of ``kernels``.

        ``kernels``: ``(name, gpu_start_ns | None, gpu_dur_ns[, extra])``. A
        ``None`` start schedules the op on its stream after the launch returns
        and after the stream's previous op. ``extra`` holds ``kernel()`` /
        ``memcpy()`` keywords plus ``api`` / ``launch_ns`` overrides; names
        starting ``Memcpy`` / ``Memset`` become copies / memsets launched with
        ``cudaMemcpyAsync`` / ``cudaMemsetAsync``. ``children`` are names of
        kernel-less ops (``aten::empty``...) placed before the launches. Every
        launch lies strictly inside the op; correlation and External ids are
        allocated here.
        """
        ext = self.cpu_op(op_name, start_ns, None, tid=tid, args=args)
        t = start_ns + 500
        for child in children:  # kernel-less ops, e.g. output allocation
            self.cpu_op(child, t, 1_800, tid=tid)
            t += 2_100
        t = max(t + 400, start_ns + pre_ns)
        res = OpResult(ext, start_ns, 0)
        for spec in kernels:
            extra = spec[3] if len(spec) > 3 else {}
            default_api = (
                "cudaMemcpyAsync"
                if spec[0].startswith("Memcpy")
                else "cudaMemsetAsync"
                if spec[0].startswith("Memset")
                else launch_api
            )
            api = extra.get("api", default_api)
            ldur = extra.get("launch_ns", launch_ns)
            corr = self.launch(api, t, ldur, tid=tid, external_id=ext)
            gpu = self._emit_gpu(spec, corr, t, t + ldur + LAUNCH_TO_GPU_NS, ext)
            res.gpu.append({**gpu, "api": api})
            t += ldur + launch_gap_ns
        res.end_ns = t - (launch_gap_ns if kernels else 0) + post_ns
        self.close(ext, res.end_ns)
        return res

    def graph_launch(
        self, ts_ns: int, kernels, *, dur_ns: int = 9_000, tid: int | None = None, external_id: int | None = None
    ) -> int:
        """One ``cudaGraphLaunch`` whose N kernels all carry its ONE correlation id
        (one flow start, N flow ends). ``kernels`` as in ``op_with_kernels``."""
        corr = self.launch("cudaGraphLaunch", ts_ns, dur_ns, tid=tid, external_id=external_id)
        for spec in kernels:
            self._emit_gpu(spec, corr, ts_ns, ts_ns + dur_ns + LAUNCH_TO_GPU_NS, external_id)
        return corr

    # ---- profiler bookkeeping events ---------------------------------------

    def process_metadata(self, ts_ns: int = 0) -> None:
        """The ``M`` events naming the CPU process, each GPU and each thread/stream seen."""

        def m(name, pid, tid, args):
            self._add({"name": name, "ph": "M", "ts": self.origin_ns + ts_ns, "pid": pid, "tid": tid, "args": args})

        m("process_name", self.pid, 0, {"name": self.process_name})
        m("process_labels", self.pid, 0, {"labels": "CPU"})
        m("process_sort_index", self.pid, 0, {"sort_index": self.pid})
        for props in self.device_properties:
            d = props["id"]
            m("process_name", d, 0, {"name": self.process_name})
            m("process_labels", d, 0, {"labels": f"GPU {d}"})
            m("process_sort_index", d, 0, {"sort_index": 5000000 + d})
        for tid in sorted(self._cpu_tids):
            m(
                "thread_name",
                self.pid,
                str(tid) if self.legacy else tid,
                {"name": f"thread {tid} ({self.process_name})"},
            )
            m("thread_sort_index", self.pid, str(tid) if self.legacy else tid, {"sort_index": tid})
        for device, stream in sorted(self._streams):
            # Modern Kineto really writes a trailing space after the stream number.
            label = f"stream {stream}" if self.legacy else f"stream {stream} "
            m("thread_name", device, self._gpu_tid(device, stream), {"name": label})
            m("thread_sort_index", device, self._gpu_tid(device, stream), {"sort_index": stream})

    def trace_span(self, start_ns: int, dur_ns: int) -> None:
        """The ``Trace`` span covering the profiling window and its
        ``Iteration Start: PyTorch Profiler`` instant (string pid/tid)."""
        start = self.origin_ns + start_ns
        self._add(
            {
                "ph": "X",
                "cat": "Trace",
                "ts": start,
                "dur": dur_ns,
                "pid": "Traces" if self.legacy else "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            }
        )
        if not self.legacy:
            self._add(
                {
                    "name": "process_sort_index",
                    "ph": "M",
                    "ts": start,
                    "pid": "Spans",
                    "tid": 0,
                    "args": {"sort_index": 536870912},
                }
            )
        self._add(
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": start,
            }
        )

    def record_window_end(self, ts_ns: int) -> None:
        """The ``Record Window End`` instant (pid and tid are empty strings)."""
        self._add(
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": self.origin_ns + ts_ns}
        )

    def finish(self, margin_ns: int = 20_000) -> None:
        """Add the Trace span, metadata and window-end events around what is written."""
        if self._finished:
            raise RuntimeError("finish() already called")
        self._finished = True
        timed = [e for e in self.events if e["ph"] == "X"]
        lo = min(e["ts"] for e in timed) - self.origin_ns - margin_ns
        hi = max(e["ts"] + (e["dur"] or 0) for e in timed) - self.origin_ns + margin_ns
        self.trace_span(lo, hi - lo)
        self.process_metadata(lo + min(191_653, (hi - lo) // 2))  # Kineto stamps M events after the start
        self.record_window_end(hi + 1_330_000)

    # ---- truth and output ---------------------------------------------------

    @property
    def truth(self) -> dict:
        """Ground truth of what has been written, by plain Python.

        ``counts``: events per ``(ph, cat)`` (cat None for M/i events without
        one); ``gpu_ops`` / ``gpu_ops_linked`` / ``gpu_ops_orphan``: kernels,
        memcpys and memsets, linked when a runtime/driver call with the same
        correlation is in the trace; ``busy_ns``: length of the union of all
        GPU op intervals (all devices and streams merged); ``busy_ns_linked``:
        the same over linked ops only; ``span_ns``: first GPU op start to last
        GPU op end; ``kernels``: ``{name: {"count", "total_ns"}}``.
        """
        linked = [g for g in self._gpu_ops if g[4] in self._launch_corrs]
        kernels: dict = {}
        for _, s, e, name, _ in self._gpu_ops:
            k = kernels.setdefault(name, {"count": 0, "total_ns": 0})
            k["count"] += 1
            k["total_ns"] += e - s
        ops = self._gpu_ops
        return {
            "counts": dict(self._counts),
            "events": len(self.events),
            "gpu_ops": len(ops),
            "gpu_ops_linked": len(linked),
            "gpu_ops_orphan": len(ops) - len(linked),
            "busy_ns": _union_ns([(s, e) for _, s, e, _, _ in ops]),
            "busy_ns_linked": _union_ns([(s, e) for _, s, e, _, _ in linked]),
            "span_ns": (max(g[2] for g in ops) - min(g[1] for g in ops)) if ops else 0,
            "kernels": kernels,
        }

    def _check_closed(self):
        if self._open:
            names = [e["name"] for e in self._open.values()]
            raise RuntimeError(f"ops never closed: {names}")

    def _header(self) -> dict:
        head = {"schemaVersion": 1, "deviceProperties": copy.deepcopy(self.device_properties)}
        if self.distributed_info is not None:
            head["distributedInfo"] = copy.deepcopy(self.distributed_info)
        head.update(copy.deepcopy(self.metadata))
        return head

    def _trailer(self) -> dict:
        return {"traceName": self.trace_name, "displayTimeUnit": "ms", "baseTimeNanoseconds": self.base_time_ns}

    def to_dict(self) -> dict:
        """The trace as ``json.load`` would return it (``ts``/``dur`` as float µs;
        at epoch-scale origins a float cannot hold the ns; ``write`` is exact)."""
        self._check_closed()
        events = []
        for ev in self.events:
            ev = copy.deepcopy(ev)
            for k in ("ts", "dur"):
                if k in ev:
                    ev[k] = ev[k] / 1000
            events.append(ev)
        return {**self._header(), "traceEvents": events, **self._trailer()}

    def dumps(self) -> str:
        """The trace as Kineto lays it out: metadata keys, then ``traceEvents``,
        then ``traceName`` / ``displayTimeUnit`` / ``baseTimeNanoseconds``."""
        self._check_closed()
        out = ["{"]
        out += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in self._header().items()]
        out.append('  "traceEvents": [')
        out.append(",\n".join(_render_event(ev) for ev in self.events))
        out.append("  ],")
        trailer = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in self._trailer().items()]
        out.append(",\n".join(trailer))
        out.append("}")
        return "\n".join(out) + "\n"

    def write(self, path) -> None:
        """Write ``.json`` or, by suffix, ``.json.gz`` (deterministic: gzip mtime 0)."""
        data = self.dumps().encode()
        path = str(path)
        with open(path, "wb") as f:
            if path.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                    gz.write(data)
            else:
                f.write(data)


def _union_ns(intervals) -> int:
    """Total length covered by half-open [start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def _render_value(key: str, value) -> str:
    if key in ("ts", "dur"):
        return us(value)
    if key in _SIX_DECIMALS and isinstance(value, float):
        return f"{value:.6f}"
    return json.dumps(value)


def _render_event(ev: dict) -> str:
    head = ", ".join(f"{json.dumps(k)}: {_render_value(k, v)}" for k, v in ev.items() if k != "args")
    text = "  {\n    " + head
    if "args" in ev:
        args = ", ".join(f"{json.dumps(k)}: {_render_value(k, v)}" for k, v in ev["args"].items())
        text += ',\n    "args": {\n      ' + args + "\n    }"
    return text + "\n  }"


# =============================================================================
# The post's attention variants
# =============================================================================

B, H, S, D = 8, 16, 1024, 64
QKV = [B, H, S, D]
SCORES_NUMEL = B * H * S * S  # 134,217,728 elements in the [B, H, S, S] score matrix
STAGES = stages.names()
PRECISIONS = ("tensor_core", "fp32_simt", "other")

# Kernel names as CUPTI demangles them on an A100 with PyTorch 2.x.
GEMM_QK_BF16 = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn"
GEMM_PV_BF16 = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_nn"
SGEMM_QK = "ampere_sgemm_128x64_tn"
SGEMM_PV = "ampere_sgemm_128x64_nn"
MUL_BF16 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, "
    "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)"
)
MUL_F32 = MUL_BF16.replace("c10::BFloat16", "float")
MASKED_FILL_BF16 = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
    "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, "
    "c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#10}::operator()() "
    "const::{lambda(c10::BFloat16, bool)#1}>(at::TensorIteratorBase&, at::native::"
    "(anonymous namespace)::masked_fill_kernel(at::TensorIterator&, c10::Scalar const&)"
    "::{lambda()#1}::operator()() const::{lambda()#10}::operator()() const::{lambda("
    "c10::BFloat16, bool)#1} const&)::{lambda(int)#1}>(int, at::native::"
    "gpu_kernel_impl_nocast<at::native::(anonymous namespace)::masked_fill_kernel("
    "at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::"
    "{lambda()#10}::operator()() const::{lambda(c10::BFloat16, bool)#1}>(at::"
    "TensorIteratorBase&, at::native::(anonymous namespace)::masked_fill_kernel(at::"
    "TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()"
    "#10}::operator()() const::{lambda(c10::BFloat16, bool)#1} const&)::{lambda(int)#1})"
)
SOFTMAX_BF16 = (
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, "
    "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"
)
SOFTMAX_F32 = (
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>"
    "(float*, float const*, int, int, int, bool const*, int, bool)"
)
MEMCPY_DTOD = "Memcpy DtoD (Device -> Device)"
FILL_BOOL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<bool>, std::array<char*, 1ul>)"
)
FILL_F32 = FILL_BOOL.replace("<bool>", "<float>")
TRIU_TRIL = (
    "void at::native::triu_tril_kernel<bool, int, false, 4, true>(at::cuda::detail::TensorInfo"
    "<bool, int>, at::cuda::detail::TensorInfo<bool const, int>, long, long, long, int)"
)
LOGICAL_NOT = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::logical_not_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() "
    "const::{lambda(bool)#1}, std::array<char*, 2ul> >(int, at::native::logical_not_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() "
    "const::{lambda(bool)#1}, std::array<char*, 2ul>)"
)
WHERE_F32 = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() "
    "const::{lambda()#8}::operator()() const::{lambda(bool, float, float)#1}>(at::"
    "TensorIteratorBase&, at::native::(anonymous namespace)::where_kernel_impl(at::"
    "TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
    "{lambda(bool, float, float)#1} const&)::{lambda(int)#1}>(int, at::native::"
    "gpu_kernel_impl_nocast<at::native::(anonymous namespace)::where_kernel_impl(at::"
    "TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::"
    "{lambda(bool, float, float)#1}>(at::TensorIteratorBase&, at::native::(anonymous namespace)"
    "::where_kernel_impl(at::TensorIterator&)::{lambda()#1}::operator()() const::{lambda()#8}::"
    "operator()() const::{lambda(bool, float, float)#1} const&)::{lambda(int)#1})"
)
ADD_F32 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)
EQ_F32 = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, bool, "
    "at::native::(anonymous namespace)::CompareEqFunctor<float> >, std::array<char*, 2ul> >(int, "
    "at::native::AUnaryFunctor<float, float, bool, at::native::(anonymous namespace)::"
    "CompareEqFunctor<float> >, std::array<char*, 2ul>)"
)
ALL_REDUCE = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t"
    "<bool, at::native::and_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() const::"
    "{lambda(bool, bool)#1}>, unsigned int, bool, 4, 4> >(at::native::ReduceOp<bool, at::native::"
    "func_wrapper_t<bool, at::native::and_kernel_cuda(at::TensorIterator&)::{lambda()#1}::"
    "operator()() const::{lambda(bool, bool)#1}>, unsigned int, bool, 4, 4>)"
)
COPY_BF16_TO_F32 = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
    "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
    "const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
    "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::"
    "LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, "
    "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
    "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)"
)
COPY_F32_TO_BF16 = COPY_BF16_TO_F32.replace("lambda(float)#1", "lambda(c10::BFloat16)#1")
CLONE_F32 = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::"
    "native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>("
    "at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} "
    "const&)::{lambda(int)#1})"
)
EFFICIENT_KERNEL = (
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
    "<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)"
)
# CUPTI demangles the traits with their namespace (as in the real H100 trace);
# the post abbreviates them. Match on "flash_fwd_kernel", not on the full string.
FLASH_KERNEL = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 64, 4, "
    "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 64, 4, "
    "cutlass::bfloat16_t> >, true, false, false, false, true, true, false, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
CUDNN_KERNEL = "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_6_128x64x64_4x1x1_cga1x1x1_kernel0_0"


def _ew(numel: int, regs: int = 24, vec: int = 4) -> dict:
    """Launch config of a vectorized elementwise kernel: 128 threads x ``vec`` elements."""
    return {"grid": (math.ceil(numel / (128 * vec)), 1, 1), "block": (128, 1, 1), "registers_per_thread": regs}


_GEMM_QK_CFG = {"grid": (16, 8, B * H), "block": (128, 1, 1), "registers_per_thread": 232, "shared_memory": 73728}
_GEMM_PV_CFG = dict(_GEMM_QK_CFG, grid=(1, 8, B * H))
_SGEMM_QK_CFG = {"grid": (8, 16, B * H), "block": (128, 1, 1), "registers_per_thread": 122, "shared_memory": 12544}
_SGEMM_PV_CFG = dict(_SGEMM_QK_CFG, grid=(8, 1, B * H))
_SOFTMAX_CFG = {"grid": (B * H * S // 4, 1, 1), "block": (32, 4, 1), "registers_per_thread": 40}
_MASK_CFG = _ew(S * S, regs=16)
# The fused kernels: flash and cuDNN as the post reports them.
_FLASH_CFG = {
    "grid": (S // 128, B, H),
    "block": (128, 1, 1),
    "registers_per_thread": 255,
    "shared_memory": 32768,
    "est_occupancy": 13,
}
_EFFICIENT_CFG = {
    "grid": (S // 64, H, B),
    "block": (32, 4, 1),
    "registers_per_thread": 128,
    "shared_memory": 49152,
    "est_occupancy": 18,
}
# CUPTI reports no occupancy for kernels launched with cuLaunchKernelEx.
_CUDNN_CFG = {
    "grid": (S // 128, H, B),
    "block": (256, 1, 1),
    "registers_per_thread": 240,
    "shared_memory": 65536,
    "blocks_per_sm": 0.0,
    "warps_per_sm": 0.0,
    "est_occupancy": 0,
    "api": "cuLaunchKernelEx",
    "launch_ns": 11_900,
}


@dataclass(frozen=True)
class _K:
    """One GPU op of a forward, with its truth: stage and precision class."""

    name: str
    dur_ns: int
    stage: str
    precision: str = "other"
    cfg: dict = field(default_factory=dict)


@dataclass(frozen=True)
class _Op:
    """One CPU op of a forward: a leaf launching ``kernels`` (after kernel-less
    ``children``) or, with ``kids``, a wrapper laid out around nested ops."""

    name: str
    kernels: tuple = ()
    kids: tuple = ()
    children: tuple = ()
    args: dict | None = None
    api: str = "cudaLaunchKernel"
    pre_ns: int | None = None  # CPU time before the first child / launch


def _inputs(*params) -> dict:
    """Kineto's record_shapes args for an op's inputs: a list = a bf16 tensor of
    those dims (contiguous), a str = a scalar's concrete value, None = absent."""

    def strides(dims):
        out, acc = [], 1
        for d in reversed(dims):
            out.insert(0, acc)
            acc *= d
        return out

    return {
        "Concrete Inputs": ["" if p is None or isinstance(p, list) else p for p in params],
        "Input type": ["c10::BFloat16" if isinstance(p, list) else "" if p is None else "Scalar" for p in params],
        "Input Strides": [strides(p) if isinstance(p, list) else [] for p in params],
        "Input Dims": [p if isinstance(p, list) else [] for p in params],
    }


_QKV_BSHD = [B, S, H, D]  # flash / efficient kernels take [B, S, H, D] views
_SDPA = dict(name="aten::scaled_dot_product_attention", args=_inputs(QKV, QKV, QKV, None, "0.", "True", None, "False"))


def _matmul(kernel: _K) -> _Op:
    return _Op(
        "aten::matmul",
        kids=(
            _Op("aten::expand"),
            _Op("aten::reshape"),
            _Op("aten::bmm", kernels=(kernel,)),
            _Op("aten::_unsafe_view"),
        ),
    )


def _naive(inplace: bool) -> tuple:
    qk = _K(GEMM_QK_BF16, 181_232, "qk_matmul", "tensor_core", _GEMM_QK_CFG)
    scale = _K(MUL_BF16, 412_512, "scale", "other", _ew(SCORES_NUMEL))
    fill = _K(MASKED_FILL_BF16, 420_288, "mask", "other", _ew(SCORES_NUMEL, regs=20))
    if inplace:
        mask = _Op("aten::masked_fill_", kernels=(fill,))
    else:
        # masked_fill = clone(contiguous) + masked_fill_: the clone's copy_ is a
        # device-to-device cudaMemcpyAsync, the post's hidden copy. Stage "mask":
        # the launching op (masked_fill) decides, not the copy's kernel name.
        copy_ = _K(MEMCPY_DTOD, 405_760, "mask", "other", {"bytes": SCORES_NUMEL * 2})
        mask = _Op(
            "aten::masked_fill",
            kids=(
                _Op("aten::clone", kids=(_Op("aten::empty_like"), _Op("aten::copy_", kernels=(copy_,)))),
                _Op("aten::masked_fill_", kernels=(fill,)),
            ),
        )
    softmax = _Op(
        "aten::softmax",
        kids=(_Op("aten::_softmax", kernels=(_K(SOFTMAX_BF16, 760_672, "softmax", "other", _SOFTMAX_CFG),)),),
    )
    pv = _K(GEMM_PV_BF16, 180_296, "pv_matmul", "tensor_core", _GEMM_PV_CFG)
    return (_matmul(qk), _Op("aten::mul", kernels=(scale,)), mask, softmax, _matmul(pv))


def _math() -> tuple:
    """SDPA's MATH backend: upcasts to fp32 (SIMT sgemm), rebuilds the causal mask
    every call and wraps softmax in ``_safe_softmax``: 20 GPU ops."""
    qkv_numel = B * H * S * D

    def leaf(op, name, dur, stage, cfg, precision="other"):
        return _Op(op, kernels=(_K(name, dur, stage, precision, cfg),))

    def alloc_then(op, alloc, kernel_leaf):  # e.g. aten::ones -> aten::empty + aten::fill_
        return _Op(op, kids=(_Op(alloc), kernel_leaf))

    def to_copy(name, dur):  # aten::to -> aten::_to_copy -> aten::copy_
        return _Op(
            "aten::to",
            kids=(
                alloc_then(
                    "aten::_to_copy", "aten::empty_strided", leaf("aten::copy_", name, dur, "layout", _ew(qkv_numel))
                ),
            ),
        )

    mask = (
        alloc_then("aten::ones", "aten::empty", leaf("aten::fill_", FILL_BOOL, 1_568, "mask", _MASK_CFG)),
        leaf("aten::tril", TRIU_TRIL, 3_840, "mask", _MASK_CFG),
        leaf("aten::logical_not", LOGICAL_NOT, 2_432, "mask", _MASK_CFG),
        alloc_then("aten::scalar_tensor", "aten::empty", leaf("aten::fill_", FILL_F32, 1_312, "mask", _ew(1))),
        leaf("aten::where", WHERE_F32, 4_096, "mask", _MASK_CFG),
    )
    safe_softmax = _Op(
        "aten::_safe_softmax",
        kids=(
            leaf("aten::_softmax", SOFTMAX_F32, 721_344, "softmax", _SOFTMAX_CFG),
            leaf("aten::eq", EQ_F32, 431_296, "softmax", _ew(SCORES_NUMEL)),
            leaf("aten::all", ALL_REDUCE, 104_928, "softmax", {"grid": (B * H * S // 4, 1, 1), "block": (32, 16, 1)}),
            alloc_then(
                "aten::zeros_like",
                "aten::empty_like",
                leaf("aten::fill_", FILL_F32, 352_416, "softmax", _ew(SCORES_NUMEL)),
            ),
            leaf("aten::where", WHERE_F32, 736_264, "softmax", _ew(SCORES_NUMEL)),
        ),
    )
    body = mask + (
        to_copy(COPY_BF16_TO_F32, 36_384),
        to_copy(COPY_BF16_TO_F32, 36_352),
        to_copy(COPY_BF16_TO_F32, 36_416),
        leaf("aten::mul", MUL_F32, 45_120, "scale", _ew(qkv_numel)),  # q and k each * sqrt(scale)
        leaf("aten::mul", MUL_F32, 45_088, "scale", _ew(qkv_numel)),
        _Op("aten::transpose"),
        _Op(
            "aten::contiguous",
            kids=(
                alloc_then(
                    "aten::clone", "aten::empty_like", leaf("aten::copy_", CLONE_F32, 44_832, "layout", _ew(qkv_numel))
                ),
            ),
        ),
        _matmul(_K(SGEMM_QK, 2_031_616, "qk_matmul", "fp32_simt", _SGEMM_QK_CFG)),
        leaf("aten::add_", ADD_F32, 688_480, "mask", _ew(SCORES_NUMEL)),  # scores += mask bias
        safe_softmax,
        _matmul(_K(SGEMM_PV, 1_879_248, "pv_matmul", "fp32_simt", _SGEMM_PV_CFG)),
        to_copy(COPY_F32_TO_BF16, 35_968),
    )
    math_args = _inputs(QKV, QKV, QKV, None, "0.", "True", None, None, "False")
    return (_Op(**_SDPA, kids=(_Op("aten::_scaled_dot_product_attention_math", kids=body, args=math_args),)),)


def _fused(variant: str) -> tuple:
    if variant == "efficient":
        k = _K(EFFICIENT_KERNEL, 277_888, "fused_attention", "tensor_core", _EFFICIENT_CFG)
        inner = _Op(
            "aten::_scaled_dot_product_efficient_attention",
            args=_inputs(QKV, QKV, QKV, None, "False", "0.", "True", None),
            kids=(
                _Op("aten::transpose"),
                _Op("aten::transpose"),
                _Op("aten::transpose"),
                _Op(
                    "aten::_efficient_attention_forward",
                    kernels=(k,),
                    pre_ns=66_000,
                    children=("aten::empty", "aten::empty"),
                    args=_inputs(
                        _QKV_BSHD,
                        _QKV_BSHD,
                        _QKV_BSHD,
                        None,
                        None,
                        None,
                        None,
                        None,
                        "0.",
                        "1",
                        "False",
                        None,
                        None,
                        None,
                    ),
                ),
            ),
        )
    elif variant == "flash":
        k = _K(FLASH_KERNEL, 146_816, "fused_attention", "tensor_core", _FLASH_CFG)
        inner = _Op(
            "aten::_scaled_dot_product_flash_attention",
            args=_inputs(QKV, QKV, QKV, "0.", "True", "False", None),
            kids=(
                _Op("aten::transpose"),
                _Op("aten::transpose"),
                _Op("aten::transpose"),
                _Op(
                    "aten::_flash_attention_forward",
                    kernels=(k,),
                    pre_ns=83_800,
                    children=("aten::empty_like", "aten::empty", "aten::empty"),
                    args=_inputs(
                        _QKV_BSHD,
                        _QKV_BSHD,
                        _QKV_BSHD,
                        None,
                        None,
                        "1024",
                        "1024",
                        "0.",
                        "True",
                        "False",
                        "0.125",
                        None,
                        None,
                        None,
                        None,
                    ),
                ),
                _Op("aten::transpose"),
            ),
        )
    else:  # cudnn: CPU time goes to plan selection before a single cuLaunchKernelEx
        k = _K(CUDNN_KERNEL, 186_304, "fused_attention", "tensor_core", _CUDNN_CFG)
        inner = _Op(
            "aten::_scaled_dot_product_cudnn_attention",
            kernels=(k,),
            pre_ns=107_400,
            children=("aten::empty", "aten::empty", "aten::empty"),
            args=_inputs(QKV, QKV, QKV, None, "False", "0.", "True", "False", None),
        )
    # cuDNN's own sdpa wrapper spends longer before dispatch (the post: 26 % self CPU).
    return (_Op(**_SDPA, kids=(inner,), pre_ns=83_000 if variant == "cudnn" else 20_000),)


VARIANTS = {  # name -> (region label, trace-name backend tag, forward builder)
    "naive": ("attn_fwd", "", lambda: _naive(False)),
    "inplace": ("attn_fwd", "_inplace", lambda: _naive(True)),
    "math": ("sdpa_fwd", "_math", _math),
    "efficient": ("sdpa_fwd", "_efficient", lambda: _fused("efficient")),
    "flash": ("sdpa_fwd", "_flash", lambda: _fused("flash")),
    "cudnn": ("sdpa_fwd", "_cudnn", lambda: _fused("cudnn")),
}
STEPS = (2, 3, 4)
# Per-step jitter added to every GPU op duration; sums to zero so per-op means are the base values.
_JITTER_NS = (96, -64, -32)
# Region opening to first op: 228 µs of cold start at the first profiled step, ~5 µs after.
_FIRST_OP_GAP_NS = (228_000, 5_000, 5_000)


@dataclass
class Variant:
    """One post variant: its builder (``to_dict()`` / ``write()``) and its truth."""

    name: str
    builder: TraceBuilder
    truth: dict

    def to_dict(self) -> dict:
        return self.builder.to_dict()

    def write(self, path) -> None:
        self.builder.write(path)


def _lay(b: TraceBuilder, node: _Op, t: int, jitter: int, sink: list) -> int:
    """Write ``node`` starting at ``t`` (relative ns); return its end. GPU ops go to ``sink``."""
    if node.kernels:
        specs = [(k.name, None, k.dur_ns + jitter, k.cfg) for k in node.kernels]
        res = b.op_with_kernels(
            node.name,
            t,
            specs,
            launch_api=node.api,
            args=node.args,
            children=node.children,
            pre_ns=node.pre_ns or 4_000,
        )
        for k, g in zip(node.kernels, res.gpu):
            sink.append({**g, "op": node.name, "stage": k.stage, "precision": k.precision})
        return res.end_ns
    if not node.kids:  # a kernel-less op (view, transpose, allocation)
        b.cpu_op(node.name, t, 1_800, args=node.args)
        return t + 1_800
    ext = b.cpu_op(node.name, t, None, args=node.args)
    t += node.pre_ns or 3_100
    for kid in node.kids:
        t = _lay(b, kid, t, jitter, sink) + 1_400
    b.close(ext, t)
    return t


def _build_variant(name: str, legacy: bool, origin_ns: int, metadata: dict | None = None) -> Variant:
    region, tag, forward = VARIANTS[name]
    trace_name = f"{B}_{H}_{S}_{D}{tag}_eager"
    b = TraceBuilder(origin_ns=origin_ns, legacy=legacy, trace_name=trace_name, metadata=metadata)
    ops = forward()
    all_gpu: list = []
    # The warm-up step's last kernel still runs when the window opens: its launch
    # predates the trace, so it is an orphan (and carries no External id).
    last = _last_kernel(ops)
    orphan = b.orphan_kernel(
        last.name, 3_232, last.dur_ns, **{k: v for k, v in last.cfg.items() if k not in ("api", "launch_ns")}
    )
    # Its stage is what it really is; only kernel-name rules can recover that.
    all_gpu.append(
        {
            "correlation": orphan["args"]["correlation"],
            "name": last.name,
            "kind": "kernel",
            "ts_ns": 3_232,
            "dur_ns": last.dur_ns,
            "api": None,
            "op": None,
            "stage": last.stage,
            "precision": last.precision,
            "step": None,
            "region": None,
            "orphan": True,
        }
    )
    occ = []
    t = 41_870
    for i, step in enumerate(STEPS):
        step_ext = b.profiler_step(step, t, None)
        b.cpu_op("aten::empty", t + 9_400, 2_150)  # a step-level op that launches nothing
        r0 = t + 15_000
        region_ext = b.user_annotation(region, r0, None)
        sink: list = []
        cur = r0 + _FIRST_OP_GAP_NS[i]
        for op in ops:
            cur = _lay(b, op, cur, _JITTER_NS[i], sink) + 1_600
        r1 = cur + 1_400
        b.close(region_ext, r1)
        t_end = r1 + 21_000  # prof.step() bookkeeping
        b.close(step_ext, t_end)
        g0 = min(g["ts_ns"] for g in sink)
        g1 = max(g["ts_ns"] + g["dur_ns"] for g in sink)
        if not legacy:  # Kineto projects ranges with GPU work onto the stream
            b.gpu_user_annotation(f"ProfilerStep#{step}", g0, g1 - g0, step_ext)
            b.gpu_user_annotation(region, g0, g1 - g0, region_ext)
        for g in sink:
            all_gpu.append({**g, "step": step, "region": region, "orphan": False})
        occ.append(
            {
                "cpu_ns": r1 - r0,
                "gpu_ns": sum(g["dur_ns"] for g in sink),
                "gpu_ops": len(sink),
                "first_op_gap_ns": _FIRST_OP_GAP_NS[i],
            }
        )
        t = t_end + 1_000
    b.finish()

    per_fwd = {o["gpu_ops"] for o in occ}
    assert len(per_fwd) == 1, per_fwd
    bt = b.truth
    for g in all_gpu:
        g["ts_ns"] += origin_ns  # truth carries absolute ns, exactly ts * 1000 in the file
        g["launch_api"] = g.pop("api")
    forward = [g for g in all_gpu if g["step"] == STEPS[0]]
    stage_ns: dict = {}
    for g in all_gpu:
        if g["region"]:
            stage_ns[g["stage"]] = stage_ns.get(g["stage"], 0) + g["dur_ns"]
    fused = [k for k in _kernels(ops) if k.stage == "fused_attention"]
    truth = {
        "variant": name,
        "trace_name": trace_name,
        "region": region,
        "steps": [f"ProfilerStep#{s}" for s in STEPS],
        "gpu_ops_per_forward": per_fwd.pop(),
        "regions": {
            region: {
                "occurrences": len(occ),
                "gpu_ops_per_occurrence": occ[0]["gpu_ops"],
                "gpu_time_ns": [o["gpu_ns"] for o in occ],
                "gpu_time_avg_ns": statistics.fmean(o["gpu_ns"] for o in occ),
                "cpu_time_ns": [o["cpu_ns"] for o in occ],
                "cpu_time_avg_ns": statistics.fmean(o["cpu_ns"] for o in occ),
                "first_op_gap_ns": [o["first_op_gap_ns"] for o in occ],
            }
        },
        "forward": [{k: g[k] for k in ("name", "kind", "op", "launch_api", "stage", "precision")} for g in forward],
        "gpu_ops": all_gpu,
        "precision": {g["name"]: g["precision"] for g in all_gpu},
        "launch_api": {g["name"]: g["launch_api"] for g in forward},
        "stage_ns": stage_ns,
        "occupancy": {
            k.name: theoretical_occupancy(
                k.cfg["registers_per_thread"], math.prod(k.cfg["block"]), k.cfg["shared_memory"]
            )
            for k in fused
        },
        "orphans": bt["gpu_ops_orphan"],
        "busy_ns": bt["busy_ns"],
        "busy_ns_linked": bt["busy_ns_linked"],
        "span_ns": bt["span_ns"],
        "counts": bt["counts"],
    }
    return Variant(name, b, truth)


def _kernels(ops) -> list:
    out = []
    for op in ops:
        out += list(op.kernels) + _kernels(op.kids)
    return out


def _last_kernel(ops) -> _K:
    return _kernels(ops)[-1]


def post_variants(
    names=None, *, legacy: bool = False, origin_ns: int = DEFAULT_ORIGIN_NS, metadata: dict | None = None
) -> dict:
    """Build the post's variants: ``{name: Variant}`` for naive, inplace, math,
    efficient, flash, cudnn (or the subset ``names``).

    Each trace: an orphan kernel at the start (the warm-up step's last kernel),
    then ``ProfilerStep#2..4``, each with a kernel-less ``aten::empty`` and one
    region (``attn_fwd`` or ``sdpa_fwd``) around one forward of B=8, H=16,
    S=1024, D=64, bf16, causal. ``Variant.truth`` documents the answers (see
    the module's tests for how each is checked). ``metadata``: extra top-level
    keys for every file (``sample_traces/gpu_a100_synthetic`` marks them synthesized).
    """
    return {n: _build_variant(n, legacy, origin_ns, metadata) for n in (names or VARIANTS)}


def tiny_llama(impl: str):
    """A tiny random Hugging Face Llama (2 layers, 4 heads of 8, 2 KV heads), in eval mode: nothing to
    download. Needs torch and transformers (the caller skips without them)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM._from_config(config, attn_implementation=impl).eval()


if __name__ == "__main__":  # write all variants for a look in Perfetto: python tests/synthetic.py DIR
    import sys
    from pathlib import Path

    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    for v in post_variants().values():
        v.write(out / f"{v.truth['trace_name']}.json.gz")
        print(v.name, v.truth["gpu_ops_per_forward"], v.truth["regions"][v.truth["region"]]["gpu_time_avg_ns"])
