"""Real GPU traces recorded with module scopes, and the same traces as the profiler records them by default.

Each shared trace that carries ``python_function`` events (``nn.Module`` scopes, Python stacks) is written
again without them (``capture.zoo.strip_python_functions``), and once more without what ``record_shapes``
adds as well (the profiler's defaults: no stacks, no shapes). The stages tracekit decides on the scoped
trace are the truth (module scopes decide attention exactly on these traces: tests/test_module_attention.py);
`stripped_agreement` measures what survives without them, over the attention modules' GPU time: at most
5 % of it ``other`` and at least 95 % of the core-stage time with the same stage, with as many calls.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import SHARED_TRACES, require_shared
from stripped_agreement import agreement

from capture import zoo

# Below the bar, with the measured numbers and why. Strict: a fix turns the entry into a failure to remove.
_POST_NORM = (
    "BERT is post-norm: BertSelfOutput's residual add and LayerNorm after the output projection are the "
    "attention module's (out_proj in the scoped trace), but a post-norm layer runs its ops in a pre-norm "
    "layer's order, so without the scope the block ends at the output projection (docs/attribution.md)"
)
BELOW_BAR = {
    "tracelens/h100_bert-small_sdpa-flash.json.gz": f"other 12.7 % of 149 us: {_POST_NORM}",
    "tracelens/mi300_bert-small_sdpa-flash.json.gz": f"other 11.3 % of 219 us: {_POST_NORM}",
}
VARIANTS = ("stripped", "no_shapes")


def _has_python_functions(path) -> bool:
    """Whether the trace holds a python_function event: its category in the bytes, without parsing them."""
    with gzip.open(path, "rb") as fh:
        return re.search(rb'"cat"\s*:\s*"' + zoo.PYTHON_CATEGORY.encode() + rb'"', fh.read()) is not None


@pytest.fixture(scope="session")
def scoped_names(inputs) -> list[str]:
    """The shared traces with Python scopes (decided once per session, by content)."""
    shared = require_shared()
    key = ("scoped-shared", tuple((n, (shared / n).stat().st_size) for n in SHARED_TRACES))
    listing = inputs.made(
        key,
        "scoped.json",
        lambda path: path.write_text(json.dumps([n for n in SHARED_TRACES if _has_python_functions(shared / n)])),
    )
    return json.loads(listing.read_text())


@pytest.fixture(scope="session")
def pairs(inputs, scoped_names):
    """``pairs(variant)``: the scoped traces loaded in one database, their stripped twins in another, and the
    pairs by file name; each variant's twins written and loaded once per session, when first asked for."""
    shared = require_shared()
    made: dict[str, tuple] = {}

    def get(variant: str) -> tuple:
        if variant not in made:
            stripped = []
            for name in scoped_names:
                key = ("stripped-shared", variant, name, (shared / name).stat().st_size)
                stripped.append(
                    inputs.made(
                        key,
                        name.replace("/", "__"),
                        lambda path, name=name: zoo.strip_python_functions(
                            shared / name, path, shapes=variant == "stripped"
                        ),
                    )
                )
            made[variant] = (
                inputs.trace(*(shared / n for n in scoped_names)),
                inputs.trace(*stripped),
                {n.split("/")[-1]: p.name for n, p in zip(scoped_names, stripped)},
            )
        return made[variant]

    return get


def test_the_scoped_shared_traces_are_the_ones_with_module_scopes(scoped_names):
    """The traces this file compares: every shared trace with Python scopes (at least the five whose
    attention modules run on the GPU)."""
    for name in (
        "tracelens/b200_vllm_eager_paged-fp8.json.gz",
        "tracelens/h100_bert-small_sdpa-flash.json.gz",
        "tracelens/mi300_falconsai_vit_sdpa_modules.json.gz",
        "tracelens/mi300_sglang_qwen3-8b_capture_modules.json.gz",
        "tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz",
    ):
        assert name in scoped_names
    assert "tracelens/mi210_gpu_only.json.gz" not in scoped_names


# Both variants of every trace; the stripped-only one (shapes kept, which no_shapes covers less of) under
# TRACEKIT_SLOW=1 (CI).
@pytest.mark.parametrize(
    "name, variant",
    [
        pytest.param(
            n,
            v,
            id=f"{n}-{v}",
            marks=[
                *([pytest.mark.xfail(strict=True, reason=BELOW_BAR[n])] if n in BELOW_BAR else []),
                *([] if v == "no_shapes" else [pytest.mark.slow]),
            ],
        )
        for v in VARIANTS
        for n in SHARED_TRACES
    ],
)
def test_a_shared_trace_without_its_scopes_agrees_with_itself(name, variant, scoped_names, pairs):
    """The attention modules' GPU time (GPU ops matched by time, stream and name, weighted by duration; for
    a trace whose attention modules launched nothing on the GPU, the SGLang capture pass, their CPU ops'
    self time, matched by time, name and thread): at most 5 % of it other, at least 95 % of the core
    stages right, the same forward calls (without shapes too: T5's first encoder layer builds its
    relative-position bias in some 20 ops between QK^T and the softmax). A trace whose calls hold no
    attention time has the same calls either way."""
    if name not in scoped_names:
        pytest.skip(f"{name} has no Python scopes: nothing to strip")
    scoped, stripped, names = pairs(variant)
    file = name.split("/")[-1]
    (result,) = agreement(scoped, stripped, gpu=True, pairs={file: names[file]})
    if not result.attention_ns:
        (result,) = agreement(scoped, stripped, pairs={file: names[file]})
    assert result.unmatched == 0
    if not result.attention_ns:  # no attention module's time (a norm benchmark): the calls are the same either way
        assert result.calls_stripped == result.calls_scoped
        return
    assert result.meets(), (result.row(), result.worst())
    assert result.forward_calls_stripped == result.forward_calls_scoped, result.row()
