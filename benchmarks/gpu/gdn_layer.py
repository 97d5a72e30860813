"""Qwen3-Next's Gated DeltaNet mixer between its two projections, op by op as Megatron-Core runs it without context
parallelism (megatron/core/ssm/gated_delta_net.py, GatedDeltaNet.forward at Megatron-LM 17a67b9, the submodule of
Bridge PR #3168), on one GPU at TP 1: what timing.gdn_glue_bytes charges as HBM traffic, measured (needs CUDA,
PyTorch, Triton and flash-linear-attention 0.4.0).

From in_proj's output [s, b, 2K + 2V + 2H] (requires grad) to out_proj's input [s, b, V]: transpose to [b, s, .];
split into qkv / gate / beta / alpha; qkv.transpose(1, 2).contiguous() for the conv; the conv with fused SiLU
(Dao's causal_conv1d_fn, not installable here: a SiLU over the same [b, C, s] tensor stands in, the same bytes
forward, read C + C and write C, and backward, read 2C and write C); transpose back and split q / k / v; fla's
l2norm of q.contiguous() and k.contiguous(); repeat_interleave of q and k from 16 key heads to 32 value heads;
value / gate / beta / alpha .contiguous(); g = -exp(A_log) x softplus(alpha.float() + dt_bias) and sigmoid(beta)
in fp32 / bf16; fla's chunk_gated_delta_rule (use_qk_l2norm_in_kernel=False); the gated RMSNorm under torch.compile
(Megatron's jit_fuser on torch >= 2.2): RMSNorm over the value head dim, times silu(gate.float()), back to bf16;
reshape and transpose(0, 1).contiguous() to [s, b, V]. Its backward with a gradient of that output.

Each shape is timed three ways by CUDA events over eager calls: the whole mixer (forward, forward + backward), fla's
chunk_gated_delta_rule alone on tensors of the same shapes, and the host time of one mixer forward + backward
(perf_counter around the Python calls, no synchronisation inside). The glue is the whole less the kernel. CSV to
stdout and $OUT/gdn_layer.csv. fla's kernels autotune on the first call: run gdn_layer.sh, which compiles them
first in parallel processes (as gdn_chunk.sh does).

Run: bash benchmarks/gpu/gdn_layer.sh (fla's wheels carried in .whl)
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from gdn_chunk import _set_autotune_bench
from gpu_bench import Table, device_ready, event_seconds

WARMUP, ITERS = 3, 10
# Qwen3-Next-80B-A3B (config.json): 16 key heads and 32 value heads of 128, conv kernel 4, RMSNorm eps 1e-6
KEY_HEADS, VALUE_HEADS, HEAD_DIM, CONV_KERNEL, EPS = 16, 32, 128, 4, 1e-6
KEY_DIM, VALUE_DIM = KEY_HEADS * HEAD_DIM, VALUE_HEADS * HEAD_DIM
CONV_DIM = 2 * KEY_DIM + VALUE_DIM
IN_PROJ_DIM = CONV_DIM + VALUE_DIM + 2 * VALUE_HEADS
SHAPES = [(2, 4096), (1, 8192), (4, 4096), (1, 16384)]  # (MBS, seq): PR #3168's GB200 MBS 2 at 4K first


@torch.compile(dynamic=False)
def _gated_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """GatedDeltaNet._apply_gated_norm: out_norm (RMSNorm over the value head dim), times silu(gate) in fp32."""
    dtype = x.dtype
    x = x.reshape(-1, x.shape[-1])
    y = F.rms_norm(x, (x.shape[-1],), weight, EPS)
    gate = gate.reshape(-1, gate.shape[-1])
    return (y * F.silu(gate.float())).to(dtype)


def mixer(qkvzba: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, norm_w: torch.Tensor) -> torch.Tensor:
    from fla.modules.l2norm import l2norm
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    seq, batch, _ = qkvzba.shape
    x = qkvzba.transpose(0, 1)
    qkv, gate, beta, alpha = torch.split(x, [CONV_DIM, VALUE_DIM, VALUE_HEADS, VALUE_HEADS], dim=-1)
    gate = gate.reshape(batch, seq, -1, HEAD_DIM)
    beta = beta.reshape(batch, seq, -1)
    alpha = alpha.reshape(batch, seq, -1)
    qkv = qkv.transpose(1, 2).contiguous()
    qkv = F.silu(qkv)  # stands in for causal_conv1d_fn(activation="silu"): the same bytes each way
    qkv = qkv.transpose(1, 2)
    query, key, value = torch.split(qkv, [KEY_DIM, KEY_DIM, VALUE_DIM], dim=-1)
    query = query.reshape(batch, seq, -1, HEAD_DIM)
    key = key.reshape(batch, seq, -1, HEAD_DIM)
    value = value.reshape(batch, seq, -1, HEAD_DIM)
    query = l2norm(query.contiguous())
    key = l2norm(key.contiguous())
    query = query.repeat_interleave(VALUE_HEADS // KEY_HEADS, dim=2)
    key = key.repeat_interleave(VALUE_HEADS // KEY_HEADS, dim=2)
    query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    gate, beta, alpha = gate.contiguous(), beta.contiguous(), alpha.contiguous()
    g = -a_log.exp() * F.softplus(alpha.float() + dt_bias)
    beta = beta.sigmoid()
    out, _ = chunk_gated_delta_rule(query, key, value, g=g, beta=beta, initial_state=None, output_final_state=False,
                                    use_qk_l2norm_in_kernel=False)
    norm_out = _gated_norm(out, gate, norm_w)
    return norm_out.reshape(batch, seq, -1).transpose(0, 1).contiguous()


def _mixer_inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    """in_proj's output [s, b, 2K + 2V + 2H] (requires grad), A_log and dt_bias [H] (fp32), the out_norm weight, and a
    gradient of the mixer's output [s, b, V]."""
    dev, bf16 = "cuda", torch.bfloat16
    qkvzba = (0.1 * torch.randn(seq, batch, IN_PROJ_DIM, device=dev, dtype=bf16)).requires_grad_()
    a_log = torch.log(torch.empty(VALUE_HEADS, device=dev).uniform_(1, 16)).requires_grad_()
    dt_bias = torch.rand(VALUE_HEADS, device=dev).requires_grad_()
    norm_w = torch.ones(HEAD_DIM, device=dev, dtype=bf16, requires_grad=True)
    dout = torch.randn(seq, batch, VALUE_DIM, device=dev, dtype=bf16)
    return qkvzba, a_log, dt_bias, norm_w, dout


def measure(batch: int, seq: int, warmup: int = WARMUP, iters: int = ITERS) -> dict[str, float]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    dev, bf16 = "cuda", torch.bfloat16
    qkvzba, a_log, dt_bias, norm_w, dout = _mixer_inputs(batch, seq)

    def fwd():
        return mixer(qkvzba, a_log, dt_bias, norm_w)

    def fwdbwd():
        fwd().backward(dout)

    q, k = (F.normalize(torch.randn(batch, seq, VALUE_HEADS, HEAD_DIM, device=dev, dtype=bf16), dim=-1).requires_grad_()
            for _ in range(2))
    v = torch.randn(batch, seq, VALUE_HEADS, HEAD_DIM, device=dev, dtype=bf16, requires_grad=True)
    g = F.logsigmoid(torch.randn(batch, seq, VALUE_HEADS, device=dev)).requires_grad_()
    beta = torch.rand(batch, seq, VALUE_HEADS, device=dev, dtype=bf16).requires_grad_()
    dk = torch.randn(batch, seq, VALUE_HEADS, HEAD_DIM, device=dev, dtype=bf16)

    def kfwd():
        return chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=False)[0]

    def kfwdbwd():
        kfwd().backward(dk)

    out = {"fwd_ms": event_seconds(fwd, warmup, iters) * 1e3, "fwdbwd_ms": event_seconds(fwdbwd, warmup, iters) * 1e3,
           "kernel_fwd_ms": event_seconds(kfwd, warmup, iters) * 1e3,
           "kernel_fwdbwd_ms": event_seconds(kfwdbwd, warmup, iters) * 1e3}
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fwdbwd()
    out["host_fwdbwd_ms"] = (time.perf_counter() - start) / iters * 1e3  # host-bound if close to fwdbwd_ms
    torch.cuda.synchronize()
    return out


def profile(batch: int, seq: int, iters: int = 5) -> int:
    """The GPU kernels of the mixer's forward + backward by name (torch.profiler, CUDA activity): calls and
    microseconds per mixer call, to $OUT/gdn_layer_profile.csv and stdout, largest first."""
    import os
    from torch.profiler import ProfilerActivity, profile as torch_profile

    qkvzba, a_log, dt_bias, norm_w, dout = _mixer_inputs(batch, seq)
    for _ in range(WARMUP):
        mixer(qkvzba, a_log, dt_bias, norm_w).backward(dout)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            mixer(qkvzba, a_log, dt_bias, norm_w).backward(dout)
        torch.cuda.synchronize()
    rows = sorted(((e.key, e.count / iters, e.device_time_total / iters) for e in prof.key_averages()
                   if e.device_time_total > 0), key=lambda r: -r[2])
    lines = ["kernel,calls_per_mixer,us_per_mixer"] + [f"\"{k[:160]}\",{c:g},{t:.1f}" for k, c, t in rows]
    print("\n".join(lines))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gdn_layer_profile.csv"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if not device_ready():
        return 1
    if argv[:1] == ["--compile"]:
        rank, ranks = int(argv[1]), int(argv[2])
        _set_autotune_bench(compile_only=True, rank=rank, ranks=ranks)
        measure(*SHAPES[rank % len(SHAPES)], warmup=1, iters=1)  # each shape's torch.compile graph cached too
        print(f"# compiled ({rank} of {ranks})", file=sys.stderr)
        return 0
    _set_autotune_bench(compile_only=False)
    if argv[:1] == ["--profile"]:
        return profile(*SHAPES[0])
    table = Table("gdn_layer.csv")
    for batch, seq in SHAPES:
        try:
            r = measure(batch, seq)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"# B{batch} S{seq}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  file=sys.stderr)
            continue
        table.add(B=batch, T=seq, **{k: round(v, 3) for k, v in r.items()})
        table.write()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
