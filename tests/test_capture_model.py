"""label_modules and profile_model on tiny models built here (no downloads)."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import capture  # noqa: E402
from capture.cli import main  # noqa: E402


class RotaryEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, x):
        t = torch.arange(x.shape[-2], dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1).cos()


class LlamaAttention(nn.Module):
    """Named like the transformers class so the default patterns find it."""

    def __init__(self, hidden=32, heads=2):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim)
        self.attn_dropout = nn.Dropout(0.0)

    def forward(self, x):
        b, s, h = x.shape

        def split(t):
            return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        cos = self.rotary_emb(q)
        q, k = q * cos, k * cos
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(self.attn_dropout(out.transpose(1, 2).reshape(b, s, h)))


class Block(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden)
        self.self_attn = LlamaAttention(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 64), nn.GELU(), nn.Linear(64, hidden))

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(x)


class TinyModel(nn.Module):
    def __init__(self, layers=2, hidden=32, vocab=50):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden) for _ in range(layers))

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x


def inside(child, parent):
    # Kineto timestamps are rounded to ns; allow a hair of slack at the edges.
    return (
        child["tid"] == parent["tid"]
        and parent["ts"] - 0.01 <= child["ts"]
        and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 0.01
    )


def test_label_modules_wraps_attention_and_projection_children():
    model = TinyModel()
    handle = capture.label_modules(model)
    labels = dict(handle.labels)
    assert handle.attention_modules == ["layers.0.self_attn", "layers.1.self_attn"]
    assert labels["layers.0.self_attn"] == "attention:LlamaAttention"
    for proj in ("q_proj", "k_proj", "v_proj"):
        assert labels[f"layers.0.self_attn.{proj}"] == "stage:qkv_proj"
    assert labels["layers.0.self_attn.o_proj"] == "stage:out_proj"
    assert labels["layers.0.self_attn.rotary_emb"] == "stage:rope"
    # torch.nn building blocks named like attention are not attention calls.
    assert "layers.0.self_attn.attn_dropout" not in labels
    assert len(handle.labels) == 2 * 6

    again = capture.label_modules(model)  # a second call must not double-wrap
    assert again.labels == []
    handle.remove()
    assert "forward" not in model.layers[0].self_attn.__dict__
    assert "forward" not in model.layers[0].self_attn.q_proj.__dict__
    assert capture.label_modules(model).labels  # labelable again after remove()


def test_name_matches_skip_leaf_building_blocks():
    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(32))

        def forward(self, x):
            return x * self.weight

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = RMSNorm()
            self.attn = LlamaAttention()
            self.attn_layers = nn.ModuleList([nn.Linear(32, 32)])

    handle = capture.label_modules(nn.Sequential(Layer()))
    assert handle.attention_modules == ["0.attn"]


def test_nested_matches_are_not_wrapped_twice():
    class OuterAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner_attn = LlamaAttention()
            self.out_proj = nn.Linear(32, 32)

        def forward(self, x):
            return self.out_proj(self.inner_attn(x))

    model = nn.Sequential(OuterAttention())
    handle = capture.label_modules(model)
    assert handle.attention_modules == ["0"]
    labels = dict(handle.labels)
    assert labels["0"] == "attention:OuterAttention"
    assert "0.inner_attn" not in labels
    assert labels["0.out_proj"] == "stage:out_proj"
    assert labels["0.inner_attn.q_proj"] == "stage:qkv_proj"


def test_patterns_match_qualified_names_case_insensitively():
    model = TinyModel(layers=1)
    handle = capture.label_modules(model, patterns=("*.SELF_ATTN",))
    assert handle.attention_modules == ["layers.0.self_attn"]
    handle.remove()
    assert capture.label_modules(model, patterns=("nothing*",)).labels == []


def test_labels_survive_a_forward_that_raises():
    model = TinyModel(layers=1)
    with capture.label_modules(model), pytest.raises(ValueError):
        model(torch.zeros(1, 4, 3, dtype=torch.long))  # one dimension too many
    assert "forward" not in model.layers[0].self_attn.__dict__


def test_profile_model_ranges_nest(tmp_path):
    model = TinyModel()
    ids = torch.randint(0, 50, (1, 16))
    result = capture.profile_model(model, ids, tmp_path, flat=True, warmup=1, steps=2)
    assert result.trace == tmp_path / "TinyModel.json.gz"
    with gzip.open(result.trace, "rt") as fh:
        trace = json.load(fh)
    events = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
    attention = [e for e in events if e["name"] == "attention:LlamaAttention"]
    assert len(attention) == 2 * 2  # two layers, two profiled steps
    for stage, per_call in (("stage:qkv_proj", 3), ("stage:out_proj", 1), ("stage:rope", 1)):
        found = [e for e in events if e["name"] == stage]
        assert len(found) == per_call * len(attention)
        assert all(any(inside(s, a) for a in attention) for s in found)
    meta = trace["tracekit_capture"]
    assert meta["impl"] == "LlamaAttention" and meta["model"] == "TinyModel"
    assert meta["labelled_modules"] == 2 and meta["dtype"] == "float32"
    # The labels are gone after the capture.
    assert "forward" not in model.layers[0].self_attn.__dict__
    figures = json.loads(result.key_averages_json.read_text())["regions"]
    assert figures["attention:LlamaAttention"]["count"] == 4
    assert figures["stage:qkv_proj"]["count"] == 12


def test_profile_model_takes_keyword_inputs_and_skips_unlisted_ranks(tmp_path):
    model = TinyModel(layers=1)
    inputs = {"input_ids": torch.randint(0, 50, (1, 8))}
    info = capture.ClusterInfo(rank=1, world_size=2, local_rank=1, host="h", job_id=None)
    assert capture.profile_model(model, inputs, tmp_path, warmup=0, steps=1, cluster=info, ranks=frozenset({0})) is None
    assert list(tmp_path.iterdir()) == []
    result = capture.profile_model(model, inputs, tmp_path, tag="m", warmup=0, steps=1, cluster=info)
    assert result.trace.parent == tmp_path / "m"
    assert result.trace.name.startswith("rank00001.h.TinyModel.")


def test_model_command_without_transformers_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)
    code = main(["model", "--hf", str(tmp_path), "--device", "cpu", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == "Error: transformers is not installed; capture needs it: pip install transformers\n"


def _tiny_hf_model(transformers, kind):
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
        )
        return transformers.LlamaForCausalLM(config), "LlamaAttention", True
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config), "BertAttention", None


@pytest.mark.parametrize("kind", ["llama", "bert"])
def test_hf_tiny_model_through_the_command(kind, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model, attention_class, causal = _tiny_hf_model(transformers, kind)
    model.save_pretrained(tmp_path / f"tiny-{kind}")
    code = main(
        [
            "model",
            "--hf",
            str(tmp_path / f"tiny-{kind}"),
            "--seq",
            "16",
            "--device",
            "cpu",
            "--attn-impl",
            "eager",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--flat",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    with gzip.open(tmp_path / "out" / f"tiny-{kind}.json.gz", "rt") as fh:
        trace = json.load(fh)
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
    assert {f"attention:{attention_class}", "stage:qkv_proj", "stage:out_proj"} <= names
    meta = trace["tracekit_capture"]
    assert meta["shapes"] == {"batch": 1, "heads": 2, "seq_q": 16, "seq_kv": 16, "head_dim": 16}
    assert meta["causal"] is causal
    # An encoder checkpoint loads as the base model, without a fresh LM head.
    assert meta["model"] == type(model).__name__


def test_hf_missing_directory_is_one_line(tmp_path, capsys):
    pytest.importorskip("transformers")
    assert main(["model", "--hf", str(tmp_path / "absent"), "--device", "cpu"]) == 1
    assert capsys.readouterr().err == f"Error: no model directory at {tmp_path / 'absent'}\n"
