"""DeepSeek Sparse Attention (DSA): the lightning indexer and top-k attention, costed.

The architecture (DeepSeek-V3.2, arXiv 2512.02556, equations 1-2; GLM-5 / GLM-5.2: transformers
``GlmMoeDsaIndexer`` / ``DeepseekV32Indexer``): per layer that runs an indexer, ``wq_b`` maps the query latent
(q_lora_rank) to ``index_heads`` x ``index_head_dim``, ``wk`` the hidden state to one key of ``index_head_dim``
(then a LayerNorm with weight and bias), ``weights_proj`` the hidden state to one weight per index head. Each
query scores every causal key (ReLU of the dot products, weighted over the index heads) and the MLA attention
then reads only the ``topk`` best keys. GLM-5.2's IndexShare layers reuse the previous indexer layer's top-k.

FLOPs follow Megatron Bridge's count for ``experimental_attention_variant == "dsa"``
(src/megatron/bridge/training/utils/flop_utils.py, the model TFLOP/s its DSA runs report; Megatron-LM's own
``num_floating_point_operations`` still counts these models as dense MLA):
- Megatron-Core runs DSA's attention as absorbed MLA (experimental_attention_variant/absorbed_mla.py): the
  scores are over kv_lora_rank + rope channels and the context over kv_lora_rank, each query over its
  ``topk - topk (topk - 1) / 2s`` causal keys on average (s > topk; else (s + 1) / 2);
- the indexer's scores are dense in the forward (every causal pair: the top-k needs them all), H_i (D_i + 1)
  per pair; with the indexer loss (the GLM recipes: ``dsa_indexer_loss_coeff`` 0.001, sparse loss) its
  backward covers the selected pairs (2x the forward per pair) and the loss's teacher recomputes the main
  queries' scores over the selected keys (forward only);
- the indexer projections run forward and weight-gradient only (Megatron-Core detaches their inputs).

moeplan keeps its own convention of forward FLOPs x 3 (flops.TRAIN_MULTIPLIER) and so stores what is not 3x
as its forward equivalent (training FLOPs / 3). The indexer projections are weight GEMMs listed with the layer's
GEMMs; :func:`indexer_proj_fwd_correction` takes off the pass they do not run.

Which Megatron-Core releases train DSA and which context-parallel type it takes are layout rules, one layer down:
:mod:`moeplan.run.dsa_rules`.
"""

from __future__ import annotations

from moeplan.models.spec import Attention, SparseAttention

# The GLM-5 / GLM-5.2 recipes train the indexer with its KL loss on the selected keys (Megatron Bridge GLM-5.2
# verification card: "sparse indexer loss coefficient 0.001"; Megatron-Core dsa_indexer_loss_coeff,
# dsa_indexer_use_sparse_loss). A run without the loss computes the top-k under no_grad.
TRAINS_INDEXER = True
SPARSE_INDEXER_LOSS = True
TRAIN_PASSES = 3  # forward + dgrad + wgrad: engine.flops.TRAIN_MULTIPLIER (not imported: flops imports this module)
TOPK_INDEX_BYTES = 4  # int32 top-k indices (transformers GlmMoeDsaIndexer returns .to(torch.int32))


def indexer_params(a: Attention, hidden: int) -> int:
    """Weights of one layer's lightning indexer: wq_b (query latent -> H_i x D_i), wk (hidden -> D_i), k_norm
    (LayerNorm weight + bias of D_i), weights_proj (hidden -> H_i); no biases on the linears (DeepseekV32Indexer).
    0 on a layer that reuses another's top-k or has dense attention."""
    s = a.sparse
    if s is None or not s.runs_indexer:
        return 0
    q_in = a.q_lora_rank or hidden
    return q_in * s.index_heads * s.index_head_dim + hidden * s.index_head_dim + 2 * s.index_head_dim \
        + hidden * s.index_heads


def indexer_gemm_shapes(a: Attention, hidden: int) -> list[tuple[str, int, int]]:
    """(name, k, n) of the indexer's weight GEMMs on a layer that runs it (replicated across TP)."""
    s = a.sparse
    if s is None or not s.runs_indexer:
        return []
    q_in = a.q_lora_rank or hidden
    return [("dsa_index_q", q_in, s.index_heads * s.index_head_dim), ("dsa_index_k", hidden, s.index_head_dim),
            ("dsa_index_w", hidden, s.index_heads)]


def indexer_proj_fwd_correction(a: Attention, hidden: int) -> float:
    """What the indexer projections' 3-pass count (flops.layer_gemms) overstates, in forward FLOPs (negative):
    Megatron-Core detaches their inputs, so they run forward + weight gradient with the indexer loss (2 passes:
    Bridge's ``indexer_projection_multiplier`` 4 = 2 x 2 FMA) and forward alone without it (1 pass)."""
    passes = 2 if TRAINS_INDEXER else 1
    fwd = sum(2.0 * k * n for _, k, n in indexer_gemm_shapes(a, hidden))
    return fwd * (passes - TRAIN_PASSES) / TRAIN_PASSES


def dense_causal_keys(seq_len: int) -> float:
    """Causal keys per query on average: (s + 1) / 2 (Bridge's dense_causal_context)."""
    return (seq_len + 1) / 2


def sparse_causal_keys(topk: int, seq_len: int) -> float:
    """Keys per query under top-k selection: the first topk queries see all their causal keys, the rest topk;
    on average topk - topk (topk - 1) / 2s once s > topk (Bridge's sparse_causal_context)."""
    if seq_len <= topk:
        return dense_causal_keys(seq_len)
    return topk - topk * (topk - 1) / (2 * seq_len)


def absorbed_dims(a: Attention) -> tuple[int, int]:
    """(d_qk, d_v) of absorbed MLA, what Megatron-Core's DSA attention multiplies over: the KV latent plus the
    rope channels for the scores, the latent for the context."""
    return a.kv_lora_rank + a.qk_rope_head_dim, a.kv_lora_rank


def sparse_attention_train_flops(a: Attention, seq_len: int) -> float:
    """Training FLOPs per token of the top-k attention (3 x forward: 2 x keys x heads x (d_qk + d_v))."""
    s = a.sparse
    assert s is not None
    d_qk, d_v = absorbed_dims(a)
    return TRAIN_PASSES * 2 * sparse_causal_keys(s.topk, seq_len) * a.num_heads * (d_qk + d_v)


def indexer_score_train_flops(a: Attention, seq_len: int) -> float:
    """Training FLOPs per token of the indexer's scoring on a layer that runs it: the dense forward over every
    causal key, the loss's backward over the selected (sparse loss) or all keys, and the loss's teacher scores
    of the main queries over the same keys (forward only). 0 where the layer reuses another's top-k."""
    s = a.sparse
    if s is None or not s.runs_indexer:
        return 0.0
    dense = dense_causal_keys(seq_len)
    selected = sparse_causal_keys(s.topk, seq_len)
    unit = s.index_heads * (s.index_head_dim + 1)  # H_i dot products of D_i plus the head weighting
    flops = 2 * dense * unit
    if TRAINS_INDEXER:
        grad_keys = selected if SPARSE_INDEXER_LOSS else dense
        flops += 4 * grad_keys * unit
        flops += 2 * grad_keys * a.num_heads * absorbed_dims(a)[0]  # teacher: detached main Q.K, forward only
    return flops


def core_fwd_equiv_flops(a: Attention, seq_len: int) -> float:
    """The sequence-dependent work of one DSA layer per token (top-k attention plus indexer scoring) as forward
    FLOPs in moeplan's convention (training FLOPs / 3), what flops.attention_core_fwd_flops returns for it."""
    return (sparse_attention_train_flops(a, seq_len) + indexer_score_train_flops(a, seq_len)) / TRAIN_PASSES


def indexer_saved_elems(s: SparseAttention) -> list[tuple[str, float, float]]:
    """(name, elements per token, bytes per element) one indexer layer keeps for backward: its query and key
    (for the indexer loss's gradient), its head weights, and the int32 top-k indices the sparse attention's
    backward reads (kept once, on the layer that computes them). A layer that reuses the top-k keeps none."""
    if not s.runs_indexer:
        return []
    out = [("dsa_topk_indices", float(s.topk), float(TOPK_INDEX_BYTES))]
    if TRAINS_INDEXER:
        out += [("dsa_index_qk", float(s.index_heads * s.index_head_dim + s.index_head_dim), 2.0),
                ("dsa_index_weights", float(s.index_heads), 2.0)]
    return out


def cp_gathered_elems(a: Attention) -> int:
    """Elements per token that DSA's context parallelism all-gathers: Megatron-Core runs it as all-gather CP
    ("Non-packed DSA allgather CP", experimental_attention_variant/dsa.py) of the absorbed-MLA KV latent and rope
    key (kv_lora_rank + qk_rope_head_dim) and, on a layer that runs the indexer, its key (index_head_dim); not the
    per-head K/V a dense MLA ring exchanges."""
    s = a.sparse
    assert s is not None
    return a.kv_lora_rank + a.qk_rope_head_dim + (s.index_head_dim if s.runs_indexer else 0)

