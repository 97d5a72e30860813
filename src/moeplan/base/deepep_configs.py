"""DeepEP's default normal-kernel configs: the ONE table moeplan reads for DeepEP's buffer sizes (engine.
dispatcher_buffers) and its RDMA message sizes across nodes (engine.timing.moe), the one rule that picks a row, and
the SM count DeepEP runs on under Megatron-Core's defaults (DEEPEP_NUM_SMS).

Release: deepseek-ai/DeepEP e02e4d2 ("Support EP24 for internode kernels", 2025-09-26) through dd758ca (2026-07-14;
the file moved from deep_ep/buffer.py to deep_ep/buffers/legacy.py, values unchanged): ``Buffer.get_dispatch_config``
/ ``Buffer.get_combine_config``. Megatron-Core's fused_a2a.py passes no config to ``dispatch`` / ``combine``, so
these defaults run, and its ``get_buffer`` sizes the buffers from both configs (the larger NVL and the larger RDMA
size hint). Older releases differ at EP 24..128 (before c939644, 2025-09-22, EP32 dispatched 32-token RDMA chunks).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


# SMs DeepEP's normal kernels run on where the run sets none: Megatron-Core moe_deepep_num_sms default 20
# (transformer_config.py, core_r0.14 .. r0.18); from 0.19 moe_flex_dispatcher_num_sms, unset: DeepEP's 20
# (token_dispatcher.py), DeepEP's own Buffer.num_sms default (deep_ep/buffers/legacy.py). A Config's SM count; the
# buffers' channels are half of it. The calibration's ep_sms.deepep (timing) equals it (tests/unit/test_deepep_configs).
DEEPEP_NUM_SMS = 20


class DeepEPConfig(NamedTuple):
    """One DeepEP ``Config`` (csrc/legacy/config.hpp) less its SM count: the most tokens one NVLink / RDMA chunk
    sends (``num_max_*_chunked_send_tokens``) and the receive ring's depth in tokens (``..._recv_tokens``)."""

    nvl_send_tokens: int
    nvl_recv_tokens: int
    rdma_send_tokens: int
    rdma_recv_tokens: int


# EP size -> (dispatch config, combine config); deep_ep/buffers/legacy.py get_dispatch_config / get_combine_config
DEEPEP_CONFIGS: dict[int, tuple[DeepEPConfig, DeepEPConfig]] = {
    2: (DeepEPConfig(24, 256, 6, 128), DeepEPConfig(10, 256, 6, 128)),
    4: (DeepEPConfig(6, 256, 6, 128), DeepEPConfig(9, 256, 6, 128)),
    8: (DeepEPConfig(6, 256, 6, 128), DeepEPConfig(4, 256, 6, 128)),
    16: (DeepEPConfig(36, 288, 20, 128), DeepEPConfig(4, 288, 12, 128)),
    24: (DeepEPConfig(32, 288, 8, 128), DeepEPConfig(1, 288, 8, 128)),
    32: (DeepEPConfig(32, 288, 8, 128), DeepEPConfig(1, 288, 8, 128)),
    48: (DeepEPConfig(32, 288, 8, 128), DeepEPConfig(1, 288, 8, 128)),
    64: (DeepEPConfig(32, 288, 8, 128), DeepEPConfig(1, 288, 8, 128)),
    96: (DeepEPConfig(20, 480, 12, 128), DeepEPConfig(1, 480, 8, 128)),
    128: (DeepEPConfig(20, 560, 12, 128), DeepEPConfig(1, 560, 8, 128)),
    144: (DeepEPConfig(32, 720, 12, 128), DeepEPConfig(2, 720, 8, 128)),
    160: (DeepEPConfig(28, 720, 12, 128), DeepEPConfig(2, 720, 8, 128)),
}


# The EP sizes DeepEP lists configs for; any other size stops at get_dispatch_config / get_combine_config's assert
# ("Unsupported number of EP ranks"), which Megatron-Core's fused_a2a.get_buffer calls with its group's size. Its
# largest row (160) is a fact of the Python table; the Buffer's cap on normal-kernel ranks (DEEPEP_MAX_RANKS) is one
# of csrc: today they are equal (tests/unit/test_deepep_configs.py), two facts kept apart.
DEEPEP_EP_SIZES: tuple[int, ...] = tuple(sorted(DEEPEP_CONFIGS))

# NVLink peers per RDMA rank of DeepEP's normal kernels (csrc NUM_MAX_NVL_PEERS): the Buffer asserts num_ranks < 8 or
# a multiple of 8 (csrc deep_ep.cpp at e02e4d2, csrc/legacy/buffer.hpp at dd758ca), and its internode kernels run
# num_ranks / 8 RDMA ranks of 8 NVLink peers each.
DEEPEP_NVL_PEERS = 8

# RDMA peers DeepEP's normal kernels reach (csrc/kernels/configs.cuh NUM_MAX_RDMA_PEERS, 20 at e02e4d2 .. dd758ca).
DEEPEP_RDMA_PEERS = 20

# The most ranks DeepEP's normal (training) kernels take: the Buffer asserts num_ranks <= NUM_MAX_NVL_PEERS x
# NUM_MAX_RDMA_PEERS unless low_latency_mode (csrc deep_ep.cpp at e02e4d2, csrc/legacy/buffer.hpp at dd758ca;
# deepseek-ai/DeepEP #464; #90: normal kernels support EP 2 .. 160).
DEEPEP_MAX_RANKS = DEEPEP_NVL_PEERS * DEEPEP_RDMA_PEERS


class _ExpertLayout(Protocol):
    """What :func:`tp_ep_group_ranks` reads of a layout (moeplan.run.parallel.Parallel)."""

    @property
    def ep(self) -> int: ...

    @property
    def etp(self) -> int: ...


def tp_ep_group_ranks(parallel: _ExpertLayout) -> int:
    """Ranks of Megatron-Core's expert-TP x EP group (pg_collection.tp_ep), the group every dispatcher moves tokens
    over: the allgather dispatcher gathers over it, the alltoall dispatcher's all-to-all (EP) and expert-TP
    all-gather together span it (token_dispatcher.py), and the flex dispatchers run DeepEP, HybridEP and NCCL EP on
    it. The group DeepEP runs on: expert TP x EP. Megatron-Core's flex dispatcher hands DeepEP its tp_ep
    group (token_dispatcher.py MoEFlexTokenDispatcher: ``_DeepepManager(group=self.tp_ep_group)``, pg_collection.tp_ep,
    core_r0.12 .. 0.19), and fused_a2a.get_buffer asks for the configs and size hints of ``group.size()``; deep_ep's
    Buffer keys its config rows, its rank cap and its NVLink x RDMA split on that num_ranks (deep_ep/buffers/legacy.py
    get_dispatch_config(num_ranks), dispatch: ``get_dispatch_config(self.group_size)``). Every config lookup (buffer
    memory, RDMA message sizes) and the rank checks (moeplan.plan.pitfalls) read this one number. The flex dispatcher
    hands HybridEP and NCCL EP the same group (``_HybridEPManager`` / ``_NCCLEPManager(group=self.tp_ep_group)``), so
    their buffers and traffic (moeplan.engine.dispatcher_buffers, moeplan.engine.timing.moe.flex_token_copies) read
    it too."""
    return parallel.ep * parallel.etp


def deepep_config_ep(ep: int) -> int:
    """The DEEPEP_CONFIGS row a DeepEP group of ``ep`` ranks reads (expert TP x EP: :func:`tp_ep_group_ranks`; DeepEP
    calls them EP ranks): its own size where DeepEP lists it; otherwise the smallest listed size above it, the
    largest listed one beyond 160 ranks. One rule for memory and time. For a size
    DeepEP does not list (12, 40, 80, ...) DeepEP itself asserts (DEEPEP_EP_SIZES): the next row is moeplan's stand-in
    for an estimate, and ``check`` warns (lint rule deepep-ep-size, moeplan.plan.pitfalls)."""
    above = [k for k in DEEPEP_CONFIGS if k >= ep]
    return min(above) if above else max(DEEPEP_CONFIGS)


def deepep_configs(ep: int) -> tuple[DeepEPConfig, DeepEPConfig]:
    """(dispatch, combine) DeepEP default configs for a DeepEP group of ``ep`` ranks (:func:`deepep_config_ep`)."""
    return DEEPEP_CONFIGS[deepep_config_ep(ep)]
