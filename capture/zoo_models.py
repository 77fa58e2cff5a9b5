"""Plain-torch transformer families for the trace zoo, written to follow Hugging Face's code paths.

Each class carries the name of the Hugging Face class it imitates (``LlamaAttention``,
``BertSelfOutput``, ``T5LayerSelfAttention``, ...), because the trace records
``nn.Module: <ClassName>_<n>`` scopes and functions by name (``apply_rotary_pos_emb``,
``eager_attention_forward``, ``compute_bias``), and the zoo's traces should look like a
real model's. The ops follow the same code paths: RMSNorm in float32, ``rotate_half``
RoPE, ``repeat_kv`` for grouped KV heads, GPT-2's Conv1D ``addmm`` and fused ``c_attn``
split, BERT's post-norm ``BertSelfOutput``, T5's relative position buckets, ViT's patch
embedding, CLIP's causal text tower, Whisper's cross-attention.

This module imports torch at import time; `capture.zoo` imports it only when it records.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    """The few sizes every family shares; the defaults make a model of a few thousand weights."""

    hidden: int = 64
    heads: int = 4
    kv_heads: int = 4
    layers: int = 2
    ffn: int = 128
    vocab: int = 100
    positions: int = 64
    attn: str = "eager"  # eager, sdpa or flex
    qk_norm: bool = False  # Qwen3's per-head q/k RMSNorm
    sliding_window: int | None = None  # Mistral's window, in tokens

    @property
    def head_dim(self) -> int:
        """Width of one head."""
        return self.hidden // self.heads


# --- The attention functions Hugging Face's decoder models dispatch to ------------------------------


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Grouped KV heads repeated to the query's heads: [B, Hkv, S, D] -> [B, Hkv * groups, S, D]."""
    if groups == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, groups, s, d).reshape(b, h * groups, s, d)


def eager_attention_forward(module: nn.Module, q, k, v, mask, scaling: float, dropout: float = 0.0):
    """Scores, scale, additive mask, softmax in float32, dropout, product with V; [B, S, H, D] out."""
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    weights = torch.matmul(q, k.transpose(2, 3)) * scaling
    if mask is not None:
        weights = weights + mask
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


def sdpa_attention_forward(module: nn.Module, q, k, v, mask, scaling: float, dropout: float = 0.0):
    """`F.scaled_dot_product_attention`, causal by its flag when no mask is given (Hugging Face's `sdpa`)."""
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    causal = mask is None and getattr(module, "is_causal", False) and q.shape[2] > 1
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=dropout if module.training else 0.0, scale=scaling, is_causal=causal
    )
    return out.transpose(1, 2).contiguous()


def flex_attention_forward(module: nn.Module, q, k, v, mask, scaling: float, dropout: float = 0.0):
    """flex_attention with a causal score_mod (eager: the unfused reference path) and grouped KV heads."""
    from torch.nn.attention.flex_attention import flex_attention

    def causal(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx >= kv_idx, score, -float("inf"))

    out = flex_attention(q, k, v, score_mod=causal, scale=scaling, enable_gqa=q.shape[1] != k.shape[1])
    assert isinstance(out, torch.Tensor)
    return out.transpose(1, 2).contiguous()


ATTENTION_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "eager": eager_attention_forward,
    "sdpa": sdpa_attention_forward,
    "flex": flex_attention_forward,
}


def _causal_mask(seq: int, window: int | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive [1, 1, S, S] mask of a decoder: 0 where a query sees a key, the dtype's minimum elsewhere."""
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    hidden = j > i
    if window is not None:
        hidden = hidden | (i - j >= window)
    return torch.zeros(seq, seq, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)[None, None]


# --- Llama / Qwen3 / Mistral: RMSNorm, RoPE, grouped KV heads ---------------------------------------


class LlamaRMSNorm(nn.Module):
    """RMSNorm computed in float32, as Hugging Face's Llama does."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


class LlamaRotaryEmbedding(nn.Module):
    """The cos/sin tables of the positions, computed once per forward at the model level."""

    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    """The rotation's sign flip: (x1, x2) -> (-x2, x1) over the last dim's halves."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """q * cos + rotate_half(q) * sin, the same for k; the tables broadcast over heads."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class LlamaAttention(nn.Module):
    """q/k/v/o projections, optional per-head q/k norms (Qwen3), RoPE, grouped KV heads, the attention function."""

    is_causal = True

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        d = cfg.head_dim
        self.scaling = d**-0.5
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)
        if cfg.qk_norm:
            self.q_norm = LlamaRMSNorm(d)
            self.k_norm = LlamaRMSNorm(d)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        shape = (b, s, -1, self.cfg.head_dim)
        q, k = self.q_proj(x).view(shape), self.k_proj(x).view(shape)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = ATTENTION_FUNCTIONS[self.cfg.attn](self, q, k, v, mask, self.scaling)
        return self.o_proj(out.reshape(b, s, -1))


class LlamaMLP(nn.Module):
    """The gated SiLU MLP."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    """Pre-norm decoder layer: norm, attention, residual; norm, MLP, residual."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(cfg.hidden)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    """Embedding, rotary tables, the mask (built here, outside attention, as Hugging Face does), layers, head."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.rotary_emb = LlamaRotaryEmbedding(cfg.head_dim)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg) for _ in range(cfg.layers))
        self.norm = LlamaRMSNorm(cfg.hidden)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
        cos, sin = self.rotary_emb(x, positions)
        # sdpa and flex take causality from a flag or score_mod; eager and a sliding window need the mask.
        needs_mask = self.cfg.attn == "eager" or self.cfg.sliding_window is not None
        mask = _causal_mask(input_ids.shape[1], self.cfg.sliding_window, x.dtype) if needs_mask else None
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


# --- GPT-2: Conv1D (addmm), fused c_attn split, where-mask ------------------------------------------


class Conv1D(nn.Module):
    """GPT-2's transposed linear: ``addmm(bias, x.view(-1, nx), weight)`` then a view back."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class GPT2Attention(nn.Module):
    """One c_attn for q, k and v, split; causal mask by ``torch.where``; c_proj and the residual dropout."""

    bias: torch.Tensor

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.c_attn = Conv1D(3 * cfg.hidden, cfg.hidden)
        self.c_proj = Conv1D(cfg.hidden, cfg.hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)
        causal = torch.tril(torch.ones(cfg.positions, cfg.positions, dtype=torch.bool))
        self.register_buffer("bias", causal[None, None], persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.cfg.hidden, dim=2)
        q, k, v = (t.view(b, s, self.cfg.heads, self.cfg.head_dim).transpose(1, 2) for t in (q, k, v))
        weights = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.cfg.head_dim)
        weights = torch.where(self.bias[:, :, :s, :s], weights, torch.finfo(weights.dtype).min)
        weights = self.attn_dropout(F.softmax(weights, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, s, -1)
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    """c_fc, GELU, c_proj, dropout."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.c_fc = Conv1D(cfg.ffn, cfg.hidden)
        self.c_proj = Conv1D(cfg.hidden, cfg.ffn)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class GPT2Block(nn.Module):
    """ln_1, attention, residual; ln_2, MLP, residual."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.hidden)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    """Token and position embeddings, blocks, final norm."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.hidden)
        self.wpe = nn.Embedding(cfg.positions, cfg.hidden)
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)

    def forward(self, input_ids):
        x = self.wte(input_ids) + self.wpe(torch.arange(input_ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


# --- BERT: post-norm, BertSelfOutput, a padding mask ------------------------------------------------


class BertSelfAttention(nn.Module):
    """query/key/value, scores / sqrt(D), the padding mask added, softmax, dropout, product with V."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (
            p(x).view(b, s, self.cfg.heads, self.cfg.head_dim).permute(0, 2, 1, 3)
            for p in (self.query, self.key, self.value)
        )
        if self.cfg.attn == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.cfg.head_dim)
            probs = self.dropout(F.softmax(scores + mask, dim=-1))
            out = torch.matmul(probs, v)
        return out.permute(0, 2, 1, 3).contiguous().view(b, s, -1)


class BertSelfOutput(nn.Module):
    """dense, dropout, residual add, LayerNorm: the attention module's post-norm output block."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class BertAttention(nn.Module):
    """BertSelfAttention then BertSelfOutput (one attention call around both)."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.self = BertSelfAttention(cfg)
        self.output = BertSelfOutput(cfg)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class BertLayer(nn.Module):
    """Attention, then intermediate dense + GELU and the output dense, dropout, residual, LayerNorm."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.attention = BertAttention(cfg)
        self.intermediate = nn.Linear(cfg.hidden, cfg.ffn)
        self.output = nn.Linear(cfg.ffn, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.LayerNorm(self.output(F.gelu(self.intermediate(x))) + x)


class BertModel(nn.Module):
    """Word, position and token-type embeddings, LayerNorm, layers; the padding mask made additive here."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position_embeddings = nn.Embedding(cfg.positions, cfg.hidden)
        self.token_type_embeddings = nn.Embedding(2, cfg.hidden)
        self.LayerNorm = nn.LayerNorm(cfg.hidden)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.layers))

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.position_embeddings(torch.arange(s))
        x = self.LayerNorm(x + self.token_type_embeddings(torch.zeros_like(input_ids)))
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layer:
            x = layer(x, mask)
        return x


# --- T5: relative position bias, encoder-decoder -----------------------------------------------------


class T5LayerNorm(nn.Module):
    """T5's RMS norm (no mean, no bias), in float32."""

    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class T5Attention(nn.Module):
    """q/k/v/o without bias or scaling; the first layer's bias Embedding over relative position buckets."""

    def __init__(self, cfg: Config, *, bias: bool, bidirectional: bool, buckets: int = 8, max_distance: int = 32):
        super().__init__()
        self.cfg, self.bidirectional = cfg, bidirectional
        self.buckets, self.max_distance = buckets, max_distance
        self.q, self.k, self.v, self.o = (nn.Linear(cfg.hidden, cfg.hidden, bias=False) for _ in range(4))
        if bias:
            self.relative_attention_bias = nn.Embedding(buckets, cfg.heads)
        self.dropout = nn.Dropout(0.1)

    def _relative_position_bucket(self, relative_position):
        buckets = self.buckets
        result = torch.zeros_like(relative_position)
        if self.bidirectional:
            buckets //= 2
            result += (relative_position > 0).to(torch.long) * buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        exact = buckets // 2
        is_small = relative_position < exact
        large = exact + (
            torch.log(relative_position.float() / exact) / math.log(self.max_distance / exact) * (buckets - exact)
        ).to(torch.long)
        large = torch.min(large, torch.full_like(large, buckets - 1))
        return result + torch.where(is_small, relative_position, large)

    def compute_bias(self, q_len: int, k_len: int):
        """The [1, H, Sq, Sk] bias of the relative positions (query to key)."""
        relative = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
        values = self.relative_attention_bias(self._relative_position_bucket(relative))
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, x, kv=None, position_bias=None, mask=None):
        b, s, _ = x.shape
        kv = x if kv is None else kv
        q = self.q(x).view(b, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        k = self.k(kv).view(b, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        v = self.v(kv).view(b, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            if hasattr(self, "relative_attention_bias"):
                position_bias = self.compute_bias(s, k.shape[2])
            else:
                position_bias = torch.zeros(1, self.cfg.heads, s, k.shape[2], dtype=scores.dtype)
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        weights = self.dropout(F.softmax(scores.float(), dim=-1).type_as(scores))
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, s, -1)
        return self.o(out), position_bias


class T5LayerSelfAttention(nn.Module):
    """Pre-norm, self-attention, dropout, residual (nested around T5Attention: one call)."""

    def __init__(self, cfg: Config, *, bias: bool, bidirectional: bool):
        super().__init__()
        self.layer_norm = T5LayerNorm(cfg.hidden)
        self.SelfAttention = T5Attention(cfg, bias=bias, bidirectional=bidirectional)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, position_bias=None, mask=None):
        out, position_bias = self.SelfAttention(self.layer_norm(x), position_bias=position_bias, mask=mask)
        return x + self.dropout(out), position_bias


class T5LayerCrossAttention(nn.Module):
    """Pre-norm, attention over the encoder's output, dropout, residual."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.layer_norm = T5LayerNorm(cfg.hidden)
        self.EncDecAttention = T5Attention(cfg, bias=False, bidirectional=True)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, encoded, position_bias=None):
        out, position_bias = self.EncDecAttention(self.layer_norm(x), kv=encoded, position_bias=position_bias)
        return x + self.dropout(out), position_bias


class T5Block(nn.Module):
    """Self-attention, cross-attention in the decoder, the ReLU feed-forward."""

    def __init__(self, cfg: Config, *, bias: bool, decoder: bool):
        super().__init__()
        self.self_attention = T5LayerSelfAttention(cfg, bias=bias, bidirectional=not decoder)
        self.cross_attention = T5LayerCrossAttention(cfg) if decoder else None
        self.layer_norm = T5LayerNorm(cfg.hidden)
        self.wi = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.wo = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x, bias, mask, encoded, cross_bias):
        x, bias = self.self_attention(x, bias, mask)
        if self.cross_attention is not None:
            x, cross_bias = self.cross_attention(x, encoded, cross_bias)
        return x + self.wo(F.relu(self.wi(self.layer_norm(x)))), bias, cross_bias


class T5Model(nn.Module):
    """Shared embedding, an encoder stack and a causal decoder stack; the first layer's bias is passed on."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.shared = nn.Embedding(cfg.vocab, cfg.hidden)
        self.encoder = nn.ModuleList(T5Block(cfg, bias=i == 0, decoder=False) for i in range(cfg.layers))
        self.decoder = nn.ModuleList(T5Block(cfg, bias=i == 0, decoder=True) for i in range(cfg.layers))
        self.encoder_norm = T5LayerNorm(cfg.hidden)
        self.decoder_norm = T5LayerNorm(cfg.hidden)

    def forward(self, input_ids, decoder_input_ids):
        x, bias = self.shared(input_ids), None
        for block in self.encoder:
            x, bias, _ = block(x, bias, None, None, None)
        encoded = self.encoder_norm(x)
        y, bias, cross = self.shared(decoder_input_ids), None, None
        mask = _causal_mask(decoder_input_ids.shape[1], dtype=y.dtype)
        for block in self.decoder:
            y, bias, cross = block(y, bias, mask, encoded, cross)
        return self.decoder_norm(y)


# --- ViT and CLIP: patch embeddings, encoder layers ---------------------------------------------------


class ViTSelfAttention(nn.Module):
    """query/key/value and SDPA (Hugging Face's ViT default) or the eager function, no mask."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.query = nn.Linear(cfg.hidden, cfg.hidden)
        self.key = nn.Linear(cfg.hidden, cfg.hidden)
        self.value = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (
            p(x).view(b, s, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
            for p in (self.query, self.key, self.value)
        )
        if self.cfg.attn == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2)
        else:
            out = eager_attention_forward(self, q, k, v, None, self.cfg.head_dim**-0.5)
        return out.reshape(b, s, -1)


class ViTSelfOutput(nn.Module):
    """dense and dropout; the residual is the layer's."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.dense(x))


class ViTAttention(nn.Module):
    """ViTSelfAttention then ViTSelfOutput."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.attention = ViTSelfAttention(cfg)
        self.output = ViTSelfOutput(cfg)

    def forward(self, x):
        return self.output(self.attention(x))


class ViTLayer(nn.Module):
    """layernorm_before, attention, residual; layernorm_after, MLP, residual."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(cfg.hidden)
        self.attention = ViTAttention(cfg)
        self.layernorm_after = nn.LayerNorm(cfg.hidden)
        self.intermediate = nn.Linear(cfg.hidden, cfg.ffn)
        self.output = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x):
        x = x + self.attention(self.layernorm_before(x))
        return x + self.output(F.gelu(self.intermediate(self.layernorm_after(x))))


class ViTModel(nn.Module):
    """A Conv2d patch embedding, the class token and positions, layers, final norm."""

    def __init__(self, cfg: Config, image: int = 32, patch: int = 8):
        super().__init__()
        self.projection = nn.Conv2d(3, cfg.hidden, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden))
        self.position_embeddings = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, cfg.hidden) * 0.02)
        self.layer = nn.ModuleList(ViTLayer(cfg) for _ in range(cfg.layers))
        self.layernorm = nn.LayerNorm(cfg.hidden)

    def forward(self, pixel_values):
        x = self.projection(pixel_values).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.position_embeddings
        for layer in self.layer:
            x = layer(x)
        return self.layernorm(x)


class CLIPAttention(nn.Module):
    """q/k/v/out projections, eager: scores * scale, the causal mask (text tower), softmax, dropout."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(cfg.hidden, cfg.hidden) for _ in range(4))

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = (
            p(x).view(b, s, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = eager_attention_forward(self, q, k, v, mask, self.cfg.head_dim**-0.5)
        return self.out_proj(out.reshape(b, s, -1))


class CLIPEncoderLayer(nn.Module):
    """layer_norm1, attention, residual; layer_norm2, quick-GELU MLP, residual."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden)
        self.self_attn = CLIPAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden)
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x, mask):
        x = x + self.self_attn(self.layer_norm1(x), mask)
        h = self.fc1(self.layer_norm2(x))
        return x + self.fc2(h * torch.sigmoid(1.702 * h))


class CLIPModel(nn.Module):
    """A causal text tower and a vision tower of CLIPEncoderLayers, both projected and compared."""

    def __init__(self, cfg: Config, image: int = 32, patch: int = 8):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg.vocab, cfg.hidden)
        self.text_positions = nn.Embedding(cfg.positions, cfg.hidden)
        self.text_layers = nn.ModuleList(CLIPEncoderLayer(cfg) for _ in range(cfg.layers))
        self.final_layer_norm = nn.LayerNorm(cfg.hidden)
        self.patch_embedding = nn.Conv2d(3, cfg.hidden, kernel_size=patch, stride=patch, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(cfg.hidden) * 0.02)
        self.vision_positions = nn.Embedding((image // patch) ** 2 + 1, cfg.hidden)
        self.pre_layrnorm = nn.LayerNorm(cfg.hidden)
        self.vision_layers = nn.ModuleList(CLIPEncoderLayer(cfg) for _ in range(cfg.layers))
        self.post_layernorm = nn.LayerNorm(cfg.hidden)
        self.text_projection = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.visual_projection = nn.Linear(cfg.hidden, cfg.hidden, bias=False)

    def forward(self, input_ids, pixel_values):
        s = input_ids.shape[1]
        t = self.token_embedding(input_ids) + self.text_positions(torch.arange(s))
        mask = _causal_mask(s, dtype=t.dtype)
        for layer in self.text_layers:
            t = layer(t, mask)
        text = self.text_projection(self.final_layer_norm(t)[:, -1])
        p = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        p = torch.cat((self.class_embedding.expand(p.shape[0], 1, -1), p), dim=1)
        p = self.pre_layrnorm(p + self.vision_positions(torch.arange(p.shape[1])))
        for layer in self.vision_layers:
            p = layer(p, None)
        image = self.visual_projection(self.post_layernorm(p[:, 0]))
        text = text / text.norm(dim=-1, keepdim=True)
        image = image / image.norm(dim=-1, keepdim=True)
        return text @ image.t()


# --- Whisper: convolutional encoder, decoder with cross-attention -----------------------------------


class WhisperAttention(nn.Module):
    """q (with bias), k (without), v, out projections and SDPA; a decoder's self-attention is causal."""

    def __init__(self, cfg: Config, *, is_causal: bool):
        super().__init__()
        self.cfg, self.is_causal = cfg, is_causal
        self.q_proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.k_proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.out_proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x, kv=None):
        b, s, _ = x.shape
        kv = x if kv is None else kv
        q = self.q_proj(x).view(b, s, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        k = self.k_proj(kv).view(b, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        v = self.v_proj(kv).view(b, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 2)
        out = sdpa_attention_forward(self, q, k, v, None, self.cfg.head_dim**-0.5)
        return self.out_proj(out.reshape(b, s, -1))


class WhisperEncoderLayer(nn.Module):
    """Pre-norm self-attention and GELU MLP."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(cfg.hidden)
        self.self_attn = WhisperAttention(cfg, is_causal=False)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden)
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperDecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder's output, GELU MLP; all pre-norm."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(cfg.hidden)
        self.self_attn = WhisperAttention(cfg, is_causal=True)
        self.encoder_attn_layer_norm = nn.LayerNorm(cfg.hidden)
        self.encoder_attn = WhisperAttention(cfg, is_causal=False)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden)
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x, encoded):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), encoded)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperModel(nn.Module):
    """Two Conv1d over mel frames (the second strided), positions, encoder layers; a token decoder."""

    def __init__(self, cfg: Config, mels: int = 16):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, cfg.hidden, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(cfg.hidden, cfg.hidden, kernel_size=3, stride=2, padding=1)
        self.encoder_positions = nn.Embedding(cfg.positions, cfg.hidden)
        self.encoder_layers = nn.ModuleList(WhisperEncoderLayer(cfg) for _ in range(cfg.layers))
        self.encoder_norm = nn.LayerNorm(cfg.hidden)
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.decoder_positions = nn.Embedding(cfg.positions, cfg.hidden)
        self.decoder_layers = nn.ModuleList(WhisperDecoderLayer(cfg) for _ in range(cfg.layers))
        self.decoder_norm = nn.LayerNorm(cfg.hidden)

    def forward(self, input_features, decoder_input_ids):
        x = F.gelu(self.conv2(F.gelu(self.conv1(input_features)))).transpose(1, 2)
        x = x + self.encoder_positions(torch.arange(x.shape[1]))
        for layer in self.encoder_layers:
            x = layer(x)
        encoded = self.encoder_norm(x)
        y = self.embed_tokens(decoder_input_ids) + self.decoder_positions(torch.arange(decoder_input_ids.shape[1]))
        for layer in self.decoder_layers:
            y = layer(y, encoded)
        return self.decoder_norm(y)


# --- torch.nn's own attention ------------------------------------------------------------------------


class MHALayers(nn.Module):
    """Layers of nn.MultiheadAttention (batch first) with a residual and LayerNorm; `need_weights` picks
    the slow path (averaged weights returned) or, under no_grad in eval, the fast path."""

    def __init__(self, cfg: Config, *, need_weights: bool):
        super().__init__()
        self.need_weights = need_weights
        self.attn = nn.ModuleList(
            nn.MultiheadAttention(cfg.hidden, cfg.heads, batch_first=True) for _ in range(cfg.layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.hidden) for _ in range(cfg.layers))

    def forward(self, x):
        for attn, norm in zip(self.attn, self.norms):
            out, _ = attn(x, x, x, need_weights=self.need_weights)
            x = norm(x + out)
        return x


def transformer_encoder(cfg: Config) -> nn.Module:
    """nn.TransformerEncoder of nn.TransformerEncoderLayer (batch first, post-norm, ReLU)."""
    layer = nn.TransformerEncoderLayer(cfg.hidden, cfg.heads, cfg.ffn, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)


def builders() -> dict[str, Callable[..., Any]]:
    """The model classes by family, for `capture.zoo` (which imports this module only when recording)."""
    return {
        "llama": LlamaForCausalLM,
        "gpt2": GPT2Model,
        "bert": BertModel,
        "t5": T5Model,
        "vit": ViTModel,
        "clip": CLIPModel,
        "whisper": WhisperModel,
        "mha": MHALayers,
        "encoder_layer": transformer_encoder,
    }
