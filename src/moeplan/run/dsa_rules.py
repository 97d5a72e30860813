"""DeepSeek sparse attention's layout rules (the costs are :mod:`moeplan.engine.dsa`): the Megatron-Core releases
that train it and the one context-parallel communication type it runs. Read by the layout rules
(moeplan.run.parallel.mixer_rules), the knob problems (moeplan.engine.knobs), the CP timing
(moeplan.engine.timing.attention) and the run-file assertions (moeplan.megatron.asserts)."""

from __future__ import annotations

from moeplan.models.spec import Attention

# Megatron-Core releases (TransformerConfig, megatron/core/transformer/transformer_config.py): DSA
# (experimental_attention_variant "dsa", dsa_indexer_n_heads / _head_dim / _topk / _loss_coeff) first appears in
# core_v0.16.0; cross-layer top-k sharing (dsa_indexer_topk_freq, dsa_indexer_skip_topk_offset) in core_v0.19.0.
DSA_SINCE = (0, 16)
INDEX_SHARE_SINCE = (0, 19)
# DSAttention asserts "context parallelism currently supports cp_comm_type=allgather only"
# (experimental_attention_variant/dsa.py); Megatron-Core's name for it
CP_COMM_TYPE = "allgather"


def version_problem(a: Attention, version: tuple[int, int], version_label: str) -> str | None:
    """Why Megatron-Core ``version`` cannot train this attention layer, else None."""
    s = a.sparse
    if s is None:
        return None
    if version < DSA_SINCE:
        return (f"Megatron-Core {version_label} has no DeepSeek sparse attention (experimental_attention_variant "
                f"'dsa' arrives in 0.16)")
    if not s.runs_indexer and version < INDEX_SHARE_SINCE:
        return (f"Megatron-Core {version_label} cannot share DSA top-k across layers (IndexShare: "
                f"dsa_indexer_topk_freq arrives in 0.19); this model needs 0.19 or newer")
    return None
