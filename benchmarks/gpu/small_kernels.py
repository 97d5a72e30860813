"""GPU time of the small element-wise kernels an MoE layer launches by the hundred, measured on one GPU (needs CUDA
and PyTorch): how much time a kernel takes beyond its bytes at the copy rate, i.e. the per-kernel floor a layer
of a small-hidden model pays hundreds of times (docs/calibration.md, known gaps: "GEMMs against kernel
measurements").

Each case is a chain of ``CHAIN`` dependent kernels of one kind on tensors of one size (rows x width), captured in
one CUDA graph and replayed (so no host launch cost enters): seconds per kernel, and the bytes each moves. Sizes:
token-sized (4,096 or 16,384 tokens x hidden 2,048 / 7,168), routed-row-sized (32,768 x 2,048) and
router-sized (4,096 x 128 / 512 fp32). Kinds: ``add`` (read 2, write 1), ``mul_scalar`` (read 1, write 1),
``cast`` (bf16 -> fp32), ``rmsnorm`` (torch's fused rms_norm), ``softmax`` (last dim), ``topk`` (k 8 over the last
dim; router-sized only). Prints CSV rows to stdout and $OUT/small_kernels.csv.

Run: python benchmarks/gpu/small_kernels.py
"""

from __future__ import annotations

import sys

import torch

from gpu_bench import Table, device_ready, graph_seconds

CHAIN = 100
WARMUP, ITERS = 3, 20
SIZES = [(4096, 2048), (16384, 2048), (32768, 2048), (4096, 7168), (4096, 128), (4096, 512), (512, 2048), (64, 2048)]


def kernel(kind: str, x: torch.Tensor, y: torch.Tensor):
    if kind == "add":
        return x + y, 3 * x.numel() * x.element_size()
    if kind == "mul_scalar":
        return x * 1.0001, 2 * x.numel() * x.element_size()
    if kind == "cast":
        return x.float(), x.numel() * (x.element_size() + 4)
    if kind == "rmsnorm":
        return torch.nn.functional.rms_norm(x, (x.shape[-1],)), 2 * x.numel() * x.element_size()
    if kind == "softmax":
        return torch.softmax(x, dim=-1), 2 * x.numel() * x.element_size()
    if kind == "topk":
        return torch.topk(x, 8, dim=-1).values, x.numel() * x.element_size()
    raise ValueError(kind)


def time_chain(kind: str, rows: int, width: int) -> tuple[float, int]:
    dtype = torch.float32 if width <= 512 else torch.bfloat16
    x = torch.randn(rows, width, device="cuda", dtype=dtype)
    y = torch.randn(rows, width, device="cuda", dtype=dtype)
    moved = 0

    def chain():
        nonlocal moved
        t = x
        for _ in range(CHAIN):
            out, moved = kernel(kind, t if kind != "cast" else x, y)
            t = out if out.shape == x.shape and out.dtype == x.dtype else t
    return graph_seconds(chain, WARMUP, ITERS) / CHAIN, moved


def main() -> int:
    if not device_ready():
        return 1
    table = Table("small_kernels.csv")
    for rows, width in SIZES:
        for kind in ("add", "mul_scalar", "cast", "rmsnorm", "softmax", "topk"):
            if (kind == "topk" and width > 512) or (kind == "cast" and width <= 512):  # fp32 there: a cast is a no-op
                continue
            s, moved = time_chain(kind, rows, width)
            table.add(kind=kind, rows=rows, width=width, bytes=moved, seconds=f"{s:.4e}",
                      gb_per_s=round(moved / s / 1e9, 1))
    table.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
