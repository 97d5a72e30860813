"""Argument types (token counts, lengths, positive integers), the argument groups several commands share
(cluster, run layout and knobs, sweep, unsaid settings) and the keyword arguments they become."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.base.limits import run_problem, sweep_lengths_problem
from moeplan.base.te_release import (DEFAULT_TE_VERSION, GROUPED_TENSOR_ENV, GROUPED_TENSOR_FIRST_VERSION, TE_COMMIT,
                                     TE_RELEASES)
from moeplan.base.vocab import (CP_COMM_TYPES, DEFAULT_GPU, DEFAULT_MCORE_VERSION, DEFAULT_RESERVE_GIB, DISPATCHERS,
                                FSDP_STRATEGIES, OPTIMIZERS, PRECISIONS, TRACE_DETAIL_MICROBATCHES)
from moeplan.cli.output import api, read_strategy
from moeplan.run.attention_backend import TE_WIDE_HEAD_FIX_VERSION


HARDWARE_DOC = "docs/hardware.md (example: examples/hardware_h100_200g.yaml)"
TE_VERSION_HELP = (f"Transformer Engine release the run trains with, one of {', '.join(TE_RELEASES)} (default "
                   f"{DEFAULT_TE_VERSION}, the recipes' TE {TE_COMMIT}: every calibrated number was measured on it). It "
                   f"decides the attention kernel per head shape: from {TE_WIDE_HEAD_FIX_VERSION} (TE PR #3056, cuDNN 9.23) "
                   "cuDNN trains head dim 256 on B200/GB200/B300/GB300, so Qwen3-Next gets the cuDNN rate instead of "
                   "FlashAttention-2 (sm100) or the unfused path (sm103), whose s x s scores and no-CP rule disappear")
TE_GROUPED_TENSOR_HELP = (
    f"run the routed experts on TE GroupedLinear's grouped-tensor path ({GROUPED_TENSOR_ENV}=1, TE "
    f"{GROUPED_TENSOR_FIRST_VERSION}+, opt-in in every release; no released Megatron-Core has an option for it): one "
    "grouped quantize and one cuBLASLt grouped GEMM per linear instead of one per local expert, which removes the "
    "per-expert host launches of quantized experts. With Megatron-Core <= 0.19 it runs BF16 (TE 2.17, 2.18) and FP8 "
    "current scaling (TE 2.18) on H100/H200/B200/GB200/B300/GB300 in a CUDA 13 container (cuBLASLt 13.3+); MXFP8 "
    "and FP8 block scaling quantize 128-row blocks Megatron-Core does not pad to, and TE 2.19 needs the token "
    "counts on the GPU, so those raise: estimate refuses the flag there, plan keeps only runs whose experts TE's op "
    "fuser runs (it does not read the variable) and refuses it where none is left, check reports it as an error)")
HARDWARE_HELP = f"extra GPU definitions; format, units and an example in {HARDWARE_DOC}"


def parse_tokens(text: str, bound: str = "seq_len") -> int:
    """'128k' -> 131072, '4096' -> 4096, '1m' -> 1048576 (powers of two, as sequence lengths are), within the bound
    of the run size ``bound`` (moeplan.base.limits)."""
    t = str(text).strip().lower()
    scale = 1
    if t.endswith("k"):
        scale, t = 1024, t[:-1]
    elif t.endswith("m"):
        scale, t = 1024 * 1024, t[:-1]
    try:
        value = int(float(t) * scale)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a token count: '{text}' (use e.g. 4096, 32k, 128k)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: '{text}'")
    return _within(bound, value)


def parse_batch_tokens(text: str) -> int:
    """--gbs-tokens: :func:`parse_tokens` within the bound of tokens per batch."""
    return parse_tokens(text, "gbs_tokens")


def _within(name: str, value: int) -> int:
    """``value`` within moeplan.base.limits' bound of the run size ``name`` (argparse's one-line error past it)."""
    problem = run_problem(name, value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def bounded_int(name: str, least: int = 1) -> Callable[[str], int]:
    """An argparse type: an integer >= ``least`` within the bound of the run size ``name`` (moeplan.base.limits)."""
    def parse(text: str) -> int:
        return _within(name, _int_from(text, least, "positive" if least == 1 else f">= {least}"))
    parse.__name__ = name  # argparse's 'invalid <name> value'
    return parse


def _int_from(text: str, least: int, words: str) -> int:
    """An argparse integer of at least ``least``; ``words`` says the bound in the error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: '{text}'") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {words}: '{text}'")
    return value


def positive_int(text: str) -> int:
    """A GPU count or a parallel size: positive, within the GPU-count bound (moeplan.base.limits)."""
    return _within("gpus", _int_from(text, 1, "positive"))


def nonnegative_int(text: str) -> int:
    return _int_from(text, 0, ">= 0")


def add_run_arguments(p: argparse.ArgumentParser, layout: bool = True) -> None:
    """Arguments shared by estimate / plan / report (estimate: --seq-len and --gbs may come from --strategy)."""
    p.add_argument("model", metavar="MODEL", help="catalog name or path to config.json")
    p.add_argument("--seq-len", type=parse_tokens, required=not layout, help="sequence length, e.g. 32k, 128k")
    p.add_argument("--gbs", type=bounded_int("gbs"), required=not layout, help="global batch size in sequences")
    _cluster_arguments(p, required=True)
    if layout:
        p.add_argument("--mbs", type=positive_int, default=1, help="micro-batch size (default 1)")
        for name, what in (("tp", "tensor"), ("pp", "pipeline"), ("vpp", "virtual pipeline (chunks per rank)"),
                           ("cp", "context"), ("ep", "expert"), ("etp", "expert tensor")):
            p.add_argument(f"--{name}", type=positive_int, default=1, help=f"{what} parallel size (default 1)")
        p.add_argument("--pipeline-layout", help="Megatron pipeline_model_parallel_layout, e.g. 'Et|(tt|)*30mL'")
        p.add_argument("--recompute", default="none",
                       help="none | full[:uniform|block[:N]] | selective:MOD[,MOD] with Megatron-Core labels "
                            "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, gdn_norm_out")
        p.add_argument("--dispatcher", default="auto", choices=["auto", *DISPATCHERS],
                       help="MoE token dispatcher; auto = HybridEP on NVL72, the faster of DeepEP/HybridEP on NVL8")
        p.add_argument("--ep-overlap", action="store_true", help="overlap EP all-to-all with compute (moe_a2a_overlap)")
        p.add_argument("--delay-wgrad", action=argparse.BooleanOptionalAction, default=None,
                       help="delay_wgrad_compute: with --ep-overlap, run the weight-gradient GEMMs as separate nodes "
                            "beside dispatch_bwd / the next combine_bwd (default: on with --ep-overlap, as Bridge's "
                            "moe_a2a_overlap sets it)")
        p.add_argument("--cuda-graphs", help="CUDA graph scopes, e.g. attn,moe_router,moe_preprocess or full_iteration")
        p.add_argument("--optimizer-offload", type=float, default=0.0, metavar="F",
                       help="fraction of optimizer state on the CPU (optimizer_offload_fraction; default 0)")
        p.add_argument("--offload-modules", help="fine-grained activation offload, e.g. core_attn,attn_proj")
        p.add_argument("--cp-comm-type", default="p2p", choices=list(CP_COMM_TYPES),
                       help="context-parallel communication (Megatron-Core cp_comm_type; p2p = ring; default p2p)")
        p.add_argument("--capacity-factor", type=float, help="moe_expert_capacity_factor (token dropping)")
        p.add_argument("--rank-capacity-factor", type=float, metavar="F",
                       help="moe_expert_rank_capacity_factor: sync-free dropless MoE for full-iteration CUDA graphs "
                            "(Megatron-Core 0.18+, HybridEP; Bridge perf recipes use 1.5)")
        p.add_argument("--fsdp", default=None, choices=["off", *FSDP_STRATEGIES],  # None: off, or a --strategy file's
                       help="Megatron-FSDP data_parallel_sharding_strategy (use_megatron_fsdp, Megatron-Core 0.14+); "
                            "off = distributed optimizer (default, or the --strategy file's)")
        _fsdp_buffer_argument(p)


def _fsdp_buffer_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fsdp-double-buffer", action="store_true",
                   help="Megatron-FSDP fsdp_double_buffer: two persistent buffers per unit size (needed for NCCL "
                        "user buffers); caps the gather prefetch and the reduce-scatter queue at two layers")


def _numerics(args: argparse.Namespace) -> dict[str, Any]:
    """Gradient and Adam-moment dtypes and the optimizer: the user's numerics, passed to every
    estimating command."""
    return {"grad_fp32": not args.bf16_grads, "bf16_moments": args.bf16_moments, "optimizer": args.optimizer,
            "mtp_layers": args.mtp_layers, "te_version": args.te_version or DEFAULT_TE_VERSION,
            "te_grouped_tensor": args.te_grouped_tensor}


def run_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        gpu=args.gpu, gpus=args.gpus, seq_len=args.seq_len, gbs=args.gbs, precision=args.precision,
        hardware_file=args.hardware, moe_imbalance=_imbalance(args), reserve_gib=_reserve(args),
        mcore_version=args.mcore_version, cal=args.cal, **_numerics(args),
    )
    if hasattr(args, "tp"):
        kw.update(
            mbs=args.mbs, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep, etp=args.etp,
            pipeline_layout=args.pipeline_layout, recompute=args.recompute, dispatcher=args.dispatcher,
            ep_overlap=args.ep_overlap, delay_wgrad=args.delay_wgrad, cuda_graphs=args.cuda_graphs, optimizer_offload=args.optimizer_offload,
            offload_modules=args.offload_modules, cp_comm_type=args.cp_comm_type,
            capacity_factor=args.capacity_factor, rank_capacity_factor=args.rank_capacity_factor,
            fsdp=args.fsdp, fsdp_double_buffer=args.fsdp_double_buffer,
        )
    return kw


def strategy_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """build_config arguments of `moeplan estimate`: the flags, or a strategy file with the flags that differ
    from their defaults on top (model and cluster always come from the command line)."""
    given = run_kwargs(args)
    if not args.strategy:
        if args.seq_len is None or args.gbs is None:
            raise MoeplanError("estimate needs --seq-len and --gbs, or --strategy FILE.yaml")
        return given
    import inspect

    merged = read_strategy(args.strategy)
    defaults = {k: v.default for k, v in inspect.signature(api.build_config).parameters.items()}
    for key, value in given.items():
        if key not in merged or (value is not None and value != defaults.get(key, inspect.Parameter.empty)):
            merged[key] = value
    return merged


def fixed(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for key in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value
    if getattr(args, "dispatcher", None) not in (None, "auto"):
        out["dispatcher"] = args.dispatcher
    if getattr(args, "recompute", None):
        out["recompute"] = args.recompute
    return out


def parse_lengths(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"empty item in '{text}': give comma-separated lengths, e.g. 16k,32k,64k")
    problem = sweep_lengths_problem(len(items))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    out = [parse_tokens(t) for t in items]
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"a length appears twice in '{text}'")
    return out


def held_layout(args: argparse.Namespace) -> dict[str, Any] | None:
    keys = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")
    held = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    if not held and not args.hold:
        return None
    held.update(recompute=args.recompute or "none", dispatcher=args.dispatcher or "auto",
                optimizer_offload=args.optimizer_offload, cp_comm_type=args.cp_comm_type)
    return held


def sweep_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The cluster and run settings (_cluster_arguments, and Megatron-FSDP) as API keywords: plan, a report's
    plans and its sweep rows, a sweep, explain's MODEL lengths."""
    return dict(gpu=args.gpu, gpus=args.gpus, precision=args.precision, hardware_file=args.hardware,
                moe_imbalance=_imbalance(args), reserve_gib=_reserve(args), mcore_version=args.mcore_version,
                cal=args.cal, fsdp=args.fsdp, fsdp_double_buffer=args.fsdp_double_buffer, **_numerics(args))


TRACE_HELP = ("write one iteration as a Chrome trace-event JSON (open in https://ui.perfetto.dev or chrome://tracing): "
              "one process per pipeline rank; forwards and backwards in Megatron-Core's interleaved 1F1B order, "
              "compute and TP/CP/EP/PP/DP communication tracks, recompute, optimizer, offload; the most loaded "
              f"rank's memory as a counter. Beyond {TRACE_DETAIL_MICROBATCHES} micro-batches only the first and the last "
              f"{TRACE_DETAIL_MICROBATCHES // 2} carry the items nested in their operations (GEMMs, attention, communication: "
              "every other operation repeats them exactly); every operation, flow and memory change stays, and the "
              "file's otherData says so. A FILE.json.gz (or .gz) name writes it gzip-compressed, which both open "
              "(~10x smaller)")


def _cluster_arguments(p: argparse.ArgumentParser, required: bool) -> None:
    """GPU, count, precision and the modelling knobs every estimating command takes."""
    p.add_argument("--gpu", default=DEFAULT_GPU, help=f"GPU name from `moeplan hardware` (default {DEFAULT_GPU})")
    p.add_argument("--gpus", type=positive_int, required=required, help="total GPU count")
    p.add_argument("--precision", default="bf16", choices=list(PRECISIONS),
                   help="GEMM precision: fp8 = blockwise (Hopper), fp8-cs current scaling, mxfp8 (Blackwell)")
    p.add_argument("--hardware", metavar="FILE.yaml", help=HARDWARE_HELP)
    p.add_argument("--mtp-layers", type=bounded_int("mtp_layers", 0), default=None, metavar="N",
                   help="multi-token prediction modules trained (Megatron-Core mtp_num_layers; default: the model's "
                        "config, none for Qwen3-Next, whose checkpoint holds one and whose Bridge recipes train 1)")
    unsaid_arguments(p)
    calibration_argument(p)
    p.add_argument("--mcore-version", default=DEFAULT_MCORE_VERSION,
                   help=f"Megatron-Core version targeted: field names, allowed values, rules (default {DEFAULT_MCORE_VERSION})")
    p.add_argument("--te-version", help=TE_VERSION_HELP)
    p.add_argument("--te-grouped-tensor", action="store_true", help=TE_GROUPED_TENSOR_HELP)
    p.add_argument("--bf16-grads", action="store_true",
                   help="main grads reduced and accumulated in bf16 (grad_reduce_in_fp32=False, as Megatron Bridge "
                        "perf recipes do); default fp32")
    p.add_argument("--bf16-moments", action="store_true",
                   help="precision-aware optimizer with bf16 Adam moments (exp_avg/exp_avg_sq, as the DeepSeek-V3 "
                        "recipes do); default fp32")
    p.add_argument("--optimizer", default="adam", choices=list(OPTIMIZERS),
                   help="adam (distributed optimizer or Megatron-FSDP) or muon (Megatron-Core 0.16+ dist_muon: one "
                        "fp32 momentum per 2-D weight, Newton-Schulz each step; embeddings, output layer and norms "
                        "stay on Adam; no CPU offload or bf16 moments); default adam")


def fsdp_search_argument(p: argparse.ArgumentParser) -> None:
    """--fsdp and --fsdp-double-buffer of the searching commands (plan, report)."""
    p.add_argument("--fsdp", default="auto", choices=["auto", "off", *FSDP_STRATEGIES],
                   help="Megatron-FSDP: auto = search optim_grads_params beside the distributed optimizer (default), "
                        "off = distributed optimizer only, or pin a data_parallel_sharding_strategy")
    _fsdp_buffer_argument(p)


def _imbalance(args: argparse.Namespace) -> float:
    """--moe-imbalance as the planning commands take it (unset: force-balanced routing, 1.0)."""
    return 1.0 if args.moe_imbalance is None else float(args.moe_imbalance)


def _reserve(args: argparse.Namespace) -> float:
    """--reserve-gib as the planning commands take it (unset, where a run file could say it: the default)."""
    return DEFAULT_RESERVE_GIB if args.reserve_gib is None else float(args.reserve_gib)


def unsaid_arguments(p: argparse.ArgumentParser, from_file: bool = False) -> None:
    """What no Megatron field says: routing imbalance and the memory reserve (``from_file``: check, where a
    moeplan export's '# moeplan:' comment says what its plan assumed, and an unset flag takes that; explain of run
    files reads it the same way, whose unset flag is None too: :func:`_imbalance` for the planning commands)."""
    said = ", else a run file's '# moeplan:' comment" if from_file else ""
    p.add_argument("--moe-imbalance", type=float, default=None,
                   help=f"tokens on the busiest expert rank / mean; 1.0 = force-balanced routing (default{said}); capped "
                        "per layout at EP x min(top-k, local experts) / top-k, every token on one rank")
    p.add_argument("--reserve-gib", type=float, default=None,
                   help=f"GiB per GPU kept for CUDA context, NCCL and fragmentation (default {DEFAULT_RESERVE_GIB:g}, or "
                        f"the --calibration profile's{said})")


def calibration_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calibration", metavar="PROFILE.yaml",
                   help="timing constants (and memory reserve) fitted to your cluster by `moeplan calibrate --out`")


def _gbs_is_tokens_here(text: str) -> int:
    raise argparse.ArgumentTypeError(
        f"the tokens per global batch are held constant across lengths here: give --gbs-tokens (e.g. 4m, or "
        f"GBS x seq-len), not --gbs {text}")


def sweep_arguments(p: argparse.ArgumentParser, required: bool = True,
                     seq_help: str = "comma-separated lengths, e.g. 16k,32k,64k") -> None:
    p.add_argument("--seq-len", type=parse_lengths, required=required, help=seq_help)
    p.add_argument("--gbs-tokens", type=parse_batch_tokens, required=required,
                   help="tokens per global batch, constant across lengths (e.g. 4m); GBS = tokens / seq")
    # Not an option here: without it argparse would take `--gbs N` (sequences, as plan and estimate read it)
    # as an abbreviation of --gbs-tokens N and silently plan N tokens per batch.
    p.add_argument("--gbs", type=_gbs_is_tokens_here, help=argparse.SUPPRESS)
    _cluster_arguments(p, required)
    p.add_argument("--hold", action="store_true", help="hold the layout given by the flags below at every length")
    for name in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs"):
        p.add_argument(f"--{name}", type=positive_int, help=f"{name.upper()} of the held layout")
    p.add_argument("--recompute", help="recompute of the held layout (none, full, selective:...)")
    p.add_argument("--dispatcher", choices=["auto", *DISPATCHERS],
                   help="MoE token dispatcher of the held layout (auto: the estimates' choice for the GPU)")
    p.add_argument("--optimizer-offload", type=float, default=0.0, metavar="F",
                   help="fraction 0-1 of the held layout's optimizer state on the CPU (optimizer_offload_fraction; "
                   "default 0)")
    p.add_argument("--cp-comm-type", default="p2p", choices=list(CP_COMM_TYPES),
                   help="context-parallel communication of the held layout (Megatron-Core cp_comm_type; default p2p)")
    p.add_argument("--fsdp", default="auto", choices=["auto", "off", *FSDP_STRATEGIES],
                   help="Megatron-FSDP: planned lengths search optim_grads_params beside the distributed optimizer "
                        "(auto, default), never (off), or pin a data_parallel_sharding_strategy; a held layout runs the "
                        "strategy given, else the distributed optimizer")
    _fsdp_buffer_argument(p)
