"""Training-log text in the formats Megatron-LM and Megatron Bridge print, built from measured numbers.

Formats as the code that writes them prints them (read in NVIDIA/Megatron-LM megatron/training/training.py
``training_log``, arguments.py ``_print_args``, training/utils/common_utils.py ``report_memory``; and
NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/utils/train_utils.py ``training_log`` /
``report_memory``, config.py ``log_non_default_values``). Only the numbers come from the published runs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

GIB = 1024**3

# Settings of the Qwen3-30B-A3B, 16 H100, EP16 HybridEP run (Megatron Bridge qwen3-30b-a3b model card:
# 20.147 s/step, 299.352 TFLOP/s/GPU; peak allocated 62.166 GiB, ../shared/reference/guidance.md).
QWEN3_30B_EP16 = {
    "num_layers": 48, "hidden_size": 2048, "num_attention_heads": 32, "num_experts": 128, "moe_router_topk": 8,
    "moe_ffn_hidden_size": 768, "world_size": 16, "data_parallel_size": 16, "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1, "virtual_pipeline_model_parallel_size": None, "context_parallel_size": 1,
    "expert_model_parallel_size": 16, "expert_tensor_parallel_size": 1, "seq_length": 4096,
    "global_batch_size": 1024, "micro_batch_size": 1, "bf16": True, "fp8": None, "fp8_recipe": "delayed",
    "recompute_granularity": None, "recompute_modules": None, "recompute_method": None, "recompute_num_layers": None,
    "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
    "overlap_moe_expert_parallel_comm": True, "cuda_graph_impl": "transformer_engine",
    "cuda_graph_scope": ["moe_router", "moe_preprocess"], "cuda_graph_warmup_steps": 3,
    "moe_router_force_load_balancing": True, "use_distributed_optimizer": True,
    "accumulate_allreduce_grads_in_fp32": False, "overlap_grad_reduce": True, "overlap_param_gather": True,
    "optimizer_cpu_offload": False, "optimizer_offload_fraction": 1.0, "use_precision_aware_optimizer": False,
    "tp_comm_overlap": False, "cp_comm_type": ["p2p"], "train_iters": 50, "log_interval": 1, "profile": False,
    "profile_step_start": 10, "profile_step_end": 12, "log_throughput": True, "lr": 0.0003,
}


def arguments_dump(settings: Mapping[str, object]) -> str:
    """Megatron-LM's ``_print_args('arguments', args)``: sorted, dots to column 48, Python values."""
    lines = ["------------------------ arguments ------------------------"]
    body = ["  {} {} {}".format(k, "." * (48 - len(k)), v) for k, v in settings.items()]
    lines += sorted(body, key=lambda x: x.lower())
    lines.append("-------------------- end of arguments ---------------------")
    return "\n".join(lines) + "\n"


def iteration_line(it: int, train_iters: int, elapsed_s: float, gbs: int, tflops: float | None,
                   timestamp: str = "2026-07-25 10:00:00") -> str:
    s = f" [{timestamp}] iteration {it:8d}/{train_iters:8d} |"
    s += f" consumed samples: {it * gbs:12d} |"
    s += f" elapsed time per iteration (ms): {elapsed_s * 1000.0:.1f} |"
    if tflops is not None:
        s += f" throughput per GPU (TFLOP/s/GPU): {tflops:.1f} |"
    s += " learning rate: 3.000000E-04 |"
    s += f" global batch size: {gbs:5d} |"
    s += " lm loss: 9.871234E+00 | loss scale: 1.0 | grad norm: 1.234 |"
    s += " number of skipped iterations:   0 | number of nan iterations:   0 |"
    return s


def mlm_memory_line(rank: int, it: int, alloc_gib: float, max_alloc_gib: float, reserved_gib: float,
                    max_reserved_gib: float) -> str:
    mb = GIB / 1024**2
    return (f"[Rank {rank}] (after {it} iterations) memory (MB) | allocated: {alloc_gib * mb:.2f} | "
            f"max allocated: {max_alloc_gib * mb:.2f} | reserved: {reserved_gib * mb:.2f} | "
            f"max reserved: {max_reserved_gib * mb:.2f}")


def bridge_memory_line(rank: int, it: int, alloc_gib: float, max_alloc_gib: float, reserved_gib: float,
                       max_reserved_gib: float) -> str:
    def gb(x: float) -> float:
        v = x * GIB / 1e9
        return round(v, -int(math.floor(math.log10(abs(v)))) + 4)

    return (f"[Rank {rank}] (after {it} iterations) memory (GB) | mem-allocated-gigabytes: {gb(alloc_gib)} | "
            f"mem-active-gigabytes: {gb(alloc_gib)} | mem-inactive-gigabytes: 0.5 | "
            f"mem-reserved-gigabytes: {gb(reserved_gib)} | mem-max-allocated-gigabytes: {gb(max_alloc_gib)} | "
            f"mem-max-active-gigabytes: {gb(max_alloc_gib)} | mem-max-inactive-gigabytes: 1.2 | "
            f"mem-max-reserved-gigabytes: {gb(max_reserved_gib)} | mem-alloc-retires: 0 | mem-allocated-count: 51234")


def step_times(steady_s: float, n: int, warm: Sequence[float] = (3.0, 1.4), jitter: float = 0.004) -> list[float]:
    """Iteration 1.. n: slow warm-up factors, then the steady time with a deterministic +-jitter."""
    out = [steady_s * w for w in warm]
    out += [steady_s * (1 + jitter * math.sin(1.7 * i)) for i in range(n - len(warm))]
    return out


def mlm_log(settings: Mapping[str, object], times_s: Sequence[float], *, tflops_steady: float | None,
            peak_alloc_gib: float, peak_reserved_gib: float, ranks: Sequence[int] = (0,), memory_at: int = 1,
            steady_s: float | None = None, first_iteration: int = 1, every: int = 1) -> str:
    """A Megatron-LM log: banner dump, iteration lines (TFLOP/s = tflops_steady x steady_s / time), one
    memory report (``steady_s`` defaults to the median of the times after two warm-up iterations).
    ``first_iteration`` > 1: a job resumed from the checkpoint of iteration ``first_iteration - 1`` (it prints
    its arguments again and logs on from there; ``memory_at`` counts the lines it logged). ``every``: the
    iterations between lines (``log_interval``: lines at ``first_iteration``, ``first_iteration + every``, ...)."""
    gbs = int(settings["global_batch_size"])  # type: ignore[arg-type]
    n = int(settings.get("train_iters", len(times_s)))  # type: ignore[arg-type]
    steady = steady_s or (statistics.median(times_s[2:] or times_s) if times_s else 1.0)
    out = ["using world size: {}".format(settings.get("world_size")), arguments_dump(settings)]
    for k, t in enumerate(times_s, start=1):
        i = first_iteration + (k - 1) * every
        tf = None if tflops_steady is None else tflops_steady * steady / t
        out.append(iteration_line(i, n, t, gbs, tf))
        if k == memory_at:
            for k, r in enumerate(ranks):
                scale = 1.0 - 0.03 * k  # the first rank listed is the most loaded
                out.append(mlm_memory_line(r, i, 0.6 * peak_alloc_gib * scale, peak_alloc_gib * scale,
                                           peak_reserved_gib * scale, peak_reserved_gib * scale))
    return "\n".join(out) + "\n"


def bridge_summary(model: Mapping[str, object], train: Mapping[str, object], dataset: Mapping[str, object],
                   ddp: Mapping[str, object] = (), optimizer: Mapping[str, object] = (),
                   other: Mapping[str, Mapping[str, object]] = {}) -> str:
    """Megatron Bridge's ``log_non_default_values``: Mcore sections list non-defaults only; ``other``: more of
    the other sections (``{"checkpoint": {"load": ...}, "logger": {"log_interval": 10}}``)."""
    lines = ["", "=" * 70, "Configuration Summary (Non-Default Values vs Megatron Core)", "=" * 70]
    for name, section, cls in (("optimizer", optimizer, "OptimizerConfig"), ("ddp", ddp, "DistributedDataParallelConfig"),
                               ("model", model, "TransformerConfig")):
        if section:
            lines.append(f"\n[{name}] Non-default values (vs Mcore {cls}):")
            for k, v in sorted(dict(section).items()):
                lines.append(f"  {k}: {v!r}  (Mcore default: None)")
    lines += ["\n" + "-" * 70, "Other Configuration Values:", "-" * 70]
    for name, section in (("train", train), ("dataset", dataset), *other.items()):
        lines.append(f"\n[{name}]:")
        for k, v in sorted(dict(section).items()):
            lines.append(f"  {k}: {v!r}")
    lines.append("\n" + "=" * 70)
    return "\n".join(lines) + "\n"
