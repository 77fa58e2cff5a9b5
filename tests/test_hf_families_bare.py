"""Hugging Face model families whose layers read differently, recorded with module scopes and as the profiler
records by default: the same trace without Python stacks, and without shapes too.

Each tiny random model (no download) is recorded once per session with ``with_modules``, ``with_stack`` and
``record_shapes``; its scoped copy is the truth for the stripped copies (``capture.zoo.strip_python_functions``).
The families are the ones whose layer structure once misled the block reading: Granite scales its residual
(``mul, add``) before the next layer's norm; Gemma 2 and OLMo-2 normalise after attention (a norm, then the
residual add, then the next norm, written in plain ops); Persimmon normalises q and k with two LayerNorms in a
row; DeBERTa-v2 adds its c2p and p2c position terms (two more bmms) between QK^T and the softmax; Swin reads its
relative position bias from a [P, H] table before its SDPA op. The bar is the
issue's (at most 5 % of the attention time other, at least 95 % of the core right, the same forward calls) and
ours the other way (at most 5 % taken in beyond the attention modules).
"""

from __future__ import annotations

import pytest
from conftest import slow_unless
from stripped_agreement import CORE_MIN_PCT, OTHER_MAX_PCT, agreement, record_scoped

from capture import zoo

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
FAMILIES = {
    "granite": ("GraniteConfig", "GraniteForCausalLM", TINY, "eager"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(TINY, num_key_value_heads=2, head_dim=8), "eager"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", TINY, "sdpa"),
    "persimmon": ("PersimmonConfig", "PersimmonForCausalLM", TINY, "sdpa"),
    "swin": (
        "SwinConfig",
        "SwinModel",
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4),
        "sdpa",
    ),
    "deberta_v2": (
        "DebertaV2Config",
        "DebertaV2Model",
        dict(TINY, relative_attention=True, position_buckets=8, max_relative_positions=16, pos_att_type=["p2c", "c2p"]),
        "eager",
    ),
}
# DeBERTa-v2's position terms put two projections between QK^T and the softmax: without shapes the pattern
# cannot be confirmed (attention_missed names it); its SelfOutput holds the residual add and LayerNorm, as BERT's.
# Swin's relative position bias (its table [P, H] read by index before the SDPA op) is told by the table's
# heads: without shapes it stays layout and other (6-11 %).
NEEDS_SHAPES = {"deberta_v2", "swin"}
EVERY_RUN = ("granite", "persimmon")


def _record(path, family: str) -> None:
    config_class, model_class, kwargs, attn = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**kwargs)
    model = getattr(transformers, model_class)._from_config(config, attn_implementation=attn).eval()
    inputs = (torch.randn(2, 3, 32, 32),) if family == "swin" else (torch.randint(0, 64, (2, 12)),)
    record_scoped(path, lambda: model(*inputs))


@pytest.fixture(scope="module")
def copies(inputs):
    """``copies(family)``: the scoped, stripped and bare databases of a family and their file names."""
    made: dict[str, tuple] = {}

    def get(family: str):
        if family not in made:
            key = ("hf-family", family, torch.__version__, transformers.__version__)
            scoped = inputs.made(key, f"{family}.scoped.json.gz", lambda p: _record(p, family))
            twins = {}
            for variant, shapes in (("stripped", True), ("bare", False)):
                twins[variant] = inputs.made(
                    (*key, variant),
                    f"{family}.{variant}.json.gz",
                    lambda p, shapes=shapes: zoo.strip_python_functions(scoped, p, shapes=shapes),
                )
            made[family] = (scoped, twins)
        return made[family]

    return get


@pytest.mark.parametrize("variant", ["stripped", "bare"])
@pytest.mark.parametrize("family", [slow_unless(f in EVERY_RUN, f, id=f) for f in FAMILIES])
def test_a_family_without_its_scopes_agrees_with_itself(copies, inputs, family, variant):
    if variant == "bare" and family in NEEDS_SHAPES:
        pytest.skip(f"{family}: its pattern needs recorded shapes (attention_missed names it without them)")
    scoped_path, twins = copies(family)
    scoped, stripped = inputs.trace(scoped_path), inputs.trace(twins[variant])
    (result,) = agreement(scoped, stripped, robust=True, pairs={scoped_path.name: twins[variant].name})
    summary = f"{result.row()}, extra {result.extra_pct:.1f} %; largest differences {result.worst()}"
    assert result.unmatched == 0 and result.attention_ns > 0, summary
    assert result.other_pct <= OTHER_MAX_PCT, summary
    assert result.core_right_pct >= CORE_MIN_PCT, summary
    assert result.forward_calls_stripped == result.forward_calls_scoped, summary
    assert result.extra_pct <= 5.0, summary
