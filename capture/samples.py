"""The repository's sample traces, recorded by the project itself.

``python -m capture samples`` rewrites ``sample_traces/cpu_attention/``: the reference
variants that run on a CPU, at a small shape. ``python -m capture samples --gpu``
records the post's setting on a GPU (batch 8, heads 16, seq 1024, head_dim 64, bf16,
causal) into ``sample_traces/gpu_<name>/``, every variant the GPU runs, flex compiled,
plus a small randomly initialised Llama forward with eager attention, once labelled
and once with no label at all (what a serving stack's trace looks like), and its training
step with SDPA attention (forward, backward, optimizer). Each folder
gets one ``{name}.json.gz`` per trace, its key_averages files, and ``manifest.json``,
which holds only fields that do not depend on the time of recording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .attention import AttentionShape, Outcome, run_attention, run_experiment
from .cluster import atomic_write, detect_cluster, output_path
from .errors import CaptureError, require
from .labels import ATTENTION_PREFIX, DEFAULT_PATTERNS, LABEL_SCHEME, label_modules
from .model import hf_inputs, hf_shapes, profile_model
from .session import CAPTURE_VERSION, DEFAULT_SCHEDULE, capture, capture_metadata

SAMPLE_DIR = Path("sample_traces") / "cpu_attention"
SAMPLE_IMPLS = ("naive", "inplace", "math", "efficient", "flash", "cudnn", "auto")
SAMPLE_SHAPE = AttentionShape(batch=2, heads=4, seq=128, head_dim=32)
SAMPLE_TAG = "cpu_attention"
GPU_SAMPLE_IMPLS = ("naive", "inplace", "math", "efficient", "flash", "cudnn", "auto", "flex")
GPU_SAMPLE_SHAPE = AttentionShape(batch=8, heads=16, seq=1024, head_dim=64)
# A small Llama (random weights, nothing to download): 2 decoder layers, 16 heads of 64.
GPU_SAMPLE_LLAMA = dict(
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=2,
    num_attention_heads=16,
    num_key_value_heads=16,
    vocab_size=32000,
    max_position_embeddings=2048,
)
GPU_SAMPLE_LLAMA_INPUT = dict(batch=2, seq=512)


def record_samples(out: str | Path = SAMPLE_DIR) -> tuple[Path, list[Outcome]]:
    """Record the CPU sample traces into `out` and write its ``manifest.json``.

    Variants torch refuses on CPU are listed under ``unavailable`` in the manifest.
    Returns the manifest path and the outcomes.
    """
    torch = require("torch")
    out = Path(out)
    options: dict[str, Any] = dict(
        out=out,
        shape=SAMPLE_SHAPE,
        dtype="float32",
        causal=True,
        device="cpu",
        tag=SAMPLE_TAG,
        flat=True,
        record_shapes=True,
        with_stack=False,
    )
    outcomes = run_experiment(list(SAMPLE_IMPLS), **options)
    traces = []
    for outcome in outcomes:
        if outcome.result is None:
            continue
        result = outcome.result
        traces.append(
            {
                "file": result.trace.name,
                "impl": outcome.impl,
                "key_averages_txt": result.key_averages_txt.name,
                "key_averages_json": result.key_averages_json.name,
            }
        )
    manifest = {
        "description": "Attention forward on CPU, one trace per implementation (regenerate: python -m capture samples)",
        "label_scheme": LABEL_SCHEME,
        "capture_version": CAPTURE_VERSION,
        "torch_version": torch.__version__,
        "device": "cpu",
        "dtype": "float32",
        "causal": True,
        "shapes": SAMPLE_SHAPE.as_metadata(),
        "schedule": DEFAULT_SCHEDULE.as_dict(),
        "warmup_calls": 3,
        "record_shapes": True,
        "with_stack": False,
        "profile_memory": False,
        "traces": traces,
        "unavailable": [{"impl": o.impl, "reason": o.unavailable} for o in outcomes if o.unavailable],
    }
    path = atomic_write(
        out / "manifest.json",
        lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode()),
    )
    return path, outcomes


def gpu_sample_dir(gpu_name: str) -> Path:
    """``sample_traces/gpu_<short name>``: ``NVIDIA H200`` -> ``gpu_h200``."""
    words = [w for w in gpu_name.lower().replace("-", " ").split() if w not in ("nvidia", "amd", "tesla")]
    return Path("sample_traces") / ("gpu_" + (words[0] if words else "unknown"))


def record_gpu_samples(out: str | Path | None = None, *, device: str = "cuda") -> tuple[Path, list[Outcome]]:
    """Record the GPU sample traces (the post's variants and a small Llama) into `out`.

    `out` defaults to `gpu_sample_dir` of the GPU's name. Needs a CUDA (or ROCm)
    device; flex runs compiled; the Llama needs transformers. Variants the GPU
    refuses are listed under ``unavailable`` in the manifest. Returns the manifest
    path and the attention outcomes. (`device` is for the tests' smoke run on a CPU.)
    """
    torch = require("torch")
    if device == "cuda" and not torch.cuda.is_available():
        raise CaptureError("samples --gpu needs a CUDA device; torch.cuda.is_available() is False")
    gpu_name = torch.cuda.get_device_name(0) if device == "cuda" else device
    out = Path(out) if out is not None else gpu_sample_dir(gpu_name)
    options: dict[str, Any] = dict(
        out=out,
        shape=GPU_SAMPLE_SHAPE,
        dtype="bfloat16",
        causal=True,
        device=device,
        tag=out.name,
        flat=True,
        record_shapes=True,
        with_stack=False,
    )
    outcomes = [run_attention(impl, compiled=(impl == "flex"), **options) for impl in GPU_SAMPLE_IMPLS]
    traces = [
        {
            "file": o.result.trace.name,
            "impl": o.impl,
            "compiled": o.impl == "flex",
            "key_averages_txt": o.result.key_averages_txt.name,
            "key_averages_json": o.result.key_averages_json.name,
        }
        for o in outcomes
        if o.result is not None
    ]
    models = _record_llama(out, device) + [_record_llama_train(out, device)]
    manifest = {
        "description": "Attention forward on a GPU, the post's variants and a small Llama "
        "(regenerate on a GPU: python -m capture samples --gpu)",
        "label_scheme": LABEL_SCHEME,
        "capture_version": CAPTURE_VERSION,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device": device,
        "gpu_name": gpu_name,
        "dtype": "bfloat16",
        "causal": True,
        "shapes": GPU_SAMPLE_SHAPE.as_metadata(),
        "schedule": DEFAULT_SCHEDULE.as_dict(),
        "warmup_calls": 3,
        "record_shapes": True,
        "with_stack": False,
        "profile_memory": False,
        "traces": traces,
        "models": models,
        "unavailable": [{"impl": o.impl, "reason": o.unavailable} for o in outcomes if o.unavailable],
    }
    path = atomic_write(
        out / "manifest.json",
        lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode()),
    )
    return path, outcomes


def _record_llama(out: Path, device: str) -> list[dict[str, Any]]:
    """A randomly initialised small Llama's forward with eager attention, labelled and unlabelled."""
    torch = require("torch")
    transformers = require("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**GPU_SAMPLE_LLAMA, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    batch, seq = GPU_SAMPLE_LLAMA_INPUT["batch"], GPU_SAMPLE_LLAMA_INPUT["seq"]
    inputs = hf_inputs(model, batch=batch, seq=seq, device=device)
    shapes = hf_shapes(model, batch=batch, seq=seq)
    records = []
    for name, patterns in (("llama_eager", DEFAULT_PATTERNS), ("llama_eager_unlabelled", ())):
        result = profile_model(
            model,
            inputs,
            out,
            name=name,
            tag=out.name,
            flat=True,
            patterns=patterns,
            shapes=shapes,
            causal=True,
            metadata={"model_config": dict(GPU_SAMPLE_LLAMA), "attn_implementation": "eager"},
        )
        assert result is not None  # no --ranks: every rank records
        records.append(_llama_entry(result, "eager", labelled=bool(patterns)))
    return records


def _llama_entry(result: Any, attn_implementation: str, **flags: bool) -> dict[str, Any]:
    """The manifest's entry for one recording of the sample Llama (``flags``: labelled, training)."""
    return {
        "file": result.trace.name,
        "model": "LlamaForCausalLM (random weights)",
        "config": dict(GPU_SAMPLE_LLAMA),
        "attn_implementation": attn_implementation,
        **flags,
        "batch": GPU_SAMPLE_LLAMA_INPUT["batch"],
        "seq": GPU_SAMPLE_LLAMA_INPUT["seq"],
        "key_averages_txt": result.key_averages_txt.name,
        "key_averages_json": result.key_averages_json.name,
    }


def _record_llama_train(out: Path, device: str) -> dict[str, Any]:
    """The same small Llama's training step (forward, backward, an SGD step) with SDPA attention,
    its attention modules labelled: the backward's attention kernels run on autograd's thread,
    outside the forward's labels."""
    torch = require("torch")
    transformers = require("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**GPU_SAMPLE_LLAMA, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch, seq = GPU_SAMPLE_LLAMA_INPUT["batch"], GPU_SAMPLE_LLAMA_INPUT["seq"]
    inputs = hf_inputs(model, batch=batch, seq=seq, device=device)

    def step() -> None:
        loss = model(**inputs, labels=inputs["input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    cluster = detect_cluster()
    name = "llama_train_sdpa"
    with label_modules(model, DEFAULT_PATTERNS) as handle:
        meta = capture_metadata(
            device=device,
            cluster=cluster,
            tag=out.name,
            impl=",".join(
                sorted(
                    {label[len(ATTENTION_PREFIX) :] for _, label in handle.labels if label.startswith(ATTENTION_PREFIX)}
                )
            )
            or None,
            shapes=hf_shapes(model, batch=batch, seq=seq),
            dtype="bfloat16",
            causal=True,
            model=type(model).__name__,
            labelled_modules=len(handle.attention_modules),
            model_config=dict(GPU_SAMPLE_LLAMA),
            attn_implementation="sdpa",
            training=True,
        )
        result = capture(step, output_path(out, out.name, cluster, name, flat=True), device=device, metadata=meta)
    assert result is not None  # no --ranks: every rank records
    return _llama_entry(result, "sdpa", labelled=True, training=True)
