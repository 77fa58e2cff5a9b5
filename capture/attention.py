"""The attention experiment: one labelled forward per implementation, one trace each.

Implementations (all forward-only under ``torch.no_grad()``, random q/k/v [B, H, S, D]):

* ``naive``   ``q @ kᵀ`` → ``* scale`` → ``masked_fill(mask, -inf)`` → softmax → ``@ v``
* ``inplace`` the same with ``masked_fill_``
* ``math`` / ``efficient`` / ``flash`` / ``cudnn``  ``F.scaled_dot_product_attention``
  pinned to one backend with ``sdpa_kernel``
* ``flex``    ``torch.nn.attention.flex_attention`` with a causal block mask
* ``auto``    ``F.scaled_dot_product_attention``, backend left to torch
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import ClusterInfo, detect_cluster, output_path, should_record
from .errors import CaptureError, UnavailableError, require
from .labels import attention_call, stage
from .session import (
    DEFAULT_SCHEDULE,
    CaptureResult,
    Schedule,
    capture,
    capture_metadata,
    resolve_device,
)

IMPLS: tuple[str, ...] = ("naive", "inplace", "math", "efficient", "flash", "cudnn", "flex", "auto")
SDPA_BACKENDS = {
    "math": "MATH",
    "efficient": "EFFICIENT_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}
DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
}


@dataclass(frozen=True)
class AttentionShape:
    """Attention input shape: q, k and v are [batch, heads, seq, head_dim]."""

    batch: int = 8
    heads: int = 16
    seq: int = 1024
    head_dim: int = 64

    def as_metadata(self) -> dict[str, int]:
        """The shape as the metadata's ``shapes`` object (seq_q = seq_kv = seq)."""
        return {
            "batch": self.batch,
            "heads": self.heads,
            "seq_q": self.seq,
            "seq_kv": self.seq,
            "head_dim": self.head_dim,
        }


@dataclass
class Outcome:
    """What happened to one implementation: recorded, ran unrecorded, or unavailable."""

    impl: str
    result: CaptureResult | None = None
    unavailable: str | None = None

    def line(self, rank_note: str = "ran without recording") -> str:
        """A one-line report for the terminal."""
        if self.unavailable is not None:
            return f"{self.impl}: unavailable: {self.unavailable}"
        if self.result is None:
            return f"{self.impl}: {rank_note}"
        return self.result.summary(self.impl)


def parse_impls(text: str) -> tuple[list[str], bool]:
    """Parse ``--impl`` (a name, a comma list, or ``all``) into names and an `explicit` flag.

    `explicit` is False for ``all``, whose unavailable members are skipped quietly.
    """
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return list(IMPLS), False
    unknown = [n for n in names if n not in IMPLS]
    if unknown or not names:
        raise CaptureError(f"unknown --impl {', '.join(unknown) or repr(text)}: use one of {', '.join(IMPLS)} or all")
    return names, True


def resolve_dtype(name: str, device: str) -> str:
    """Map a ``--dtype`` value to a torch dtype name; ``auto`` is bf16 on cuda, fp32 on cpu."""
    if name == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise CaptureError(f"unknown --dtype {name!r}: use auto, bf16, fp16 or fp32") from None


def default_tag(shape: AttentionShape, compiled: bool) -> str:
    """The reference experiment's run name, ``{batch}_{heads}_{seq}_{head_dim}_{eager|compile}``."""
    mode = "compile" if compiled else "eager"
    return f"{shape.batch}_{shape.heads}_{shape.seq}_{shape.head_dim}_{mode}"


@contextmanager
def _no_label(_name: str) -> Iterator[None]:
    yield


def _body(
    impl: str, causal: bool, shape: AttentionShape, device: str, staged: bool
) -> tuple[Callable[..., Any], Callable[[], AbstractContextManager[Any]]]:
    """Return the attention computation of `impl` and the context it must run in."""
    torch = require("torch")
    F = torch.nn.functional
    # torch.compile drops record_function ranges inside compiled code (with a warning),
    # so compiled bodies carry no stage labels; the attention:<impl> range stays outside.
    label = stage if staged else _no_label

    if impl in ("naive", "inplace"):
        scale = 1.0 / math.sqrt(shape.head_dim)
        # Built once, outside the timed call, as in the reference script.
        mask = torch.ones(shape.seq, shape.seq, dtype=torch.bool, device=device).triu(1) if causal else None

        def naive(q: Any, k: Any, v: Any) -> Any:
            with label("qk_matmul"):
                scores = q @ k.transpose(-2, -1)
            with label("scale"):
                scores = scores * scale
            if mask is not None:
                with label("mask"):
                    if impl == "inplace":
                        scores.masked_fill_(mask, float("-inf"))
                    else:
                        scores = scores.masked_fill(mask, float("-inf"))
            with label("softmax"):
                probs = torch.softmax(scores, dim=-1)
            with label("pv_matmul"):
                return probs @ v

        return naive, nullcontext

    if impl in SDPA_BACKENDS or impl == "auto":
        # No stage label: the backend decides what runs (fused kernels, or
        # the math path's matmuls and softmax), and tracekit reads it off the ops.
        def sdpa(q: Any, k: Any, v: Any) -> Any:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        if impl == "auto":
            return sdpa, nullcontext
        attention = require("torch.nn.attention")
        backend = getattr(attention.SDPBackend, SDPA_BACKENDS[impl], None)
        if backend is None:
            raise UnavailableError(impl, f"torch {torch.__version__} has no SDPBackend.{SDPA_BACKENDS[impl]}")
        return sdpa, lambda: attention.sdpa_kernel(backend)

    if impl == "flex":
        try:
            flex_module = require("torch.nn.attention.flex_attention")
        except CaptureError:
            raise UnavailableError(
                impl, f"torch {torch.__version__} has no torch.nn.attention.flex_attention"
            ) from None
        block_mask = None
        if causal:
            try:
                block_mask = flex_module.create_block_mask(
                    lambda b, h, q_idx, kv_idx: q_idx >= kv_idx,
                    None,
                    None,
                    shape.seq,
                    shape.seq,
                    device=device,
                )
            except Exception as exc:  # noqa: BLE001 - same rule as the probe
                raise UnavailableError(
                    impl, f"create_block_mask failed on {device}: {type(exc).__name__}: {exc}"
                ) from exc

        def flex(q: Any, k: Any, v: Any) -> Any:
            return flex_module.flex_attention(q, k, v, block_mask=block_mask)

        return flex, _quiet_flex

    raise CaptureError(f"unknown attention implementation {impl!r}")


@contextmanager
def _quiet_flex() -> Iterator[None]:
    # Eager flex_attention warns at length that it runs unfused; the CLI prints a
    # one-line note instead.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def _probe(impl: str, forward: Callable[[], Any], device: str, setting: str) -> None:
    """Run `forward` once; turn a refusal by torch into `UnavailableError` with one line.

    `setting` describes the inputs (dtype, shape, device) for the message.
    """
    torch = require("torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            forward()
            if device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - any refusal means "not on this setup"
            message = str(exc).strip().split("\n")[0] or type(exc).__name__
            if message.startswith("No viable backend"):
                # Its second sentence blames disabled backends, which is the point of
                # pinning one; the first says all there is to say.
                message = message.split(". ")[0] + "."
            what = f"SDPBackend.{SDPA_BACKENDS[impl]}" if impl in SDPA_BACKENDS else impl
            reason = f"{what} cannot run {setting}: {type(exc).__name__}: {message}"
            # SDPA explains on CUDA why a backend declined ("Flash attention kernel not
            # used because ...") in warnings, not in the error itself.
            why = [str(w.message).split("\n")[0] for w in caught if "not used because" in str(w.message)]
            if why:
                reason += " (" + "; ".join(dict.fromkeys(why)) + ")"
            raise UnavailableError(impl, reason) from exc


def run_attention(
    impl: str,
    *,
    out: str | Path,
    shape: AttentionShape = AttentionShape(),
    dtype: str = "auto",
    causal: bool = True,
    device: str = "auto",
    compiled: bool = False,
    tag: str | None = None,
    flat: bool = False,
    ranks: frozenset[int] | None = None,
    cluster: ClusterInfo | None = None,
    warmup: int = 3,
    steps: int = 3,
    record_shapes: bool = True,
    with_stack: bool = False,
    profile_memory: bool = False,
    seed: int = 0,
    all_reduce: bool = False,
) -> Outcome:
    """Record one attention implementation; unavailable ones come back as `Outcome.unavailable`.

    `steps` is the number of profiled (active) steps of the schedule; `warmup` the
    un-profiled calls before it. The trace goes to `output_path(out, tag, ...)`;
    ranks left out by `ranks` run the same calls without recording. With
    `all_reduce`, every call's output is then all-reduced over the job's default
    process group (already initialised: `cluster.init_distributed`), as a
    data-parallel step would, so each rank's trace holds real collectives.
    """
    torch = require("torch")
    device = resolve_device(device)
    dtype_name = resolve_dtype(dtype, device)
    cluster = cluster or detect_cluster()
    tag = tag or default_tag(shape, compiled)
    schedule = Schedule(wait=DEFAULT_SCHEDULE.wait, warmup=DEFAULT_SCHEDULE.warmup, active=steps, repeat=1)
    try:
        body, context = _body(impl, causal, shape, device, staged=not compiled)
        if compiled:
            body = torch.compile(body)
        generator = torch.Generator(device=device).manual_seed(seed)
        q, k, v = (
            torch.randn(
                shape.batch,
                shape.heads,
                shape.seq,
                shape.head_dim,
                device=device,
                dtype=getattr(torch, dtype_name),
                generator=generator,
            )
            for _ in range(3)
        )

        def forward() -> Any:
            with attention_call(impl):
                out = body(q, k, v)
            if all_reduce:  # outside the call's label: communication, not attention
                torch.distributed.all_reduce(out)
            return out

        with torch.no_grad(), context():
            setting = (
                f"{dtype_name} {'causal' if causal else 'full'} "
                f"[{shape.batch}, {shape.heads}, {shape.seq}, {shape.head_dim}] on {device}"
            )
            _probe(impl, forward, device, setting)
            meta = capture_metadata(
                device=device,
                cluster=cluster,
                tag=tag,
                impl=impl,
                shapes=shape.as_metadata(),
                dtype=dtype_name,
                causal=causal,
                compiled=compiled,
                # The probe is the first warm-up call, and it always runs.
                warmup_calls=max(warmup, 1),
            )
            result = capture(
                forward,
                output_path(out, tag, cluster, impl, flat=flat),
                device=device,
                metadata=meta,
                warmup=max(warmup - 1, 0),
                schedule=schedule,
                record_shapes=record_shapes,
                with_stack=with_stack,
                profile_memory=profile_memory,
                record=should_record(cluster, ranks),
            )
    except UnavailableError as exc:
        return Outcome(impl, unavailable=exc.reason)
    return Outcome(impl, result=result)


def run_experiment(impls: list[str], **options: Any) -> list[Outcome]:
    """Run `run_attention` for each of `impls` with the same options, in order."""
    return [run_attention(impl, **options) for impl in impls]
