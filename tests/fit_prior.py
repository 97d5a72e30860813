"""The fit's source values (benchmarks/calibrate.py PRIOR): what each fitted constant was set to from its source before
any fit, independent of the fit's output. benchmarks/calibrate.py starts the fit here; tests/nocp_rows.py prunes the
'without CP' rows' candidate layouts here (so the fit's inputs do not depend on what it wrote)."""

from __future__ import annotations

import functools
from typing import Any

# Constants not listed start at calibration.yaml's value, whose comment names its source.
PRIOR_OVERRIDES: dict[str, Any] = {
    # FlashAttention-3 (arXiv 2407.08608, Fig. 5-7): tensor-core work of the backward ~0.55 of peak
    "attn_bwd_eff": {"flash": 0.55, "cudnn_mla": 0.55, "flash_sm90": 0.55},
    # NCCL all-to-all: ~0.75 of link rate for large messages (nccl-tests alltoall_perf busbw on NVLink / IB)
    "a2a_eff": {"alltoall": 0.75, "allgather": 0.75},
    # DeepEP internode normal kernels ~0.9 of RDMA line rate (deepseek-ai/DeepEP docs/legacy.md); NCCL 0.75
    "a2a_scaleout_eff": {"alltoall": 0.75, "allgather": 0.75, "deepep": 0.9, "hybridep": 0.9},
    # No measured source: a guess that the merged 1F1B schedule hides most of each window's compute
    # (DeepSeek-V3, arXiv 2412.19437 sec. 3.2.1, reports all-to-all fully hidden by its DualPipe overlap);
    # the fit barely moves it (docs/calibration.md, "pinned" column). ~10 stream waits x ~20 us per layer.
    "ep_overlap_eff": 0.9, "ep_overlap_layer_s": 2.0e-4,
    # grouped GEMM at large per-expert rows ~0.85 of a dense GEMM (no measured source; MB01 and G06 pin it);
    # epilogue per output element: K half-efficiency 128 (two K-steps of 64 of the CUTLASS mainloop) at
    # H100's BF16 MAMF per SM (catalog: 794.5e12 / 132), timing.gemm_k_half
    "grouped_gemm_eff": 0.85, "gemm_epilogue_s": 2 * 128.0 / (794.5e12 / 132),
    # ~60 kernels after each dropless-MoE host sync x ~5 us launch (Megatron-Core CUDA graph docs)
    "launch_overhead_per_layer_s": 3.0e-4,
    "expert_launch_host_s": 3.0e-5,
    # one eager pass over a TP8 MoE layer: ~60-80 module calls x tens of us (TransformerEngine issue #2053)
    "host_layer_pass_s": 3.0e-3,
    # EP calls across EFA nodes (host-posted RDMA): UCCL-EP's low-latency kernels on p6-b200 with 400 Gb/s EFA take
    # 228-406 us a dispatch and 318-617 us a combine of 128 tokens at EP16-EP32 (uccl-project/uccl ep/README.md),
    # part of it the transfer: ~0.3 ms a call; NCCL's all-to-all through aws-ofi-nccl has no published per-call
    # figure and takes the same source value
    "ep_proxy_call_s": 3.0e-4, "a2a_host_call_s": 3.0e-4,
    # DeepEP's chunked RDMA writes through the proxies: a libfabric post and its completion from a CPU proxy per
    # message (no published per-message figure on EFA): ~1 us a message and rail
    "ep_proxy_message_s": 1.0e-6,
    # a quarter of STREAM bandwidth for a fused multi-tensor CPU AdamW (no source; G08 pins it)
    "cpu_adam_mem_eff": 0.25,
}


@functools.lru_cache(maxsize=1)
def prior_calibration() -> Any:
    """The shipped calibration with PRIOR_OVERRIDES: where the fit starts."""
    from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

    return DEFAULT_CALIBRATION.with_overrides(PRIOR_OVERRIDES)


__all__ = ["PRIOR_OVERRIDES", "prior_calibration"]
