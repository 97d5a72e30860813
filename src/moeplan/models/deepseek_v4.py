"""Reader of DeepSeek-V4 ``config.json`` files (model_type ``deepseek_v4``).

Keys as transformers ``DeepseekV4Config`` (configuration_deepseek_v4.py) reads them, legacy names included:
``compress_ratios`` (one entry per layer, 0 / 4 / 128, the Hub files add a trailing entry for the MTP layer)
or ``layer_types``; ``o_groups`` / ``o_lora_rank`` (grouped output projection); ``index_n_heads`` /
``index_head_dim`` / ``index_topk`` (the CSA layers' lightning indexer); ``sliding_window``; ``hc_mult`` (mHC
residual streams); ``qk_rope_head_dim`` (the rotary share of ``head_dim``); ``num_hash_layers`` (the first
layers route by token id: the same expert compute). Costed in moeplan.engine.compressed_attention and
moeplan.engine.hyper_connections. hf.py holds the shared key reading (its ``_Cfg``) and registers this reader.
"""

from __future__ import annotations

from typing import Any

from moeplan.models.spec import Attention, CompressedAttention, Layer, MoE

RATIOS = (0, 4, 128)  # Bridge flop_utils: "Only 0, 4, and 128 are supported" (sliding, CSA, HCA)
LAYER_TYPE_RATIO = {"sliding_attention": 0, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}

# DeepseekV4Config's field defaults (transformers configuration_deepseek_v4.py) of the keys read as optional
DEFAULTS: dict[str, Any] = {
    "hc_mult": 4, "sliding_window": 128, "o_groups": 8, "index_n_heads": 64, "index_head_dim": 128,
    "index_topk": 512, "num_nextn_predict_layers": 1, "n_shared_experts": 1, "tie_word_embeddings": False,
    "num_key_value_heads": 1,
}


def _ratios(c: Any, n: int) -> tuple[list[int], int]:
    """Per-layer compress ratios of the n main layers and of the MTP layer (the trailing entry, else 0)."""
    if c._given("compress_ratios") and c.raw("compress_ratios") is not None:
        ratios = c.int_list("compress_ratios")
    else:
        types = c.str_list("layer_types")
        if types is None:
            raise c._missing("compress_ratios", "or layer_types (the attention of each layer)")
        if set(types) - set(LAYER_TYPE_RATIO):
            raise c._fail("layer_types", f"entries must be one of {', '.join(LAYER_TYPE_RATIO)}")
        ratios = [LAYER_TYPE_RATIO[t] for t in types]
    bad = sorted(set(ratios) - set(RATIOS))
    if bad:
        raise c._fail("compress_ratios", f"holds {bad}: DeepSeek-V4 compresses by 0 (sliding window), 4 or 128")
    if len(ratios) not in (n, n + 1):
        raise c._fail("compress_ratios", f"has {len(ratios)} entries for {n} layers (n, or n + 1 with the MTP layer)")
    return ratios[:n], ratios[n] if len(ratios) > n else 0


def read_deepseek_v4(c: Any) -> dict[str, Any]:
    """DeepSeek-V4 Flash / Pro (transformers DeepseekV4ForCausalLM): every layer MoE, its attention a single
    shared K=V head over a sliding window plus compressed entries, mHC around each block."""
    n = c.int("num_hidden_layers")
    heads, hd = c.int("num_attention_heads"), c.int("head_dim")
    if c.int("num_key_value_heads") != 1:
        raise c._fail("num_key_value_heads", "must be 1: DeepSeek-V4 attends with one shared K=V head")
    rope = c.int("qk_rope_head_dim") if c._given("qk_rope_head_dim") else hd // 8  # 64 / 512 default
    o_groups = c.int("o_groups")
    c.divides("num_attention_heads", heads, "o_groups", o_groups, "the grouped output projection splits the heads")
    topk = c.int("index_topk")
    ratios, mtp_ratio = _ratios(c, n)
    hc = c.int("hc_mult")
    moe_ffn = c.int("moe_intermediate_size")
    experts, k = c.int("n_routed_experts"), c.int("num_experts_per_tok")
    if k > experts:
        raise c._fail("num_experts_per_tok", f"({k}) exceeds n_routed_experts ({experts})")
    moe = MoE(num_experts=experts, top_k=k, expert_ffn_hidden=moe_ffn,
              shared_ffn_hidden=c.int("n_shared_experts", allow_zero=True) * moe_ffn,
              act_clamp=c.opt_float("swiglu_limit") if c._given("swiglu_limit") else None)
    base = dict(kind="mla", num_heads=heads, num_kv_heads=1, head_dim=hd, v_head_dim=hd,
                sliding_window=c.int("sliding_window"), sink_logits=heads, q_lora_rank=c.int("q_lora_rank"),
                qk_nope_head_dim=hd - rope, qk_rope_head_dim=rope)

    def layer(ratio: int) -> Layer:
        comp = CompressedAttention(ratio, o_groups, c.int("o_lora_rank"), c.int("index_n_heads"),
                                   c.int("index_head_dim"), topk)
        return Layer(Attention(compressed=comp, **base), moe, hc_mult=hc)

    kinds = {r: layer(r) for r in set(ratios) | {mtp_ratio}}
    mtp = c.int("num_nextn_predict_layers", allow_zero=True)
    return {"layers": tuple(kinds[r] for r in ratios), "mtp_layers": mtp,
            "mtp_layer": kinds[mtp_ratio] if mtp else None, "hc_mult": hc}
