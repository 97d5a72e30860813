"""DeepSeek-V4's layout rules (the costs are :mod:`moeplan.engine.compressed_attention` and
:mod:`moeplan.engine.hyper_connections`): the Megatron-Core release that trains it."""

from __future__ import annotations

from moeplan.models.spec import Attention, ModelSpec

# Megatron-Core's "dsv4_hybrid" attention variant and mHC (enable_mhc_connections) are on Megatron-LM main after
# core_v0.19.0, the release moeplan calls 0.20 (base.fields); Megatron Bridge's DeepSeekV4HybridModelProvider builds
# on them.
DSV4_SINCE = (0, 20)


def version_problem(a: Attention, version: tuple[int, int], version_label: str) -> str | None:
    """Why Megatron-Core ``version`` cannot train this attention layer (DeepSeek-V4's), else None."""
    if a.compressed is None or version >= DSV4_SINCE:
        return None
    return (f"Megatron-Core {version_label} has no DeepSeek-V4 attention or mHC (experimental_attention_variant "
            f"'dsv4_hybrid', enable_mhc_connections: Megatron-LM main after 0.19); use --mcore-version 0.20")


def dsv4_fields(spec: ModelSpec) -> dict[str, object]:
    """DeepSeek-V4's architecture under Megatron-Core's names (the 0.20 rows of base.fields; Megatron Bridge's
    DeepSeek-V4 provider sets the same): the attention variant, the per-layer compress ratios (MTP layers included,
    as Bridge's flop_utils reads them), the window, the grouped output projection and mHC. Empty for other models."""
    attn = spec.first_attention
    if attn is None or attn.compressed is None:
        return {}
    layers = list(spec.layers) + ([spec.mtp_layer] * spec.mtp_layers if spec.mtp_layer is not None else [])
    ratios = [layer.mixer.compressed.compress_ratio for layer in layers
              if isinstance(layer.mixer, Attention) and layer.mixer.compressed is not None]
    return {"experimental_attention_variant": "dsv4_hybrid", "csa_compress_ratios": ratios,
            "csa_window_size": attn.sliding_window, "output_projection_groups": attn.compressed.o_groups,
            "output_projection_lora_rank": attn.compressed.o_lora_rank, "enable_mhc_connections": spec.hc_mult > 1,
            "mhc_num_residual_streams": spec.hc_mult}
