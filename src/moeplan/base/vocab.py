"""moeplan's vocabulary: every list of names a run is described with, in one place.

Recompute and offload labels are Megatron-Core's own (``TransformerConfig.recompute_modules`` /
``offload_modules``); which labels a given Megatron-Core release accepts is a version rule and lives in
:mod:`moeplan.base.fields`. Everything else (the run record, the readers, the exports, the CLI's
choices) imports these names; nothing re-types them.

A leaf: imports nothing from moeplan.
"""

from __future__ import annotations

from typing import Literal, get_args

# Megatron-Core ``recompute_modules`` labels (transformer_config.py, core_r0.14-r0.18; r0.19 adds
# gdn_norm_out).
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                      "shared_experts", "gdn_norm_out", "mhc")
# The guidance's shorthand and its Megatron-Core label.
RECOMPUTE_ALIASES: dict[str, str] = {"up_proj": "mla_up_proj", "norm": "layernorm", "act": "moe_act",
                                     "attn": "core_attn"}
RecomputeGranularity = Literal["none", "selective", "full"]
RECOMPUTE_GRANULARITIES: tuple[str, ...] = get_args(RecomputeGranularity)
# Megatron-Core ``recompute_method`` of full recompute
RecomputeMethod = Literal["uniform", "block"]
RECOMPUTE_METHODS: tuple[str, ...] = get_args(RecomputeMethod)

# Megatron-Core ``offload_modules`` (fine-grained activation offloading, core_r0.16+) that moeplan models.
OFFLOAD_MODULES: tuple[str, ...] = ("core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm",
                                    "qkv_linear", "fused_group_mlp")

# The optimizer CPU offload fractions (optimizer_offload_fraction) the planner and the linter try, besides 0.
OFFLOAD_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)

# GEMM precisions: fp8 = blockwise scaling (DeepSeek-V3 recipe), fp8-cs = current scaling, fp8-ds = delayed
# scaling, mxfp8 = Blackwell block scaling, nvfp4 = Blackwell NVFP4 training (Megatron-Core fp4 e2m1 with
# fp4_recipe nvfp4, TE >= 2.7; Bridge bf16_with_nvfp4_mixed).
Precision = Literal["bf16", "fp8", "fp8-cs", "fp8-ds", "mxfp8", "nvfp4"]
PRECISIONS: tuple[str, ...] = get_args(Precision)  # the Literal is the one list
# Transformer Engine quantization configs moeplan knows (Megatron-Core ``TransformerConfig.quant_recipe``, read by
# megatron.core.quantization.utils.load_quantization_recipe; Megatron-LM ``--te-precision-config-file``): each a
# map of module -> precision overrides by GEMM name (moeplan.engine.flops), "mtp" for the MTP modules (their layer
# and eh_proj; moeplan.engine.timing.quant_map applies them). "nemotron3": Megatron Bridge
# src/megatron/bridge/perf_recipes/nemotronh/te_quant.cfg (067f987d), the quant_recipe of every Nemotron-3 Super
# NVFP4 perf recipe (B200 / B300 / GB200 / GB300 / VR200): matchers attn_qkv_bf16 ``*.linear_qkv`` and
# attn_proj_bf16 ``*.linear_proj`` -> bf16 (the attention layers' projections), latent_bf16
# ``*mlp.fc[12]_latent_proj`` -> bf16 (LatentMoE's down / up projections), mtp_bf16 ``mtp.*`` -> bf16,
# mamba_outproj_mxfp8 ``*mixer.out_proj`` -> mxfp8 (Mamba-2's output projection). Everything else (Mamba-2's
# in_proj, the routed and shared experts) runs the run's recipe (NVFP4).
TeQuantMap = Literal["none", "nemotron3"]  # the knob's values (te_quant_map): the maps' names
TE_QUANT_MAPS: dict[str, dict[str, str]] = {
    "none": {},
    "nemotron3": {"qkv": "bf16", "o_proj": "bf16", "latent_fc1": "bf16", "latent_fc2": "bf16", "mtp": "bf16",
                  "mamba_out_proj": "mxfp8"},
}
TE_QUANT_MAP_NAMES: tuple[str, ...] = get_args(TeQuantMap)
assert set(TE_QUANT_MAP_NAMES) == set(TE_QUANT_MAPS), "every TE quantization config is a value of TeQuantMap"

# MoE token dispatchers (Megatron-Core moe_token_dispatcher_type, flex = DeepEP / HybridEP / NCCL EP backends).
Dispatcher = Literal["alltoall", "allgather", "deepep", "hybridep", "ncclep"]
DISPATCHERS: tuple[str, ...] = get_args(Dispatcher)
# the flex dispatcher's backends (Megatron-Core moe_token_dispatcher_type flex + moe_flex_dispatcher_backend;
# ncclep: core_v0.19.0, NCCL Expert Parallelism through Transformer Engine's transformer_engine.pytorch.ep)
FLEX_DISPATCHERS: tuple[str, ...] = ("deepep", "hybridep", "ncclep")

# CUDA graph scopes (Megatron-Core ``cuda_graph_scope``; partial graphs that work with dropless MoE, and the
# whole iteration).
CUDA_GRAPH_SCOPES: tuple[str, ...] = ("attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba",
                                      "full_iteration")
# The partial scopes that work with dropless MoE (the routed experts' shapes change every step, so they stay
# out; Megatron Bridge's MoE perf recipes set these three): what the planner tries, the rationale and the linter
# cost.
DROPLESS_MOE_GRAPH_SCOPES: frozenset[str] = frozenset({"attn", "moe_router", "moe_preprocess"})
# The scopes of a layer's token-mixer block (attention, Mamba): a layer without a mixer has none of them.
MIXER_GRAPH_SCOPES: frozenset[str] = frozenset({"attn", "mamba"})

# Context-parallel communication (moeplan spelling; Megatron-Core writes all_gather): p2p = ring.
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
CP_COMM_TYPES: tuple[str, ...] = get_args(CpCommType)

# Megatron-FSDP ``data_parallel_sharding_strategy`` values (distributed_data_parallel_config.py and
# megatron/training/arguments.py --data-parallel-sharding-strategy, core_v0.14.0 .. core_v0.19.0), in order of
# what they shard: optimizer state, + gradients, + parameters.
FsdpStrategy = Literal["no_shard", "optim", "optim_grads", "optim_grads_params"]
FSDP_STRATEGIES: tuple[str, ...] = get_args(FsdpStrategy)
# Optimizers moeplan models: Adam (AdamW) and Muon (megatron/core/optimizer/muon.py, core_v0.16.0+).
Optimizer = Literal["adam", "muon"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
# Muon tensor-parallel modes moeplan costs (OptimizerConfig.muon_tp_mode; "distributed" is not modelled).
MuonTpMode = Literal["blockwise", "duplicated"]
MUON_TP_MODES: tuple[str, ...] = get_args(MuonTpMode)

# Megatron-Core release targeted when none is given: megatron-core 0.16.1 is the newest release installable here.
DEFAULT_MCORE_VERSION = "0.16"
# Megatron Bridge launch commands `plan --format` and the MCP export tool write (moeplan.megatron.launch)
LAUNCH_FORMATS = ("bridge-launch", "perf-launch")

# The GPU (hardware catalog name) assumed wherever none is named: the CLI, the API and run files whose
# '# moeplan:' comment names none.
DEFAULT_GPU = "h100"

# GiB per GPU outside the estimate: CUDA context, NCCL buffers and allocator fragmentation.
DEFAULT_RESERVE_GIB = 2.0

# Share of HBM the planner leaves free by default; the linter's recommended fixes are held to it too.
DEFAULT_HEADROOM = 0.10

# Smallest tokens/s gain moeplan reports as a gain: below it two choices are the same plan to the model
# (the timing estimate's own rounding and the bound's slack are far below it, its error band far above).
# The planner keeps the guidance's default knob unless another gains more than this, and a newer
# Megatron-Core release is said to "gain" only above it. The linter's warnings use rules.MIN_GAIN (3%).
RESOLVED_GAIN = 0.01

# Items (GEMMs, attention, exposed and overlapped communication, recompute) nested in the operations: every
# forward of a rank has the same items with the same durations, and so has every backward (the time model
# gives one breakdown per rank and direction), so beyond TRACE_DETAIL_MICROBATCHES micro-batches the trace
# carries them for the first and the last TRACE_DETAIL_MICROBATCHES / 2 only (warm-up and cool-down both
# shown), and says so. Every operation, PP flow, DP collective, optimizer step and memory change stays.
# DeepSeek-V3 PP 8 VPP 4 at 512 micro-batches: 514k events, 55 MB in full; 156k events, 19 MB capped (its
# 32,768 operations and 31,744 PP flows are most of that).
TRACE_DETAIL_MICROBATCHES = 64  # moeplan.engine.timeline.trace_detail applies it; --trace's help names it

# Layouts a plan search refines (dispatcher, EP overlap, CUDA graphs, sharding) at least, whatever --top asks: plan 1
# is the same for any --top up to half of it (beyond, 2 layouts per plan asked). moeplan.plan.planner applies it; `plan
# --help` names it. With 12, `--top 10` found another plan 1 than the default 5 (2026-12-04).
REFINE_MIN = 48

__all__ = [
    "CP_COMM_TYPES", "CUDA_GRAPH_SCOPES", "CpCommType", "DROPLESS_MOE_GRAPH_SCOPES", "MIXER_GRAPH_SCOPES", "DEFAULT_GPU", "DEFAULT_HEADROOM", "DEFAULT_MCORE_VERSION", "DEFAULT_RESERVE_GIB", "DISPATCHERS", "FLEX_DISPATCHERS",
    "Dispatcher", "FSDP_STRATEGIES", "FsdpStrategy", "MUON_TP_MODES", "MuonTpMode", "OFFLOAD_MODULES", "OPTIMIZERS", "Optimizer", "PRECISIONS", "Precision", "RECOMPUTE_ALIASES", "RECOMPUTE_GRANULARITIES", "RECOMPUTE_METHODS",
    "RECOMPUTE_MODULES", "REFINE_MIN", "RESOLVED_GAIN", "RecomputeGranularity", "RecomputeMethod", "TE_QUANT_MAP_NAMES", "TE_QUANT_MAPS", "TeQuantMap", "TRACE_DETAIL_MICROBATCHES",
]
