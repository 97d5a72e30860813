"""DeepSeek-V4's layout rules (the costs are :mod:`moeplan.engine.compressed_attention` and
:mod:`moeplan.engine.hyper_connections`): the Megatron-Core release that trains it."""

from __future__ import annotations

from moeplan.models.spec import Attention

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
