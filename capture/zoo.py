"""A trace zoo with ground truth: tiny transformer families recorded scoped, and again stripped.

Each case is a small model with random weights (hidden 64, 2 layers, 16 tokens) run on the
CPU under the profiler with ``record_shapes``, ``with_stack`` and ``with_modules``: the
**scoped** copy carries every ``nn.Module: <Class>_<n>`` scope and Python function as
``python_function`` events. The **stripped** twin is the same file with every
``python_function`` event removed: what the profiler's default recording holds, with the
same ops at the same times. What the analyzer decides from the scopes is the truth for what
it decides without them. No label (``attention:*``, ``stage:*``) is added: both copies rely
on what a trace shows by itself.

Families: Hugging Face ``transformers`` models built from configs (when it is importable;
``source`` ``transformers``) and plain-torch modules that follow the same code paths
(`capture.zoo_models`; ``source`` ``torch``), ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` on their slow and fast paths, the SDPA backends, eager
flex_attention, one ``torch.compile`` case and training steps. ``record_zoo`` writes
``{name}.scoped.json.gz`` and ``{name}.stripped.json.gz`` per case and a ``manifest.json``;
a case this machine cannot run (transformers missing, a backend torch refuses on CPU) is
listed under ``unavailable`` with the reason.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cluster import atomic_write, detect_cluster
from .errors import CaptureError, one_line, require
from .session import CAPTURE_VERSION, Schedule, capture, capture_metadata, resolve_device

ZOO_SCHEDULE = Schedule(wait=1, warmup=1, active=2, repeat=1)
ZOO_WARMUP = 1
SCOPED_SUFFIX = ".scoped.json.gz"
STRIPPED_SUFFIX = ".stripped.json.gz"
# What the stripped copy loses: the Python tracer's events (nn.Module scopes, Python functions).
PYTHON_CATEGORY = "python_function"
# The size every family shares: hidden 64 in 4 heads of 16, 2 layers, 16 tokens (ViT and CLIP's vision
# tower: a 32x32 image in 8x8 patches, 17 tokens; Whisper: 32 mel frames, 16 after its strided conv).
HIDDEN, HEADS, KV_HEADS, LAYERS, FFN, VOCAB, SEQ, BATCH = 64, 4, 2, 2, 128, 100, 16, 1
IMAGE, PATCH, MELS = 32, 8, 16


@dataclass(frozen=True)
class ZooCase:
    """One model of the zoo and how to run it.

    `family` names the architecture (llama, qwen3, mistral, gpt2, bert, t5, vit, clip, whisper, mha,
    encoder_layer); `source` is ``transformers`` or ``torch``; `settings` are the knobs the name
    abbreviates (attention implementation, SDPA backend, path, compiled, training). `calls_per_step`
    is how many attention module forwards one step runs: the attention calls the scoped copy should
    show per profiled step. `may_fail` cases (a backend, flex, the compiler) are listed as unavailable
    when torch refuses them here; any other failure is an error.
    """

    name: str
    family: str
    source: str
    settings: Mapping[str, Any]
    calls_per_step: int
    may_fail: bool = False

    @property
    def requires(self) -> str | None:
        """The optional package the case needs (torch aside)."""
        return "transformers" if self.source == "transformers" else None

    @property
    def training(self) -> bool:
        """A forward, backward and optimizer step instead of a forward under no_grad."""
        return bool(self.settings.get("training"))


def _case(name: str, family: str, source: str, calls: int, may_fail: bool = False, **settings: Any) -> ZooCase:
    return ZooCase(name, family, source, settings, calls, may_fail)


# Decoders run 2 attention calls per forward, T5 and Whisper 6 (2 encoder, 2 decoder self, 2 cross),
# CLIP 4 (2 text, 2 vision).
CASES: tuple[ZooCase, ...] = (
    _case("torch_llama_eager", "llama", "torch", 2, attn="eager"),
    _case("torch_llama_sdpa", "llama", "torch", 2, attn="sdpa"),
    _case("torch_llama_sdpa_math", "llama", "torch", 2, attn="sdpa", backend="math"),
    _case("torch_llama_sdpa_flash", "llama", "torch", 2, attn="sdpa", backend="flash"),
    _case("torch_llama_sdpa_efficient", "llama", "torch", 2, True, attn="sdpa", backend="efficient"),
    _case("torch_llama_flex", "llama", "torch", 2, True, attn="flex"),
    _case("torch_llama_compile", "llama", "torch", 2, True, attn="sdpa", compiled=True),
    _case("torch_llama_train", "llama", "torch", 2, attn="sdpa", training=True),
    _case("torch_qwen3_eager", "qwen3", "torch", 2, attn="eager", qk_norm=True),
    _case("torch_mistral_sdpa", "mistral", "torch", 2, attn="sdpa", sliding_window=4),
    _case("torch_gpt2_eager", "gpt2", "torch", 2, attn="eager"),
    _case("torch_bert_eager", "bert", "torch", 2, attn="eager"),
    _case("torch_bert_sdpa", "bert", "torch", 2, attn="sdpa"),
    _case("torch_t5_eager", "t5", "torch", 6, attn="eager"),
    _case("torch_vit_sdpa", "vit", "torch", 2, attn="sdpa"),
    _case("torch_clip_eager", "clip", "torch", 4, attn="eager"),
    _case("torch_whisper_sdpa", "whisper", "torch", 6, attn="sdpa"),
    # need_weights alone keeps the fused path (it averages the weights); grad on with weights that need it
    # takes F.multi_head_attention_forward's explicit bmm / softmax / bmm.
    _case("torch_mha_slow", "mha", "torch", 2, path="slow", need_weights=True, grad=True),
    _case("torch_mha_fast", "mha", "torch", 2, path="fast", need_weights=False),
    _case("torch_encoder_layer_slow", "encoder_layer", "torch", 2, path="slow", mode="train"),
    _case("torch_encoder_layer_fast", "encoder_layer", "torch", 2, path="fast", mode="eval"),
    _case("hf_llama_eager", "llama", "transformers", 2, attn="eager"),
    _case("hf_llama_sdpa", "llama", "transformers", 2, attn="sdpa"),
    _case("hf_llama_train", "llama", "transformers", 2, attn="sdpa", training=True),
    _case("hf_qwen3_eager", "qwen3", "transformers", 2, attn="eager"),
    _case("hf_mistral_sdpa", "mistral", "transformers", 2, attn="sdpa", sliding_window=4),
    _case("hf_gpt2_eager", "gpt2", "transformers", 2, attn="eager"),
    _case("hf_gpt2_sdpa", "gpt2", "transformers", 2, attn="sdpa"),
    _case("hf_bert_eager", "bert", "transformers", 2, attn="eager"),
    _case("hf_bert_sdpa", "bert", "transformers", 2, attn="sdpa"),
    _case("hf_t5_eager", "t5", "transformers", 6, attn="eager"),
    _case("hf_vit_sdpa", "vit", "transformers", 2, attn="sdpa"),
    _case("hf_clip_sdpa", "clip", "transformers", 4, attn="sdpa"),
    _case("hf_whisper_sdpa", "whisper", "transformers", 6, attn="sdpa"),
)
CASE_NAMES: tuple[str, ...] = tuple(c.name for c in CASES)


@dataclass
class ZooOutcome:
    """What recording one case gave: its manifest entry, or why it could not run here."""

    case: ZooCase
    entry: dict[str, Any] | None = None
    unavailable: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """One line for the command's output."""
        if self.unavailable is not None:
            return f"{self.case.name}: unavailable: {self.unavailable}"
        assert self.entry is not None
        return f"{self.case.name}: {self.seconds:.1f}s -> {self.entry['scoped']}, {self.entry['stripped']}"


# --- Building the models ------------------------------------------------------------------------------


def _token_ids(torch: Any, seq: int = SEQ) -> Any:
    return torch.randint(0, VOCAB, (BATCH, seq), generator=torch.Generator().manual_seed(0))


def _pixels(torch: Any) -> Any:
    return torch.randn(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(0))


def _torch_model(case: ZooCase, torch: Any) -> tuple[Any, dict[str, Any]]:
    """A plain-torch model of the case's family and its keyword inputs."""
    from . import zoo_models

    s = case.settings
    family = "llama" if case.family in ("qwen3", "mistral") else case.family
    cfg = zoo_models.Config(
        hidden=HIDDEN,
        heads=HEADS,
        kv_heads=KV_HEADS if family == "llama" else HEADS,
        layers=LAYERS,
        ffn=FFN,
        vocab=VOCAB,
        attn=s.get("attn", "eager"),
        qk_norm=bool(s.get("qk_norm")),
        sliding_window=s.get("sliding_window"),
    )
    build = zoo_models.builders()[family]
    ids = _token_ids(torch)
    if family in ("llama", "gpt2"):
        return build(cfg), {"input_ids": ids}
    if family == "bert":
        return build(cfg), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family == "t5":
        return build(cfg), {"input_ids": ids, "decoder_input_ids": _token_ids(torch, SEQ // 2)}
    if family == "vit":
        return build(cfg, image=IMAGE, patch=PATCH), {"pixel_values": _pixels(torch)}
    if family == "clip":
        return build(cfg, image=IMAGE, patch=PATCH), {"input_ids": ids, "pixel_values": _pixels(torch)}
    if family == "whisper":
        features = torch.randn(BATCH, MELS, 2 * SEQ, generator=torch.Generator().manual_seed(0))
        return build(cfg, mels=MELS), {"input_features": features, "decoder_input_ids": _token_ids(torch, SEQ // 2)}
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=torch.Generator().manual_seed(0))
    if family == "mha":
        return build(cfg, need_weights=s["need_weights"]), {"x": x}
    return build(cfg), {"src": x}


def _hf_model(case: ZooCase, torch: Any) -> tuple[Any, dict[str, Any]]:
    """A transformers model of the case's family, from a config (random weights), and its inputs."""
    tf = require("transformers")
    attn = case.settings.get("attn", "eager")
    decoder = dict(
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        attn_implementation=attn,
    )
    encoder = dict(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS, num_attention_heads=HEADS)
    ids = _token_ids(torch)
    family = case.family
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**decoder)), {"input_ids": ids}
    if family == "qwen3":
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(**decoder, head_dim=HIDDEN // HEADS)), {"input_ids": ids}
    if family == "mistral":
        config = tf.MistralConfig(**decoder, sliding_window=case.settings["sliding_window"])
        return tf.MistralForCausalLM(config), {"input_ids": ids}
    if family == "gpt2":
        config = tf.GPT2Config(
            n_embd=HIDDEN,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=64,
            vocab_size=VOCAB,
            bos_token_id=0,
            eos_token_id=0,
        )
        config._attn_implementation = attn
        return tf.GPT2Model(config), {"input_ids": ids}
    if family == "bert":
        config = tf.BertConfig(**encoder, vocab_size=VOCAB, max_position_embeddings=64, attn_implementation=attn)
        return tf.BertModel(config), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family == "t5":
        config = tf.T5Config(
            vocab_size=VOCAB,
            d_model=HIDDEN,
            d_kv=HIDDEN // HEADS,
            d_ff=FFN,
            num_layers=LAYERS,
            num_heads=HEADS,
            relative_attention_num_buckets=8,
            attn_implementation=attn,
        )
        return tf.T5Model(config), {"input_ids": ids, "decoder_input_ids": _token_ids(torch, SEQ // 2)}
    if family == "vit":
        config = tf.ViTConfig(**encoder, image_size=IMAGE, patch_size=PATCH, attn_implementation=attn)
        return tf.ViTModel(config), {"pixel_values": _pixels(torch)}
    if family == "clip":
        config = tf.CLIPConfig(
            text_config=dict(
                encoder, vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=1
            ),
            vision_config=dict(encoder, image_size=IMAGE, patch_size=PATCH),
            projection_dim=HIDDEN,
            attn_implementation=attn,
        )
        return tf.CLIPModel(config), {"input_ids": ids, "pixel_values": _pixels(torch)}
    if family == "whisper":
        config = tf.WhisperConfig(
            vocab_size=VOCAB,
            d_model=HIDDEN,
            encoder_layers=LAYERS,
            decoder_layers=LAYERS,
            encoder_attention_heads=HEADS,
            decoder_attention_heads=HEADS,
            encoder_ffn_dim=FFN,
            decoder_ffn_dim=FFN,
            num_mel_bins=MELS,
            max_source_positions=SEQ,
            max_target_positions=64,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=0,
            decoder_start_token_id=0,
            attn_implementation=attn,
        )
        features = torch.randn(BATCH, MELS, 2 * SEQ, generator=torch.Generator().manual_seed(0))
        return tf.WhisperModel(config), {"input_features": features, "decoder_input_ids": _token_ids(torch, SEQ // 2)}
    raise CaptureError(f"zoo case {case.name}: no transformers model for family {family!r}")


DTYPES = ("float32", "bfloat16", "float16")


def _step(case: ZooCase, torch: Any, device: str = "cpu", dtype: str = "float32") -> Callable[[], object]:
    """The case's model and the call one profiler step runs: a forward (no_grad unless the path needs
    grad) or a training step, on `device` in `dtype` (floating inputs too; token ids stay integers)."""
    torch.manual_seed(0)
    model, inputs = (_hf_model if case.source == "transformers" else _torch_model)(case, torch)
    kind = getattr(torch, dtype)
    model = model.to(device=device, dtype=kind)
    inputs = {k: v.to(device=device, dtype=kind if v.is_floating_point() else v.dtype) for k, v in inputs.items()}
    s = case.settings
    if case.training:
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

        def train() -> None:
            out = model(**inputs)
            logits = getattr(out, "logits", out)
            logits.float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return train
    # The slow paths of torch.nn's attention: train mode (dropout active) or grad on, never the fused op.
    model.train() if s.get("mode") == "train" else model.eval()
    if s.get("compiled"):
        model = torch.compile(model)
    backend = s.get("backend")
    grad = s.get("mode") == "train" or bool(s.get("grad"))

    def forward() -> object:
        with torch.set_grad_enabled(grad):
            if backend is None:
                return model(**inputs)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            chosen = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}.get(
                backend, SDPBackend.EFFICIENT_ATTENTION
            )
            with sdpa_kernel(chosen):
                return model(**inputs)

    return forward


# --- Recording and stripping --------------------------------------------------------------------------


# The args record_shapes adds to an op.
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def strip_python_functions(scoped: str | Path, stripped: str | Path, *, shapes: bool = True) -> int:
    """Write `scoped` (a gzipped Kineto trace) to `stripped` without its ``python_function`` events.

    The metadata's profiler settings then say ``with_stack`` and ``with_modules`` false, and
    ``stripped_from`` names the scoped file. ``shapes=False`` also drops what ``record_shapes`` adds to
    each op's args (``SHAPE_ARGS``): the profiler's defaults. Returns how many events were removed.
    """
    with gzip.open(scoped, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    events = trace["traceEvents"]
    kept = [e for e in events if e.get("cat") != PYTHON_CATEGORY]
    if not shapes:
        for event in kept:
            args = event.get("args")
            if isinstance(args, dict):
                for key in SHAPE_ARGS:
                    args.pop(key, None)
    trace["traceEvents"] = kept
    meta = trace.get("tracekit_capture")
    if isinstance(meta, dict):
        meta = dict(meta, stripped_from=Path(scoped).name)
        meta["profiler"] = dict(meta.get("profiler") or {}, with_stack=False, with_modules=False)
        if not shapes:
            meta["profiler"]["record_shapes"] = False
        trace["tracekit_capture"] = meta
    data = json.dumps(trace).encode()

    def write(fh: Any) -> None:
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
            gz.write(data)

    atomic_write(stripped, write)
    return len(events) - len(kept)


def _unavailable(case: ZooCase) -> str | None:
    if case.requires is None:
        return None
    try:
        require(case.requires)
    except CaptureError as exc:
        return str(exc)
    return None


def record_case(case: ZooCase, out: str | Path, *, device: str = "cpu", dtype: str = "float32") -> ZooOutcome:
    """Record one case into `out`: the scoped trace, its key_averages files and the stripped twin, on
    `device` (cpu, or cuda: the GPU's kernels join the trace) in `dtype`."""
    started = time.monotonic()
    missing = _unavailable(case)
    if missing is not None:
        return ZooOutcome(case, unavailable=missing)
    torch = require("torch")
    out = Path(out)
    step = _step(case, torch, device, dtype)
    try:
        step()  # the first call doubles as the probe: a backend torch refuses here raises now
    except Exception as exc:
        if not case.may_fail:
            raise
        return ZooOutcome(case, unavailable=one_line(f"{type(exc).__name__}: {exc}"))
    meta = capture_metadata(
        device=device,
        cluster=detect_cluster(),
        tag="zoo",
        impl=case.name,
        shapes={"batch": BATCH, "heads": HEADS, "seq_q": SEQ, "seq_kv": SEQ, "head_dim": HIDDEN // HEADS},
        dtype=dtype,
        zoo_case=case.name,
        family=case.family,
        source=case.source,
        settings=dict(case.settings),
    )
    scoped = out / (case.name + SCOPED_SUFFIX)
    result = capture(
        step,
        scoped,
        device=device,
        metadata=meta,
        warmup=ZOO_WARMUP - 1,
        schedule=ZOO_SCHEDULE,
        record_shapes=True,
        with_stack=True,
        with_modules=True,
    )
    assert result is not None  # no ranks given: this process records
    stripped = out / (case.name + STRIPPED_SUFFIX)
    removed = strip_python_functions(scoped, stripped)
    entry = {
        "name": case.name,
        "family": case.family,
        "source": case.source,
        "settings": dict(case.settings),
        "training": case.training,
        "scoped": scoped.name,
        "stripped": stripped.name,
        "key_averages_txt": result.key_averages_txt.name,
        "key_averages_json": result.key_averages_json.name,
        "attention_calls": case.calls_per_step * ZOO_SCHEDULE.active,
        "python_functions_removed": removed,
    }
    return ZooOutcome(case, entry=entry, seconds=time.monotonic() - started)


def select_cases(names: Iterable[str] | None = None) -> list[ZooCase]:
    """The cases named (all when None), in the zoo's order; an unknown name is a CaptureError."""
    if names is None:
        return list(CASES)
    wanted = list(names)
    unknown = sorted(set(wanted) - set(CASE_NAMES))
    if unknown:
        raise CaptureError(f"unknown zoo case(s) {', '.join(unknown)}: choose from {', '.join(CASE_NAMES)}")
    return [c for c in CASES if c.name in wanted]


def record_zoo(
    out: str | Path,
    names: Iterable[str] | None = None,
    progress: Callable[[ZooOutcome], None] | None = None,
    *,
    device: str = "cpu",
    dtype: str = "float32",
) -> tuple[Path, list[ZooOutcome]]:
    """Record the zoo's cases (all, or `names`) into `out` and write its ``manifest.json``.

    `progress` is called with each case's outcome as it finishes. `device`: cpu, cuda or auto (a lent GPU:
    ``python -m capture zoo OUT --device cuda --dtype bfloat16``); cuda without one is a CaptureError.
    Returns the manifest path and the outcomes.
    """
    torch = require("torch")
    device = resolve_device(device)
    if dtype not in DTYPES:
        raise CaptureError(f"zoo --dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    out = Path(out)
    outcomes = []
    threads = torch.get_num_threads()
    # One intra-op thread: models this small gain nothing from more, and on a shared machine an
    # OpenMP team waiting for busy cores turns a microsecond GEMM into tens of milliseconds.
    torch.set_num_threads(1)
    try:
        for case in select_cases(names):
            outcome = record_case(case, out, device=device, dtype=dtype)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    finally:
        torch.set_num_threads(threads)
    try:
        transformers_version = require("transformers").__version__
    except CaptureError:
        transformers_version = None
    manifest = {
        "description": "Tiny transformer families recorded with module scopes and again without "
        "(regenerate: python -m capture zoo OUTDIR)",
        "capture_version": CAPTURE_VERSION,
        "torch_version": torch.__version__,
        "transformers_version": transformers_version,
        "device": device,
        "dtype": dtype,
        "intra_op_threads": 1,
        "schedule": ZOO_SCHEDULE.as_dict(),
        "warmup_calls": ZOO_WARMUP,
        "scoped": {"record_shapes": True, "with_stack": True, "with_modules": True},
        "stripped": {"record_shapes": True, "with_stack": False, "with_modules": False},
        "traces": [o.entry for o in outcomes if o.entry is not None],
        "unavailable": [{"name": o.case.name, "reason": o.unavailable} for o in outcomes if o.unavailable],
    }
    path = atomic_write(out / "manifest.json", lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode()))
    return path, outcomes


__all__ = [
    "CASES",
    "CASE_NAMES",
    "SCOPED_SUFFIX",
    "STRIPPED_SUFFIX",
    "ZOO_SCHEDULE",
    "ZooCase",
    "ZooOutcome",
    "record_case",
    "record_zoo",
    "select_cases",
    "strip_python_functions",
]
