"""fla's chunk_gated_delta_rule (the Gated DeltaNet kernels Megatron-Core runs) on one GPU, forward and forward +
backward (needs CUDA, PyTorch, Triton and flash-linear-attention 0.4.0, the release Megatron-LM pinned until
2026-08).

Shapes: fla's own GB200 benchmark's six (tests/data/fla_gdn_gb200.csv), so the two GPUs compare point by point,
and Qwen3-Next's Gated DeltaNet as Megatron-Core runs it under context parallelism, head-parallel over the whole
sequence (32 value heads / CP per rank: 8 at CP 4, 2 at CP 16), where the state recurrence walks every 64-token
chunk with few programs. q, k, v [B, T, H, D] bf16, g (log decay) and beta [B, T, H], use_qk_l2norm_in_kernel,
as fla's benchmark calls it. Milliseconds by CUDA events over eager calls (host launches included, as triton's
do_bench includes them). CSV to stdout and $OUT/gdn_chunk.csv.

Run: python benchmarks/gpu/gdn_chunk.py
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from gpu_bench import Table, device_ready, event_seconds

WARMUP, ITERS = 3, 10
FLA_TABLE = [(1, 8192, 96, 128), (2, 16384, 16, 128), (4, 2048, 16, 128), (4, 4096, 64, 128), (8, 1024, 8, 64),
             (8, 2048, 32, 256)]
QWEN3_NEXT_CP = [(2, 8192, 32, 128), (1, 32768, 8, 128), (1, 65536, 8, 128), (1, 65536, 2, 128), (1, 131072, 2, 128),
                 (1, 16384, 2, 128)]


def measure(b: int, t: int, h: int, d: int) -> tuple[float, float]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    q, k, v = (torch.randn(b, t, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = F.logsigmoid(torch.randn(b, t, h, device="cuda", dtype=torch.float32)).requires_grad_()
    beta = torch.rand(b, t, h, device="cuda", dtype=torch.bfloat16).sigmoid().requires_grad_()
    do = torch.randn(b, t, h, d, device="cuda", dtype=torch.bfloat16)

    def fwd():
        return chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)[0]

    def fwdbwd():
        fwd().backward(do)
    return event_seconds(fwd, WARMUP, ITERS) * 1e3, event_seconds(fwdbwd, WARMUP, ITERS) * 1e3


def main() -> int:
    if not device_ready():
        return 1
    table = Table("gdn_chunk.csv")
    for source, shapes in (("fla-table", FLA_TABLE), ("qwen3-next-cp", QWEN3_NEXT_CP)):
        for b, t, h, d in shapes:
            try:
                fwd_ms, fwdbwd_ms = measure(b, t, h, d)
            except Exception as exc:  # noqa: BLE001 - report and go on (an fla / Triton mismatch names itself)
                print(f"# {b} {t} {h} {d}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                      file=sys.stderr)
                continue
            table.add(source=source, B=b, T=t, H=h, D=d, fwd_ms=round(fwd_ms, 3), fwdbwd_ms=round(fwdbwd_ms, 3))
            torch.cuda.empty_cache()
    table.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
