"""CPU recordings that mimic a serving engine's step annotations, with known steps.

A serving engine runs one model step per scheduler iteration and, when its own
profiler runs, writes a ``record_function`` range around it. ``record_serving``
runs a tiny decoder (plain torch, random weights) through a plan of steps
(prefill, decode, mixed) and wraps each step the way the engine does, so the
trace's steps, phases, requests and tokens are known by construction:

========  ==========================================================================
engine    the ranges written (names as the engine's code writes them)
========  ==========================================================================
vllm_v1   ``execute_new_<new>_cached_<cached>`` (vLLM V1 ``gpu_worker.annotate_profile``)
          around ``gpu_model_runner: preprocess`` / ``forward`` / ``sample``
          (``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``)
vllm      ``execute_context_<n>(<tokens>_<tokens*tokens>)_generation_<n>(<tokens>)``
          (the form of the shared B200 vLLM trace)
sglang    ``capture_<bs>_DECODE`` once before the first decode step (a graph capture
          pass: warm-up), then ``step[EXTEND bs=<n> toks=<t>]``, ``step[DECODE bs=<n>]``
          and ``step[MIXED bs=<n> toks=<t>]``
tgi       no range at all (TGI writes OpenTelemetry spans, not profiler ranges): the
          steps are the calls of the top module ``FlashLlamaForCausalLM``, recorded
          with ``with_stack`` (forward periodicity)
========  ==========================================================================

The first ``warmup_steps`` steps of the plan sleep ``warmup_sleep_s`` inside the
step (a compile, an allocation) and every step sleeps ``step_sleep_s``, so the
warm-up steps are slower than the rest by construction.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import detect_cluster
from .errors import CaptureError, require
from .session import CaptureResult, Schedule, capture_metadata, profiling

ENGINES = ("vllm_v1", "vllm", "sglang", "tgi")


@dataclass(frozen=True)
class ServingStep:
    """One scheduler iteration: requests and tokens in prefill, requests decoding (one token each)."""

    context_requests: int = 0
    context_tokens: int = 0
    generation_requests: int = 0

    @property
    def phase(self) -> str:
        if self.context_requests and self.generation_requests:
            return "mixed"
        return "prefill" if self.context_requests else "decode"

    @property
    def tokens(self) -> int:
        return self.context_tokens + self.generation_requests

    @property
    def requests(self) -> int:
        return self.context_requests + self.generation_requests


# Two requests of 16 prompt tokens, four decode steps, a third request arriving (mixed), two more decodes.
DEFAULT_PLAN = (
    ServingStep(2, 32, 0),
    *[ServingStep(0, 0, 2)] * 4,
    ServingStep(1, 16, 2),
    *[ServingStep(0, 0, 3)] * 2,
)


def step_names(engine: str, step: ServingStep) -> list[str]:
    """The ranges, outermost first, that `engine` writes around `step` (empty for tgi)."""
    c, ct, g = step.context_requests, step.context_tokens, step.generation_requests
    if engine == "vllm_v1":
        return [f"execute_new_{c}_cached_{g}"]
    if engine == "vllm":
        return [f"execute_context_{c}({ct}_{ct * ct})_generation_{g}({g})"]
    if engine == "sglang":
        if step.phase == "decode":
            return [f"step[DECODE bs={g}]"]
        word = "EXTEND" if step.phase == "prefill" else "MIXED"
        return [f"step[{word} bs={step.requests} toks={step.tokens}]"]
    if engine == "tgi":
        return []
    raise CaptureError(f"unknown serving engine {engine!r} (known: {', '.join(ENGINES)})")


def _model(torch: Any, hidden: int = 32, heads: int = 2, layers: int = 1, vocab: int = 64):
    nn = torch.nn
    F = torch.nn.functional
    Module: Any = nn.Module  # (torch is imported when a recording starts: mypy sees no class here)

    class LlamaAttention(Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv_proj = nn.Linear(hidden, 3 * hidden, bias=False)
            self.o_proj = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x):
            t = x.shape[0]
            q, k, v = self.qkv_proj(x).view(t, 3, heads, hidden // heads).permute(1, 2, 0, 3)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o_proj(out.transpose(0, 1).reshape(t, hidden))

    class LlamaDecoderLayer(Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = LlamaAttention()
            self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden))

        def forward(self, x):
            x = x + self.self_attn(x)
            return x + self.mlp(x)

    class FlashLlamaForCausalLM(Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, hidden)
            self.layers = nn.ModuleList(LlamaDecoderLayer() for _ in range(layers))
            self.lm_head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, ids):
            x = self.embed_tokens(ids)
            for layer in self.layers:
                x = layer(x)
            return self.lm_head(x)

    torch.manual_seed(0)
    return FlashLlamaForCausalLM().eval(), vocab


def record_serving(
    engine: str,
    out: str | os.PathLike[str],
    *,
    plan: tuple[ServingStep, ...] = DEFAULT_PLAN,
    warmup_steps: int = 2,
    warmup_sleep_s: float = 0.06,
    step_sleep_s: float = 0.01,
) -> CaptureResult:
    """Record `plan` on CPU as `engine` annotates its steps into ``OUT/serving_<engine>.json.gz``.

    The trace's metadata (``tracekit_capture``) holds the plan: each step's phase,
    requests and tokens, and which steps are warm-up.
    """
    if engine not in ENGINES:
        raise CaptureError(f"unknown serving engine {engine!r} (known: {', '.join(ENGINES)})")
    torch = require("torch")
    record_function = require("torch.profiler").record_function
    model, vocab = _model(torch)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"serving_{engine}.json.gz"
    truth = [
        dict(phase=s.phase, context_requests=s.context_requests, context_tokens=s.context_tokens,
             generation_requests=s.generation_requests, tokens=s.tokens, warmup=i < warmup_steps)
        for i, s in enumerate(plan)
    ]  # fmt: skip
    # command_line names the call, not argv: torch writes a double quote of the metadata as /" (bad JSON).
    meta = capture_metadata(
        device="cpu",
        cluster=detect_cluster(),
        tag=f"serving_{engine}",
        engine=engine,
        plan=truth,
        command_line=f"capture.serving.record_serving {engine}",
    )
    decode_seen = False

    def forward(tokens: int):
        ids = torch.randint(0, vocab, (tokens,))
        if engine == "vllm_v1":
            with record_function("gpu_model_runner: preprocess"):
                ids = ids.clone()
            with record_function("gpu_model_runner: forward"):
                logits = model(ids)
            with record_function("gpu_model_runner: sample"):
                return logits.argmax(-1)
        return model(ids).argmax(-1)

    def run(i: int, step: ServingStep) -> None:
        nonlocal decode_seen
        if engine == "sglang" and step.phase == "decode" and not decode_seen:
            # SGLang captures its decode graphs before the first decode batch: a forward of its own.
            decode_seen = True
            with record_function(f"capture_{step.generation_requests}_DECODE"):
                forward(step.generation_requests)
        ranges = [record_function(n) for n in step_names(engine, step)]
        for r in ranges:
            r.__enter__()
        try:
            if i < warmup_steps:
                time.sleep(warmup_sleep_s)
            time.sleep(step_sleep_s)
            forward(step.tokens)
        finally:
            for r in reversed(ranges):
                r.__exit__(None, None, None)

    schedule = Schedule(wait=1, warmup=1, active=len(plan))
    with torch.inference_mode():
        model(torch.zeros(4, dtype=torch.long))  # lazy initialisation outside the trace
        # No shapes (steps need none); TGI's steps are its module scopes (with_stack), the others' their ranges.
        with profiling(
            path, device="cpu", metadata=meta, schedule=schedule, record_shapes=False, with_stack=engine == "tgi"
        ) as rec:
            for i in range(schedule.steps):
                if i < schedule.wait + schedule.warmup:
                    model(torch.zeros(4, dtype=torch.long))  # not recorded: the profiler's wait and warm-up steps
                else:
                    run(i - schedule.wait - schedule.warmup, plan[i - schedule.wait - schedule.warmup])
                rec.step()
    assert rec.result is not None
    return rec.result


SERVING_SAMPLE_DIR = Path("sample_traces") / "cpu_serving"


def record_serving_samples(out: str | os.PathLike[str] = SERVING_SAMPLE_DIR, engines=ENGINES) -> Path:
    """Record ``serving_<engine>.json.gz`` for each engine into `out` and write its ``manifest.json``.

    The manifest holds, per trace, the engine, the ranges it writes and the plan (the
    truth the tests compare serving_steps with); key_averages files are not kept.
    """
    import json

    out = Path(out)
    entries = []
    for engine in engines:
        result = record_serving(engine, out)
        for extra in (result.key_averages_txt, result.key_averages_json):
            Path(extra).unlink(missing_ok=True)
        entries.append(
            dict(
                file=Path(result.trace).name,
                engine=engine,
                ranges=sorted({n for s in DEFAULT_PLAN for n in step_names(engine, s)}),
            )
        )
    plan = [
        dict(phase=s.phase, context_requests=s.context_requests, context_tokens=s.context_tokens,
             generation_requests=s.generation_requests, tokens=s.tokens)
        for s in DEFAULT_PLAN
    ]  # fmt: skip
    manifest = out / "manifest.json"
    manifest.write_text(json.dumps(dict(plan=plan, warmup_steps=2, traces=entries), indent=1) + "\n")
    return manifest
