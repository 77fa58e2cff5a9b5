"""Real-model mode: label a model's attention modules, profile its forward, write a trace."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .attention import resolve_dtype
from .cluster import ClusterInfo, detect_cluster, output_path, should_record
from .errors import CaptureError, one_line, require
from .labels import ATTENTION_PREFIX, DEFAULT_PATTERNS, label_modules
from .session import (
    DEFAULT_SCHEDULE,
    CaptureResult,
    Schedule,
    capture,
    capture_metadata,
    resolve_device,
)


def _move(inputs: Any, device: str) -> Any:
    if hasattr(inputs, "to"):
        return inputs.to(device)
    if isinstance(inputs, Mapping):
        return {key: _move(value, device) for key, value in inputs.items()}
    if isinstance(inputs, (list, tuple)):
        return type(inputs)(_move(value, device) for value in inputs)
    return inputs


def _call(model: Any, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (list, tuple)):
        return model(*inputs)
    return model(inputs)


def _first_parameter(model: Any) -> Any:
    return next(iter(model.parameters()), None)


def profile_model(
    model: Any,
    inputs: Any,
    out: str | Path,
    *,
    name: str | None = None,
    tag: str = "model",
    flat: bool = False,
    device: str | None = None,
    patterns: Iterable[str] = DEFAULT_PATTERNS,
    shapes: Mapping[str, int | None] | None = None,
    causal: bool | None = None,
    metadata: Mapping[str, Any] | None = None,
    warmup: int = 3,
    steps: int = 3,
    record_shapes: bool = True,
    with_stack: bool = False,
    profile_memory: bool = False,
    ranks: frozenset[int] | None = None,
    cluster: ClusterInfo | None = None,
) -> CaptureResult | None:
    """Profile forward passes of an already-built `torch.nn.Module` and write a trace.

    `inputs` is one tensor, a tuple (positional arguments) or a dict (keyword
    arguments). The model's attention modules are labelled with `label_modules`
    (`patterns`) for the duration of the capture, so each forward of one is an
    ``attention:<ClassName>`` range. `device` moves model and inputs (default: where
    the model's parameters are); `name` (default: the model's class) names the file;
    `shapes`, `causal` and `metadata` go into the trace's metadata. Returns None on
    a rank that `ranks` leaves out.
    """
    torch = require("torch")
    if device is not None:
        model = model.to(device)
        inputs = _move(inputs, device)
    first = _first_parameter(model)
    device_type = first.device.type if first is not None else (device or "cpu")
    dtype = str(first.dtype).removeprefix("torch.") if first is not None else None
    cluster = cluster or detect_cluster()
    name = name or type(model).__name__
    model.eval()
    with label_modules(model, patterns) as handle, torch.no_grad():
        classes = sorted(
            {label[len(ATTENTION_PREFIX) :] for _, label in handle.labels if label.startswith(ATTENTION_PREFIX)}
        )
        meta = capture_metadata(
            device=device_type,
            cluster=cluster,
            tag=tag,
            impl=",".join(classes) or None,
            shapes=shapes,
            dtype=dtype,
            causal=causal,
            model=type(model).__name__,
            labelled_modules=len(handle.attention_modules),
        )
        meta.update(metadata or {})
        return capture(
            lambda: _call(model, inputs),
            output_path(out, tag, cluster, name, flat=flat),
            device=device_type,
            metadata=meta,
            warmup=warmup,
            schedule=Schedule(wait=DEFAULT_SCHEDULE.wait, warmup=DEFAULT_SCHEDULE.warmup, active=steps, repeat=1),
            record_shapes=record_shapes,
            with_stack=with_stack,
            profile_memory=profile_memory,
            record=should_record(cluster, ranks),
        )


def load_hf_model(
    model_id: str,
    *,
    device: str,
    dtype: str,
    attn_implementation: str | None = None,
) -> Any:
    """Load a transformers model onto `device` in `dtype`, as its checkpoint was saved.

    A checkpoint saved from a causal LM (``*ForCausalLM``, ``*LMHeadModel``) loads
    with its head through AutoModelForCausalLM; any other through AutoModel, so an
    encoder such as BERT is not given a randomly initialised LM head. Raises
    MissingDependencyError when transformers is not installed and CaptureError when
    the model cannot be loaded.
    """
    torch = require("torch")
    transformers = require("transformers")
    if model_id.startswith(("/", ".")) and not Path(model_id).exists():
        # transformers would report a missing directory as a malformed hub repo id.
        raise CaptureError(f"no model directory at {model_id}")
    kwargs: dict[str, Any] = {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        config = transformers.AutoConfig.from_pretrained(model_id)
        auto = (
            transformers.AutoModelForCausalLM
            if any(_is_causal_lm(arch) for arch in config.architectures or ())
            else transformers.AutoModel
        )
        model = auto.from_pretrained(model_id, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise CaptureError(f"cannot load model {model_id!r}: {one_line(str(exc))}") from exc
    return model.to(device=device, dtype=getattr(torch, dtype)).eval()


def _is_causal_lm(class_name: str) -> bool:
    return class_name.endswith(("ForCausalLM", "LMHeadModel"))


def hf_inputs(model: Any, *, batch: int, seq: int, device: str, seed: int = 0) -> dict[str, Any]:
    """Random token ids (and an all-ones attention mask) for a transformers model."""
    torch = require("torch")
    vocab = getattr(model.config, "vocab_size", None) or 32000
    generator = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    return {
        "input_ids": ids.to(device),
        "attention_mask": torch.ones(batch, seq, dtype=torch.long, device=device),
    }


def hf_shapes(model: Any, *, batch: int, seq: int) -> dict[str, int | None]:
    """The metadata's shapes for a transformers model, heads and head_dim from its config."""
    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    hidden = getattr(config, "hidden_size", None)
    head_dim = getattr(config, "head_dim", None) or (hidden // heads if hidden and heads else None)
    return {"batch": batch, "heads": heads, "seq_q": seq, "seq_kv": seq, "head_dim": head_dim}


def run_hf_model(
    model_id: str,
    *,
    out: str | Path,
    batch: int = 1,
    seq: int = 512,
    dtype: str = "auto",
    device: str = "auto",
    attn_implementation: str | None = None,
    tag: str | None = None,
    flat: bool = False,
    **options: Any,
) -> CaptureResult | None:
    """Load `model_id` with transformers, label its attention and profile forward passes.

    `options` are passed on to `profile_model` (patterns, warmup, steps, ranks, ...).
    """
    device = resolve_device(device)
    dtype_name = resolve_dtype(dtype, device)
    model = load_hf_model(model_id, device=device, dtype=dtype_name, attn_implementation=attn_implementation)
    name = Path(model_id.rstrip("/")).name or "model"
    # Causal LMs attend causally; for other architectures the config does not say.
    causal = True if _is_causal_lm(type(model).__name__) else None
    return profile_model(
        model,
        hf_inputs(model, batch=batch, seq=seq, device=device),
        out,
        name=name,
        tag=tag or f"{name}_{batch}_{seq}",
        flat=flat,
        shapes=hf_shapes(model, batch=batch, seq=seq),
        causal=causal,
        metadata={
            "model_id": model_id,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
        },
        **options,
    )
