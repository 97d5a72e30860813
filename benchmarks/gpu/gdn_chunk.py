"""fla's chunk_gated_delta_rule (the Gated DeltaNet kernels Megatron-Core runs) on one GPU, forward and forward +
backward (needs CUDA, PyTorch, Triton and flash-linear-attention 0.4.0, the release Megatron-LM pinned until
2026-08).

Shapes: fla's own GB200 benchmark's six (tests/data/fla_gdn_gb200.csv), so the two GPUs compare point by point,
and Qwen3-Next's Gated DeltaNet as Megatron-Core runs it under context parallelism, head-parallel over the whole
sequence (32 value heads / CP per rank: 8 at CP 4, 2 at CP 16), where the state recurrence walks every 64-token
chunk with few programs. q, k, v [B, T, H, D] bf16, g (log decay) and beta [B, T, H], use_qk_l2norm_in_kernel,
as fla's benchmark calls it. Milliseconds by CUDA events over eager calls (host launches included, as triton's
do_bench includes them). CSV to stdout and $OUT/gdn_chunk.csv.

fla autotunes every kernel on the first call of each (H, D) (its autotune keys are H, K, V and the chunk size,
not B or T), compiling each of a few hundred configurations one after another: minutes per shape. So the run has
two phases. ``--compile H D RANK N`` (N processes per distinct (H, D), each taking every N-th configuration, run side by
side on the host's cores) calls the
kernels once with Triton's autotune benchmark replaced by a single call, which fills Triton's on-disk kernel cache
and times nothing (FLA_CACHE_RESULTS=0, so no autotune choice is stored); then the plain run (one process, alone
on the GPU) autotunes from the cached binaries with a shorter benchmark (Triton do_bench warmup 5 ms, rep 25 ms)
and times every shape.

Run: bash benchmarks/gpu/gdn_chunk.sh (fla's wheels carried in .whl)
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
AUTOTUNE_WARMUP_MS, AUTOTUNE_REP_MS = 5, 25


def _set_autotune_bench(compile_only: bool, rank: int = 0, ranks: int = 1) -> None:
    """Replace Triton's autotune benchmark: one call per configuration (``compile_only``: compiles it, times
    nothing; process ``rank`` of ``ranks`` takes every ranks-th configuration in the order the autotuner
    meets them, the same in every process) or a shorter do_bench than Triton's default 25 / 100 ms."""
    import triton
    from triton.runtime.autotuner import Autotuner

    seen = [0]

    def one_call(kernel_call, quantiles):  # noqa: ARG001 - Triton's benchmarker signature
        seen[0] += 1
        if seen[0] % ranks != rank:
            return [float("inf")] * 3
        kernel_call()
        return [1.0, 1.0, 1.0]

    def short(kernel_call, quantiles):
        return triton.testing.do_bench(kernel_call, warmup=AUTOTUNE_WARMUP_MS, rep=AUTOTUNE_REP_MS, quantiles=quantiles)

    Autotuner.do_bench = property(lambda self: one_call if compile_only else short)


def measure(b: int, t: int, h: int, d: int, warmup: int = WARMUP, iters: int = ITERS) -> tuple[float, float]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    q, k, v = (torch.randn(b, t, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = F.logsigmoid(torch.randn(b, t, h, device="cuda", dtype=torch.float32)).requires_grad_()
    beta = torch.rand(b, t, h, device="cuda", dtype=torch.bfloat16).sigmoid().requires_grad_()
    do = torch.randn(b, t, h, d, device="cuda", dtype=torch.bfloat16)

    def fwd():
        return chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)[0]

    def fwdbwd():
        fwd().backward(do)
    return event_seconds(fwd, warmup, iters) * 1e3, event_seconds(fwdbwd, warmup, iters) * 1e3


def main(argv: list[str]) -> int:
    if not device_ready():
        return 1
    if argv[:1] == ["--compile"]:
        h, d, rank, ranks = (int(a) for a in argv[1:5])
        _set_autotune_bench(compile_only=True, rank=rank, ranks=ranks)
        b, t = next((b, t) for b, t, hh, dd in FLA_TABLE + QWEN3_NEXT_CP if (hh, dd) == (h, d))
        measure(b, min(t, 8192), h, d, warmup=1, iters=1)
        print(f"# compiled H {h} D {d} ({rank} of {ranks})", file=sys.stderr)
        return 0
    _set_autotune_bench(compile_only=False)
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
            table.write()  # each row as it comes: a run stopped at its limit still returns what it measured
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
