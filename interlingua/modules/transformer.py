"""Transformer encoder and decoder (kinds: `transformer`), pre-norm by default (paper 004).

Each layer is written out (not `nn.TransformerEncoderLayer`) so that one encoder layer can be
changed as paper 004 does:

- `residual_drop_layer: i`: layer i's self-attention sub-layer is SA(LN(x)) instead of
  x + SA(LN(x)); its feed-forward residual stays.
- `position_query: true`: in that layer the self-attention query is computed from sinusoidal
  position encodings alone (wavelength base `query_wavelength`, 100), keys and values from the
  layer input (see `EncoderLayer`).
- `variational_dropout: true`: one dropout mask per sequence shared over time (`VariationalDropout`)
  instead of element-wise dropout, in the encoder and the decoder.
- `attention_dropout: p` (dropout on the attention weights) and `word_dropout: p` (whole input
  tokens dropped), in training only: the paper 004 authors' training setup (0.2 and 0.1).
- decoder `language_embedding: concat`: a learned embedding of the target language is concatenated
  to every decoder input embedding and projected back, relu(W [e; l] + b), before the positions
  (the paper 004 authors' decoder), so every position is told the target language, not the first
  input (the tag) alone.

The encoder returns (H, mask) like the BiLSTM, so both bridge kinds sit on top of it. The
decoder attends over the bridge memory and decodes incrementally: the self-attention keys and
values of past positions are cached in the state (grown by one position per step), the memory's
keys and values are projected once in `start_state`, and the state's `select` indexes both (a beam-search
step's `reorder_beams` only the self-attention cache: beams share their sentence's memory).
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from interlingua.config import KindConfig
from interlingua.data.vocab import PAD
from interlingua.errors import ConfigError, LanguageError
from interlingua.modules.base import Decoder, DecoderStateLike, Encoder, check_rows_per_sentence, sentence_rows
from interlingua.modules.dropout import Dropout, scaled_keep_mask
from interlingua.modules.encoders import lengths_to_mask
from interlingua.modules.linear import Linear
from interlingua.modules.registry import DECODERS, ENCODERS


class _TransformerConfig(KindConfig):
    """Settings shared by the Transformer encoder and decoder (paper 004: pre-norm Transformer)."""

    layers: int = Field(6, ge=1, le=64)
    hidden: int | None = Field(None, ge=2)
    """d_model, the width of every layer and of the output; None: the model's `embed_dim`
    (embeddings of another size are projected to it)."""
    heads: int = Field(8, ge=1, le=1024)
    """Attention heads; must divide d_model."""
    ff_dim: int | None = Field(None, ge=1)
    """Inner size of the feed-forward sub-layer; None: 4 * d_model."""
    norm: Literal["pre", "post"] = "pre"
    """Layer normalisation before each sub-layer (pre: x + F(LN(x)), a final LN on top) or after
    it (post: LN(x + F(x)), Vaswani et al.)."""
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = Field(1024, ge=1)
    """Longest sequence with `positions: learned` (the size of its table)."""
    variational_dropout: bool = False
    """One dropout mask per sequence, shared over time (embeddings, sub-layer outputs, feed-forward),
    instead of element-wise dropout."""
    attention_dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the attention weights, in training only (paper 004's authors: 0.2)."""
    word_dropout: float = Field(0.0, ge=0, lt=1)
    """In training, the probability of dropping a whole input token: its embedding is zeroed (its position
    encoding stays) and the kept ones are scaled by 1 / (1 - p) (paper 004's authors: 0.1)."""

    @model_validator(mode="after")
    def _heads_divide(self) -> _TransformerConfig:
        if self.hidden is not None and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class TransformerEncoderConfig(_TransformerConfig):
    type: Literal["transformer"] = "transformer"
    residual_drop_layer: int | None = Field(None, ge=1)
    """1-based layer whose self-attention sub-layer drops its residual connection (SA(LN(x))
    instead of x + SA(LN(x))); the feed-forward residual stays. None: every layer keeps it."""
    position_query: bool = False
    """In `residual_drop_layer`, compute the self-attention query from sinusoidal position
    encodings of wavelength base `query_wavelength` alone (keys and values from the layer input)."""
    query_wavelength: float = Field(100.0, gt=1.0)

    @model_validator(mode="after")
    def _drop_layer(self) -> TransformerEncoderConfig:
        if self.residual_drop_layer is not None and self.residual_drop_layer > self.layers:
            raise ValueError(f"residual_drop_layer ({self.residual_drop_layer}) "
                             f"is beyond the last layer ({self.layers})")
        if self.position_query and self.residual_drop_layer is None:
            raise ValueError("position_query needs residual_drop_layer (the layer whose query it replaces)")
        return self


class TransformerDecoderConfig(_TransformerConfig):
    type: Literal["transformer"] = "transformer"
    tie_embeddings: bool = False
    """One weight matrix for the target embeddings and the output projection (Press & Wolf 2017);
    needs d_model (`hidden`) equal to `embed_dim`."""
    language_embedding: Literal["none", "concat"] = "none"
    """`concat`: a learned target-language vector l (size d_model, one per target language) joins every
    decoder input: e' = relu(W [e; l] + b) with W (d_model, 2 d_model), applied to the scaled token
    embedding (after word dropout and the projection to d_model), before the positions (the paper 004
    authors' LAN_EMB_CONCAT). `none`: the target language reaches the decoder only through the tag."""


def sinusoids(positions: torch.Tensor, dim: int, base: float = 10000.0) -> torch.Tensor:
    """Sinusoidal encodings (len, dim) of `positions` (len,): PE(p, 2i) = sin(p / base^(2i/dim)),
    PE(p, 2i+1) = cos(p / base^(2i/dim)) (Vaswani et al. 2017 with base 10000)."""
    half = (dim + 1) // 2
    freq = torch.exp(-math.log(base) * torch.arange(half, device=positions.device, dtype=torch.float32) * 2 / dim)
    angle = positions.float()[:, None] * freq[None, :]
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)[:, :dim]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              causal: bool = False, dropout: float = 0.0) -> torch.Tensor:
    """Scaled dot-product attention over heads: q (batch, h, n, d_k), k, v (batch, h, m, d_k),
    mask broadcastable to (batch, h, n, m), True where a query may attend -> (batch, h, n, d_k);
    `dropout` on the attention weights. With dropout on the CPU the weights are spelled out, so
    that they are dropped with `scaled_keep_mask` (the fused kernel's CPU dropout draws torch's
    slow masks), in fp32 as the fused kernel's CPU fallback does (small batched bf16 products are
    several times slower there); everywhere else the fused kernel runs, on the CPU in fp32 where a bf16
    training step needs its backward pass. On a GPU it runs without cuDNN's attention (see
    `_without_cudnn_attention`)."""
    if dropout > 0 and q.device.type == "cpu":
        with torch.autocast("cpu", enabled=False):
            weights = _attention_weights(q.float(), k.float(), mask, causal)
            out = (weights * scaled_keep_mask(weights.shape, dropout, weights)) @ v.float()
        return out.to(q.dtype)
    if q.device.type == "cuda":
        with _without_cudnn_attention():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout)
    if q.device.type == "cpu" and q.dtype != torch.float32 and torch.is_grad_enabled():
        # the fused CPU kernel's backward pass in bf16 took about 20x its fp32 time (21 against 1.1 ms a call,
        # 39% of a bf16 step of a d128 Transformer on an Intel Xeon with AMX: docs/results/speed.md), its
        # forward pass near fp32's: training steps attend in fp32, decoding in the model's precision
        with torch.autocast("cpu", enabled=False):
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, is_causal=causal)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout)


def beam_step_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor | None) -> torch.Tensor:
    """`attention` of a beam-search step's cross-attention, without dropout: a sentence's hypotheses as queries over
    its one memory (5 queries a sentence at beam 5). PyTorch's fused CPU kernel is built for long queries: at these
    shapes it took 3-5x the two products and the softmax written out (64 sentences, 4 heads of 32, 8-30 keys:
    395-560 against 80-160 us on an AMD EPYC), and a beam-5 pass ran 1.05-1.06x with them written out
    (docs/results/speed.md, "The decoding step"). The self-attention's one query a row stays fused: written out it
    was faster alone but not in the pass. Written out on the CPU in fp32 (the last bits round differently: the 1,000
    translations of the test set were compared, the same ones), the fused kernel elsewhere."""
    if q.device.type != "cpu" or q.dtype != torch.float32:
        return attention(q, k, v, mask)
    return _attention_weights(q, k, mask) @ v


def _without_cudnn_attention() -> contextlib.AbstractContextManager[None]:
    """The fused kernels allowed now, less cuDNN's. Since torch 2.5 a masked bf16 / fp16 call on a Hopper
    GPU goes to cuDNN first, which builds an execution plan for every new (batch, length) shape, about a
    second each; token batches and decoding bring a new shape almost every step, so training in bf16 ran
    at 1/12 of fp32's speed on an H200 (measured, docs/TESTING.md). Flash and memory-efficient attention
    take any shape at once. A caller's own `sdpa_kernel` choice is kept, less cuDNN."""
    flags = torch.backends.cuda
    if not flags.cudnn_sdp_enabled():
        return contextlib.nullcontext()
    allowed = [backend for backend, enabled in ((SDPBackend.FLASH_ATTENTION, flags.flash_sdp_enabled()),
                                                (SDPBackend.EFFICIENT_ATTENTION, flags.mem_efficient_sdp_enabled()),
                                                (SDPBackend.MATH, flags.math_sdp_enabled())) if enabled]
    return sdpa_kernel(allowed) if allowed else contextlib.nullcontext()


def _attention_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None,
                       causal: bool = False) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_k)) over the keys `mask` (and, `causal`, the query's position) allows
    -> (batch, h, n, m). Masked scores get the dtype's lowest value, not -inf, so that a row with
    no key allowed (padding) is finite."""
    scores = (q @ k.transpose(-2, -1)) * q.size(-1) ** -0.5
    if causal:
        n, m = scores.shape[-2:]
        up_to_query = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
        mask = up_to_query if mask is None else mask & up_to_query
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def attention_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The weights `attention` applies to v, spelled out (the fused kernel does not return them):
    softmax(q k^T / sqrt(d_k)) over the keys `mask` allows -> (batch, h, n, m), fp32. For showing
    what a layer attends to, never in the forward pass."""
    return _attention_weights(q.float(), k.float(), mask)


class VariationalDropout(nn.Module):
    """Dropout with one mask per sequence shared over time: x (batch, time, d) * m (batch, 1, d),
    m ~ Bernoulli(1 - p) / (1 - p) (Gal & Ghahramani 2016). The identity in eval mode."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        return x * scaled_keep_mask((x.size(0), 1, x.size(-1)), self.p, x)


def _dropout(p: float, variational: bool) -> nn.Module:
    return VariationalDropout(p) if variational else Dropout(p)


class MultiHeadAttention(nn.Module):
    """Projections of multi-head attention around `attention`; keys and values can be projected
    apart from the queries (cached keys in the decoder, position queries in the encoder)."""

    def __init__(self, dim: int, heads: int, kv_dim: int | None = None, dropout: float = 0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q_proj = Linear(dim, dim)
        self.kv_proj = Linear(kv_dim or dim, 2 * dim)
        self.out_proj = Linear(dim, dim)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, n, dim) -> (batch, h, n, d_k)."""
        return self._split(self.q_proj(x))

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, m, kv_dim) -> keys, values (batch, h, m, d_k)."""
        k, v = self.kv_proj(x).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
               causal: bool = False, beam_step: bool = False) -> torch.Tensor:
        """`beam_step`: q holds the queries of a beam-search step's hypotheses, see `beam_step_attention`."""
        dropout = self.dropout if self.training else 0.0
        if beam_step and dropout == 0 and not causal:
            out = beam_step_attention(q, k, v, mask)
        else:
            out = attention(q, k, v, mask, causal, dropout)  # (batch, h, n, d_k)
        b, h, n, dk = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * dk))


class _Layer(nn.Module):
    """Sub-layers with pre- or post-norm residual connections, feed-forward and dropout."""

    def __init__(self, dim: int, ff_dim: int, dropout: float, norm: str, variational: bool, n_norms: int):
        super().__init__()
        self.pre = norm == "pre"
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(n_norms))
        self.ff = nn.Sequential(Linear(dim, ff_dim), nn.ReLU(), _dropout(dropout, variational),
                                Linear(ff_dim, dim))
        self.drop = _dropout(dropout, variational)

    def _norm(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """`self.norms[i](x)` without the module call (a decoding step makes many)."""
        norm: nn.LayerNorm = self.norms[i]  # type: ignore[assignment]  # ModuleList: Module items
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)

    def _sub_input(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """What sub-layer i's function reads: LN(x) with pre-norm, x itself with post-norm."""
        return self._norm(i, x) if self.pre else x

    def _residual(self, x: torch.Tensor, i: int, y: torch.Tensor) -> torch.Tensor:
        """Sub-layer i's output y joined to its input x: x + y with pre-norm, LN(x + y) with post-norm."""
        return x + y if self.pre else self._norm(i, x + y)

    def _sub(self, x: torch.Tensor, i: int, fn: Callable[[torch.Tensor], torch.Tensor],
             residual: bool = True) -> torch.Tensor:
        """pre: x + F(LN(x)) (F(LN(x)) without residual); post: LN(x + F(x)) (LN(F(x)))."""
        y = self.drop(fn(self._sub_input(x, i)))
        if residual:
            return self._residual(x, i, y)
        return y if self.pre else self._norm(i, y)


class EncoderLayer(_Layer):
    """Self-attention and feed-forward sub-layers.

    With `residual=False` the self-attention sub-layer has no residual connection. With
    `query_wavelength` (position query) the self-attention of this layer is, at position p,

        q_p = PE_b(p) W_Q,   k_j = LN(x_j) W_K,   v_j = LN(x_j) W_V     (pre-norm; x_j post-norm)
        SA(x)_p = softmax_j(q_p . k_j / sqrt(d_k)) v_j W_O             (per head, heads concatenated)

    where PE_b(p, 2i) = sin(p / b^(2i/d)), PE_b(p, 2i+1) = cos(p / b^(2i/d)) with b = `query_wavelength`
    (100 in paper 004, instead of the 10000 of the input encodings): the query carries no token content.
    """

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float, norm: str, variational: bool,
                 residual: bool = True, query_wavelength: float | None = None, attention_dropout: float = 0.0):
        super().__init__(dim, ff_dim, dropout, norm, variational, 2)
        self.attn = MultiHeadAttention(dim, heads, dropout=attention_dropout)
        self.residual, self.query_wavelength = residual, query_wavelength

    def _queries_keys_values(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k, v = self.attn.keys_values(h)
        if self.query_wavelength is None:
            q = self.attn.queries(h)
        else:
            n = h.size(1)
            basis = sinusoids(torch.arange(n, device=h.device), h.size(-1), self.query_wavelength).to(h.dtype)
            q = self.attn.queries(basis.unsqueeze(0)).expand(h.size(0), -1, -1, -1)
        return q, k, v

    def _self_attention(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.attn.attend(*self._queries_keys_values(h), mask)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (batch, n, dim), mask (batch, 1, 1, n) True on real keys."""
        x = self._sub(x, 0, lambda h: self._self_attention(h, mask), residual=self.residual)
        return self._sub(x, 1, self.ff)

    def attention_weights(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The self-attention weights (batch, h, n, n), fp32, that `forward(x, mask)` applies: row p is
        what position p attends to (rows of padded positions are meaningless)."""
        q, k, _ = self._queries_keys_values(self._sub_input(x, 0))
        return attention_weights(q, k, mask)


@dataclass
class LayerCache:
    """One decoder layer's keys and values: the memory's, projected once per sentence, and the self-attention's
    of the positions decoded so far, kept in a buffer with room for more (`appended` writes a step's position
    in place instead of copying every cached position again)."""

    key_buffer: torch.Tensor
    """(batch, h, room, d_k) self-attention keys; the first `length` positions are in use."""
    value_buffer: torch.Tensor
    memory_keys: torch.Tensor
    """(batch, h, mem_len, d_k) cross-attention keys, projected once per sentence."""
    memory_values: torch.Tensor
    length: int = 0
    """Positions in use."""
    written: list[int] = field(default_factory=lambda: [0])
    """How far the buffer is written, shared by every cache on the same buffer: a cache may write in place only
    where nothing was written after its own positions (else it would overwrite another cache's)."""

    @property
    def keys(self) -> torch.Tensor:
        """(batch, h, length, d_k) the self-attention keys of the positions decoded so far."""
        return self.key_buffer[:, :, :self.length]

    @property
    def values(self) -> torch.Tensor:
        return self.value_buffer[:, :, :self.length]

    def appended(self, keys: torch.Tensor, values: torch.Tensor) -> LayerCache:
        """The cache with positions `keys`, `values` (batch, h, n, d_k) after its own. Without gradients, written
        into the buffer's room in place (the room doubled, by one copy, where it is full); with them, into a new
        buffer, since autograd may still need the old one's contents."""
        end = self.length + keys.size(2)
        in_place = not torch.is_grad_enabled() and self.written[0] == self.length
        if in_place and end <= self.key_buffer.size(2):
            key_buffer, value_buffer, written = self.key_buffer, self.value_buffer, self.written
        else:
            room = max(end, 2 * self.key_buffer.size(2), 16) if in_place else end
            key_buffer, value_buffer = _with_room(self.keys, room), _with_room(self.values, room)
            written = [self.length]
        key_buffer[:, :, self.length:end] = keys
        value_buffer[:, :, self.length:end] = values
        written[0] = end
        return LayerCache(key_buffer, value_buffer, self.memory_keys, self.memory_values, end, written)

    def select(self, index: torch.Tensor, memory_index: torch.Tensor, skip: int = 0) -> LayerCache:
        """Rows `index` of the self-attention cache, without its first `skip` positions (padding no selected row
        reads), and rows `memory_index` of the memory's (the same rows, or the sentences of `index` where the
        memory is kept once per sentence for its beams, see `TransformerDecoderState.expand_beams`)."""
        length = self.length - skip
        return LayerCache(_rows_with_room(self.keys[:, :, skip:], index),
                          _rows_with_room(self.values[:, :, skip:], index),
                          self.memory_keys.index_select(0, memory_index),
                          self.memory_values.index_select(0, memory_index), length, [length])

    def select_decoded(self, index: torch.Tensor) -> LayerCache:
        """Reorder the self-attention cache only (rows of one sentence share the memory's)."""
        return LayerCache(_rows_with_room(self.keys, index), _rows_with_room(self.values, index),
                          self.memory_keys, self.memory_values, self.length, [self.length])

    def join(self, other: LayerCache) -> LayerCache:
        """Rows of `self` then of `other`: the self-attention caches padded at the front to the same number of
        positions, the memory's keys and values padded at the end to the same length (zeros: never attended)."""
        length = max(self.length, other.length)
        room = max(self.key_buffer.size(2), other.key_buffer.size(2), length)
        memory = max(self.memory_keys.size(2), other.memory_keys.size(2))
        keys = torch.cat([_with_room(c.keys, room, front=length - c.length) for c in (self, other)])
        values = torch.cat([_with_room(c.values, room, front=length - c.length) for c in (self, other)])
        memory_keys = torch.cat([_padded(self.memory_keys, memory), _padded(other.memory_keys, memory)])
        memory_values = torch.cat([_padded(self.memory_values, memory), _padded(other.memory_values, memory)])
        return LayerCache(keys, values, memory_keys, memory_values, length, [length])


def _with_room(x: torch.Tensor, room: int, front: int = 0) -> torch.Tensor:
    """x (batch, h, n, d) in a new zeroed buffer of `room` positions, after `front` positions of zeros."""
    buffer = x.new_zeros(x.size(0), x.size(1), room, x.size(3))
    buffer[:, :, front:front + x.size(2)] = x
    return buffer


def _rows_with_room(x: torch.Tensor, index: torch.Tensor, room: int = 8) -> torch.Tensor:
    """Rows `index` of x (batch, h, n, d) in a new buffer with `room` more positions: one copy of what is used
    (a beam-search step reorders every step, and a buffer's unused room is not worth copying)."""
    buffer = x.new_empty(index.numel(), x.size(1), x.size(2) + room, x.size(3))
    torch.index_select(x, 0, index, out=buffer[:, :, :x.size(2)])
    return buffer


def _padded(x: torch.Tensor, size: int) -> torch.Tensor:
    """x (batch, h, n, d) with zeros after its n positions, to `size`."""
    return x if x.size(2) == size else F.pad(x, (0, 0, 0, size - x.size(2)))


class DecoderLayer(_Layer):
    """Causal self-attention, cross-attention over the memory, feed-forward."""

    def __init__(self, dim: int, heads: int, ff_dim: int, dropout: float, norm: str, variational: bool,
                 memory_dim: int, attention_dropout: float = 0.0):
        super().__init__(dim, ff_dim, dropout, norm, variational, 3)
        self.self_attn = MultiHeadAttention(dim, heads, dropout=attention_dropout)
        self.cross_attn = MultiHeadAttention(dim, heads, kv_dim=memory_dim, dropout=attention_dropout)

    def start(self, memory: torch.Tensor) -> LayerCache:
        mk, mv = self.cross_attn.keys_values(memory)
        empty = mk.new_zeros(mk.size(0), mk.size(1), 0, mk.size(-1))
        return LayerCache(empty, empty.clone(), mk, mv)

    def forward(self, x: torch.Tensor, cache: LayerCache, memory_mask: torch.Tensor,
                incremental: bool) -> tuple[torch.Tensor, LayerCache]:
        """x (batch, T, dim): the whole target (teacher forcing, causal) or, `incremental`, the next
        position(s) after those in `cache` (whose keys and values join the cache)."""
        new = cache

        def self_attention(h: torch.Tensor) -> torch.Tensor:
            nonlocal new
            k, v = self.self_attn.keys_values(h)
            q = self.self_attn.queries(h)
            if incremental:
                new = cache.appended(k, v)
                k, v = new.keys, new.values
                causal = q.size(2) > 1
                if causal:  # several new positions: each sees the cache and the new ones up to itself
                    t, n = k.size(2), q.size(2)
                    allowed = torch.ones(n, t, dtype=torch.bool, device=q.device).tril(t - n)
                    return self.self_attn.attend(q, k, v, allowed)
                return self.self_attn.attend(q, k, v)
            return self.self_attn.attend(q, k, v, causal=True)

        x = self._sub(x, 0, self_attention)
        x = self._sub(x, 1, lambda h: self._cross_attention(h, cache, memory_mask))
        return self._sub(x, 2, self.ff), new

    def _cross_attention(self, h: torch.Tensor, cache: LayerCache, memory_mask: torch.Tensor) -> torch.Tensor:
        sentences = cache.memory_keys.size(0)
        if h.size(0) == sentences:
            return self.cross_attn.attend(self.cross_attn.queries(h), cache.memory_keys, cache.memory_values,
                                          memory_mask)
        # beams: a sentence's hypotheses are its queries over its one memory (no copy per beam)
        rows, steps, dim = h.shape
        grouped = h.reshape(sentences, rows // sentences * steps, dim)
        out = self.cross_attn.attend(self.cross_attn.queries(grouped), cache.memory_keys, cache.memory_values,
                                     memory_mask, beam_step=True)
        return out.reshape(rows, steps, dim)

    def step(self, x: torch.Tensor, cache: LayerCache, memory_mask: torch.Tensor,
             self_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, LayerCache]:
        """`forward(x, cache, memory_mask, incremental=True)` of one new position x (rows, 1, dim) in eval mode
        (no dropout): the same products in the same order, bit for bit, without the module calls and closures
        between them (norms, dropouts, the feed-forward `Sequential`), which took about a fifth of a
        decoding step of a d128 Transformer (docs/results/speed.md). `self_mask` (rows, 1, 1, positions + 1):
        the cached positions each row may attend to, where rows joined the batch at different steps
        (`TransformerDecoderState.pad`); None: all of them."""
        attn = self.self_attn
        h = self._sub_input(x, 0)
        cache = cache.appended(*attn.keys_values(h))
        x = self._residual(x, 0, attn.attend(attn.queries(h), cache.keys, cache.values, self_mask))
        x = self._residual(x, 1, self._cross_attention(self._sub_input(x, 1), cache, memory_mask))
        first, last = self.ff[0], self.ff[3]
        x = self._residual(x, 2, last(torch.relu(first(self._sub_input(x, 2)))))
        return x, cache


class _Embedding(nn.Module):
    """Token embeddings * sqrt(embed_dim) (projected to d_model where the sizes differ) + positions, dropout.
    The embeddings start as N(0, 1/embed_dim) (Vaswani et al.; fairseq), so that after scaling
    tokens and position encodings have the same magnitude.

    With `language_concat` (the decoder's `language_embedding: concat`) a language vector (d_model,)
    given to `forward` is concatenated to each token's embedding and projected back, relu(W [e; l] + b),
    before the positions are added."""

    def __init__(self, vocab_size: int, embed_dim: int, dim: int, cfg: _TransformerConfig, dropout: float,
                 language_concat: bool = False):
        super().__init__()
        self.dim, self.positions = dim, cfg.positions
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        with torch.no_grad():  # N(0, 1/embed_dim): scaled by sqrt(embed_dim), tokens weigh as much as positions
            nn.init.normal_(self.embed.weight, 0.0, embed_dim ** -0.5)
            self.embed.weight[PAD].zero_()
        self.proj = Linear(embed_dim, dim, bias=False) if embed_dim != dim else None
        self.scale = math.sqrt(embed_dim)
        self.max_positions = cfg.max_positions
        self.table = nn.Embedding(cfg.max_positions, dim) if cfg.positions == "learned" else None
        self.drop = _dropout(dropout, cfg.variational_dropout)
        self.word_dropout = cfg.word_dropout
        self.language_proj = Linear(2 * dim, dim) if language_concat else None

    def forward(self, ids: torch.Tensor, start: int = 0, language: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids (batch, n) at positions start .. start + n - 1 -> (batch, n, d_model); `language` (d_model,):
        the vector concatenated to every position (needed exactly where `language_concat` was asked).
        `positions` (batch,): instead of `start`, each row's own position, for one position per row (a
        decoding step over rows that joined the batch at different steps)."""
        x = self.embed(ids) * self.scale
        if self.training and self.word_dropout > 0:  # whole tokens: one draw per position
            x = x * scaled_keep_mask(ids.shape + (1,), self.word_dropout, x)
        if self.proj is not None:
            x = self.proj(x)
        if self.language_proj is not None:
            if language is None:
                raise ValueError("this embedding concatenates a language vector: none was given")
            lang = language.to(x.dtype).expand(*x.shape[:-1], -1)
            x = torch.relu(self.language_proj(torch.cat([x, lang], dim=-1)))
        n = ids.size(1)
        if positions is not None:
            return self.drop(x + self._row_positions(positions, x.dtype))
        if self.table is not None:
            self._check_fits(start + n)
            x = x + self.table(torch.arange(start, start + n, device=ids.device))
        elif n == 1 and not self.training:  # a decoding step
            x = x + _sinusoid_row(start, self.dim, ids.device, x.dtype)
        else:
            x = x + sinusoids(torch.arange(start, start + n, device=ids.device), self.dim).to(x.dtype)
        return self.drop(x)

    def _check_fits(self, positions: int) -> None:
        """A learned position table reads no further than its size."""
        if positions > self.max_positions:
            raise ValueError(f"sequence of {positions} positions is longer than max_positions ({self.max_positions})")

    def _row_positions(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The encodings (batch, 1, d_model) of one position per row, each the same values as `forward` adds at
        that position."""
        if self.table is not None:
            self._check_fits(int(positions.max()) + 1)
            return self.table(positions).unsqueeze(1)
        length = -(-(int(positions.max()) + 1) // 64) * 64  # whole blocks of 64: few tables are built
        return _sinusoid_table(length, self.dim, positions.device, dtype).index_select(0, positions).unsqueeze(1)


@functools.lru_cache(maxsize=64)
def _sinusoid_table(length: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Positions 0 .. length - 1 (length, dim), each row exactly `_sinusoid_row`'s (so that a step's encoding
    does not depend on how it was looked up)."""
    with torch.inference_mode(False), torch.no_grad():
        return torch.cat([_sinusoid_row(p, dim, device, dtype) for p in range(length)])


@functools.lru_cache(maxsize=4096)
def _sinusoid_row(position: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """`sinusoids` of one position (1, dim) in `dtype`, computed once: a decoding step's embedding needs one
    position, and computing it took ten small operators a step. An ordinary tensor even under inference mode,
    so that a later call with gradients on can use it."""
    with torch.inference_mode(False), torch.no_grad():
        return sinusoids(torch.tensor([position], device=device), dim).to(dtype)


def _sizes(cfg: _TransformerConfig, embed_dim: int) -> tuple[int, int]:
    dim = cfg.hidden or embed_dim
    if dim % cfg.heads:
        raise ConfigError(f"transformer width {dim} (hidden, or embed_dim where hidden is not set) must be a "
                          f"multiple of heads ({cfg.heads})")
    return dim, cfg.ff_dim or 4 * dim


@ENCODERS.register("transformer", config=TransformerEncoderConfig)
class TransformerEncoder(Encoder):
    """Stack of `EncoderLayer`s; H (batch, n, d_model), zero at padding; a final LayerNorm with pre-norm."""

    def __init__(self, cfg: TransformerEncoderConfig, vocab_size: int, embed_dim: int, dropout: float):
        super().__init__()
        dim, ff_dim = _sizes(cfg, embed_dim)
        self.embedding = _Embedding(vocab_size, embed_dim, dim, cfg, dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(dim, cfg.heads, ff_dim, dropout, cfg.norm, cfg.variational_dropout,
                         residual=cfg.residual_drop_layer != i + 1,
                         query_wavelength=(cfg.query_wavelength
                                           if cfg.position_query and cfg.residual_drop_layer == i + 1 else None),
                         attention_dropout=cfg.attention_dropout)
            for i in range(cfg.layers))
        self.final_norm = nn.LayerNorm(dim) if cfg.norm == "pre" else None
        self.output_dim = dim
        self.max_length = cfg.max_positions if cfg.positions == "learned" else None
        self.self_attention_layers = cfg.layers

    @classmethod
    def from_config(cls, cfg: TransformerEncoderConfig, *, vocab_size: int, embed_dim: int, dropout: float,
                    **_: object) -> TransformerEncoder:
        return cls(cfg, vocab_size, embed_dim, dropout)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (batch, src_len), lengths (batch,) -> H (batch, src_len, d_model), mask (batch, src_len)."""
        states, mask = self.layer_states(src, lengths)
        return states[-1], mask

    def layer_states(self, src: torch.Tensor, lengths: torch.Tensor, upto: int | None = None
                     ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """[embeddings + positions (after dropout), each layer's output], zero at padding; with pre-norm
        the last entry of the whole stack is the final LayerNorm's output (H), the residual stream before it
        is not kept. `upto` k < L: layers 1..k only, layer k's output without the final LayerNorm."""
        return self._run_layers(src, lengths, None, upto)

    def self_attention(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Each layer's self-attention weights [(batch, h, n, n) fp32, layer 1 first] on the way to H,
        and the mask (batch, n); rows and columns past a sentence's length are padding."""
        weights: list[torch.Tensor] = []
        _, mask = self._run_layers(src, lengths, weights)
        return weights, mask

    def _run_layers(self, src: torch.Tensor, lengths: torch.Tensor, weights: list[torch.Tensor] | None,
                    upto: int | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The layer stack once (its first `upto` layers); with a `weights` list, each layer's attention
        weights are appended to it."""
        mask = lengths_to_mask(lengths, src.size(1))
        x = self.embedding(src)
        keys = mask[:, None, None, :]
        states = [x]
        run = self.layers if upto is None else self.layers[:upto]
        for layer in run:
            if weights is not None:
                weights.append(layer.attention_weights(x, keys))  # type: ignore[operator]  # ModuleList: Module items
            x = layer(x, keys)
            states.append(x)
        if self.final_norm is not None and len(run) == len(self.layers):
            states[-1] = self.final_norm(x)
        keep = mask.unsqueeze(-1)
        return [s * keep.to(s.dtype) for s in states], mask


@dataclass
class TransformerDecoderState(DecoderStateLike):
    caches: list[LayerCache]
    memory_mask: torch.Tensor
    """(batch, 1, 1, mem_len) True where the decoder may attend."""
    position: int
    """Target positions decoded so far (the next token's position): the self-attention caches' length."""
    language: torch.Tensor | None = None
    """(d_model,) the target language's embedding with `language_embedding: concat` (one call decodes one
    target language, so one vector serves every row and reordering leaves it as it is); None otherwise."""
    pad: torch.Tensor | None = None
    """(rows,) where rows joined the batch at different steps (`join`): the leading cache positions that are not
    the row's own (zeros it never attends to), so row r's next position is `position - pad[r]`. None: every row
    is at `position`."""

    @property
    def batch_size(self) -> int:
        """Rows (hypotheses) in the state: more than the memory's sentences once beams share their sentence's
        memory."""
        return self.caches[0].keys.size(0) if self.caches else self.memory_mask.size(0)

    def select(self, index: torch.Tensor) -> TransformerDecoderState:
        """Rows `index`; where beams share their sentence's memory, whole sentences' rows (as beam search
        picks them), with the memory of their sentences. Cache positions that are padding in every row
        selected are left behind."""
        memory_index = sentence_rows(index, self.batch_size, self.memory_mask.size(0))
        pad = None if self.pad is None else self.pad.index_select(0, index)
        skip = int(pad.min()) if pad is not None and pad.numel() else 0
        if pad is not None:
            pad = pad - skip if bool((pad > skip).any()) else None
        return TransformerDecoderState([c.select(index, memory_index, skip) for c in self.caches],
                                       self.memory_mask.index_select(0, memory_index), self.position - skip,
                                       self.language, pad)

    def reorder_beams(self, index: torch.Tensor) -> TransformerDecoderState:
        """The self-attention caches follow the beams; the memory's keys, values and mask stay in place."""
        return TransformerDecoderState([c.select_decoded(index) for c in self.caches], self.memory_mask,
                                       self.position, self.language,
                                       None if self.pad is None else self.pad.index_select(0, index))

    def join(self, other: TransformerDecoderState) -> TransformerDecoderState:
        """The rows of `self` then those of `other`, each at its own position (as many rows a sentence in both):
        the shorter caches are padded at the front and `pad` says by how much, the
        memories padded to the longer one with their masks. Both decode the same target language."""
        check_rows_per_sentence(self.batch_size, self.memory_mask.size(0), other.batch_size, other.memory_mask.size(0))
        position = max(self.position, other.position)
        memory = max(self.memory_mask.size(-1), other.memory_mask.size(-1))
        pads = [(position - s.position) + (torch.zeros(s.batch_size, dtype=torch.long, device=s.memory_mask.device)
                                           if s.pad is None else s.pad) for s in (self, other)]
        masks = [F.pad(s.memory_mask, (0, memory - s.memory_mask.size(-1)), value=False) for s in (self, other)]
        pad = torch.cat(pads)
        return TransformerDecoderState([a.join(b) for a, b in zip(self.caches, other.caches)], torch.cat(masks),
                                       position, self.language, pad if bool(pad.any()) else None)

    def self_mask(self) -> torch.Tensor | None:
        """(rows, 1, 1, position + 1) the positions each row attends to in the next step (its own and the new
        one), or None where all rows attend to all."""
        if self.pad is None:
            return None
        columns = torch.arange(self.position + 1, device=self.pad.device)
        return (columns >= self.pad.unsqueeze(1))[:, None, None, :]

    def expand_beams(self, index: torch.Tensor) -> TransformerDecoderState:
        """The memory's keys and values stay once per sentence; its hypotheses attend to them together
        (one query each) in `DecoderLayer`'s cross-attention."""
        return self.reorder_beams(index)


@DECODERS.register("transformer", config=TransformerDecoderConfig)
class TransformerDecoder(Decoder):
    """Stack of `DecoderLayer`s over the bridge memory; incremental decoding with cached keys/values."""

    def __init__(self, cfg: TransformerDecoderConfig, vocab_size: int, embed_dim: int, memory_dim: int, dropout: float,
                 languages: Sequence[str] = ()):
        """`languages`: the target languages this decoder serves (with `language_embedding: concat`, one
        learned vector each)."""
        super().__init__()
        dim, ff_dim = _sizes(cfg, embed_dim)
        self.dim = dim
        concat = cfg.language_embedding == "concat"
        self.embedding = _Embedding(vocab_size, embed_dim, dim, cfg, dropout, language_concat=concat)
        self.language_embeddings: nn.ParameterDict | None = None
        """Target language code -> its vector (d_model,), N(0, 1) like a scaled token embedding; keyed by code,
        not by position in a list, so that a language added later (`interlingua extend`) moves no other."""
        if concat:
            if not languages:
                raise ConfigError("decoder.language_embedding: concat needs the decoder's target languages")
            self.language_embeddings = nn.ParameterDict({lang: nn.Parameter(torch.randn(dim)) for lang in languages})
        self.max_length = cfg.max_positions if cfg.positions == "learned" else None
        self.layers = nn.ModuleList(
            DecoderLayer(dim, cfg.heads, ff_dim, dropout, cfg.norm, cfg.variational_dropout, memory_dim,
                         attention_dropout=cfg.attention_dropout)
            for _ in range(cfg.layers))
        self.final_norm = nn.LayerNorm(dim) if cfg.norm == "pre" else None
        self.generator = Linear(dim, vocab_size)
        if cfg.tie_embeddings:  # one Parameter: the embedding table is the output projection's weight
            if self.embedding.proj is not None:
                raise ConfigError(f"decoder.tie_embeddings needs the decoder width ({dim}) "
                                  f"equal to embed_dim ({embed_dim})")
            self.generator.weight = self.embedding.embed.weight

    @classmethod
    def from_config(cls, cfg: TransformerDecoderConfig, *, vocab_size: int, embed_dim: int, memory_dim: int,
                    dropout: float, languages: Sequence[str] = (), **_: object) -> TransformerDecoder:
        return cls(cfg, vocab_size, embed_dim, memory_dim, dropout, languages)

    def start_state(self, memory: torch.Tensor, memory_mask: torch.Tensor,
                    language: str | None = None) -> TransformerDecoderState:
        """Projects the memory's keys and values for every layer; the self-attention caches start empty.
        With language embeddings the state carries `language`'s vector (a language without one is a
        `LanguageError`); without them `language` is not used."""
        return TransformerDecoderState([layer.start(memory)  # type: ignore[operator]  # ModuleList: Module items
                                        for layer in self.layers], memory_mask[:, None, None, :], 0,
                                       self.language_vector(language))

    @property
    def languages(self) -> list[str]:
        """The target languages with an embedding (sorted); empty without `language_embedding: concat`."""
        return sorted(self.language_embeddings) if self.language_embeddings is not None else []

    def language_vector(self, language: str | None) -> torch.Tensor | None:
        """`language`'s embedding (d_model,) where the decoder has them, else None."""
        if self.language_embeddings is None:
            return None
        if language is None:
            raise ValueError("this decoder embeds the target language (language_embedding: concat): "
                             "start_state needs it")
        if language not in self.language_embeddings:
            raise LanguageError(f"the decoder has no language embedding for '{language}' "
                                f"(languages: {', '.join(self.languages)})")
        return self.language_embeddings[language]

    def _run(self, tgt: torch.Tensor, state: TransformerDecoderState,
             incremental: bool) -> tuple[torch.Tensor, TransformerDecoderState]:
        one_step = incremental and tgt.size(1) == 1 and not self.training  # a decoding step: `DecoderLayer.step`
        if state.pad is not None and not one_step:
            raise ValueError("rows at different positions (a joined state) decode one eval step at a time")
        positions = None if state.pad is None else state.position - state.pad
        x = self.embedding(tgt, start=state.position if incremental else 0, language=state.language,
                           positions=positions)
        self_mask = state.self_mask()
        caches = []
        for layer, cache in zip(self.layers, state.caches):
            x, cache = (layer.step(x, cache, state.memory_mask, self_mask)  # type: ignore[operator]  # ModuleList
                        if one_step else layer(x, cache, state.memory_mask, incremental))
            caches.append(cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, TransformerDecoderState(caches, state.memory_mask, state.position + tgt.size(1), state.language,
                                          state.pad)

    def forward(self, tgt_in: torch.Tensor, state: TransformerDecoderState) -> tuple[torch.Tensor, None]:
        """Teacher forcing: tgt_in (batch, T) -> states (batch, T, d_model); no attention weights."""
        x, _ = self._run(tgt_in, state, incremental=False)
        return x, None

    def step_states(self, prev: torch.Tensor,
                    state: TransformerDecoderState) -> tuple[torch.Tensor, TransformerDecoderState]:
        x, state = self._run(prev.unsqueeze(1), state, incremental=True)
        return x[:, 0], state
