"""A profiler session with the field's defaults, and what it writes.

Defaults follow the reference workflow: CPU + CUDA activities (CUDA when present), a
``schedule(wait=1, warmup=1, active=3, repeat=1)``, un-profiled warm-up calls first,
a device synchronisation before each step boundary and before stopping. Unlike the
reference, `record_shapes` is on by default: attribution and FLOP estimates use shapes.

Each recording writes three files side by side::

    NAME.json.gz              the chrome trace, gzipped, with metadata key "tracekit_capture"
    NAME.key_averages.txt     the profiler's own key_averages() table
    NAME.key_averages.json    the profiler's figures for attention:* and stage:* ranges
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .cluster import ClusterInfo, atomic_write, gzip_into
from .errors import CaptureError, require
from .labels import ATTENTION_PREFIX, LABEL_SCHEME, STAGE_PREFIX

CAPTURE_VERSION = "0.1.0"
METADATA_KEY = "tracekit_capture"
TRACE_SUFFIX = ".json.gz"


@dataclass(frozen=True)
class Schedule:
    """The profiler schedule; `steps` is how many `prof.step()` calls it takes."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1

    @property
    def steps(self) -> int:
        """Number of steps from the first wait step to the end of the last active one."""
        return (self.wait + self.warmup + self.active) * self.repeat

    def as_dict(self) -> dict[str, int]:
        """The schedule's arguments, as passed to `torch.profiler.schedule`."""
        return asdict(self)


DEFAULT_SCHEDULE = Schedule()


def resolve_device(device: str = "auto") -> str:
    """Return ``"cuda"`` or ``"cpu"`` for a ``--device`` value (auto, cpu, cuda).

    Raises CaptureError when CUDA is asked for but this torch build or machine has none.
    """
    torch = require("torch")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise CaptureError(
            "--device cuda: torch.cuda.is_available() is False on this machine "
            f"(torch {torch.__version__}); use --device cpu or a CUDA build of torch"
        )
    if device not in ("cpu", "cuda"):
        raise CaptureError(f"unknown device {device!r}: use auto, cpu or cuda")
    return device


def synchronize(device: str) -> None:
    """Wait for queued device work, so a step boundary or the stop sees it finished."""
    if device == "cuda":
        require("torch").cuda.synchronize()


def environment_metadata(device: str) -> dict[str, Any]:
    """Describe the device and the torch build: gpu_name, sm_count and library versions."""
    torch = require("torch")
    gpu_name = sm_count = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        gpu_name, sm_count = props.name, props.multi_processor_count
    cudnn = torch.backends.cudnn
    return {
        "gpu_name": gpu_name,
        "sm_count": sm_count,
        "device": device,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": cudnn.version() if cudnn.is_available() else None,
        "hip_version": getattr(torch.version, "hip", None),
    }


def capture_metadata(
    *,
    device: str,
    cluster: ClusterInfo,
    tag: str,
    impl: str | None = None,
    shapes: Mapping[str, int | None] | None = None,
    dtype: str | None = None,
    causal: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Build the ``tracekit_capture`` metadata object embedded in every trace.

    `shapes` holds batch, heads, seq_q, seq_kv and head_dim; `extra` adds keys (e.g.
    ``compiled``, ``model``). Values must be JSON-serialisable.
    """
    meta: dict[str, Any] = environment_metadata(device)
    meta.update(
        impl=impl,
        shapes=dict(shapes) if shapes is not None else None,
        dtype=dtype,
        causal=causal,
        host=cluster.host,
        rank=cluster.rank,
        world_size=cluster.world_size,
        local_rank=cluster.local_rank,
        job_id=cluster.job_id,
        command_line=shlex.join(getattr(sys, "orig_argv", sys.argv)),
        tag=tag,
        label_scheme=LABEL_SCHEME,
        capture_version=CAPTURE_VERSION,
        created_utc=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    meta.update(extra)
    return meta


@dataclass
class RegionStats:
    """The profiler's key_averages() figures for one labelled range, in microseconds.

    The device fields are None on CPU-only runs. `device_time_total_us` is the time of
    the device kernels launched inside the range (the table's "CUDA total");
    `gpu_annotation_time_total_us` is Kineto's projection of the range onto the GPU
    stream (the ``gpu_user_annotation`` events), None when there is none.
    """

    count: int
    cpu_time_total_us: float
    self_cpu_time_total_us: float
    device_time_total_us: float | None = None
    self_device_time_total_us: float | None = None
    gpu_annotation_count: int | None = None
    gpu_annotation_time_total_us: float | None = None


def region_stats(key_averages: Any, device: str) -> dict[str, RegionStats]:
    """Collect `RegionStats` for every ``attention:*`` and ``stage:*`` key, sorted by name."""
    regions: dict[str, RegionStats] = {}
    projections: dict[str, tuple[int, float]] = {}
    on_device = device != "cpu"
    for avg in key_averages:
        key = avg.key
        if not key.startswith((ATTENTION_PREFIX, STAGE_PREFIX)):
            continue
        # key_averages() groups by device type too: a labelled range shows up once as a
        # CPU row and, on GPU runs, once more as its gpu_user_annotation projection.
        if str(avg.device_type).endswith("CPU"):
            regions[key] = RegionStats(
                count=avg.count,
                cpu_time_total_us=round(avg.cpu_time_total, 3),
                self_cpu_time_total_us=round(avg.self_cpu_time_total, 3),
                device_time_total_us=round(avg.device_time_total, 3) if on_device else None,
                self_device_time_total_us=(round(avg.self_device_time_total, 3) if on_device else None),
            )
        else:
            projections[key] = (avg.count, round(avg.device_time_total, 3))
    for key, (count, total) in projections.items():
        if key in regions:
            regions[key].gpu_annotation_count = count
            regions[key].gpu_annotation_time_total_us = total
    return dict(sorted(regions.items()))


def sidecar_path(trace: Path, suffix: str) -> Path:
    """The path of a file written beside `trace` (``NAME.json.gz`` -> ``NAME<suffix>``)."""
    name = trace.name
    stem = name[: -len(TRACE_SUFFIX)] if name.endswith(TRACE_SUFFIX) else trace.stem
    return trace.with_name(stem + suffix)


@dataclass
class CaptureResult:
    """What one recording wrote, and the profiler's figures for the labelled ranges."""

    trace: Path
    key_averages_txt: Path
    key_averages_json: Path
    regions: dict[str, RegionStats] = field(default_factory=dict)

    def summary(self, name: str) -> str:
        """One line: `name`, the attention ranges' calls and times per call, the trace path."""
        parts = [name]
        for key, stats in self.regions.items():
            if not key.startswith(ATTENTION_PREFIX):
                continue
            calls = max(stats.count, 1)
            text = f"{key} calls={stats.count} cpu={stats.cpu_time_total_us / calls / 1000:.3f}ms/call"
            if stats.device_time_total_us is not None:
                text += f" device={stats.device_time_total_us / calls / 1000:.3f}ms/call"
            parts.append(text)
        if len(parts) == 1:
            parts.append("no attention:* range recorded")
        parts.append(f"-> {self.trace}")
        return "  ".join(parts)


@dataclass
class Recording:
    """A running profiler session; call `step()` after each call of the workload."""

    profiler: Any
    device: str
    schedule: Schedule
    steps_taken: int = 0
    result: CaptureResult | None = None

    def step(self) -> None:
        """Synchronise the device, then advance the profiler's schedule by one step."""
        synchronize(self.device)
        self.profiler.step()
        self.steps_taken += 1


def _activities(device: str) -> list[Any]:
    profiler = require("torch.profiler")
    activities = [profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(profiler.ProfilerActivity.CUDA)
    return activities


def _kineto_safe(value: Any) -> Any:
    """`value` with every string's double quotes made single, backslashes slashes and control characters
    spaces: what JSON would escape with a backslash."""
    if isinstance(value, str):
        return "".join(" " if ord(c) < 32 else c for c in value.replace("\\", "/").replace('"', "'"))
    if isinstance(value, Mapping):
        return {_kineto_safe(k): _kineto_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_kineto_safe(v) for v in value]
    return value


def kineto_json(meta: Mapping[str, Any]) -> str:
    """`meta` as the JSON text Kineto can embed: Kineto writes a metadata value into the trace with every
    backslash turned into a slash (for Windows paths), so a JSON escape (a command line's quote, a ``python -c``
    script's newline) would break the whole trace file. The text has no backslash: strings lose their double
    quotes (made single), backslashes (made slashes) and control characters (made spaces), and non-ASCII
    characters are written as they are."""
    return json.dumps(_kineto_safe(meta), ensure_ascii=False)


@contextmanager
def profiling(
    path: str | os.PathLike[str],
    *,
    device: str,
    metadata: Mapping[str, Any],
    schedule: Schedule = DEFAULT_SCHEDULE,
    record_shapes: bool = True,
    with_stack: bool = False,
    with_modules: bool = False,
    profile_memory: bool = False,
) -> Iterator[Recording]:
    """Profile the enclosed steps and write the trace to `path` (``.json.gz``) on exit.

    Yields a `Recording`; the body must call ``recording.step()`` after each of the
    schedule's steps (`run_steps` does). On a clean exit the device is synchronised,
    the profiler stopped, and the trace plus its key_averages files written;
    ``recording.result`` then holds a `CaptureResult`. Nothing is written when the
    body raises.
    """
    profiler = require("torch.profiler")
    meta = dict(metadata)
    meta["profiler"] = {
        "schedule": schedule.as_dict(),
        "record_shapes": record_shapes,
        "with_stack": with_stack,
        "with_modules": with_modules,
        "profile_memory": profile_memory,
    }
    prof = profiler.profile(
        activities=_activities(device),
        schedule=profiler.schedule(**schedule.as_dict()),
        record_shapes=record_shapes,
        with_stack=with_stack,
        with_modules=with_modules,
        profile_memory=profile_memory,
    )
    # add_metadata_json() is silently dropped ("Profiler is not initialized") while the
    # schedule is still in its wait step; preset_metadata_json() re-adds the key each
    # time a trace cycle starts, so it always lands as a top-level object in the file.
    prof.preset_metadata_json(METADATA_KEY, kineto_json(meta))
    recording = Recording(profiler=prof, device=device, schedule=schedule)
    prof.start()
    try:
        yield recording
        synchronize(device)
    finally:
        prof.stop()
    if recording.steps_taken < schedule.steps:
        raise CaptureError(
            f"the profiler schedule needs {schedule.steps} steps but only "
            f"{recording.steps_taken} were taken: call recording.step() after each call"
        )
    recording.result = write_outputs(prof, Path(path), device)


def write_outputs(prof: Any, trace: Path, device: str) -> CaptureResult:
    """Write the gzipped chrome trace and the two key_averages files of a stopped profiler."""
    trace.parent.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=f".{trace.name}.", suffix=".json", dir=trace.parent)
    os.close(fd)
    try:
        prof.export_chrome_trace(raw)
        gzip_into(raw, trace)
    finally:
        os.unlink(raw)

    averages = prof.key_averages()
    sort_by = "cpu_time_total" if device == "cpu" else "device_time_total"
    table = averages.table(sort_by=sort_by, row_limit=-1)
    regions = region_stats(averages, device)
    txt = sidecar_path(trace, ".key_averages.txt")
    atomic_write(txt, lambda fh: fh.write((table.rstrip("\n") + "\n").encode()))
    figures = {
        "trace": trace.name,
        "device": device,
        "sort_by": sort_by,
        "time_unit": "us",
        "regions": {key: asdict(stats) for key, stats in regions.items()},
    }
    js = sidecar_path(trace, ".key_averages.json")
    atomic_write(js, lambda fh: fh.write((json.dumps(figures, indent=2) + "\n").encode()))
    return CaptureResult(trace=trace, key_averages_txt=txt, key_averages_json=js, regions=regions)


def run_steps(recording: Recording, fn: Callable[[], object]) -> None:
    """Call `fn` once per step of the recording's schedule, stepping the profiler after each."""
    for _ in range(recording.schedule.steps):
        fn()
        recording.step()


def capture(
    fn: Callable[[], object],
    path: str | os.PathLike[str],
    *,
    device: str,
    metadata: Mapping[str, Any],
    warmup: int = 3,
    schedule: Schedule = DEFAULT_SCHEDULE,
    record_shapes: bool = True,
    with_stack: bool = False,
    with_modules: bool = False,
    profile_memory: bool = False,
    record: bool = True,
) -> CaptureResult | None:
    """Warm up `fn`, then profile it over the schedule and write the trace to `path`.

    `warmup` un-profiled calls come first (lazy initialisation, autotuning and
    compilation stay out of the trace). With ``record=False`` (a rank left out by
    ``--ranks``) the same calls run without a profiler and nothing is written, so
    ranks stay in step; the result is then None.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    if not record:
        for _ in range(schedule.steps):
            fn()
        synchronize(device)
        return None
    meta = dict(metadata)
    meta.setdefault("warmup_calls", warmup)
    with profiling(
        path,
        device=device,
        metadata=meta,
        schedule=schedule,
        record_shapes=record_shapes,
        with_stack=with_stack,
        with_modules=with_modules,
        profile_memory=profile_memory,
    ) as recording:
        run_steps(recording, fn)
    return recording.result
