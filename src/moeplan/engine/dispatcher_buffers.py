"""Memory of the MoE dispatchers' communication buffers.

- DeepEP buffers: DeepEP ``Config.get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``
  (csrc/legacy/config.hpp) with DeepEP's default per-EP configs (base.deepep_configs), as Megatron sizes them
  (megatron/core/transformer/moe/fused_a2a.py get_buffer) for its group of expert TP x EP ranks
  (base.deepep_configs.tp_ep_group_ranks);
  HybridEP: tokens x ranks x (2h + 4 x experts-per-rank x ranks-per-node + 4h/128) bytes over the same expert TP x
  EP group (DeepEP hybrid-ep branch, csrc/hybrid_ep/buffer).
"""

from __future__ import annotations

from functools import lru_cache

from moeplan.base.deepep_configs import DEEPEP_NUM_SMS, DEEPEP_NVL_PEERS, deepep_configs
from moeplan.engine.activations import BF16_BYTES

DEEPEP_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4  # source meta + top-k idx/weights + scales slots


# ------------------------------------------------------------------------------------ dispatcher


@lru_cache(maxsize=256)
def deepep_buffer_bytes(hidden: int, ranks: int) -> float:
    """DeepEP normal-kernel NVL + RDMA buffer per GPU for a DeepEP group of ``ranks`` ranks (expert TP x EP:
    base.deepep_configs.tp_ep_group_ranks): DeepEP csrc/legacy/config.hpp ``get_nvl_buffer_size_hint`` /
    ``get_rdma_buffer_size_hint`` (RDMA only across nodes, ranks > 8), each the larger over the dispatch and the
    combine default config (base.deepep_configs), as Megatron-Core's fused_a2a.get_buffer sizes them (group.size())."""
    if ranks <= 1:
        return 0.0
    channels = DEEPEP_NUM_SMS // 2
    hidden_bytes = hidden * BF16_BYTES
    r_nvl, r_rdma = min(ranks, DEEPEP_NVL_PEERS), max(ranks // DEEPEP_NVL_PEERS, 1)
    nvl = rdma = 0.0
    for cfg in deepep_configs(ranks):
        nvl = max(nvl, channels * r_nvl * (2 * r_rdma + 3) * 4
                  + channels * r_nvl * cfg.nvl_recv_tokens * (hidden_bytes + DEEPEP_META_BYTES))
        if ranks > DEEPEP_NVL_PEERS:
            rdma = max(rdma, channels * r_rdma * 18 * 2 * 4
                       + 2 * channels * r_rdma * cfg.rdma_recv_tokens * (hidden_bytes + DEEPEP_META_BYTES + 16))
    return _align_128(nvl) + _align_128(rdma)


def _align_128(num_bytes: float) -> float:
    """DeepEP rounds each size hint up to 128 bytes (csrc/legacy/config.hpp)."""
    return -(-num_bytes // 128) * 128


@lru_cache(maxsize=4096)
def hybridep_buffer_bytes(hidden: int, ranks: int, tokens_per_rank: float, experts: int, nvlink_domain: int) -> float:
    """HybridEP shared dispatch/combine buffers, sized for the worst case (all tokens to one rank), for a group of
    ``ranks`` ranks holding ``experts`` experts: Megatron-Core's flex dispatcher hands HybridEP its expert TP x EP group
    (HybridEPBuffer(group=tp_ep_group), fused_a2a.init_hybrid_ep_buffer) with expert TP x num_experts experts, so
    ``experts / ranks`` is each rank's local experts (base.deepep_configs.tp_ep_group_ranks)."""
    if ranks <= 1:
        return 0.0
    ranks_per_node = min(ranks, nvlink_domain)
    experts_per_rank = experts / ranks
    per_token = hidden * BF16_BYTES + 4 * experts_per_rank * ranks_per_node + 4 * hidden / 128
    return tokens_per_rank * ranks * per_token
