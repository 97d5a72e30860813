"""DeepSeek-V4's hybrid attention (sliding window + compressed sparse / heavily compressed), costed.

The architecture (DeepSeek-V4 technical report sections 2.3.1-2.3.2; transformers ``DeepseekV4Attention``,
``DeepseekV4Compressor``, ``DeepseekV4Indexer``, ``DeepseekV4GroupedLinear`` in modeling_deepseek_v4.py;
Megatron-Core ``experimental_attention_variant`` "dsv4_hybrid"), per layer:
- queries: ``q_a_proj`` (hidden -> q_lora_rank), an RMSNorm, ``q_b_proj`` (-> heads x head_dim);
- one shared K=V head: ``kv_proj`` (hidden -> head_dim) and its RMSNorm (multi-query attention);
- a learned sink logit per head; every query reads the last ``sliding_window`` tokens;
- compress_ratio 128 (HCA): a compressor (``kv_proj`` and ``gate_proj`` hidden -> head_dim, a position bias of
  ratio x head_dim, an RMSNorm) pools each 128 tokens into one entry; every query also reads all causal entries;
- compress_ratio 4 (CSA): the same compressor over overlapping windows (widths 2 x head_dim), and a lightning
  indexer (``q_b_proj`` q_lora_rank -> index_heads x index_head_dim, ``weights_proj`` hidden -> index_heads, its
  own compressor of width 2 x index_head_dim) that picks ``index_topk`` compressed entries per query;
- the grouped output projection: ``o_groups`` blocks of heads x head_dim / o_groups -> o_lora_rank (``o_a_proj``),
  then ``o_b_proj`` (o_groups x o_lora_rank -> hidden).

FLOPs follow Megatron Bridge's count for ``experimental_attention_variant == "dsv4_hybrid"``
(src/megatron/bridge/training/utils/flop_utils.py, the model TFLOP/s its DeepSeek-V4 runs report): the
projections above as GEMMs (norms as one column each), the compressor projections (2 x head_dim wide on ratio-4
layers, head_dim on ratio-128), the indexer's projections and its scores over all s / 4 compressed keys, and the
attention over ``window`` + the compressed entries a query reads: (s // 128) / 2 on average at ratio 128,
``e (1 - 4 e / 2s)`` with e = min(topk, s // 4) at ratio 4; score and context both over ``head_dim``
(Bridge uses v_head_dim for both). Bridge counts every term 3x (forward + backward), as moeplan does.
"""

from __future__ import annotations

from moeplan.models.spec import Attention, CompressedAttention

CSA_RATIO = 4  # compressed sparse attention: overlapping windows of 2 x 4 tokens, stride 4 (report 2.3.1)
HCA_RATIO = 128  # heavily compressed attention: windows of 128 (report 2.3.2)
TOPK_INDEX_BYTES = 4  # int32 top-k indices, as the DSA indexer's (engine.dsa)


def _overlap(ratio: int) -> int:
    """Compressor width multiple: CSA's overlapping windows project 2 x the width (transformers
    ``_overlap_pool``: the low half for the previous window, the high half for the current one)."""
    return 2 if ratio == CSA_RATIO else 1


def compressed_params(a: Attention, hidden: int) -> int:
    """Weights of one V4 attention layer without its input norm (transformers DeepseekV4Attention's
    parameters; 284,332,230,231 for V4-Flash's main model with the rest of the model)."""
    c = _spec(a)
    hd, n, ql = a.head_dim, a.num_heads, a.q_lora_rank or hidden
    total = hidden * ql + ql + ql * n * hd  # q_a_proj, q_a_norm, q_b_proj
    total += hidden * hd + hd  # kv_proj, kv_norm (one shared K=V head)
    total += n * hd * c.o_lora_rank + c.o_groups * c.o_lora_rank * hidden  # grouped o_a_proj, o_b_proj
    total += a.sink_logits
    r = c.compress_ratio
    if r:
        w = _overlap(r) * hd
        total += 2 * hidden * w + r * w + hd  # compressor kv_proj, gate_proj, position bias, norm
    if c.has_indexer:
        iw = 2 * c.index_head_dim
        total += ql * c.index_heads * c.index_head_dim + hidden * c.index_heads  # indexer q_b_proj, weights_proj
        total += 2 * hidden * iw + r * iw + c.index_head_dim  # the indexer's own compressor
    return total


def _spec(a: Attention) -> CompressedAttention:
    assert a.compressed is not None
    return a.compressed


def gemm_shapes(a: Attention, hidden: int) -> list[tuple[str, int, int, str]]:
    """(name, k, n, tensor-parallel split) of one V4 attention layer's weight GEMMs, as Bridge counts them. The
    grouped o_a_proj is one GEMM of heads x head_dim -> o_lora_rank in FLOPs (each group reads its heads)."""
    c = _spec(a)
    hd, n, ql = a.head_dim, a.num_heads, a.q_lora_rank or hidden
    out = [("q_down", hidden, ql, ""), ("q_up", ql, n * hd, "n"), ("kv_proj", hidden, hd, ""),
           ("o_group_proj", n * hd, c.o_lora_rank, "k"), ("o_proj", c.o_groups * c.o_lora_rank, hidden, "")]
    r = c.compress_ratio
    if r:
        w = _overlap(r) * hd
        out += [("compress_kv", hidden, w, ""), ("compress_gate", hidden, w, "")]
    if c.has_indexer:
        iw = 2 * c.index_head_dim
        out += [("index_q", ql, c.index_heads * c.index_head_dim, ""), ("index_w", hidden, c.index_heads, ""),
                ("index_compress_kv", hidden, iw, ""), ("index_compress_gate", hidden, iw, "")]
    return out


def norm_fwd_flops(a: Attention) -> float:
    """Bridge's "+1" columns of the q and kv norms (q_term's q_lora_rank, kv_term's head_dim), forward."""
    return 2.0 * ((a.q_lora_rank or 0) + a.head_dim)


def keys_per_query(a: Attention, seq_len: int) -> float:
    """Keys a query reads on average (Bridge's window + avg_comp): the window in full, plus the compressed
    entries of its ratio."""
    c = _spec(a)
    window = a.sliding_window or 0
    if c.compress_ratio == HCA_RATIO:
        return window + (seq_len // HCA_RATIO) / 2
    if c.compress_ratio == CSA_RATIO:
        e = min(c.index_topk, seq_len // CSA_RATIO)
        return window + e * (1 - e * CSA_RATIO / (2 * seq_len))
    return float(window)


def core_fwd_flops(a: Attention, seq_len: int) -> float:
    """Score + context forward FLOPs per token (2 per multiply-add), plus the indexer's scores over every
    compressed key of a CSA layer (index_heads x index_head_dim x s / 4, not halved for causality, as Bridge)."""
    c = _spec(a)
    attn = 2.0 * 2 * a.num_heads * keys_per_query(a, seq_len) * a.head_dim
    if c.has_indexer:
        attn += 2.0 * c.index_heads * c.index_head_dim * (seq_len // CSA_RATIO)
    return attn


def saved_elems(a: Attention, hidden: int) -> list[tuple[str, float, float, bool, str]]:
    """(name, elements per token, bytes per element, GEMM input, the recompute label that drops it) one V4
    attention layer keeps for backward: the query latent and its norm, the per-head queries (rebuilt by the
    'mla_up_proj' recompute, as Megatron-Core's MLA), the shared K=V row, the compressor's kv and gate projections
    (overlap x head_dim each per token) and pooled entries (head_dim / ratio per token), the indexer's query, its own
    compressor's, its weights and int32 top-k,
    the attention output and the grouped projection's intermediate (o_groups x o_lora_rank)."""
    c = _spec(a)
    hd, n, ql = a.head_dim, a.num_heads, a.q_lora_rank or hidden
    out = [("v4_q_latent", 2.0 * ql, 2.0, True, ""), ("v4_q", float(n * hd), 2.0, False, "mla_up_proj"),
           ("v4_kv", 2.0 * hd, 2.0, True, "")]
    r = c.compress_ratio
    if r:  # the compressor's per-token kv and gate projections (the gated pooling's backward reads them) and the
        # pooled entries, one per r tokens
        out.append(("v4_compressor_kv_gate", 2.0 * _overlap(r) * hd + hd / r, 2.0, False, ""))
    if c.has_indexer:
        out += [("v4_index_q", float(c.index_heads * c.index_head_dim), 2.0, False, ""),
                ("v4_index_compressor_kv_gate", 2.0 * _overlap(r) * c.index_head_dim + c.index_head_dim / r, 2.0,
                 False, ""),
                ("v4_index_weights", float(c.index_heads), 2.0, False, ""),
                ("v4_topk_indices", float(c.index_topk), float(TOPK_INDEX_BYTES), False, "")]
    out += [("attn_out", float(n * hd), 2.0, True, ""),
            ("v4_o_group_out", float(c.o_groups * c.o_lora_rank), 2.0, True, "")]
    return out
