"""cuDNN fused attention at MLA's head shape (q / k 192, v 128: DeepSeek-V3, Kimi-K2) against the equal-head shapes,
forward and backward, measured on one GPU (needs CUDA and PyTorch).

Why: moeplan's ``cudnn_mla`` efficiencies (timing.attention_efficiency) are pinned almost only by the G14 CP series
(docs/calibration.md, known gaps): a kernel benchmark pins the kernel's own rate. PyTorch SDPA's CUDNN_ATTENTION
backend runs cuDNN frontend SDPA, the F16_arbitrary_seqlen kernels TE's FusedAttention runs for MLA (TE rules
flash-attn out for head_dim_qk != head_dim_v).

FLOPs as Megatron / moeplan count them per score element: forward 2 x (d_qk + d_v), backward 2 x (3 d_qk + 2 d_v)
(timing.fused_attention_efficiency), halved when causal. Shapes: 16 heads, batch = 16,384 / seqlen. Prints CSV
rows (backend, d_qk, d_v, causal, seq_len, pass, tflops) to stdout and $OUT/mla_attention.csv.

Run: python benchmarks/gpu/mla_attention.py
"""

from __future__ import annotations

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpu_bench import Table, device_ready, sdpa_seconds

HEADS, TOKENS = 16, 16384
WARMUP, ITERS = 3, 10


def measure(d_qk: int, d_v: int, seqlen: int, causal: bool) -> tuple[float, float]:
    batch = max(1, TOKENS // seqlen)
    q, k = (torch.randn(batch, HEADS, seqlen, d_qk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    v = torch.randn(batch, HEADS, seqlen, d_v, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(batch, HEADS, seqlen, d_v, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        fwd_s, bwd_s = sdpa_seconds(q, k, v, dout, causal, WARMUP, ITERS)
    scores = seqlen**2 * HEADS * batch / (2 if causal else 1)
    return 2 * (d_qk + d_v) * scores / fwd_s / 1e12, 2 * (3 * d_qk + 2 * d_v) * scores / bwd_s / 1e12


def main() -> int:
    if not device_ready():
        return 1
    table = Table("mla_attention.csv")
    for d_qk, d_v in ((192, 128), (128, 128), (256, 256)):
        for causal in (False, True):
            for seqlen in (2048, 4096, 8192, 16384):
                try:
                    fwd, bwd = measure(d_qk, d_v, seqlen, causal)
                except RuntimeError as exc:  # the backend refuses the shape
                    print(f"# cudnn {d_qk}/{d_v} s{seqlen}: {str(exc).splitlines()[0]}", file=sys.stderr)
                    break
                for pass_, tflops in (("fwd", fwd), ("bwd", bwd)):
                    table.add(backend="cudnn", d_qk=d_qk, d_v=d_v, causal=int(causal), seq_len=seqlen,
                              **{"pass": pass_}, tflops=round(tflops, 1))
                torch.cuda.empty_cache()
    table.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
