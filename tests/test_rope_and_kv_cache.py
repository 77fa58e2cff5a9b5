"""Ops told apart by their place in an attention call and their arguments: a rotary embedding applied by
plain ops is ``rope`` (not the core's scale/mask), a KV cache growing along the sequence axis is
``kv_cache`` (not layout).

Without ``with_stack`` the trace has no ``apply_rotary_pos_emb`` scope: inside a
call labelled by the capture module (``attention:LlamaAttention``, the
projections ``stage:qkv_proj``), RoPE is a run of ``aten::mul`` / ``aten::neg``
/ ``aten::cat`` / ``aten::add`` between the projections and the core, which the
generic op rules call ``scale`` and ``mask``. Each test records a model on CPU
torch whose ops are known by construction (or a tiny random Hugging Face Llama)
and checks every op in every call.
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import slow_unless

import tracekit

torch = pytest.importorskip("torch")

CORE_FIRST = ("aten::matmul", "aten::bmm", "aten::scaled_dot_product_attention")


def _record(tmp_path, name, model, inputs, *, math: bool = False, shapes: bool = True):
    """Record ``model(inputs)`` on CPU after a warm-up: ops and (``shapes``) their inputs, no Python stacks."""
    import contextlib

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    backend = sdpa_kernel(SDPBackend.MATH) if math else contextlib.nullcontext()
    with torch.no_grad(), backend:
        model(inputs)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=shapes) as prof:
            model(inputs)
    path = tmp_path / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return tracekit.load(path)


def _call_ops(trace) -> dict[int, list[tuple[str, str]]]:
    """Per attention call, its top-level ops (depth 1 below the call's label) in order: (name, stage)."""
    rows = trace.sql(
        """SELECT s.call_id, c.name, s.stage
           FROM cpu_stages s JOIN cpu_slices c USING (id) JOIN cpu_slices p ON p.id = c.parent_id
           WHERE s.call_id IS NOT NULL AND c.kind = 'cpu_op' AND p.id = s.call_id
           ORDER BY s.call_id, c.ts_ns, c.id"""
    ).rows()
    calls: dict[int, list[tuple[str, str]]] = {}
    for call, name, stage in rows:
        calls.setdefault(call, []).append((name, stage))
    return calls


def _before_core(ops: list[tuple[str, str]]) -> list[tuple[str, str]]:
    first = next(i for i, (name, _) in enumerate(ops) if name in CORE_FIRST)
    return ops[:first]


class _Attention(torch.nn.Module):
    """Labelled like the capture module labels a model: the call, then its projections."""

    def __init__(
        self, rotary: str | None, prescale: bool, sdpa: bool, hidden: int = 32, heads: int = 4, positions: bool = False
    ):
        super().__init__()
        self.rotary, self.prescale, self.sdpa, self.heads = rotary, prescale, sdpa, heads
        self.positions = positions  # position arithmetic in the call (a 1-D sub), as a KV cache's offsets
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        d = hidden // heads
        angles = torch.arange(16)[:, None] * (1e-2 ** (torch.arange(d // 2) / (d // 2)))[None, :]
        self.register_buffer("cos", angles.cos().repeat(1, 2))
        self.register_buffer("sin", angles.sin().repeat(1, 2))
        self.register_buffer("freqs", torch.polar(torch.ones_like(angles), angles))

    def _rotate(self, t):
        if self.rotary == "half":  # Hugging Face: q * cos + rotate_half(q) * sin
            a, b = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2 :]
            return t * self.cos + torch.cat((-b, a), dim=-1) * self.sin
        if self.rotary == "complex":  # Meta's Llama: a complex product
            z = torch.view_as_complex(t.float().reshape(*t.shape[:-1], -1, 2))
            return torch.view_as_real(z * self.freqs).flatten(-2)
        return t

    def forward(self, x):
        b, s, h = x.shape
        with torch.profiler.record_function("attention:TestAttention"):
            with torch.profiler.record_function("stage:qkv_proj"):
                q, k, v = self.q(x), self.k(x), self.v(x)
            q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            q, k = self._rotate(q), self._rotate(k)
            if self.positions:
                torch.arange(s) - 1
            if self.prescale:  # BART: the queries scaled before QK^T
                q = q * q.shape[-1] ** -0.5
            if self.sdpa:
                out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = torch.matmul(q, k.transpose(-1, -2))
                if not self.prescale:
                    scores = scores / q.shape[-1] ** 0.5
                out = torch.matmul(scores.softmax(-1), v)
            with torch.profiler.record_function("stage:out_proj"):
                return self.o(out.transpose(1, 2).reshape(b, s, h))


def _labelled_llama(impl: str):
    """A tiny random Hugging Face Llama, labelled as the capture module labels a model."""
    pytest.importorskip("transformers")
    from synthetic import tiny_llama

    from tracekit import capture

    model = tiny_llama(impl)
    return model, capture.label_modules(model)


@pytest.mark.parametrize("rotary", ["half", "complex"])
@pytest.mark.parametrize("sdpa", [False, True], ids=["eager", "sdpa"])
def test_rotary_ops_before_the_core_are_rope_by_construction(tmp_path, rotary, sdpa):
    model = _Attention(rotary, prescale=False, sdpa=sdpa)
    with _record(tmp_path, f"rope_{rotary}", model, torch.randn(2, 16, 32)) as trace:
        calls = _call_ops(trace)
    assert len(calls) == 1
    (ops,) = calls.values()
    before = _before_core(ops)
    arithmetic = [(n, s) for n, s in before if n in ("aten::mul", "aten::add", "aten::neg")]
    # half: 2 muls, a neg and an add per tensor; complex: one (complex) mul per tensor.
    assert len(arithmetic) == (8 if rotary == "half" else 2)
    assert {s for _, s in arithmetic} == {"rope"}
    signs = [s for n, s in before if n in ("aten::neg", "aten::view_as_complex", "aten::view_as_real")]
    assert signs and set(signs) == {"rope"}
    if rotary == "half":  # rotate_half's cat sits among the rotation's ops
        assert {s for n, s in before if n == "aten::cat"} == {"rope"}
    # The q/k/v reshapes before the rotation are still layout, and the core is untouched.
    assert {s for n, s in before[:6] if n in ("aten::view", "aten::transpose")} == {"layout"}
    after = ops[len(before) :]
    assert "rope" not in {s for _, s in after}
    if not sdpa:
        assert [s for n, s in after if n in ("aten::div", "aten::softmax", "aten::matmul")] == [
            "qk_matmul",
            "scale",
            "softmax",
            "pv_matmul",
        ]


@pytest.mark.parametrize("positions", [False, True], ids=["", "positions"])
@pytest.mark.parametrize("sdpa", [False, True], ids=["eager", "sdpa"])
def test_a_prescale_without_rotation_stays_scale_by_construction(tmp_path, sdpa, positions):
    """BART scales the queries before QK^T: no rotation in the call, so the mul is the core's scale.
    A sub of 1-D positions before it (a KV cache's offsets) is no rotation either, though a sub of
    q's halves would be (x1 * cos - x2 * sin)."""
    model = _Attention(None, prescale=True, sdpa=sdpa, positions=positions)
    with _record(tmp_path, "prescale", model, torch.randn(2, 16, 32)) as trace:
        (ops,) = _call_ops(trace).values()
    assert [s for n, s in _before_core(ops) if n == "aten::mul"] == ["scale"]
    assert "rope" not in {s for _, s in ops}


def test_sdpa_math_scales_inside_its_op_stay_scale(tmp_path):
    """SDPA's math backend scales q and k before its first product, inside the SDPA op (a call
    itself): those muls are the core's scale even in a call that rotates before it."""
    model = _Attention("half", prescale=False, sdpa=True)
    with _record(tmp_path, "rope_math", model, torch.randn(2, 16, 32), math=True) as trace:
        inner = trace.sql(
            """SELECT s.stage, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
               JOIN cpu_slices p ON p.id = c.parent_id
               WHERE p.name = 'aten::_scaled_dot_product_attention_math' AND c.name = 'aten::mul'
               GROUP BY ALL"""
        ).rows()
        outer = trace.sql(
            """SELECT list(DISTINCT s.stage) FROM cpu_stages s JOIN cpu_slices c USING (id)
               JOIN cpu_slices p ON p.id = c.parent_id
               WHERE p.name = 'attention:TestAttention' AND c.name IN ('aten::mul', 'aten::neg', 'aten::add')"""
        ).rows()
    assert inner and {s for s, _ in inner} == {"scale"}
    assert outer == [(["rope"],)]


def test_labelled_llama_rope_is_rope_and_its_scale_is_the_scores(tmp_path):
    """A tiny random Hugging Face Llama labelled by the capture module (no Python stacks): the
    rotation's 8 elementwise ops per call are rope; eager's one scale is the mul after QK^T."""
    for impl in ("eager", "sdpa"):
        model, handle = _labelled_llama(impl)
        with _record(
            tmp_path,
            f"llama_{impl}",
            lambda ids, model=model: model(ids, use_cache=False),
            torch.randint(0, 64, (2, 16)),
        ) as trace:
            calls = _call_ops(trace)
            stage_of = dict(
                trace.sql(
                    """SELECT stage, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
                       WHERE s.call_id IS NOT NULL AND c.name IN ('aten::mul', 'aten::neg', 'aten::add')
                       GROUP BY ALL"""
                ).rows()
            )
        handle.remove()
        assert len(calls) == 2
        for ops in calls.values():
            before = _before_core(ops)
            assert [s for n, s in before if n in ("aten::mul", "aten::add", "aten::neg")] == ["rope"] * 8
        # Per call: 8 rotary ops; eager adds the scores' scale (mul) and the causal mask (add).
        assert stage_of == ({"rope": 16, "scale": 2, "mask": 2} if impl == "eager" else {"rope": 16})


# transformers 5 renames past_key_values to cache; 4.x knows only the old name.
@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("shapes", [True, False], ids=["record_shapes", "no_shapes"])
def test_a_growing_kv_cache_is_kv_cache_by_its_arguments(tmp_path, cache, shapes):
    """A decode step of a labelled tiny Llama: DynamicCache appends k and v with cat(dim=-2),
    StaticCache writes them with index_copy_(2, ...): two KV-cache ops per call, before the core.
    rotate_half's cat (dim -1) is rope; a trace without shapes cannot tell them apart (layout), and
    StaticCache's position arithmetic on 1-D tensors is not rope when shapes say so."""
    transformers = pytest.importorskip("transformers")
    model, handle = _labelled_llama("sdpa")
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        if cache == "static":
            kv = transformers.StaticCache(config=model.config, max_cache_len=64)
        else:
            kv = transformers.DynamicCache()
        model(ids, past_key_values=kv, use_cache=True)  # the prompt fills the cache
    step = ids[:, :1]
    op = "aten::cat" if cache == "dynamic" else "aten::index_copy_"
    # The warm-up step of _record appends too: the cache only grows.
    with _record(
        tmp_path, f"decode_{cache}", lambda x: model(x, past_key_values=kv, use_cache=True), step, shapes=shapes
    ) as trace:
        calls = _call_ops(trace)
        adds = trace.sql(
            """SELECT regexp_matches(c.input_dims::VARCHAR, '\\[\\d+,\\d+,\\d+,\\d+\\]') AS q_or_k, list(s.stage)
               FROM cpu_stages s JOIN cpu_slices c USING (id) JOIN cpu_slices p ON p.id = c.parent_id
               WHERE p.id = s.call_id AND c.name IN ('aten::add', 'aten::add_') GROUP BY ALL"""
        ).rows()
    handle.remove()
    assert len(calls) == 2
    for ops in calls.values():
        before = _before_core(ops)
        writes = [s for n, s in before if n == op and (cache == "static" or s != "rope")]
        assert writes == (["kv_cache"] * 2 if shapes else ["layout"] * 2)
        assert [s for n, s in before if n == "aten::neg"] == ["rope"] * 2
        if cache == "dynamic":
            assert [s for n, s in before if n == "aten::cat"].count("rope") == 2  # rotate_half's
        assert "kv_cache" not in {s for _, s in ops[len(before) :]}
    # The rotation's adds (of 4-D q and k) are rope; StaticCache's cache_position + 1 (1-D) is not.
    by_rank = {q_or_k: set(found) for q_or_k, found in adds}
    if shapes:
        assert by_rank[True] == {"rope"}
        if cache == "static":
            assert by_rank[False] and "rope" not in by_rank[False]


def _per_call(trace) -> dict[int, list[tuple[str, str, str]]]:
    """Per attention call, in order, its outermost ops (no op above them) in order: (name, stage, Input Dims)."""
    rows = trace.sql(
        """SELECT s.call_id, list((c.name, s.stage, CAST(c.input_dims AS VARCHAR)) ORDER BY c.ts_ns)
           FROM cpu_stages s JOIN cpu_slices c USING (id) LEFT JOIN cpu_slices p ON p.id = c.parent_id
           WHERE s.call_id IS NOT NULL AND c.kind = 'cpu_op' AND p.kind IS DISTINCT FROM 'cpu_op'
           GROUP BY s.call_id ORDER BY min(c.ts_ns)"""
    ).rows()
    return {call: [tuple(op.values()) for op in ops] for call, ops in rows}


def _outer_call_ops(trace) -> Counter:
    """(name, stage) of every outermost op inside an attention call, counted."""
    return Counter(op[:2] for ops in _per_call(trace).values() for op in ops)


def _top_ops(trace, call_id: int) -> list[tuple[str, str]]:
    """(name, stage) of the call's outermost ops, in order."""
    return [op[:2] for op in _per_call(trace)[call_id]]


def _tiny_model(family: str, attn: str = "eager"):
    """A tiny random Hugging Face model with ``attn`` attention (eager or sdpa): Llama (RoPE), GPT-NeoX
    (fused QKV, partial RoPE), Qwen3 (per-head q/k RMSNorm, grouped KV heads), Phi-3 (fused QKV,
    sliced), OPT (q pre-scaled), Falcon (x @ W.T), GPT-J (a partial rotary that rotates interleaved
    pairs: stack, then flatten), BERT (bias, scale by div) or GPT-2 (fused c_attn: Conv1D's addmm, then
    split)."""
    transformers = pytest.importorskip("transformers")
    from synthetic import tiny_llama

    torch.manual_seed(0)
    if family == "llama":
        return tiny_llama(attn)
    tiny = {
        "vocab_size": 64,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
    }
    if family == "neox":  # a partial rotary: a quarter of each head rotates, by [B, S, D/4] cos/sin tables
        config = transformers.GPTNeoXConfig(**tiny, rotary_pct=0.25)
        return transformers.GPTNeoXForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "qwen3":  # RMSNorm of q and k per head (q_norm, k_norm), 2 KV heads
        config = transformers.Qwen3Config(**tiny, num_key_value_heads=2, head_dim=8)
        return transformers.Qwen3ForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "phi3":  # one fused qkv_proj, sliced into q, k, v
        config = transformers.Phi3Config(**tiny, num_key_value_heads=2, pad_token_id=0, eos_token_id=0, bos_token_id=0)
        return transformers.Phi3ForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "opt":  # q scaled right after its projection
        config = transformers.OPTConfig(**tiny, ffn_dim=64, word_embed_proj_dim=32)
        return transformers.OPTForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "falcon":  # its linear layers are x @ W.T (matmul, numpy_T); one KV head
        config = transformers.FalconConfig(**tiny, new_decoder_architecture=False)
        return transformers.FalconForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "gptj":  # rotate_every_two: [B, S, H, r/2, 2] pairs stacked, then flattened; r = D/2
        config = transformers.GPTJConfig(vocab_size=64, n_embd=32, n_layer=2, n_head=4, rotary_dim=4)
        return transformers.GPTJForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "gemma3":  # per-head q/k RMSNorm, 2 KV heads: a long block (70 ops before QK^T in eager)
        config = transformers.Gemma3TextConfig(**tiny, num_key_value_heads=2, head_dim=8)
        return transformers.Gemma3ForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "olmo2":  # post-norm; q_norm, k_norm over the flattened [B, S, H * D] rows, between the projections
        config = transformers.Olmo2Config(**tiny, num_key_value_heads=2)
        return transformers.Olmo2ForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "deepseek_v3":  # MLA: low-rank q and kv with RMSNorms between, a rotary part rotated by sub
        config = transformers.DeepseekV3Config(
            **{**tiny, "num_hidden_layers": 1},
            num_key_value_heads=4,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
        )
        return transformers.DeepseekV3ForCausalLM._from_config(config, attn_implementation=attn).eval()
    if family == "bert":
        return transformers.BertModel._from_config(transformers.BertConfig(**tiny), attn_implementation=attn).eval()
    config = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel._from_config(config, attn_implementation=attn).eval()


# Ops that compute (launch kernels on a GPU); views, dropout in eval and residual adds do not
# separate the families' module boundaries from the block found by op order.
_COMPUTE = (
    "aten::linear",
    "aten::addmm",
    "aten::matmul",
    "aten::softmax",
    "aten::mul",
    "aten::neg",
    "aten::cat",
    "aten::stack",
)


FAMILIES = ["llama", "neox", "qwen3", "phi3", "opt", "falcon", "gptj", "bert", "gpt2"]


# Every family with shapes in every run; without shapes (the block read off the op names) Llama and Qwen3
# (q/k norms written in ops between its projections) in every run, the other families under TRACEKIT_SLOW.
@pytest.mark.parametrize(
    "shapes, family, attn",
    [
        slow_unless(shapes or family in ("llama", "qwen3"), shapes, family, attn, id=f"{label}-{family}-{attn}")
        for shapes, label in ((True, "record_shapes"), (False, "no_shapes"))
        for family in FAMILIES
        for attn in ("eager", "sdpa")
    ],
)
def test_an_unlabelled_attention_block_matches_the_labelled_one(tmp_path, family, shapes, attn):
    """A tiny random Hugging Face model recorded twice, labelled by the capture module and bare (no
    labels, no Python stacks). Bare, the call is what op order shows: the eager pattern (matmul ->
    softmax -> matmul) or the SDPA op. With shapes, either widens to the attention block, so every op
    the labels put in a call is in one with the same stage (q/k/v projections, their reshapes, the
    rotary embedding, the core, the output projection); for Llama, GPT-NeoX, Qwen3, Phi-3 and OPT every
    op, for Falcon, GPT-J, BERT and GPT-2 every computing op (BERT's attention module also holds the
    residual add and LayerNorm after its output projection, GPT-J's and GPT-2's the residual dropout,
    which the bare block leaves out; Falcon's weight transposes, numpy_T, launch nothing). Without
    shapes the block is read off the op names (projections by name, everything between the nearest one
    and the core, the q/k/v run before it back to the residual add): the same, except Falcon, whose
    x @ W.T projections are matmuls, which without shapes look like the core's products: its call stays
    the core."""
    from tracekit import capture

    model = _tiny_model(family, attn)
    ids = torch.randint(0, 64, (2, 16))
    handle = capture.label_modules(model)
    with _record(
        tmp_path, "labelled", lambda x: model(x, use_cache=False) if family != "bert" else model(x), ids, shapes=shapes
    ) as trace:
        labelled = _outer_call_ops(trace)
    handle.remove()
    with _record(
        tmp_path, "bare", lambda x: model(x, use_cache=False) if family != "bert" else model(x), ids, shapes=shapes
    ) as trace:
        bare = _outer_call_ops(trace)
        calls = trace.sql("SELECT call_source, op FROM attention_calls").rows()
    assert {source for source, _ in calls} == {"eager" if attn == "eager" else "op"} and len(calls) == 2
    core = {"qk_matmul", "softmax", "pv_matmul"} if attn == "eager" else set()
    assert {"qkv_proj", "out_proj"} | core <= {stage for _, stage in labelled}
    if family == "falcon" and not shapes:
        # x @ W.T: without shapes a projection by matmul looks like a product of the core; the call stays the core.
        assert {stage for _, stage in bare} & {"qkv_proj", "rope", "out_proj"} == set()
    elif family in ("llama", "neox", "qwen3", "phi3", "opt"):
        assert ("rope" in {stage for _, stage in labelled}) is (family != "opt")
        assert bare == labelled
    else:
        compute = Counter({k: n for k, n in labelled.items() if k[0] in _COMPUTE})
        assert Counter({k: n for k, n in bare.items() if k[0] in _COMPUTE}) == compute


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_generation_steps_match_the_labelled_ones(tmp_path, family, attn):
    """``generate``: a prefill and two decode steps (one query row, a growing KV cache), labelled and
    bare. Every call of the bare recording holds the same ops with the same stages as its labelled
    twin. Gemma 3 checks two things: its eager block has more than 64 ops before QK^T (q_proj and
    its view fell outside the window), and Hugging Face's SDPA path passes its grouped-KV query as
    ``[B, Hkv, n * S, D]``, so q_norm's ``[B, H, S, 1]`` statistics match neither the op's heads nor
    its rows (the block started after them)."""
    from tracekit import capture

    model = _tiny_model(family, attn)
    ids = torch.randint(0, 64, (2, 16))

    def generate(x):
        return model.generate(x, max_new_tokens=3, do_sample=False, pad_token_id=0)

    handle = capture.label_modules(model)
    with _record(tmp_path, "labelled", generate, ids) as trace:
        labelled = list(_per_call(trace).values())
    handle.remove()
    with _record(tmp_path, "bare", generate, ids) as trace:
        bare = list(_per_call(trace).values())
    assert len(labelled) == 6  # 2 layers x (prefill + 2 decode steps)
    decode = labelled[-1]
    assert ("aten::linear", "qkv_proj") in {op[:2] for op in decode} and "[[2,1,32]" in decode[0][2]
    assert bare == labelled


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_norm_between_two_projections_is_in_the_block(tmp_path, attn):
    """OLMo-2 normalizes q and k over their flattened ``[B, S, H * D]`` rows right after each
    projection: q_proj, q_norm, k_proj, k_norm, v_proj. Those norms look like the layer's own norm,
    but they sit between two projections that read the same hidden state, so they are the block's:
    bare, every call holds what its labelled twin holds, layer 0's too (the model's rotary table ops before
    it are not its block's: the other layer's block leads with none)."""
    from tracekit import capture

    model = _tiny_model("olmo2", attn)
    ids = torch.randint(0, 64, (2, 16))
    handle = capture.label_modules(model)
    with _record(tmp_path, "labelled", lambda x: model(x, use_cache=False), ids) as trace:
        labelled = list(_per_call(trace).values())
    handle.remove()
    with _record(tmp_path, "bare", lambda x: model(x, use_cache=False), ids) as trace:
        bare = list(_per_call(trace).values())
    assert len(labelled) == len(bare) == 2
    assert [op[:2] for op in labelled[1] if op[0] in ("aten::linear", "aten::pow", "aten::rsqrt")] == [
        ("aten::linear", "qkv_proj"),
        ("aten::pow", "qk_norm"),
        ("aten::rsqrt", "qk_norm"),
        ("aten::linear", "qkv_proj"),
        ("aten::pow", "qk_norm"),
        ("aten::rsqrt", "qk_norm"),
        ("aten::linear", "qkv_proj"),
        ("aten::linear", "out_proj"),
    ]
    assert bare[1] == labelled[1]
    # Layer 0 too: the model's rotary table ops run right before its first projection (no norm of a post-norm
    # layer stops the block there), but layer 1's block leads with none, and layers repeat: its lead is cut to
    # the other layer's (attribution/eager_block_ends), so it holds what its labelled twin holds.
    assert bare[0] == labelled[0]
    assert not {"aten::cos", "aten::sin"} & {op[0] for op in bare[0]}


@pytest.mark.parametrize("labels", [True, False], ids=["labelled", "bare"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_an_rmsnorm_written_in_ops_is_qk_norm(tmp_path, attn, labels):
    """Qwen3 normalizes q and k per head with an RMSNorm of plain ops (to, pow, mean, add, rsqrt,
    mul, to, mul): between the projections and the core those ops are ``qk_norm``, not the scale,
    mask and layout their op rules say, and not the rotary embedding that follows (whose ops are
    ``rope`` as before). Labelled and bare alike."""
    from tracekit import capture

    model = _tiny_model("qwen3", attn)
    handle = capture.label_modules(model) if labels else None
    with _record(tmp_path, "qwen3", lambda x: model(x, use_cache=False), torch.randint(0, 64, (2, 16))) as trace:
        calls = list(_per_call(trace).values())
    if handle is not None:
        handle.remove()
    assert len(calls) == 2
    for ops in calls:
        stages = {(name, stage) for name, stage, _ in ops}
        assert {stage for name, stage in stages if name in ("aten::rsqrt", "aten::pow", "aten::mean")} == {"qk_norm"}
        # Each norm: its 8 ops (q's, then k's), right after its projection's view.
        norms = [i for i, op in enumerate(ops) if op[1] == "qk_norm"]
        assert [ops[i][0] for i in norms].count("aten::rsqrt") == 2 and len(norms) == 16
        assert [ops[i - 1][0] for i in norms if ops[i - 1][1] != "qk_norm"] == ["aten::view"] * 2
        rope = [(name, dims) for name, stage, dims in ops if stage == "rope"]
        # (rotate_half's halves are slices: layout ops inside the rotary embedding)
        assert {name for name, _ in rope} == {"aten::mul", "aten::neg", "aten::cat", "aten::add", "aten::slice"}
        # q * cos, rot(q) * sin, k * cos, rot(k) * sin: 4-D heads by a table, not the norms' 4-D by [.., 1]
        muls = [dims for name, dims in rope if name == "aten::mul"]
        assert len(muls) == 4 and all(
            dims.split("],")[0].count(",") == 3 and not dims.endswith(",1]]") for dims in muls
        )


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_rotation_written_with_sub_is_rope(tmp_path, attn):
    """DeepSeek-V3's attention (labelled) rotates its rotary part as x1 * cos - x2 * sin, x2 * cos +
    x1 * sin: no neg, a sub. Those muls, subs and adds are ``rope``; its low-rank q and kv RMSNorms
    (plain ops) are ``qk_norm``; nothing else before the core is rope."""
    from tracekit import capture

    model = _tiny_model("deepseek_v3", attn)
    handle = capture.label_modules(model)
    with _record(tmp_path, "dsv3", lambda x: model(x, use_cache=False), torch.randint(0, 64, (2, 16))) as trace:
        (ops,) = _per_call(trace).values()
    handle.remove()
    rope = [(name, dims) for name, stage, dims in ops if stage == "rope"]
    assert sorted({name for name, _ in rope}) == ["aten::add", "aten::cat", "aten::mul", "aten::sub"]
    # q's and k's rotary halves: 4 muls, a sub and an add each, all on 4-D [B, H, S, r/2] tensors
    assert [name for name, _ in rope].count("aten::sub") == 2 and [name for name, _ in rope].count("aten::mul") == 8
    assert all(
        dims.startswith("[[2,") and dims.split("]")[0].count(",") == 3 for name, dims in rope if name != "aten::cat"
    )
    norm = [name for name, stage, _ in ops if stage == "qk_norm"]
    assert norm.count("aten::rsqrt") == 2 and norm.count("aten::pow") == 2
    assert {stage for _, stage, _ in ops} <= {"qkv_proj", "qk_norm", "layout", "rope", "other", "out_proj"} | (
        {"qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul"} if attn == "eager" else set()
    )


class _FlashLayoutBlock(torch.nn.Module):
    """A pre-norm attention block around a flash-attn-style op (``flash_attn::tk_fwd``, a custom op:
    q, k, v as ``[B, S, H, D]``, or ``[T, H, D]`` for a varlen batch), then an MLP. By construction:
    the q/k/v projections, their views, the op, the output reshape and projection are the block; the
    norms, the residual adds and the MLP are not."""

    def __init__(self, varlen: bool, hidden: int = 32, heads: int = 4):
        super().__init__()
        self.varlen, self.heads, self.d = varlen, heads, hidden // heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, hidden = x.shape
        h = self.norm1(x)
        shape = (b * s, self.heads, self.d) if self.varlen else (b, s, self.heads, self.d)
        q, k, v = (proj(h).view(shape) for proj in (self.q, self.k, self.v))
        out = torch.ops.flash_attn.tk_fwd(q, k, v)
        x = x + self.o(out.reshape(b, s, hidden))
        return x + self.down(torch.relu(self.up(self.norm2(x))))


@pytest.fixture(scope="module")
def flash_layout_op():
    """``flash_attn::tk_fwd``: attention over ``[B, S, H, D]`` (or ``[T, H, D]``) inputs, by SDPA on CPU."""

    @torch.library.custom_op("flash_attn::tk_fwd", mutates_args=())
    def tk_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        batched = q.dim() == 4  # else a varlen [T, H, D]: one sequence here
        q, k, v = (t if batched else t.unsqueeze(0) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)))
        return out.transpose(1, 2) if batched else out.transpose(1, 2)[0]

    return tk_fwd


@pytest.mark.parametrize("varlen", [False, True], ids=["bshd", "thd"])
def test_an_unlabelled_call_op_widens_to_its_block_by_construction(tmp_path, flash_layout_op, varlen):
    """A bare recording (no labels) of two blocks around a flash-attn-layout op: each call holds its
    q/k/v projections (qkv_proj), their views (layout), the op and its output projection (out_proj),
    and nothing of the norms, residual adds or MLP; the call keeps the op's id, source and impl."""
    model = torch.nn.Sequential(_FlashLayoutBlock(varlen), _FlashLayoutBlock(varlen)).eval()
    with _record(tmp_path, "bare", model, torch.randn(2, 16, 32)) as trace:
        calls = trace.sql("SELECT call_id, call_source, op, impl FROM attention_calls ORDER BY ts_ns").rows()
        assert [(source, op, impl) for _, source, op, impl in calls] == [("op", "flash_attn::tk_fwd", "flash")] * 2
        op_ids = {r[0] for r in trace.sql("SELECT id FROM cpu_slices WHERE name = 'flash_attn::tk_fwd'").rows()}
        assert {call_id for call_id, *_ in calls} == op_ids
        for call_id, *_ in calls:
            ops = _top_ops(trace, call_id)
            assert ops == [
                *[("aten::linear", "qkv_proj"), ("aten::view", "layout")] * 3,
                ("flash_attn::tk_fwd", "fused_attention"),
                ("aten::reshape", "layout"),
                ("aten::linear", "out_proj"),
            ]
            # The call spans its block on the CPU: from the q projection's start to o_proj's end.
            ((ts, cpu_ns, first, last),) = trace.sql(
                f"""SELECT c.ts_ns, c.cpu_ns, min(s.ts_ns), max(s.end_ns)
                    FROM attention_calls c JOIN cpu_stages st USING (call_id) JOIN cpu_slices s USING (id)
                    WHERE c.call_id = {call_id} GROUP BY ALL"""
            ).rows()
            assert (ts, cpu_ns) == (first, last - first)


class _ServingBlock(torch.nn.Module):
    """A vLLM-style layer on flattened tokens (``[T, hidden]``): a fused QKV projection, its split, a
    rotary-embedding op and a KV-cache write op on ``[T, H * D]`` rows (no head dim in their shapes),
    the attention op on ``[T, H, D]`` views, the output projection; a norm before and an MLP after.
    ``fp8``: the QKV projection is a ``cutlass_scaled_mm(out, a, b)`` op (output first) on quantized
    input, and q is quantized again before the attention op (as vLLM's fp8 attention does)."""

    def __init__(self, fp8: bool, hidden: int = 32, heads: int = 4, tp: bool = False):
        super().__init__()
        self.fp8, self.heads, self.d, self.hidden, self.tp = fp8, heads, hidden // heads, hidden, tp
        self.norm, self.o = torch.nn.LayerNorm(hidden), torch.nn.Linear(hidden, hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.up, self.down = torch.nn.Linear(hidden, 4 * hidden), torch.nn.Linear(4 * hidden, hidden)
        self.register_buffer("cache", torch.zeros(2, 64, hidden))

    def forward(self, x):
        t, ops = x.shape[0], torch.ops.tk_vllm
        h = self.norm(x)
        if self.fp8:
            qkv = torch.empty(t, 3 * self.hidden)
            ops.cutlass_scaled_mm(qkv, ops.static_scaled_fp8_quant(h), self.qkv.weight.t())
        else:
            qkv = self.qkv(h)
        q, k, v = qkv.split([self.hidden] * 3, dim=-1)
        q, k = ops.rotary_embedding(torch.arange(t), q, k)
        ops.reshape_and_cache_flash(k, v, self.cache)
        if self.fp8:
            q = ops.static_scaled_fp8_quant(q)
        heads = (t, self.heads, self.d)
        out = torch.ops.vllm.unified_attention_tk(q.view(heads), k.view(heads), v.view(heads))
        reduce = ops.all_reduce if self.tp else (lambda y: y)  # the row-parallel layers' all-reduce
        x = x + reduce(self.o(out.view(t, self.hidden)))
        return x + reduce(self.down(torch.relu(self.up(x))))


def _rotate(x: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    return x * torch.cos(angle) + x.roll(1, -1) * torch.sin(angle)


def _token_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A serving attention op's body on [T, H, D] rows: plain ops inside (no SDPA op, whose backend would
    name its own impl), [H, T, D] products."""
    q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    scores = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
    return (scores @ v).transpose(0, 1).contiguous()


@pytest.fixture(scope="module")
def serving_ops():
    """vLLM-like custom ops: ``tk_vllm::rotary_embedding``, ``reshape_and_cache_flash``,
    ``static_scaled_fp8_quant`` and ``all_reduce`` (stand-ins: a copy), ``cutlass_scaled_mm`` and
    ``vllm::unified_attention_tk`` (``[T, H, D]``)."""

    @torch.library.custom_op("tk_vllm::rotary_embedding", mutates_args=())
    def rotary_embedding(p: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angle = p[:, None].float() * 0.01
        return _rotate(q, angle), _rotate(k, angle)

    @torch.library.custom_op("tk_vllm::reshape_and_cache_flash", mutates_args=("cache",))
    def reshape_and_cache_flash(k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor) -> None:
        cache[0, : k.shape[0]] = k
        cache[1, : v.shape[0]] = v

    @torch.library.custom_op("tk_vllm::static_scaled_fp8_quant", mutates_args=())
    def static_scaled_fp8_quant(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @torch.library.custom_op("tk_vllm::cutlass_scaled_mm", mutates_args=("out",))
    def cutlass_scaled_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
        out.copy_(a @ b)

    @torch.library.custom_op("tk_vllm::all_reduce", mutates_args=())
    def all_reduce(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @torch.library.custom_op("vllm::unified_attention_tk", mutates_args=())
    def unified_attention_tk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _token_attention(q, k, v)

    return (
        rotary_embedding,
        reshape_and_cache_flash,
        static_scaled_fp8_quant,
        cutlass_scaled_mm,
        all_reduce,
        unified_attention_tk,
    )


# With shapes every case in every run; without them the fp8 tensor-parallel one (the most ops to read by name),
# the others under TRACEKIT_SLOW=1.
@pytest.mark.parametrize(
    "fp8, tp, shapes",
    [
        slow_unless(
            shapes or (fp8 and tp), fp8, tp, shapes, id=f"{'fp8' if fp8 else 'bf16'}-tp{2 if tp else 1}-{label}"
        )
        for shapes, label in ((True, "record_shapes"), (False, "no_shapes"))
        for fp8 in (False, True)
        for tp in (False, True)
    ],
)
def test_a_serving_block_widens_through_its_named_rope_and_cache_ops_by_construction(
    tmp_path, serving_ops, fp8, tp, shapes
):
    """Recorded bare, each attention op's call widens over the rotary and KV-cache ops (head ops by
    their names: their [T, H * D] rows show no head dim) to the fused QKV projection before them and the
    output projection after; the norm, residual add and MLP stay out. With fp8, the output-first GEMM
    is the QKV projection and the quantization of q passes through (neither ends nor starts a block).
    With tensor parallelism, the output projection's all-reduce is the call's (tp_comm), the MLP's
    is not."""
    model = torch.nn.Sequential(_ServingBlock(fp8, tp=tp), _ServingBlock(fp8, tp=tp)).eval()
    with _record(tmp_path, "serving", model, torch.randn(16, 32), shapes=shapes) as trace:
        calls = trace.sql("SELECT call_id, call_source, impl FROM attention_calls ORDER BY ts_ns").rows()
        assert [(source, impl) for _, source, impl in calls] == [("op", "paged")] * 2
        for call_id, *_ in calls:
            ops = _top_ops(trace, call_id)
            qkv = [("aten::linear", "qkv_proj")]
            if fp8:
                qkv = [("tk_vllm::cutlass_scaled_mm", "qkv_proj")]  # (its input's quantization stays out)
            assert ops == [
                *qkv,
                ("aten::split_with_sizes", "layout"),
                ("aten::arange", "position_bias"),  # the positions the rotary op takes
                ("tk_vllm::rotary_embedding", "rope"),
                ("tk_vllm::reshape_and_cache_flash", "kv_cache"),
                *([("tk_vllm::static_scaled_fp8_quant", "layout")] if fp8 else []),
                *[("aten::view", "layout")] * 3,
                ("vllm::unified_attention_tk", "fused_attention"),
                ("aten::view", "layout"),
                ("aten::linear", "out_proj"),
                *([("tk_vllm::all_reduce", "tp_comm")] if tp else []),
            ]
        if tp:  # the MLP's reduction stays out
            assert trace.sql(
                """SELECT count(*) FILTER (WHERE s.call_id IS NULL), count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
                   WHERE c.name = 'tk_vllm::all_reduce'"""
            ).rows() == [(2, 4)]


class _SGLangBlock(torch.nn.Module):
    """An SGLang-style layer on flattened tokens (``[T, hidden]``) made of another library's ops, as the
    Qwen3 serving trace shows them recorded bare: a fused add + RMSNorm op, a fused QKV GEMM op of the
    library's own (``gemm_a16w16(x, W[N, K])``), its split, one op normalizing q and k, the rotary table
    ``[P, D]`` cast, a rotary op and a KV-cache write on ``[T, H * D]`` rows, an output buffer allocated
    before the paged attention op on ``[T, H, D]``, the output GEMM op; the MLP's GEMM ops after."""

    def __init__(self, hidden: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.d, self.hidden = heads, hidden // heads, hidden
        self.qkv, self.o = (
            torch.nn.Parameter(torch.randn(3 * hidden, hidden)),
            torch.nn.Parameter(torch.randn(hidden, hidden)),
        )
        self.up, self.down = (
            torch.nn.Parameter(torch.randn(4 * hidden, hidden)),
            torch.nn.Parameter(torch.randn(hidden, 4 * hidden)),
        )
        self.register_buffer("cos_sin_cache", torch.randn(64, self.d))
        self.register_buffer("cache", torch.zeros(2, 64, hidden))

    def forward(self, x):
        t, ops = x.shape[0], torch.ops.tk_sgl
        h = ops.add_rmsnorm(x, x)
        q, k, v = ops.gemm_a16w16(h, self.qkv).split([self.hidden] * 3, dim=-1)
        q, k = ops.apply_qk_norm(q, k)
        q, k = ops.rotary_embedding(torch.arange(t), q, k, self.cos_sin_cache.to(x.dtype))
        out = torch.empty_like(q)
        ops.set_kv_buffer(k, v, self.cache)
        heads = (t, self.heads, self.d)
        out = torch.ops.sglang.tk_paged_attention(q.view(heads), k.view(heads), v.view(heads))
        x = ops.add_rmsnorm(ops.gemm_a16w16(out.reshape(t, self.hidden), self.o), x)
        return ops.gemm_a16w16(torch.relu(ops.gemm_a16w16(x, self.up)), self.down)


@pytest.fixture(scope="module")
def sglang_ops():
    """SGLang/aiter-like custom ops (``tk_sgl::*``, ``sglang::tk_paged_attention``); plain math inside."""

    @torch.library.custom_op("tk_sgl::add_rmsnorm", mutates_args=())
    def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.rms_norm(x + residual, x.shape[-1:])

    @torch.library.custom_op("tk_sgl::gemm_a16w16", mutates_args=())
    def gemm_a16w16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.t()

    @torch.library.custom_op("tk_sgl::apply_qk_norm", mutates_args=())
    def apply_qk_norm(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6), k * torch.rsqrt(
            k.pow(2).mean(-1, keepdim=True) + 1e-6
        )

    @torch.library.custom_op("tk_sgl::rotary_embedding", mutates_args=())
    def rotary_embedding(
        p: torch.Tensor, q: torch.Tensor, k: torch.Tensor, table: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        angle = p[:, None].float() * 0.01
        return _rotate(q, angle), _rotate(k, angle)

    @torch.library.custom_op("tk_sgl::set_kv_buffer", mutates_args=("cache",))
    def set_kv_buffer(k: torch.Tensor, v: torch.Tensor, cache: torch.Tensor) -> None:
        cache[0, : k.shape[0]] = k
        cache[1, : v.shape[0]] = v

    @torch.library.custom_op("sglang::tk_paged_attention", mutates_args=())
    def tk_paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _token_attention(q, k, v)

    return add_rmsnorm, gemm_a16w16, apply_qk_norm, rotary_embedding, set_kv_buffer, tk_paged_attention


@pytest.mark.parametrize("shapes", [True, False], ids=["record_shapes", "no_shapes"])
def test_an_sglang_block_of_library_ops_widens_to_its_gemm_ops_by_construction(tmp_path, sglang_ops, shapes):
    """Recorded bare (no Python stacks), each paged attention op's call widens back over the KV-cache
    write, the output buffer's allocation, the rotary op and its table's cast, the q/k norm op and the
    split to the library's fused QKV GEMM op, and forward to its output GEMM op; the fused add + norm
    before and after and the MLP's GEMM ops stay out. The GEMM ops are projections by their recorded
    operands (x [T, K], W [N, K]) and the library GEMM rule; without recorded shapes (the profiler's
    default) by their names, with the same block."""
    model = torch.nn.Sequential(_SGLangBlock(), _SGLangBlock()).eval()
    with _record(tmp_path, "sglang", model, torch.randn(16, 32), shapes=shapes) as trace:
        calls = trace.sql("SELECT call_id, call_source, impl FROM attention_calls ORDER BY ts_ns").rows()
        assert [(source, impl) for _, source, impl in calls] == [("op", "paged")] * 2
        for call_id, *_ in calls:
            assert _top_ops(trace, call_id) == [
                ("tk_sgl::gemm_a16w16", "qkv_proj"),
                ("aten::split_with_sizes", "layout"),
                ("tk_sgl::apply_qk_norm", "qk_norm"),
                ("aten::arange", "position_bias"),  # the positions the rotary op takes
                ("aten::to", "layout"),
                ("tk_sgl::rotary_embedding", "rope"),
                ("aten::empty_like", "other"),  # an allocation: inside the block, no stage of its own
                ("tk_sgl::set_kv_buffer", "kv_cache"),
                *[("aten::view", "layout")] * 3,
                ("sglang::tk_paged_attention", "fused_attention"),
                ("aten::reshape", "layout"),
                ("tk_sgl::gemm_a16w16", "out_proj"),
            ]
        outside = trace.sql(
            """SELECT c.name, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
               WHERE c.name LIKE 'tk_sgl::%' AND s.call_id IS NULL GROUP BY ALL ORDER BY 1"""
        ).rows()
        assert outside == [("tk_sgl::add_rmsnorm", 4), ("tk_sgl::gemm_a16w16", 4)]


class _FirstDecodeStep(torch.nn.Module):
    """q/k/v projections, a KV cache that is still empty (``[B, H, 0, D]``: the first step of
    generation) appended to along the sequence axis, SDPA, the output projection."""

    def __init__(self, hidden: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))

    def forward(self, x):
        b, s, hidden = x.shape
        q, k, v = (p(x).view(b, s, self.heads, self.d).transpose(1, 2) for p in (self.q, self.k, self.v))
        empty = torch.zeros(b, self.heads, 0, self.d)
        k, v = torch.cat([empty, k], dim=2), torch.cat([empty, v], dim=2)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(b, s, hidden))


def test_a_zero_sized_dim_beside_a_call_op_is_read_by_construction(tmp_path):
    """An empty KV cache's ``[B, H, 0, D]`` among the siblings of a bare SDPA op: its dims are read
    (no division by its zero) and the append is the call's kv_cache, inside the widened block."""
    with _record(tmp_path, "first_step", _FirstDecodeStep().eval(), torch.randn(2, 16, 32)) as trace:
        ((call_id,),) = trace.sql("SELECT call_id FROM attention_calls").rows()
        ops = _top_ops(trace, call_id)
    assert [op for op in ops if op[0] in ("aten::linear", "aten::cat")] == [
        *[("aten::linear", "qkv_proj")] * 3,
        *[("aten::cat", "kv_cache")] * 2,
        ("aten::linear", "out_proj"),
    ]
