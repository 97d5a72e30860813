"""The Megatron field table and its version rules: every moeplan knob's Megatron-Core field, Megatron Bridge
path and Megatron-LM flag, and the values each Megatron-Core release accepts.

Facts (field names, flags, allowed values, the version each appeared) were read from the public
NVIDIA/Megatron-LM tags core_v0.13.1 ... core_v0.19.0 and NVIDIA-NeMo/Megatron-Bridge tags
v0.2.0 ... v0.6.0; see ``research/config_fields.md``. No code is taken from those repositories.

A leaf of the package: it imports only :mod:`moeplan.base.errors` and the names in :mod:`moeplan.base.vocab` (itself a
leaf), so the engine may ask it version questions without importing the exports or the readers.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from moeplan.base.errors import MoeplanError
from moeplan.base.vocab import (CP_COMM_TYPES, CUDA_GRAPH_SCOPES, DEFAULT_MCORE_VERSION, FSDP_STRATEGIES,
                                OFFLOAD_MODULES, RECOMPUTE_MODULES)

DEFAULT_VERSION = DEFAULT_MCORE_VERSION

Kind = Literal["int", "opt_int", "float", "opt_float", "bool", "str", "opt_str", "list", "int_list",
               "str_or_list", "scope", "dtype"]
Owner = Literal["TransformerConfig", "ModelParallelConfig", "OptimizerConfig", "DistributedDataParallelConfig",
                "training"]

# Placeholder in a Bridge path list for the version's dataset sequence-length key.
DATASET_SEQ = "dataset.<seq_length>"


@dataclass(frozen=True)
class Knob:
    """One Megatron field moeplan sets or reads."""

    field: str  # settings key: the Megatron-Core field (or Megatron-LM argument) name
    owner: Owner  # Megatron-Core dataclass that holds it ("training": Megatron-LM args / Bridge train/dataset)
    kind: Kind  # value type, for coercion when reading
    bridge: tuple[str, ...]  # Bridge override paths written on export, in priority order when reading
    mlm: str | None  # Megatron-LM flag
    mlm_false: str | None = None  # Megatron-LM flag that sets the field False
    bridge_read: tuple[str, ...] = ()  # further Bridge paths accepted when reading (lower priority)
    since: str = "0.13"
    until: str | None = None  # last version that has the field (inclusive); None = still present
    merge_any: bool = False  # several Bridge paths: True if any is True (Bridge syncs them)
    # written on export, read back as an architecture field (ParsedRun.architecture, where the pipeline split
    # options build the layout: moeplan.parallel.layout_from_split_options), not as a setting
    architecture: bool = False


def _k(field_: str, owner: Owner, kind: Kind, bridge: str | tuple[str, ...] | None = None, mlm: str | None = "",
       **kw: Any) -> Knob:
    """A table row; the Bridge path defaults to ``model.<field>``, the flag to ``--<field-with-dashes>``."""
    paths = (bridge,) if isinstance(bridge, str) else bridge if bridge is not None else (f"model.{field_}",)
    flag = "--" + field_.replace("_", "-") if mlm == "" else mlm
    return Knob(field_, owner, kind, paths, flag, **kw)


MPC: Owner = "ModelParallelConfig"
TC: Owner = "TransformerConfig"
OPT: Owner = "OptimizerConfig"
DDP: Owner = "DistributedDataParallelConfig"
TRAIN: Owner = "training"

KNOBS: tuple[Knob, ...] = (
    # Parallel sizes: megatron/core/model_parallel_config.py (core_v0.13.1 .. core_v0.19.0); flags from
    # megatron/training/arguments.py (no --virtual-pipeline-model-parallel-size flag exists in any version);
    # Bridge: every TransformerConfig field is model.<field> (src/megatron/bridge/training/config.py).
    _k("tensor_model_parallel_size", MPC, "int"),
    _k("pipeline_model_parallel_size", MPC, "int"),
    _k("virtual_pipeline_model_parallel_size", MPC, "opt_int", mlm="--num-virtual-stages-per-pipeline-rank"),
    _k("context_parallel_size", MPC, "int"),
    _k("hierarchical_context_parallel_sizes", MPC, "int_list"),
    _k("expert_model_parallel_size", MPC, "int"),
    _k("expert_tensor_parallel_size", MPC, "opt_int"),
    _k("sequence_parallel", MPC, "bool"),
    # Pipeline layout: transformer_config.py pipeline_model_parallel_layout, grammar in
    # megatron/core/transformer/pipeline_parallel_layer_layout.py (all versions).
    _k("pipeline_model_parallel_layout", TC, "opt_str"),
    # The even split's options (transformer_config.py, all versions): a layout excludes them ("cannot be set with
    # other pipeline layout arguments") and a recipe may set them (Bridge's Qwen3-235B-A22B recipes:
    # account_for_embedding / loss True), which would move layers off moeplan's split: the export states them.
    _k("account_for_embedding_in_pipeline_split", TC, "bool", architecture=True),
    _k("account_for_loss_in_pipeline_split", TC, "bool", architecture=True),
    _k("num_layers_in_first_pipeline_stage", TC, "opt_int", mlm="--decoder-first-pipeline-num-layers",
       architecture=True),
    _k("num_layers_in_last_pipeline_stage", TC, "opt_int", mlm="--decoder-last-pipeline-num-layers",
       architecture=True),
    # Batch and sequence: Megatron-LM --global-batch-size/--micro-batch-size/--seq-length; Bridge
    # train.* (TrainingConfig) and model.seq_length + dataset sequence length (validate() asserts equal).
    _k("global_batch_size", TRAIN, "int", "train.global_batch_size"),
    _k("micro_batch_size", TRAIN, "int", "train.micro_batch_size"),
    _k("seq_length", TRAIN, "int", ("model.seq_length", DATASET_SEQ),
       bridge_read=("dataset.seq_length", "dataset.sequence_length")),
    # Megatron-LM only (arguments.py); converted to VPP with the model's layer count.
    _k("num_layers_per_virtual_pipeline_stage", TRAIN, "opt_int", ()),
    # Multi-token prediction: transformer_config.py mtp_num_layers (all versions).
    _k("mtp_num_layers", TC, "opt_int"),
    # Hybrid (Mamba) stacks, architecture under Megatron-Core's names (moeplan.run.hybrid): megatron/training/
    # arguments.py --hybrid-override-pattern (core_v0.13.1 .. v0.16; deprecated from core_v0.17.0 for the unified
    # --hybrid-layer-pattern with '|' pipeline segments and '/' MTP depths); TransformerConfig is_hybrid_model and
    # mamba_state_dim / mamba_head_dim / mamba_num_groups / mamba_num_heads (core_v0.13.1+), moe_latent_size
    # (core_v0.16.0+). Bridge: MambaModelProvider hybrid_override_pattern, HybridModelProvider hybrid_layer_pattern.
    _k("hybrid_override_pattern", TRAIN, "opt_str", until="0.16"),
    _k("hybrid_layer_pattern", TRAIN, "opt_str", since="0.17"),
    _k("is_hybrid_model", TC, "bool"),
    _k("mamba_num_heads", TC, "opt_int"),
    _k("mamba_head_dim", TC, "int"),
    _k("mamba_state_dim", TC, "int"),
    _k("mamba_num_groups", TC, "int"),
    _k("moe_latent_size", TC, "opt_int", since="0.16"),
    # Experimental attention variants: transformer_config.py experimental_attention_variant (core_v0.16.0+: "dsa";
    # "dsv4_hybrid", DeepSeek-V4's, on Megatron-LM main after core_v0.19.0, here "0.20"), with the V4 attention's
    # csa_compress_ratios / csa_window_size and the grouped output projection (output_projection_groups /
    # output_projection_lora_rank: Megatron Bridge's DeepSeekV4HybridModelProvider "MCore main uses the
    # descriptive output_projection_* fields"); mHC hyper-connections (enable_mhc_connections,
    # mhc_num_residual_streams, use_fused_mhc: TransformerConfig on Megatron-LM main after core_v0.19.0).
    _k("experimental_attention_variant", TC, "opt_str", since="0.16"),
    _k("csa_compress_ratios", TC, "int_list", since="0.20"),
    _k("csa_window_size", TC, "opt_int", since="0.20"),
    _k("output_projection_groups", TC, "opt_int", since="0.20"),
    _k("output_projection_lora_rank", TC, "opt_int", since="0.20"),
    _k("enable_mhc_connections", TC, "bool", since="0.20"),
    _k("mhc_num_residual_streams", TC, "opt_int", since="0.20"),
    _k("use_fused_mhc", TC, "bool", since="0.20"),
    # Activation recompute: transformer_config.py recompute_* (all versions).
    _k("recompute_granularity", TC, "opt_str"),
    _k("recompute_method", TC, "opt_str"),
    _k("recompute_num_layers", TC, "opt_int"),
    _k("recompute_modules", TC, "list"),
    # MoE dispatcher: transformer_config.py; moe_flex_dispatcher_backend since core_v0.16.0 (moe_enable_deepep
    # deprecated then); overlap_moe_expert_parallel_comm since core_v0.14.0, set by Bridge
    # comm_overlap.overlap_moe_expert_parallel_comm (src/megatron/bridge/training/comm_overlap.py).
    _k("moe_token_dispatcher_type", TC, "str"),
    _k("moe_flex_dispatcher_backend", TC, "opt_str", since="0.16"),
    _k("moe_enable_deepep", TC, "bool"),
    _k("moe_expert_capacity_factor", TC, "opt_float"),
    # Router logits' dtype: transformer_config.py moe_router_dtype Literal['fp32', 'fp64'] | None (core_v0.13.1 ..
    # core_v0.19.0); Megatron-LM --moe-router-dtype.
    _k("moe_router_dtype", TC, "opt_str"),
    # Sync-free dropless MoE (core_v0.18.0 transformer_config.py): fixed per-rank buffers, HybridEP only (0.19:
    # or NCCL EP), with the TE op fuser; moe_paged_stash keeps activations in pages sized by the actual tokens.
    _k("moe_expert_rank_capacity_factor", TC, "opt_float", since="0.18"),
    _k("moe_paged_stash", TC, "bool", since="0.18"),
    _k("use_transformer_engine_op_fuser", TC, "bool", since="0.18"),
    # GLU gate / linear interleave of the experts' fc1 (core_v0.18.0 transformer_config.py; TEGroupedMLP passes it to
    # TE's ScaledSwiGLU): TE's CuTe DSL fused grouped MLP runs only at 32 (moeplan.base.te_release.FusedGroupedMLP)
    _k("moe_mlp_glu_interleave_size", TC, "opt_int", since="0.18"),
    _k("overlap_moe_expert_parallel_comm", TC, "bool", "comm_overlap.overlap_moe_expert_parallel_comm",
       bridge_read=("model.overlap_moe_expert_parallel_comm",), since="0.14"),
    # Delayed weight gradients: model_parallel_config.py delay_wgrad_compute (core_v0.13.1 .. core_v0.19.0; DDP
    # config's delay_wgrad_compute from 0.14, which Megatron-LM fills from the same --delay-wgrad-compute and Bridge
    # copies from comm_overlap.delay_wgrad_compute in CommOverlapConfig.setup); from core_v0.14.0 TransformerConfig
    # asserts overlap_moe_expert_parallel_comm with it (only the merged EP-overlap schedule calls backward_dw).
    _k("delay_wgrad_compute", MPC, "bool", "comm_overlap.delay_wgrad_compute",
       bridge_read=("model.delay_wgrad_compute",)),
    # CUDA graphs: enable_cuda_graph (local) / external_cuda_graph (TE) in all versions (deprecated from
    # 0.15); cuda_graph_impl since core_v0.15; cuda_graph_scope renamed cuda_graph_modules in core_v0.18
    # (megatron/core/transformer/cuda_graph_config.py). CUDA graphs need the TE RNG tracker (MLM
    # arguments.py; Bridge syncs model.use_te_rng_tracker with rng.te_rng_tracker).
    _k("enable_cuda_graph", TC, "bool"),
    _k("external_cuda_graph", TC, "bool"),
    _k("cuda_graph_impl", TC, "str", since="0.15"),
    _k("cuda_graph_scope", TC, "scope"),
    _k("cuda_graph_modules", TC, "scope", since="0.18"),
    _k("use_te_rng_tracker", TC, "bool", mlm="--te-rng-tracker", bridge_read=("rng.te_rng_tracker",), merge_any=True),
    # A full-iteration graph captures the loss: Bridge's ConfigContainer.validate() asserts the rerun state
    # machine's NaN check off with it (training/config.py, v0.3.0 .. v0.6.0: "check_for_nan_in_loss must be
    # disabled when using full_iteration CUDA graph"); Megatron-LM's flag is --no-check-for-nan-in-loss-and-grad.
    _k("check_for_nan_in_loss", TRAIN, "bool", "rerun_state_machine.check_for_nan_in_loss",
       mlm=None, mlm_false="--no-check-for-nan-in-loss-and-grad"),
    # Context parallel communication: transformer_config.py cp_comm_type (all versions; CLI nargs='+').
    _k("cp_comm_type", TC, "str_or_list"),
    # Fine-grained activation offloading: transformer_config.py, core_v0.16.0+.
    _k("fine_grained_activation_offloading", TC, "bool", since="0.16"),
    _k("offload_modules", TC, "list", since="0.16"),
    # core_v0.19.0 transformer_config.py activation_offload_fraction (asserted in [0, 1]; Megatron-LM flag from
    # the field's argparse metadata): the share of eligible offload groups offloaded.
    _k("activation_offload_fraction", TC, "float", since="0.19"),
    # FP8: TransformerConfig fp8 (flag --fp8-format) and fp8_recipe; Bridge sets them through
    # mixed_precision.* (src/megatron/bridge/training/mixed_precision.py), which also owns grad_reduce_in_fp32
    # and copies it into the DDP config.
    _k("fp8", TC, "opt_str", "mixed_precision.fp8", mlm="--fp8-format", bridge_read=("model.fp8",)),
    _k("fp8_recipe", TC, "str", "mixed_precision.fp8_recipe", bridge_read=("model.fp8_recipe",)),
    # FP8 attention: TransformerConfig fp8_dot_product_attention (Megatron-LM --fp8-dot-product-attention); Bridge's
    # mixed_precision.fp8_dot_product_attention, which its MXFP8 full-iteration perf recipes set (v0.6.0 perf_recipes).
    _k("fp8_dot_product_attention", TC, "bool", "mixed_precision.fp8_dot_product_attention",
       bridge_read=("model.fp8_dot_product_attention",)),
    # NVFP4: TransformerConfig fp4 Literal['e2m1'] and fp4_recipe Literal['nvfp4', 'custom'] (core_v0.16.1 ..
    # core_v0.19.0; Megatron-LM --fp4-format / --fp4-recipe, validate_args: TE >= 2.7, not with --fp8-format);
    # Bridge mixed_precision.fp4 / fp4_recipe (mixed_precision.py, recipe bf16_with_nvfp4_mixed).
    _k("fp4", TC, "opt_str", "mixed_precision.fp4", mlm="--fp4-format", bridge_read=("model.fp4",), since="0.16"),
    _k("fp4_recipe", TC, "str", "mixed_precision.fp4_recipe", bridge_read=("model.fp4_recipe",), since="0.16"),
    # Layers an FP8 / FP4 run keeps in BF16 (TransformerConfig first_last_layers_bf16, num_layers_at_start_in_bf16,
    # num_layers_at_end_in_bf16, core_v0.13.1 .. core_v0.19.0, defaults False / 1 / 1: fp8_utils / fp4_utils
    # get_fp8_context / get_fp4_context); Bridge mixed_precision.* (MixedPrecisionConfig defaults the counts to 0 and
    # copies them to the model; the Nemotron-3 Super NVFP4 preset sets the end count to 14).
    _k("first_last_layers_bf16", TC, "bool", "mixed_precision.first_last_layers_bf16",
       bridge_read=("model.first_last_layers_bf16",)),
    _k("num_layers_at_start_in_bf16", TC, "int", "mixed_precision.num_layers_at_start_in_bf16",
       bridge_read=("model.num_layers_at_start_in_bf16",)),
    _k("num_layers_at_end_in_bf16", TC, "int", "mixed_precision.num_layers_at_end_in_bf16",
       bridge_read=("model.num_layers_at_end_in_bf16",)),
    _k("grad_reduce_in_fp32", DDP, "bool", "mixed_precision.grad_reduce_in_fp32",
       mlm="--accumulate-allreduce-grads-in-fp32", mlm_false="--grad-reduce-in-bf16",
       bridge_read=("ddp.grad_reduce_in_fp32",)),
    # Optimizer: megatron/core/optimizer/optimizer_config.py (same names 0.13 .. 0.19); Megatron-LM
    # validate_args requires --use-precision-aware-optimizer with --optimizer-cpu-offload. Bridge turns the
    # distributed optimizer on when either ddp.* or optimizer.* asks for it.
    _k("use_distributed_optimizer", DDP, "bool", "ddp.use_distributed_optimizer",
       bridge_read=("optimizer.use_distributed_optimizer",), merge_any=True),
    _k("optimizer_cpu_offload", OPT, "bool", "optimizer.optimizer_cpu_offload"),
    _k("optimizer_offload_fraction", OPT, "float", "optimizer.optimizer_offload_fraction"),
    _k("overlap_cpu_optimizer_d2h_h2d", OPT, "bool", "optimizer.overlap_cpu_optimizer_d2h_h2d"),
    _k("use_precision_aware_optimizer", OPT, "bool", "optimizer.use_precision_aware_optimizer"),
    _k("exp_avg_dtype", OPT, "dtype", "optimizer.exp_avg_dtype"),
    _k("exp_avg_sq_dtype", OPT, "dtype", "optimizer.exp_avg_sq_dtype"),
    # optimizer_config.py main_grads_dtype (all versions; --main-grads-dtype fp32/bf16): OptimizerConfig asserts it
    # float32 (and the moments' dtypes too) unless use_precision_aware_optimizer, so an export that sets the latter
    # states the dtypes as well (Bridge's DeepSeek-V3 recipes set bf16 ones with the precision-aware optimizer)
    _k("main_grads_dtype", OPT, "dtype", "optimizer.main_grads_dtype"),
    # Communication overlap the timing model credits: ModelParallelConfig tp_comm_overlap (TE userbuffers;
    # Bridge comm_overlap.tp_comm_overlap), DDP overlap_grad_reduce / overlap_param_gather (Megatron-Core
    # distributed_data_parallel_config.py; Bridge ddp.*). Megatron's defaults are all False.
    # Bridge's CommOverlapConfig.setup (runtime_config_update) writes its own overlap_grad_reduce /
    # overlap_param_gather into the DDP config (True at DP > 1 unless the section sets them): the export writes
    # them in both places.
    _k("tp_comm_overlap", MPC, "bool", "comm_overlap.tp_comm_overlap", bridge_read=("model.tp_comm_overlap",)),
    _k("overlap_grad_reduce", DDP, "bool", ("ddp.overlap_grad_reduce", "comm_overlap.overlap_grad_reduce")),
    _k("overlap_param_gather", DDP, "bool", ("ddp.overlap_param_gather", "comm_overlap.overlap_param_gather")),
    # Megatron-FSDP: distributed_data_parallel_config.py use_megatron_fsdp (core_v0.14.0+; core_v0.13 had only
    # use_custom_fsdp), data_parallel_sharding_strategy and fsdp_double_buffer (core_v0.13.1+); flags
    # --use-megatron-fsdp / --data-parallel-sharding-strategy / --fsdp-double-buffer (arguments.py); Bridge
    # ddp.* (v0.2.0+ syncs dist.use_megatron_fsdp). Megatron-LM and Bridge require --ckpt-format fsdp_dtensor
    # with it (arguments.py validate_args; Bridge config.py _validate_and_apply_megatron_fsdp_configs).
    _k("use_megatron_fsdp", DDP, "bool", "ddp.use_megatron_fsdp", bridge_read=("dist.use_megatron_fsdp",),
       since="0.14", merge_any=True),
    _k("data_parallel_sharding_strategy", DDP, "str", "ddp.data_parallel_sharding_strategy"),
    _k("fsdp_double_buffer", DDP, "bool", "ddp.fsdp_double_buffer"),
    _k("ckpt_format", TRAIN, "str", "checkpoint.ckpt_format"),
    # Optimizer choice: optimizer_config.py optimizer (str, all versions; Megatron-LM --optimizer choices adam,
    # sgd, + muon, dist_muon from core_v0.16.0); Muon fields muon_num_ns_steps / muon_tp_mode (core_v0.16.0+),
    # use_layer_wise_distributed_optimizer (core_v0.18.0+, what 'dist_muon' turns on; read only).
    _k("optimizer", OPT, "str", "optimizer.optimizer"),
    _k("muon_num_ns_steps", OPT, "int", "optimizer.muon_num_ns_steps", since="0.16"),
    _k("muon_tp_mode", OPT, "str", "optimizer.muon_tp_mode", since="0.16"),
    _k("use_layer_wise_distributed_optimizer", OPT, "bool", "optimizer.use_layer_wise_distributed_optimizer",
       mlm=None, since="0.18"),
)
KNOB_BY_FIELD: dict[str, Knob] = {k.field: k for k in KNOBS}

# Labels by the release that added them (moeplan.base.vocab owns the names; this says when each appeared).
_RECOMPUTE_SINCE = {"shared_experts": "0.14", "gdn_norm_out": "0.19", "mhc": "0.20"}  # the others: all versions
_CORE_RECOMPUTE = tuple(m for m in RECOMPUTE_MODULES if m not in _RECOMPUTE_SINCE)
_OFFLOAD_019 = ("fused_group_mlp",)  # core_v0.19.0 transformer_config.py offload_modules (absent from core_v0.18.2)
_CORE_OFFLOAD = tuple(m for m in OFFLOAD_MODULES if m not in _OFFLOAD_019)  # the others: all since 0.16
# 0.16+ cuda_graph_scope values: moeplan's scopes, full_iteration first as Megatron-Core's enum lists it.
_SCOPES_016 = ("full_iteration", *(s for s in CUDA_GRAPH_SCOPES if s != "full_iteration"))
_DISPATCHERS = ("allgather", "alltoall", "flex")
_FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise")


@dataclass(frozen=True)
class TorchDtype:
    """A torch dtype as a Bridge config value (``bfloat16``): Bridge's instantiate reads it as
    ``{_target_: torch.bfloat16, _call_: false}`` (megatron/bridge/utils/instantiate_utils.py)."""

    name: str


# ConfigContainer sections a recipe may leave None (comm_overlap: Optional[CommOverlapConfig] = None) or hold as a
# registered recipe name (mixed_precision: Optional[Union[MixedPrecisionConfig, str]], e.g. "bf16_mixed" from
# recipes/common.py _pretrain_common): Bridge v0.3.1 and v0.6.2 training/config.py, and their recipes do both
# (Qwen3-235B-A22B / Qwen3-Next: None and "bf16_mixed"; DeepSeek-V3: instances). Hydra cannot set a field under
# None or a string ("Could not override 'comm_overlap.overlap_moe_expert_parallel_comm'"), so an export writes
# such a section as an instance: its class as ``_target_`` (Bridge's _apply_overrides instantiates a mapping
# with one) and ``++`` paths (Hydra's force-add, which turns None / a string into that mapping and merges into an
# existing instance), with the fields the class needs besides moeplan's: CommOverlapConfig's required
# tp_comm_overlap, and what the "bf16_mixed" recipe sets (mixed_precision.py bf16_mixed; moeplan's precisions
# are all BF16-based). Value: (class, base fields). The class is named where ConfigContainer's module
# (megatron/bridge/training/config.py, v0.3.1 and v0.6.2) imports it: the same class, and each override line
# stays within 80 columns (the CLI prints them unbroken, ready to copy).
BridgeSection = tuple[str, tuple[tuple[str, object], ...]]
_INSTANCE_SECTIONS: dict[str, BridgeSection] = {
    "comm_overlap": ("megatron.bridge.training.config.CommOverlapConfig", (("tp_comm_overlap", False),)),
    "mixed_precision": ("megatron.bridge.training.config.MixedPrecisionConfig",
                        (("bf16", True), ("params_dtype", TorchDtype("bfloat16")),
                         ("pipeline_dtype", TorchDtype("bfloat16")), ("autocast_enabled", False))),
}


@dataclass(frozen=True)
class _Allowed:
    """Allowed values of one Megatron-Core release (a row of the version table)."""

    recompute_modules: tuple[str, ...]
    offload_modules: tuple[str, ...]  # empty: no fine-grained activation offloading
    cuda_graph_impls: tuple[str, ...]  # empty: no cuda_graph_impl (enable_cuda_graph / external_cuda_graph)
    cuda_graph_field: str  # field that lists the captured parts
    cuda_graph_scopes: tuple[str, ...]  # values that field accepts
    flex_backends: tuple[str, ...]  # empty: DeepEP through moe_enable_deepep
    fp8_recipes: tuple[str, ...]
    dataset_seq_path: str
    bridge_release: str  # Megatron Bridge release pinned to this Megatron-Core ("" = none)
    # Megatron-FSDP data_parallel_sharding_strategy values (empty: no use_megatron_fsdp)
    fsdp_strategies: tuple[str, ...] = FSDP_STRATEGIES
    optimizers: tuple[str, ...] = ("adam", "sgd", "muon", "dist_muon")  # Megatron-LM --optimizer choices
    muon_dp_overlap: bool = True  # Muon accepts overlap_grad_reduce / overlap_param_gather (dist_muon)
    # transformer_config.py core_v0.16/0.17: overlap_moe_expert_parallel_comm with its one MTP layer needs
    # pipeline_model_parallel_size > 1 (lifted in 0.18; mtp_num_layers <= 1 holds in every release:
    # RunConfig.ep_overlap_blockers)
    ep_overlap_mtp_needs_pp: bool = False
    # GatedDeltaNet.backward_dw (in_proj, out_proj): Megatron-LM #2997 "support 1F1B overlap for Qwen3-Next", in
    # core_v0.17.0 ssm/gated_delta_net.py; core_v0.16.1 has none, while EP A2A overlap's callables
    # (models/gpt/fine_grained_callables.py build_transformer_layer_callables -> init_backward_dw_wrapper ->
    # _BackwardDWWrapper) read layer.self_attention.backward_dw for every layer: Gated DeltaNet layers raise
    gdn_backward_dw: bool = True
    # HybridEP sizes its buffer by the local token count of the micro-batch (fused_a2a.py init_hybrid_ep_buffer
    # max_num_of_tokens_per_rank = x.shape[-2], core_v0.16.1 .. core_v0.19.0); across InfiniBand DeepEP's hybrid-ep
    # asserts the RDMA queue depth 3 x tokens + 1 below 65536 (Megatron-LM #3999). The guard PR #4094 added was
    # reverted (#4718: clusters run deeper queues) before any release, so it is a warning: the largest token count
    # per rank that stays inside the limit, None where the release has no HybridEP.
    hybridep_ib_tokens_cap: int | None = (65536 - 1 - 1) // 3
    # Bridge sections written as instances (_INSTANCE_SECTIONS): every Bridge release pinned here types both
    # Optional (v0.1 .. v0.6 training/config.py)
    bridge_instance_sections: tuple[str, ...] = ("comm_overlap", "mixed_precision")


# The version table. Sources, Megatron-LM tag core_v<version>: transformer_config.py (recompute_modules and
# offload_modules asserts in __post_init__, cuda_graph_impl/scope Literal types, moe_flex_dispatcher_backend),
# enums.py CudaGraphScope (0.16/0.17), cuda_graph_config.py CudaGraphModule (0.18+), arguments.py
# --cuda-graph-scope choices (0.13: full/attn; 0.14/0.15: + full_iteration) and --fp8-recipe choices;
# Bridge pins from pyproject.toml + 3rdparty/Megatron-LM of tags v0.1.0rc4 .. v0.6.0.
_VERSION_TABLE: dict[str, _Allowed] = {
    "0.13": _Allowed(_CORE_RECOMPUTE, (), (), "cuda_graph_scope", ("full", "attn"), (), _FP8_RECIPES,
                     "dataset.sequence_length", "", fsdp_strategies=(), optimizers=("adam", "sgd"), gdn_backward_dw=False,
                     hybridep_ib_tokens_cap=None),
    "0.14": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), (), (), "cuda_graph_scope",
                     ("full", "attn", "full_iteration"), (), _FP8_RECIPES, "dataset.sequence_length", "v0.1.0rc4",
                     optimizers=("adam", "sgd"), gdn_backward_dw=False,
                     hybridep_ib_tokens_cap=None),
    "0.15": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), (), ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", ("full", "attn", "full_iteration"), (), _FP8_RECIPES,
                     "dataset.sequence_length", "v0.2", optimizers=("adam", "sgd"), gdn_backward_dw=False,
                     hybridep_ib_tokens_cap=None),
    # core_v0.16 arguments.py: any 'muon' optimizer asserts not overlap_grad_reduce / overlap_param_gather;
    # core_v0.17 keeps that for plain 'muon' only
    "0.16": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD, ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", _SCOPES_016, ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.3", muon_dp_overlap=False, ep_overlap_mtp_needs_pp=True, gdn_backward_dw=False),
    "0.17": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD, ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", _SCOPES_016, ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.4", ep_overlap_mtp_needs_pp=True),
    "0.18": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD,
                     ("none", "local", "transformer_engine", "full_iteration"), "cuda_graph_modules",
                     _SCOPES_016[1:], ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.5"),
    "0.19": _Allowed(_CORE_RECOMPUTE + ("shared_experts", "gdn_norm_out"), _CORE_OFFLOAD + _OFFLOAD_019,
                     ("none", "local", "transformer_engine", "full_iteration"), "cuda_graph_modules",
                     _SCOPES_016[1:], ("deepep", "hybridep", "ncclep"), _FP8_RECIPES + ("custom",),
                     "dataset.seq_length", "v0.6"),
    # Megatron-LM main after core_v0.19.0 (its next release, 0.20; no tag yet): DeepSeek-V4's dsv4_hybrid attention
    # and mHC (enable_mhc_connections, recompute_modules "mhc"); Megatron Bridge main pins it (no release yet)
    "0.20": _Allowed(_CORE_RECOMPUTE + ("shared_experts", "gdn_norm_out", "mhc"), _CORE_OFFLOAD + _OFFLOAD_019,
                     ("none", "local", "transformer_engine", "full_iteration"), "cuda_graph_modules",
                     _SCOPES_016[1:], ("deepep", "hybridep", "ncclep"), _FP8_RECIPES + ("custom",),
                     "dataset.seq_length", ""),
}
VERSIONS: tuple[str, ...] = tuple(_VERSION_TABLE)

# moeplan precision -> Megatron-Core fp8_recipe (all with --fp8-format e4m3) and the Bridge recipe that
# selects the same scaling (mixed_precision.py registered recipe names).
PRECISION_TO_FP8_RECIPE = {"fp8": "blockwise", "fp8-cs": "tensorwise", "fp8-ds": "delayed", "mxfp8": "mxfp8"}
FP8_RECIPE_TO_PRECISION = {v: k for k, v in PRECISION_TO_FP8_RECIPE.items()}
BRIDGE_PRECISION_RECIPE = {
    "bf16": "bf16_mixed",
    "fp8": "bf16_with_fp8_subchannel_scaling_mixed",
    "fp8-cs": "bf16_with_fp8_current_scaling_mixed",
    "fp8-ds": "bf16_with_fp8_delayed_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",  # Bridge mixed_precision.py v0.3.1+
}
# Bridge recipe name -> (fp8, fp8_recipe) it sets (mixed_precision.py, v0.3.0; hyphen spellings also registered).
BRIDGE_RECIPES: dict[str, tuple[str | None, str | None]] = {
    "bf16_mixed": (None, None),
    "fp16_mixed": (None, None),
    "bf16_with_fp8_delayed_scaling_mixed": ("hybrid", "delayed"),
    "fp16_with_fp8_delayed_scaling_mixed": ("hybrid", "delayed"),
    "bf16_with_mxfp8_mixed": ("e4m3", "mxfp8"),
    "fp16_with_mxfp8_mixed": ("e4m3", "mxfp8"),
    "bf16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise"),
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise"),
    "nanov2_bf16_with_fp8_current_scaling_mixed": ("hybrid", "blockwise"),
    "fp16_with_fp8_current_scaling_mixed": ("hybrid", "tensorwise"),
    "bf16_with_fp8_subchannel_scaling_mixed": ("hybrid", "blockwise"),
    "fp16_with_fp8_subchannel_scaling_mixed": ("hybrid", "blockwise"),
}

# moeplan cp_comm_type spelling -> Megatron-Core's (transformer_config.py cp_comm_type).
CP_TO_MCORE = {c: "all_gather" if c == "allgather" else c for c in CP_COMM_TYPES}
CP_FROM_MCORE = {v: k for k, v in CP_TO_MCORE.items()}
MCORE_CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")  # Megatron-Core's order

# Megatron-LM dtype spelling (--exp-avg-dtype choices) <-> torch dtype name (Bridge writes str(torch.dtype)).
DTYPE_FROM_MLM = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp8": "uint8"}
DTYPE_TO_MLM = {v: k for k, v in DTYPE_FROM_MLM.items()}


# ------------------------------------------------------------------------------------------ versions


@lru_cache(maxsize=256)
def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a normalized version string ('0.16'); cached: every run's knob checks ask."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@lru_cache(maxsize=256)
def normalize_version(version: str) -> str:
    """'0.16', '0.16.1', 'v0.16.1', 'core_v0.16.1', 'core_r0.16.0' -> '0.16' (must be in the table)."""
    text = str(version).strip().lower()
    for prefix in ("core_v", "core_r", "v"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    m = re.match(r"(\d+)\.(\d+)", text)
    key = f"{int(m.group(1))}.{int(m.group(2))}" if m else text
    if key not in _VERSION_TABLE:
        raise MoeplanError(f"Megatron-Core version '{version}' unknown; known versions: {', '.join(VERSIONS)}")
    return key


@lru_cache(maxsize=64)
@lru_cache(maxsize=256)
def version_key(version: str) -> tuple[int, int]:
    """(major, minor) of a Megatron-Core version string, normalized (MoeplanError when unknown); cached: every
    run's EP-overlap rule asks."""
    return version_tuple(normalize_version(version))


def _has(knob: Knob, version: str) -> bool:
    v = version_tuple(version)
    return version_tuple(knob.since) <= v and (knob.until is None or v <= version_tuple(knob.until))


@dataclass(frozen=True)
class MegatronFields:
    """Field names and allowed values of one Megatron-Core release."""

    version: str
    knobs: Mapping[str, Knob]
    recompute_modules: tuple[str, ...]
    offload_modules: tuple[str, ...]
    cuda_graph_impls: tuple[str, ...]
    cuda_graph_field: str
    cuda_graph_scopes: tuple[str, ...]
    dispatcher_types: tuple[str, ...]
    flex_backends: tuple[str, ...]
    cp_comm_types: tuple[str, ...]
    fp8_recipes: tuple[str, ...]
    dataset_seq_path: str
    bridge_release: str
    fsdp_strategies: tuple[str, ...] = ()
    optimizers: tuple[str, ...] = ()
    muon_dp_overlap: bool = False
    ep_overlap_mtp_needs_pp: bool = False
    bridge_instance_sections: Mapping[str, BridgeSection] = field(default_factory=dict)

    def bridge_paths(self, knob: Knob) -> tuple[str, ...]:
        """Bridge paths written on export for this version."""
        return tuple(self.dataset_seq_path if p == DATASET_SEQ else p for p in knob.bridge)


def fields_for(version: str) -> MegatronFields:
    """The field table of one Megatron-Core version ('0.13' ... '0.19'; patch releases accepted)."""
    key = normalize_version(version)
    row = _VERSION_TABLE[key]
    return MegatronFields(
        version=key,
        knobs={k.field: k for k in KNOBS if _has(k, key)},
        recompute_modules=row.recompute_modules,
        offload_modules=row.offload_modules,
        cuda_graph_impls=row.cuda_graph_impls,
        cuda_graph_field=row.cuda_graph_field,
        cuda_graph_scopes=row.cuda_graph_scopes,
        dispatcher_types=_DISPATCHERS,
        flex_backends=row.flex_backends,
        cp_comm_types=MCORE_CP_COMM_TYPES,
        fp8_recipes=row.fp8_recipes,
        dataset_seq_path=row.dataset_seq_path,
        bridge_release=row.bridge_release,
        fsdp_strategies=row.fsdp_strategies,
        optimizers=row.optimizers,
        muon_dp_overlap=row.muon_dp_overlap,
        ep_overlap_mtp_needs_pp=row.ep_overlap_mtp_needs_pp,
        bridge_instance_sections={s: _INSTANCE_SECTIONS[s] for s in row.bridge_instance_sections},
    )


@lru_cache(maxsize=64)
def muon_dp_overlap(version: str) -> bool:
    """Whether Megatron-Core ``version`` lets distributed Muon overlap its gradient all-reduce and
    parameter all-gather (the field table says: not in 0.16)."""
    return _VERSION_TABLE[normalize_version(version)].muon_dp_overlap


@lru_cache(maxsize=256)
def ep_overlap_mtp_needs_pp(version: str) -> bool:
    """Whether EP A2A overlap with its one MTP layer needs PP > 1 in ``version`` (the field table: 0.16 and 0.17;
    more than one MTP layer is refused in every release). Cached: the planner asks for every candidate."""
    return _VERSION_TABLE[normalize_version(version)].ep_overlap_mtp_needs_pp



def gdn_backward_dw(version: str) -> bool:
    """Whether Megatron-Core ``version``'s Gated DeltaNet has ``backward_dw`` (the field table: 0.17+), which EP
    A2A overlap needs for every layer and delay_wgrad_compute uses to delay its projections' weight gradients."""
    return _VERSION_TABLE[normalize_version(version)].gdn_backward_dw


def hybridep_ib_tokens_cap(version: str) -> int | None:
    """The most tokens per rank HybridEP dispatches across InfiniBand inside the RDMA queue-depth limit in
    Megatron-Core ``version`` (None: no HybridEP): the field table says."""
    return _VERSION_TABLE[normalize_version(version)].hybridep_ib_tokens_cap


def sync_free_moe(version: str) -> bool:
    """Whether Megatron-Core ``version`` has moe_expert_rank_capacity_factor (sync-free dropless MoE, the
    precondition of a full-iteration CUDA graph with dropless experts): the field table says."""
    return "moe_expert_rank_capacity_factor" in fields_for(version).knobs



# ------------------------------------------------------------------------------------------ value coercion

INT_RE = re.compile(r"[+-]?\d+")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"null", "none", "~", ""}


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and INT_RE.fullmatch(value.strip()):
        return int(value)
    raise ValueError("expected an integer")


def _as_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number")
    try:
        out = float(value) if isinstance(value, (int, float, str)) else math.nan
    except (ValueError, OverflowError):
        out = math.nan
    if not math.isfinite(out):
        raise ValueError("expected a number")
    return out


def _as_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("expected true or false")


def _is_none(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE)


def _as_str(value: object) -> str:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError("expected a string")


def _as_str_list(value: object) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return [_as_str(v) for v in value]
    raise ValueError("expected a list")


def _as_dtype(value: object) -> str:
    text = _as_str(value).strip()
    text = text.removeprefix("torch.")
    return DTYPE_FROM_MLM.get(text, text)


def coerce(kind: Kind, value: object) -> object:
    """A raw value (YAML/Hydra-typed or a Megatron-LM string) as the knob's Python type."""
    if kind.startswith("opt_") and _is_none(value):
        return None
    if kind in ("list", "int_list", "str_or_list", "scope") and value is None:
        return None
    if kind in ("int", "opt_int"):
        return _as_int(value)
    if kind in ("float", "opt_float"):
        return _as_float(value)
    if kind == "bool":
        return _as_bool(value)
    if kind in ("str", "opt_str"):
        return _as_str(value)
    if kind == "dtype":
        return _as_dtype(value)
    if kind == "int_list":
        return [_as_int(v) for v in (value if isinstance(value, (list, tuple)) else _as_str_list(value))]
    items = _as_str_list(value)
    if kind == "str_or_list":
        return items[0] if len(items) == 1 and not isinstance(value, (list, tuple)) else items
    return items


KIND_WORDS = {"int": "an integer", "opt_int": "an integer or null", "float": "a number", "opt_float": "a number or null",
               "bool": "true or false", "str": "a string", "opt_str": "a string or null", "list": "a list",
               "int_list": "a list of integers", "str_or_list": "a string or list", "scope": "a list",
               "dtype": "a dtype name"}



# ------------------------------------------------------------------------------------------ checks


@dataclass(frozen=True)
class KnobProblem:
    """A knob setting that does not work: the Megatron field it concerns and one line saying why."""

    field: str
    message: str

    def __str__(self) -> str:
        return self.message


def check_settings(settings: Mapping[str, object], version: str) -> list[KnobProblem]:
    """One problem per setting the target Megatron-Core version lacks or whose value it does not accept."""
    f = fields_for(version)
    problems = [KnobProblem(k, f"{k} is not a Megatron-Core {f.version} field (since {KNOB_BY_FIELD[k].since})")
                for k in settings if k in KNOB_BY_FIELD and k not in f.knobs]

    def check(key: str, allowed: tuple[str, ...]) -> None:
        value = settings.get(key)
        values = value if isinstance(value, list) else [] if value is None else [value]
        bad = [str(v) for v in values if v not in allowed]
        if bad and key in f.knobs:
            problems.append(KnobProblem(key, f"{key}: {', '.join(bad)} not accepted by Megatron-Core {f.version} "
                                             f"(allowed: {', '.join(allowed)})"))

    if settings.get("recompute_granularity") == "selective":
        check("recompute_modules", f.recompute_modules)
    check("offload_modules", f.offload_modules)
    check("cuda_graph_impl", f.cuda_graph_impls)
    check(f.cuda_graph_field, f.cuda_graph_scopes)
    check("moe_token_dispatcher_type", f.dispatcher_types)
    check("moe_flex_dispatcher_backend", f.flex_backends)
    check("cp_comm_type", f.cp_comm_types)
    check("fp8_recipe", f.fp8_recipes)
    check("optimizer", f.optimizers)
    if settings.get("use_megatron_fsdp") is True:
        check("data_parallel_sharding_strategy", f.fsdp_strategies)
    return problems


def dp_assertions(settings: Mapping[str, object], version: str) -> list[KnobProblem]:
    """One problem per Megatron-FSDP / Muon combination Megatron-LM or Megatron Bridge rejects:
    megatron/training/arguments.py validate_args (core_v0.16.1 .. core_v0.19.0) and Bridge config.py
    (v0.3.0 .. v0.6.0)."""
    f = fields_for(version)
    out: list[KnobProblem] = []
    fsdp = settings.get("use_megatron_fsdp") is True
    opt = settings.get("optimizer")
    muon = isinstance(opt, str) and "muon" in opt
    if fsdp and settings.get("ckpt_format", "torch_dist") != "fsdp_dtensor":
        out.append(KnobProblem("ckpt_format", "Megatron-FSDP only supports the fsdp_dtensor checkpoint format "
                               "(Megatron-LM asserts it; Bridge when saving or loading), got "
                               f"{settings.get('ckpt_format', 'torch_dist')}"))
    if muon and fsdp:
        out.append(KnobProblem("use_megatron_fsdp", "Muon optimizer does not support Megatron-FSDP "
                                                    "(Megatron-LM arguments.py)"))
    if muon and settings.get("use_distributed_optimizer") is True and version_key(f.version) < (0, 18):
        out.append(KnobProblem("use_distributed_optimizer", f"Muon does not support the distributed optimizer in "
                               f"Megatron-Core {f.version}; use optimizer dist_muon (the layer-wise distributed "
                               "optimizer)"))
    plain = opt == "muon" and not settings.get("use_layer_wise_distributed_optimizer")
    if muon and (plain and version_key(f.version) < (0, 18) or not f.muon_dp_overlap):
        for key in ("overlap_grad_reduce", "overlap_param_gather"):
            if settings.get(key) is True:
                out.append(KnobProblem(key, f"{opt} in Megatron-Core {f.version} does not support {key} (Megatron-LM "
                                       "asserts it off" + ("; dist_muon allows it from 0.17)" if not f.muon_dp_overlap
                                                           else ")")))
    return out

