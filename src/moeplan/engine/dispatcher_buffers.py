"""Memory of the MoE dispatchers' communication buffers.

- DeepEP buffers: DeepEP ``Config.get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``
  (csrc/config.hpp) with Megatron's per-EP configs (megatron/core/transformer/moe/fused_a2a.py);
  HybridEP: tokens x EP x (2h + 4 x experts-per-rank x ranks-per-node + 4h/128) bytes (DeepEP
  hybrid-ep branch, csrc/hybrid_ep/buffer).
"""

from __future__ import annotations

import math
from functools import lru_cache

from moeplan.engine.activations import BF16_BYTES
DEEPEP_NUM_SMS = 20  # Megatron moe_deepep_num_sms default (core_r0.14-r0.18)
# DeepEP per-EP configs used by Megatron (dispatch and combine):
# ep -> (nvl_send_chunk, nvl_recv_chunk, rdma_send_chunk, rdma_recv_chunk); fused_a2a.py / DeepEP buffer.py
DEEPEP_CONFIGS: dict[int, tuple[tuple[int, int, int, int], tuple[int, int, int, int]]] = {
    8: ((6, 256, 6, 128), (4, 256, 6, 128)),
    16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    32: ((32, 288, 32, 128), (1, 288, 8, 128)),
    64: ((20, 288, 28, 128), (1, 288, 20, 128)),
    128: ((20, 560, 32, 128), (1, 560, 12, 128)),
}
DEEPEP_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4  # source meta + top-k idx/weights + scales slots


# ------------------------------------------------------------------------------------ dispatcher


@lru_cache(maxsize=256)
def deepep_buffer_bytes(hidden: int, ep: int) -> float:
    """DeepEP normal-kernel NVL + RDMA buffer per GPU (DeepEP csrc/config.hpp size hints)."""
    if ep <= 1:
        return 0.0
    key = min((k for k in DEEPEP_CONFIGS if k >= ep), default=128)
    channels = DEEPEP_NUM_SMS // 2
    hidden_bytes = hidden * BF16_BYTES
    r_nvl, r_rdma = min(ep, 8), max(ep // 8, 1)
    best = 0.0
    for _nvl_send, nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[key]:
        nvl = channels * r_nvl * (2 * r_rdma + 3) * 4 + channels * r_nvl * nvl_recv * (hidden_bytes + DEEPEP_META_BYTES)
        rdma = 0.0
        if ep > 8:
            cr = math.ceil(rdma_recv / rdma_send) * rdma_send
            rdma = channels * r_rdma * 18 * 2 * 4 + 2 * channels * r_rdma * cr * (hidden_bytes + DEEPEP_META_BYTES + 16)
        best = max(best, nvl + rdma)
    return best


@lru_cache(maxsize=4096)
def hybridep_buffer_bytes(hidden: int, ep: int, tokens_per_rank: float, experts: int, nvlink_domain: int) -> float:
    """HybridEP shared dispatch/combine buffers, sized for the worst case (all tokens to one rank)."""
    if ep <= 1:
        return 0.0
    ranks_per_node = min(ep, nvlink_domain)
    experts_per_rank = experts / ep
    per_token = hidden * BF16_BYTES + 4 * experts_per_rank * ranks_per_node + 4 * hidden / 128
    return tokens_per_rank * ep * per_token
