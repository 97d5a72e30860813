"""FlashAttention-2 forward / backward rate by head dim, measured on one GPU (needs CUDA and PyTorch).

Why: on Blackwell, TE 71bbefb trains head dim 256 with FlashAttention-2 (docs/calibration.md, known gaps
(i), (n)), and the stored FA2 benchmarks (tests/data/fa2_b200.csv) cover head dim 64 and 128 only. FA2
picks its tiles by head dim and the SM's shared memory (flash_fwd_launch_template.h / flash_bwd_launch_
template.h: run_mha_fwd_hdim256 / run_mha_bwd_hdim256 take 64 x 64 tiles where >= 176-192 KB is free, as on
H100 / H200 and B200 alike), and PyTorch's SDPA FLASH_ATTENTION backend is that FA2 code (aten/src/ATen/
native/transformers/cuda/flash_attn). So the ratio of the d = 256 rate to the d = 64 / 128 rate measured here
carries to B200, whose own d = 64 / 128 rates are stored.

Shapes follow flash-attn's benchmarks/benchmark_flash_attention.py (model dim 2,048, heads = 2,048 / d,
batch = 16,384 / seqlen) and count FLOPs as it does: forward 4 x s^2 x d x heads x batch (halved when
causal), backward 2.5 x forward. Rows: one CSV line per (pass, head dim, causal, seqlen) to stdout and to
$OUT/fa2_headdim.csv when OUT is set.

Run: python benchmarks/gpu/fa2_headdim.py
"""

from __future__ import annotations

import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpu_bench import Table, device_ready, sdpa_seconds

DIM = 2048
TOKENS = 16384
WARMUP, ITERS = 3, 10


def measure(backend: SDPBackend, head_dim: int, seqlen: int, causal: bool) -> tuple[float, float]:
    heads, batch = DIM // head_dim, max(1, TOKENS // seqlen)
    shape = (batch, heads, seqlen, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(backend):
        fwd_s, bwd_s = sdpa_seconds(q, k, v, dout, causal, WARMUP, ITERS)
    flops = 4 * seqlen**2 * head_dim * heads * batch / (2 if causal else 1)
    return flops / fwd_s / 1e12, 2.5 * flops / bwd_s / 1e12


def main() -> int:
    if not device_ready():
        return 1
    table = Table("fa2_headdim.csv")
    backends = [("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    for name, backend in backends:
        for head_dim in (64, 128, 256):
            for causal in (False, True):
                for seqlen in (1024, 2048, 4096, 8192, 16384):
                    try:
                        fwd, bwd = measure(backend, head_dim, seqlen, causal)
                    except RuntimeError as exc:  # backend refuses the shape
                        print(f"# {name} d{head_dim} s{seqlen}: {str(exc).splitlines()[0]}", file=sys.stderr)
                        break
                    for pass_, tflops in (("fwd", fwd), ("bwd", bwd)):
                        table.add(backend=name, **{"pass": pass_}, head_dim=head_dim, causal=int(causal),
                                  seq_len=seqlen, tflops=round(tflops, 1))
                    torch.cuda.empty_cache()
    table.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
