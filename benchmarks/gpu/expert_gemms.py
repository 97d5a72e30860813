"""Per-expert BF16 GEMMs of an MoE layer's routed experts, as Transformer Engine's GroupedLinear runs them
through TE 2.16 (one cuBLASLt matmul per local expert, round-robin over 4 streams: common/gemm/
cublaslt_gemm.cu multi_stream_cublas_gemm, NVTE_NUM_STREAMS default 4), measured on one GPU (needs CUDA
and PyTorch). PyTorch's torch.mm is a cuBLAS(Lt) matmul of the same shape.

For each expert shape (hidden H, expert FFN F, SwiGLU fc1 of width 2F) and rows per expert, the six GEMMs
of a layer's forward and backward over ``experts`` local experts: fc1 / fc2 forward, fc2 / fc1 data
gradient, fc1 / fc2 weight gradient (reduction over the expert's rows). Prints CSV rows (model, experts,
rows, gemm, m, n, k, seconds for all local experts, TFLOP/s) to stdout and $OUT/expert_gemms.csv.

Second table (``precision`` fp8): the same GEMMs in FP8 (e4m3, per-tensor scales, bf16 output) through
torch._scaled_mm (cuBLASLt FP8 matmul). Third (``bf16-accum``): the weight-gradient GEMMs accumulating into an
fp32 main_grad (beta 1, fp32 C / D), as Megatron-Core's gradient_accumulation_fusion runs them.

Run: python benchmarks/gpu/expert_gemms.py [bf16] [fp8] [bf16-accum]
"""

from __future__ import annotations

import sys

import torch

from gpu_bench import Table, device_ready, graph_seconds

STREAMS = 4
WARMUP, ITERS = 3, 20
# (label, hidden, expert ffn, local experts, rows per expert)
SHAPES = [("deepseek-v3", 7168, 2048, 8, r) for r in (256, 512, 1024, 2048, 4096)] + \
         [("qwen3-30b-a3b", 2048, 768, 16, r) for r in (256, 512, 1024, 2048, 4096)] + \
         [("qwen3-next-80b-a3b", 2048, 512, 16, r) for r in (640, 1280, 2560, 5120)]


def gemms(h: int, f: int, rows: int) -> list[tuple[str, int, int, int]]:
    """(name, m, n, k) of y[m, n] = a[m, k] @ b[k, n]."""
    return [("fc1_fwd", rows, 2 * f, h), ("fc2_fwd", rows, h, f),
            ("fc2_dgrad", rows, f, h), ("fc1_dgrad", rows, h, 2 * f),
            ("fc1_wgrad", h, 2 * f, rows), ("fc2_wgrad", f, h, rows)]


ONE = None  # per-tensor FP8 scale, made on the device in main()


def matmul(precision: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None) -> None:
    if precision == "fp8":
        torch._scaled_mm(a, b, ONE, ONE, out_dtype=torch.bfloat16)
    elif c is not None:
        torch.addmm(c, a, b, out_dtype=torch.float32, out=c)
    else:
        torch.mm(a, b)


def operands(precision: str, m: int, n: int, k: int, wgrad: bool):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()  # column-major, as cuBLASLt FP8 needs
    if precision == "fp8":
        return a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), None
    c = torch.zeros(m, n, device="cuda", dtype=torch.float32) if precision == "bf16-accum" and wgrad else None
    return a, b, c


def time_loop(precision: str, pairs: list, streams: list[torch.cuda.Stream]) -> float:
    """GPU seconds of one pass over the local experts' GEMMs, round-robin over ``streams``."""
    def once():
        main = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(main)
        for i, (a, b, c) in enumerate(pairs):
            with torch.cuda.stream(streams[i % len(streams)]):
                matmul(precision, a, b, c)
        for s in streams:
            main.wait_stream(s)
    return graph_seconds(once, WARMUP, ITERS)


def main() -> int:
    if not device_ready():
        return 1
    global ONE
    ONE = torch.ones((), device="cuda", dtype=torch.float32)
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    table = Table("expert_gemms.csv")
    precisions = sys.argv[1:] or ["bf16"]
    for precision, (label, h, f, experts, rows) in ((p, s) for p in precisions for s in SHAPES):
        for name, m, n, k in gemms(h, f, rows):
            wgrad = name.endswith("wgrad")
            if precision == "bf16-accum" and not wgrad:
                continue
            try:
                pairs = [operands(precision, m, n, k, wgrad) for _ in range(experts)]
                s = time_loop(precision, pairs, streams)
            except (RuntimeError, TypeError) as exc:
                print(f"# {precision} {label} {name}: {str(exc).splitlines()[0]}", file=sys.stderr)
                continue
            table.add(precision=precision, model=label, experts=experts, rows=rows, gemm=name, m=m, n=n, k=k,
                      seconds=f"{s:.4e}", tflops=round(2 * m * n * k * experts / s / 1e12, 1))
            del pairs
    table.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
