"""Megatron-Core / Megatron Bridge / Megatron-LM names for every moeplan knob, per Megatron-Core version.

One table drives both directions:

* export: :func:`to_settings` (Megatron-Core field -> value), :func:`to_overrides` (Megatron Bridge
  Hydra overrides), :func:`to_yaml` (Bridge ``ConfigContainer`` YAML fragment) and
  :func:`to_megatron_lm_args` (Megatron-LM flags);
* import: :func:`read_run_file` / :func:`parse_run_text` read a Bridge YAML, a file of Bridge
  overrides or a Megatron-LM argument list back into the same settings, and
  :func:`run_config_from_settings` turns settings into a :class:`~moeplan.run.RunConfig`.

:func:`mcore_kwargs` adds the model architecture so Megatron-Core's own ``TransformerConfig``
(``MLATransformerConfig`` for MLA models) can be built from a plan (:func:`build_mcore_config`).

Facts (field names, flags, allowed values, the version each appeared) were read from the public
NVIDIA/Megatron-LM tags core_v0.13.1 ... core_v0.19.0 and NVIDIA-NeMo/Megatron-Bridge tags
v0.2.0 ... v0.6.0; see ``research/config_fields.md``. No code is taken from those repositories.

Conventions:

* Settings keys are Megatron-Core field names; ``global_batch_size``, ``micro_batch_size`` and
  ``seq_length`` are Megatron-LM argument names (Bridge ``train.*`` / ``model.seq_length``).
* ``cuda_graph_scope`` / ``cuda_graph_modules`` are always lists in settings; Bridge files for
  Megatron-Core < 0.16 (where the field is a single string) get the single element.
* Megatron-LM flags cannot express ``None``, ``False`` (plain ``store_true`` flags) or empty lists:
  those settings are left out of the argument list and are absent after reading it back.
* The Bridge dataset sequence length is ``dataset.sequence_length`` up to Bridge v0.5 (Megatron-Core
  <= 0.18) and ``dataset.seq_length`` from Bridge v0.6 (Megatron-Core 0.19), where it became the
  dataclass field (Bridge src/megatron/bridge/training/config.py, GPTDatasetConfig). Both are read.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from yaml.constructor import SafeConstructor

from moeplan.errors import MoeplanError
from moeplan.models.spec import Attention, DenseMLP, GatedDeltaNet, ModelSpec, MoE
from moeplan.parallel import Batch, Parallel, build_pipeline
from moeplan.run import CUDA_GRAPH_SCOPES, FSDP_STRATEGIES, RECOMPUTE_MODULES, Recompute, RunConfig

DEFAULT_VERSION = "0.16"  # megatron-core 0.16.1 is the newest release installable here

Kind = Literal["int", "opt_int", "float", "opt_float", "bool", "str", "opt_str", "list", "int_list",
               "str_or_list", "scope", "dtype"]
Owner = Literal["TransformerConfig", "ModelParallelConfig", "OptimizerConfig", "DistributedDataParallelConfig",
                "training"]

# Placeholder in a Bridge path list for the version's dataset sequence-length key.
_DATASET_SEQ = "dataset.<seq_length>"


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
    # Batch and sequence: Megatron-LM --global-batch-size/--micro-batch-size/--seq-length; Bridge
    # train.* (TrainingConfig) and model.seq_length + dataset sequence length (validate() asserts equal).
    _k("global_batch_size", TRAIN, "int", "train.global_batch_size"),
    _k("micro_batch_size", TRAIN, "int", "train.micro_batch_size"),
    _k("seq_length", TRAIN, "int", ("model.seq_length", _DATASET_SEQ),
       bridge_read=("dataset.seq_length", "dataset.sequence_length")),
    # Megatron-LM only (arguments.py); converted to VPP with the model's layer count.
    _k("num_layers_per_virtual_pipeline_stage", TRAIN, "opt_int", ()),
    # Multi-token prediction: transformer_config.py mtp_num_layers (all versions).
    _k("mtp_num_layers", TC, "opt_int"),
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
    # Sync-free dropless MoE (core_v0.18.0 transformer_config.py): fixed per-rank buffers, HybridEP only (0.19:
    # or NCCL EP), with the TE op fuser; moe_paged_stash keeps activations in pages sized by the actual tokens.
    _k("moe_expert_rank_capacity_factor", TC, "opt_float", since="0.18"),
    _k("moe_paged_stash", TC, "bool", since="0.18"),
    _k("use_transformer_engine_op_fuser", TC, "bool", since="0.18"),
    _k("overlap_moe_expert_parallel_comm", TC, "bool", "comm_overlap.overlap_moe_expert_parallel_comm",
       bridge_read=("model.overlap_moe_expert_parallel_comm",), since="0.14"),
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
    # Context parallel communication: transformer_config.py cp_comm_type (all versions; CLI nargs='+').
    _k("cp_comm_type", TC, "str_or_list"),
    # Fine-grained activation offloading: transformer_config.py, core_v0.16.0+.
    _k("fine_grained_activation_offloading", TC, "bool", since="0.16"),
    _k("offload_modules", TC, "list", since="0.16"),
    # FP8: TransformerConfig fp8 (flag --fp8-format) and fp8_recipe; Bridge sets them through
    # mixed_precision.* (src/megatron/bridge/training/mixed_precision.py), which also owns grad_reduce_in_fp32
    # and copies it into the DDP config.
    _k("fp8", TC, "opt_str", "mixed_precision.fp8", mlm="--fp8-format", bridge_read=("model.fp8",)),
    _k("fp8_recipe", TC, "str", "mixed_precision.fp8_recipe", bridge_read=("model.fp8_recipe",)),
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
    _k("use_precision_aware_optimizer", OPT, "bool", "optimizer.use_precision_aware_optimizer"),
    _k("exp_avg_dtype", OPT, "dtype", "optimizer.exp_avg_dtype"),
    _k("exp_avg_sq_dtype", OPT, "dtype", "optimizer.exp_avg_sq_dtype"),
    # Communication overlap the timing model credits: ModelParallelConfig tp_comm_overlap (TE userbuffers;
    # Bridge comm_overlap.tp_comm_overlap), DDP overlap_grad_reduce / overlap_param_gather (Megatron-Core
    # distributed_data_parallel_config.py; Bridge ddp.*). Megatron's defaults are all False.
    _k("tp_comm_overlap", MPC, "bool", "comm_overlap.tp_comm_overlap", bridge_read=("model.tp_comm_overlap",)),
    _k("overlap_grad_reduce", DDP, "bool", "ddp.overlap_grad_reduce"),
    _k("overlap_param_gather", DDP, "bool", "ddp.overlap_param_gather"),
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

_CORE_RECOMPUTE = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe")
_CORE_OFFLOAD = ("core_attn", "attn_proj", "expert_fc1", "moe_act", "attn_norm", "mlp_norm", "qkv_linear")
_SCOPES_016 = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
_CP_COMM = ("p2p", "all_gather", "a2a", "a2a+p2p")
_DISPATCHERS = ("allgather", "alltoall", "flex")
_FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise")


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
    # transformer_config.py core_v0.16/0.17: overlap_moe_expert_parallel_comm with MTP needs mtp_num_layers 1
    # and pipeline_model_parallel_size > 1
    ep_overlap_mtp_needs_pp: bool = False


# The version table. Sources, Megatron-LM tag core_v<version>: transformer_config.py (recompute_modules and
# offload_modules asserts in __post_init__, cuda_graph_impl/scope Literal types, moe_flex_dispatcher_backend),
# enums.py CudaGraphScope (0.16/0.17), cuda_graph_config.py CudaGraphModule (0.18+), arguments.py
# --cuda-graph-scope choices (0.13: full/attn; 0.14/0.15: + full_iteration) and --fp8-recipe choices;
# Bridge pins from pyproject.toml + 3rdparty/Megatron-LM of tags v0.1.0rc4 .. v0.6.0.
_VERSION_TABLE: dict[str, _Allowed] = {
    "0.13": _Allowed(_CORE_RECOMPUTE, (), (), "cuda_graph_scope", ("full", "attn"), (), _FP8_RECIPES,
                     "dataset.sequence_length", "", fsdp_strategies=(), optimizers=("adam", "sgd")),
    "0.14": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), (), (), "cuda_graph_scope",
                     ("full", "attn", "full_iteration"), (), _FP8_RECIPES, "dataset.sequence_length", "v0.1.0rc4",
                     optimizers=("adam", "sgd")),
    "0.15": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), (), ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", ("full", "attn", "full_iteration"), (), _FP8_RECIPES,
                     "dataset.sequence_length", "v0.2", optimizers=("adam", "sgd")),
    # core_v0.16 arguments.py: any 'muon' optimizer asserts not overlap_grad_reduce / overlap_param_gather;
    # core_v0.17 keeps that for plain 'muon' only
    "0.16": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD, ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", _SCOPES_016, ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.3", muon_dp_overlap=False, ep_overlap_mtp_needs_pp=True),
    "0.17": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD, ("none", "local", "transformer_engine"),
                     "cuda_graph_scope", _SCOPES_016, ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.4", ep_overlap_mtp_needs_pp=True),
    "0.18": _Allowed(_CORE_RECOMPUTE + ("shared_experts",), _CORE_OFFLOAD,
                     ("none", "local", "transformer_engine", "full_iteration"), "cuda_graph_modules",
                     _SCOPES_016[1:], ("deepep", "hybridep"), _FP8_RECIPES + ("custom",),
                     "dataset.sequence_length", "v0.5"),
    "0.19": _Allowed(_CORE_RECOMPUTE + ("shared_experts", "gdn_norm_out"), _CORE_OFFLOAD + ("fused_group_mlp",),
                     ("none", "local", "transformer_engine", "full_iteration"), "cuda_graph_modules",
                     _SCOPES_016[1:], ("deepep", "hybridep", "ncclep"), _FP8_RECIPES + ("custom",),
                     "dataset.seq_length", "v0.6"),
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
}
# Bridge recipe name -> (fp8, fp8_recipe) it sets (mixed_precision.py, v0.3.0; hyphen spellings also registered).
_BRIDGE_RECIPES: dict[str, tuple[str | None, str | None]] = {
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

# moeplan cp_comm_type spelling -> Megatron-Core's.
_CP_TO_MCORE = {"p2p": "p2p", "allgather": "all_gather", "a2a": "a2a", "a2a+p2p": "a2a+p2p"}
_CP_FROM_MCORE = {v: k for k, v in _CP_TO_MCORE.items()}

# Megatron-LM dtype spelling (--exp-avg-dtype choices) <-> torch dtype name (Bridge writes str(torch.dtype)).
_DTYPE_FROM_MLM = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp8": "uint8"}
_DTYPE_TO_MLM = {v: k for k, v in _DTYPE_FROM_MLM.items()}


# ------------------------------------------------------------------------------------------ versions


def _vkey(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


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


def version_key(version: str) -> tuple[int, int]:
    """(major, minor) of a Megatron-Core version string, normalized (MoeplanError when unknown)."""
    return _vkey(normalize_version(version))


def _has(knob: Knob, version: str) -> bool:
    v = _vkey(version)
    return _vkey(knob.since) <= v and (knob.until is None or v <= _vkey(knob.until))


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

    def bridge_paths(self, knob: Knob) -> tuple[str, ...]:
        """Bridge paths written on export for this version."""
        return tuple(self.dataset_seq_path if p == _DATASET_SEQ else p for p in knob.bridge)


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
        cp_comm_types=_CP_COMM,
        fp8_recipes=row.fp8_recipes,
        dataset_seq_path=row.dataset_seq_path,
        bridge_release=row.bridge_release,
        fsdp_strategies=row.fsdp_strategies,
        optimizers=row.optimizers,
        muon_dp_overlap=row.muon_dp_overlap,
        ep_overlap_mtp_needs_pp=row.ep_overlap_mtp_needs_pp,
    )


def muon_dp_overlap(version: str) -> bool:
    """Whether Megatron-Core ``version`` lets distributed Muon overlap its gradient all-reduce and
    parameter all-gather (the field table says: not in 0.16)."""
    return fields_for(version).muon_dp_overlap


# ------------------------------------------------------------------------------------------ export


def _parallel_settings(cfg: RunConfig) -> dict[str, object]:
    par = cfg.parallel
    pipe = build_pipeline(cfg.model, par)
    out: dict[str, object] = {
        "tensor_model_parallel_size": par.tp,
        "pipeline_model_parallel_size": par.pp,
        "virtual_pipeline_model_parallel_size": par.vpp if par.vpp > 1 else None,
        "context_parallel_size": par.cp,
        "expert_model_parallel_size": par.ep,
        "expert_tensor_parallel_size": par.etp,
        "sequence_parallel": par.sequence_parallel,
        "pipeline_model_parallel_layout": pipe.layout_string() if pipe.explicit else None,
    }
    if cfg.cp_comm_type == "a2a+p2p":
        inner = _a2a_group(cfg)
        out["hierarchical_context_parallel_sizes"] = [inner, par.cp // inner]
    return out


def _a2a_group(cfg: RunConfig) -> int:
    """a2a group of hierarchical CP: the CP ranks inside one NVLink domain (as moeplan.timing assumes)."""
    from moeplan.hardware import load_gpu

    try:
        domain = load_gpu(cfg.gpu).nvlink_domain
    except MoeplanError:
        domain = 8  # a GPU from a user hardware file: assume an 8-GPU NVLink node
    from moeplan.parallel import hierarchical_cp_inner

    return hierarchical_cp_inner(cfg.parallel.tp, cfg.parallel.cp, domain)


def _recompute_settings(rc: Recompute, f: MegatronFields) -> dict[str, object]:
    if rc.granularity == "none":
        return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
                "recompute_modules": None}
    if rc.granularity == "full":
        return {"recompute_granularity": "full", "recompute_method": rc.method, "recompute_num_layers": rc.num_layers,
                "recompute_modules": None}
    for m in sorted(rc.modules):
        if m not in f.recompute_modules:
            raise MoeplanError(f"recompute module '{m}' is not available in Megatron-Core {f.version} "
                               f"(allowed: {', '.join(f.recompute_modules)})")
    return {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None,
            "recompute_modules": sorted(rc.modules)}


def sync_free_moe(version: str) -> bool:
    """Whether Megatron-Core ``version`` has moe_expert_rank_capacity_factor (sync-free dropless MoE, the
    precondition of a full-iteration CUDA graph with dropless experts): the field table says."""
    return "moe_expert_rank_capacity_factor" in fields_for(version).knobs


def _moe_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    out: dict[str, object] = {}
    if cfg.dispatcher in ("alltoall", "allgather"):
        out["moe_token_dispatcher_type"] = cfg.dispatcher
    elif f.flex_backends:
        out["moe_token_dispatcher_type"] = "flex"
        out["moe_flex_dispatcher_backend"] = cfg.dispatcher
    elif cfg.dispatcher == "deepep":
        out["moe_token_dispatcher_type"] = "flex"
    else:
        raise MoeplanError(f"dispatcher '{cfg.dispatcher}' needs Megatron-Core >= 0.16 "
                           f"(moe_flex_dispatcher_backend); {f.version} has DeepEP only")
    if not f.flex_backends:
        out["moe_enable_deepep"] = cfg.dispatcher == "deepep"
    out["moe_expert_capacity_factor"] = cfg.capacity_factor
    if cfg.rank_capacity_factor is not None:
        if not sync_free_moe(f.version):
            raise MoeplanError(f"moe_expert_rank_capacity_factor (sync-free dropless MoE) needs Megatron-Core >= 0.18, "
                               f"target is {f.version}")
        if cfg.dispatcher != "hybridep":
            raise MoeplanError("moe_expert_rank_capacity_factor needs the HybridEP dispatcher "
                               f"(moe_flex_dispatcher_backend=hybridep), not {cfg.dispatcher}")
        out["moe_expert_rank_capacity_factor"] = cfg.rank_capacity_factor
        out["moe_paged_stash"] = True
        out["use_transformer_engine_op_fuser"] = True
    if "overlap_moe_expert_parallel_comm" in f.knobs:
        out["overlap_moe_expert_parallel_comm"] = cfg.ep_overlap
    elif cfg.ep_overlap:
        raise MoeplanError(f"EP communication overlap (overlap_moe_expert_parallel_comm) needs Megatron-Core >= 0.14, "
                           f"target is {f.version}")
    return out


def _cuda_graph_settings(scopes: frozenset[str], f: MegatronFields) -> dict[str, object]:
    """CUDA graph fields per version: 0.13/0.14 enable_cuda_graph (local) / external_cuda_graph (TE) with a
    single scope; 0.15 cuda_graph_impl with a single scope; 0.16/0.17 cuda_graph_scope list (full_iteration
    only with the local impl); 0.18+ cuda_graph_modules, full iteration is cuda_graph_impl='full_iteration'."""
    if "full_iteration" in scopes and len(scopes) > 1:
        raise MoeplanError("CUDA graph scope full_iteration captures the whole iteration and must be used alone")
    allowed = set(f.cuda_graph_scopes) | ({"full_iteration"} & set(f.cuda_graph_impls))
    bad = sorted(scopes - allowed)
    single = _vkey(f.version) < (0, 16)
    if bad or (single and len(scopes) > 1):
        raise MoeplanError(f"CUDA graph scope(s) {', '.join(sorted(scopes))} not supported by Megatron-Core {f.version} "
                           f"({f.cuda_graph_field}: {', '.join(f.cuda_graph_scopes)}"
                           f"{', one at a time' if single else ''})")
    full_iter = scopes == {"full_iteration"}
    if not f.cuda_graph_impls:
        if not scopes:
            return {"enable_cuda_graph": False, "external_cuda_graph": False}
        return {"enable_cuda_graph": full_iter, "external_cuda_graph": not full_iter,
                "cuda_graph_scope": sorted(scopes), "use_te_rng_tracker": True}
    if not scopes:
        return {"cuda_graph_impl": "none"}
    if full_iter and "full_iteration" in f.cuda_graph_impls:
        return {"cuda_graph_impl": "full_iteration", "use_te_rng_tracker": True}
    impl = "local" if full_iter else "transformer_engine"
    return {"cuda_graph_impl": impl, f.cuda_graph_field: sorted(scopes), "use_te_rng_tracker": True}


def _offload_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    if not f.offload_modules:
        if cfg.offload_modules:
            raise MoeplanError(f"fine-grained activation offloading needs Megatron-Core >= 0.16, target is {f.version}")
        return {}
    bad = sorted(m for m in cfg.offload_modules if m not in f.offload_modules)
    if bad:
        raise MoeplanError(f"offload module(s) {', '.join(bad)} not available in Megatron-Core {f.version}")
    return {"fine_grained_activation_offloading": bool(cfg.offload_modules),
            "offload_modules": sorted(cfg.offload_modules)}


def _precision_settings(cfg: RunConfig) -> dict[str, object]:
    if cfg.precision == "bf16":
        return {"fp8": None}
    return {"fp8": "e4m3", "fp8_recipe": PRECISION_TO_FP8_RECIPE[cfg.precision]}


def _optimizer_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    offload = cfg.optimizer_offload > 0
    out: dict[str, object] = {
        "grad_reduce_in_fp32": cfg.grad_fp32,
        # moeplan's Adam memory model is the distributed optimizer's; Megatron-FSDP always uses it (Bridge
        # v0.6.0 config.py); Muon runs without it (arguments.py: "Muon optimizer does not support
        # distributed optimizer"), 'dist_muon' being its layer-wise distributed optimizer
        "use_distributed_optimizer": cfg.optimizer == "adam",
        "optimizer_cpu_offload": offload,
    }
    if offload:
        out["optimizer_offload_fraction"] = float(cfg.optimizer_offload)
    out["use_precision_aware_optimizer"] = offload or cfg.bf16_moments
    if cfg.bf16_moments:
        out["exp_avg_dtype"] = "bfloat16"
        out["exp_avg_sq_dtype"] = "bfloat16"
    overlap = cfg.dp_overlap
    if cfg.optimizer == "muon":
        name = "dist_muon" if cfg.muon_layer_wise else "muon"
        if "muon" not in f.optimizers:
            raise MoeplanError(f"the Muon optimizer needs Megatron-Core >= 0.16 (optimizer 'muon'/'dist_muon', "
                               f"muon_* fields), target is {f.version}")
        out["optimizer"] = name
        out["muon_num_ns_steps"] = cfg.muon_ns_steps
        out["muon_tp_mode"] = cfg.muon_tp_mode
        if not f.muon_dp_overlap or not cfg.muon_layer_wise:
            overlap = False  # Megatron-LM asserts it off (plain muon always; any muon in core_v0.16)
    if cfg.fsdp is not None:
        if cfg.fsdp not in f.fsdp_strategies:
            raise MoeplanError(f"Megatron-FSDP (use_megatron_fsdp) needs Megatron-Core >= 0.14; {f.version} has only "
                               "the deprecated use_custom_fsdp")
        out["use_megatron_fsdp"] = True
        out["data_parallel_sharding_strategy"] = cfg.fsdp
        out["fsdp_double_buffer"] = cfg.fsdp_double_buffer
        out["ckpt_format"] = "fsdp_dtensor"
        if cfg.fsdp in ("optim_grads", "optim_grads_params"):
            overlap = True  # megatron_fsdp.py forces overlap_grad_reduce (and param gather) on
    out["overlap_grad_reduce"] = overlap
    out["overlap_param_gather"] = overlap and (cfg.optimizer == "adam" or cfg.muon_layer_wise)
    return out


def to_settings(cfg: RunConfig, version: str | None = None) -> dict[str, object]:
    """Megatron-Core field name -> value for a plan (``version`` defaults to ``cfg.mcore_version``)."""
    f = fields_for(version or cfg.mcore_version)
    out = _parallel_settings(cfg)
    out["global_batch_size"] = cfg.batch.gbs
    out["micro_batch_size"] = cfg.batch.mbs
    out["seq_length"] = cfg.batch.seq_len
    if cfg.model.mtp_layers:
        out["mtp_num_layers"] = cfg.model.mtp_layers
    out.update(_recompute_settings(cfg.recompute, f))
    if cfg.model.first_moe is not None:
        out.update(_moe_settings(cfg, f))
    out.update(_cuda_graph_settings(cfg.cuda_graph_scopes, f))
    out["cp_comm_type"] = _CP_TO_MCORE[cfg.cp_comm_type]
    if cfg.parallel.tp > 1:
        out["tp_comm_overlap"] = cfg.tp_comm_overlap
    out.update(_offload_settings(cfg, f))
    out.update(_precision_settings(cfg))
    out.update(_optimizer_settings(cfg, f))
    return out


def _bridge_value(knob: Knob, value: object, f: MegatronFields) -> object:
    """A setting as the Bridge config holds it (a single scope string before 0.16)."""
    if knob.kind == "scope" and isinstance(value, list) and _vkey(f.version) < (0, 16):
        return value[0] if len(value) == 1 else ",".join(value)
    return value


def _bridge_items(cfg: RunConfig, version: str | None) -> list[tuple[str, object]]:
    f = fields_for(version or cfg.mcore_version)
    items: list[tuple[str, object]] = []
    for key, value in to_settings(cfg, f.version).items():
        knob = f.knobs[key]
        for path in f.bridge_paths(knob):
            items.append((path, _bridge_value(knob, value, f)))
    return items


_BARE_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_.+\-/]*")
_HYDRA_WORDS = {"null", "true", "false", "nan", "inf"}


def _hydra_scalar(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _BARE_STRING.fullmatch(text) and text.lower() not in _HYDRA_WORDS:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_override_value(value: object) -> str:
    """A value in Hydra override syntax: null, true/false, numbers, bare or quoted strings, [a,b] lists."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_scalar(v) for v in value) + "]"
    return _hydra_scalar(value)


def to_overrides(cfg: RunConfig, version: str | None = None) -> list[str]:
    """Megatron Bridge Hydra overrides, e.g. ``model.context_parallel_size=8``."""
    return [f"{path}={format_override_value(value)}" for path, value in _bridge_items(cfg, version)]


def to_yaml(cfg: RunConfig, version: str | None = None) -> str:
    """The same fields nested as a Bridge ``ConfigContainer`` YAML fragment (model:, train:, ...)."""
    tree: dict[str, dict[str, object]] = {}
    for path, value in _bridge_items(cfg, version):
        section, name = path.split(".", 1)
        tree.setdefault(section, {})[name] = value
    return str(yaml.safe_dump(tree, sort_keys=False, default_flow_style=False))


def _mlm_tokens(knob: Knob, value: object) -> list[str]:
    assert knob.mlm is not None
    if value is None:
        return []
    if isinstance(value, bool):
        if value:
            return [knob.mlm]
        return [knob.mlm_false] if knob.mlm_false else []
    if isinstance(value, list):
        return [knob.mlm, *map(str, value)] if value else []
    if knob.kind == "dtype":
        return [knob.mlm, _DTYPE_TO_MLM.get(str(value), str(value))]
    return [knob.mlm, repr(value) if isinstance(value, float) else str(value)]


def to_megatron_lm_args(cfg: RunConfig, version: str | None = None) -> list[str]:
    """Megatron-LM flags (argv tokens: join them with :func:`shlex.join` for a shell)."""
    f = fields_for(version or cfg.mcore_version)
    args: list[str] = []
    for key, value in to_settings(cfg, f.version).items():
        args += _mlm_tokens(f.knobs[key], value)
    return args + ["--bf16"]


# ------------------------------------------------------------------------------------------ import

# ConfigContainer sections (src/megatron/bridge/training/config.py, v0.2.0 .. main).
BRIDGE_SECTIONS = frozenset(
    "rng rerun_state_machine train model optimizer ddp scheduler dataset logger tokenizer checkpoint dist ft "
    "straggler nvrx_straggler profiling peft comm_overlap mixed_precision tensor_inspect inprocess_restart "
    "optimizer_config_override_provider validation env_vars".split())
_USED_SECTIONS = frozenset("model train optimizer ddp dataset mixed_precision comm_overlap".split())

# Architecture fields (TransformerConfig / MLATransformerConfig / Bridge model providers): read into
# ParsedRun.architecture so a linter can compare them with the model.
ARCHITECTURE_FIELDS = frozenset(
    "num_layers hidden_size ffn_hidden_size num_attention_heads num_query_groups kv_channels num_moe_experts "
    "moe_router_topk moe_ffn_hidden_size moe_shared_expert_intermediate_size moe_layer_freq vocab_size "
    "multi_latent_attention q_lora_rank kv_lora_rank qk_head_dim qk_pos_emb_head_dim v_head_dim "
    "max_position_embeddings gated_linear_unit add_bias_linear add_qkv_bias qk_layernorm attention_output_gate "
    "experimental_attention_variant linear_attention_freq linear_conv_kernel_dim linear_key_head_dim "
    "linear_value_head_dim linear_num_key_heads linear_num_value_heads moe_shared_expert_gate "
    "share_embeddings_and_output_weights normalization position_embedding_type "
    # not architecture, but read with their values: the linter (CUDA graphs need fixed shapes) and
    # Megatron's uneven pipeline-split options (moeplan.parallel.layout_from_split_options)
    "variable_seq_lengths account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split "
    "num_layers_in_first_pipeline_stage num_layers_in_last_pipeline_stage".split())

# Fields moeplan recognises but does not use, by Bridge section (model: TransformerConfig and provider fields;
# train: TrainingConfig; optimizer: OptimizerConfig; ddp: DistributedDataParallelConfig; dataset:
# GPTDatasetConfig; mixed_precision: MixedPrecisionConfig; comm_overlap: CommOverlapConfig).
_RECOGNISED: dict[str, frozenset[str]] = {
    "model": frozenset((
        "_target_ hidden_dropout attention_dropout init_method_std layernorm_epsilon bf16 fp16 params_dtype "
        "pipeline_dtype autocast_dtype moe_grouped_gemm moe_permute_fusion moe_router_load_balancing_type "
        "moe_aux_loss_coeff moe_z_loss_coeff moe_router_score_function moe_router_pre_softmax "
        "moe_router_topk_scaling_factor moe_router_num_groups moe_router_group_topk moe_router_enable_expert_bias "
        "moe_router_bias_update_rate moe_router_dtype moe_router_fusion moe_shared_expert_overlap "
        "moe_pad_expert_input_to_capacity moe_token_drop_policy moe_router_force_load_balancing moe_deepep_num_sms "
        "moe_hybridep_num_sms moe_router_padding_for_fp8 moe_router_padding_for_quantization moe_layer_recompute "
        "moe_input_jitter_eps moe_per_layer_logging moe_apply_probs_on_input moe_use_legacy_grouped_gemm "
        "mtp_loss_scaling_factor cross_entropy_loss_fusion "
        "cross_entropy_fusion_impl gradient_accumulation_fusion bias_activation_fusion bias_dropout_fusion "
        "masked_softmax_fusion persist_layer_norm apply_rope_fusion cuda_graph_warmup_steps "
        "cuda_graph_use_single_mempool cuda_graph_retain_backward_graph transformer_layer_spec tp_comm_overlap "
        "deallocate_pipeline_outputs overlap_p2p_comm batch_p2p_comm calculate_per_token_loss "
        "delay_wgrad_compute first_last_layers_bf16 fp8_param fp8_margin fp8_amax_history_len "
        "fp8_amax_compute_algo fp8_wgrad fp8_dot_product_attention fp8_multi_head_attention fp8_interval fp4 "
        "fp4_recipe num_layers_at_start_in_bf16 num_layers_at_end_in_bf16 attention_backend "
        "attention_softmax_in_fp32 apply_query_key_layer_scaling rotary_base rotary_percent rope_scaling "
        "rope_scaling_factor seq_len_interpolation_factor rotary_scaling_factor beta_fast beta_slow mscale "
        "mscale_all_dim original_max_position_embeddings rope_type distribute_saved_activations cpu_offloading "
        "cpu_offloading_num_layers cpu_offloading_activations cpu_offloading_weights "
        "cpu_offloading_double_buffering min_offloaded_tensor_size init_model_with_meta_device "
        "use_cpu_initialization perform_initialization make_vocab_size_divisible_by "
        "should_pad_vocab parallel_output fp16_lm_cross_entropy activation_func window_size softmax_type "
        "use_transformer_engine_full_layer_spec "
        "use_transformer_engine_op_fuser generation_config hf_model_id test_mode "
        "tp_comm_overlap_disable_qkv tp_comm_overlap_disable_fc1 wgrad_deferral_limit").split()),
    "train": frozenset((
        "_target_ train_iters train_samples exit_interval exit_duration_in_mins exit_signal_handler "
        "exit_signal_handler_for_dataloader manual_gc manual_gc_interval manual_gc_eval rampup_batch_size "
        "decrease_batch_size_if_needed empty_unused_memory_level check_weight_hash_across_dp_replicas_interval "
        "train_sync_interval eval_iters eval_interval skip_train check_optimizer_step_success").split()),
    "optimizer": frozenset((
        "_target_ lr min_lr weight_decay adam_beta1 adam_beta2 adam_eps sgd_momentum clip_grad bf16 "
        "fp16 params_dtype loss_scale initial_loss_scale min_loss_scale loss_scale_window hysteresis "
        "main_grads_dtype main_params_dtype decoupled_lr decoupled_min_lr overlap_cpu_optimizer_d2h_h2d "
        "use_torch_optimizer_for_cpu_offload pin_cpu_grads pin_cpu_params barrier_with_L1_time timers "
        "log_num_zeros_in_grad config_logger_dir store_param_remainders overlap_param_gather_with_optimizer_step "
        "optimizer_cuda_graph use_megatron_fsdp").split()),
    "ddp": frozenset((
        "_target_ overlap_grad_reduce overlap_param_gather align_param_gather num_distributed_optimizer_instances "
        "check_for_nan_in_grad check_for_large_grads bucket_size pad_buckets_for_high_nccl_busbw "
        "average_in_collective fp8_param_gather use_custom_fsdp "
        "gradient_reduce_div_fusion suggested_communication_unit_size preserve_fp32_weights "
        "keep_fp8_transpose_cache nccl_ub outer_dp_sharding_strategy "
        "disable_symmetric_registration reduce_scatter_with_fp32_accumulation delay_wgrad_compute").split()),
    "dataset": frozenset((
        "_target_ random_seed blend blend_per_split split split_matrix num_dataset_builder_threads path_to_cache "
        "mmap_bin_files mock tokenizer reset_position_ids reset_attention_mask eod_mask_loss "
        "create_attention_mask drop_last_partial_validation_sequence add_extra_token_to_sequence "
        "object_storage_cache_path dataloader_type num_workers data_sharding pin_memory persistent_workers "
        "trust_remote_code skip_getting_attention_mask_from_dataset full_validation").split()),
    "mixed_precision": frozenset((
        "_target_ fp32 fp16 bf16 params_dtype pipeline_dtype autocast_dtype autocast_enabled "
        "first_last_layers_bf16 fp8_margin fp8_amax_history_len fp8_amax_compute_algo fp8_wgrad "
        "fp8_dot_product_attention fp8_multi_head_attention fp8_param fp8_param_gather fp4 fp4_recipe loss_scale "
        "initial_loss_scale min_loss_scale loss_scale_window hysteresis num_layers_at_start_in_bf16 "
        "num_layers_at_end_in_bf16 reuse_grad_buf_for_mxfp8_param_ag").split()),
    "comm_overlap": frozenset((
        "_target_ tp_comm_overlap tp_comm_overlap_cfg tp_comm_bootstrap_backend overlap_p2p_comm batch_p2p_comm "
        "overlap_grad_reduce overlap_param_gather overlap_param_gather_with_optimizer_step align_param_gather "
        "bucket_size defer_embedding_wgrad_compute wgrad_deferral_limit delay_wgrad_compute "
        "data_parallel_size").split()),
}

# Megatron-LM flags whose name is not --<field> of a recognised field, and launcher options (torchrun).
_MLM_ARCH_FLAGS = {"--num-experts": "num_moe_experts", "--group-query-attention": None, "--swiglu": None,
                   "--disable-bias-linear": None, "--untie-embeddings-and-output-weights": None}
_MLM_RECOGNISED_EXTRA = frozenset((
    "--bf16 --fp16 --use-mcore-models --transformer-impl --attention-backend --lr --min-lr --lr-decay-style "
    "--lr-warmup-iters --lr-warmup-fraction --lr-decay-iters --lr-decay-samples --lr-warmup-samples --train-iters "
    "--train-samples --data-path --split --mock-data --tokenizer-type --tokenizer-model --vocab-file --merge-file "
    "--save --load --save-interval --eval-interval --eval-iters --log-interval --tensorboard-dir --wandb-project "
    "--wandb-exp-name --seed --distributed-backend --distributed-timeout-minutes --overlap-grad-reduce "
    "--overlap-param-gather --clip-grad --weight-decay --adam-beta1 --adam-beta2 --init-method-std "
    "--hidden-dropout --attention-dropout --no-masked-softmax-fusion --no-bias-swiglu-fusion "
    "--no-rope-fusion --no-load-optim --no-load-rng --exit-interval --num-workers --dataloader-type "
    "--log-throughput --timing-log-level --manual-gc --manual-gc-interval --use-flash-attn --no-create-attention-mask-in-dataloader "
    "--recompute-activations --main-grads-dtype --main-params-dtype --moe-aux-loss-coeff --moe-z-loss-coeff "
    "--moe-router-dtype --moe-router-bias-update-rate --moe-router-enable-expert-bias --moe-router-score-function "
    "--moe-router-topk-scaling-factor --moe-router-num-groups --moe-router-group-topk --moe-router-pre-softmax "
    "--moe-router-fusion --moe-shared-expert-overlap --moe-layer-recompute --fp8-param-gather --fp8-amax-history-len "
    "--fp8-amax-compute-algo --fp8-margin --first-last-layers-bf16 --overlap-cpu-optimizer-d2h-h2d "
    "--use-torch-optimizer-for-cpu-offload --delay-wgrad-compute --tp-comm-overlap --overlap-p2p-communication "
    "--no-overlap-p2p-communication --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers "
    "--nproc-per-node --nproc_per_node --nnodes --node-rank --node_rank --master-addr --master_addr "
    "--master-port --master_port --rdzv-backend --rdzv-endpoint --rdzv-id --standalone").split())

def _mlm_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _mlm_recognised() -> dict[str, str | None]:
    """Recognised-but-unused flag -> architecture field it carries (or None)."""
    out: dict[str, str | None] = {f: None for f in _MLM_RECOGNISED_EXTRA}
    for names in _RECOGNISED.values():
        out.update({_mlm_flag(n): None for n in names if n != "_target_"})
    out.update({_mlm_flag(n): n for n in ARCHITECTURE_FIELDS})
    out.update(_MLM_ARCH_FLAGS)
    return out


_MLM_RECOGNISED = _mlm_recognised()
_MLM_KNOBS: dict[str, tuple[Knob, bool]] = {}  # flag -> (knob, value it sets for a bool flag)
for _knob in KNOBS:
    if _knob.mlm:
        _MLM_KNOBS[_knob.mlm] = (_knob, True)
    if _knob.mlm_false:
        _MLM_KNOBS[_knob.mlm_false] = (_knob, False)
_MLM_RECOMPUTE_ACTIVATIONS = "--recompute-activations"  # = --recompute-granularity selective (arguments.py)

# Bridge path -> (knob, priority): the first export path has priority 0.
_BRIDGE_KNOBS: dict[str, tuple[Knob, int]] = {}
for _knob in KNOBS:
    for _i, _path in enumerate((*_knob.bridge, *_knob.bridge_read)):
        if _path != _DATASET_SEQ:
            _BRIDGE_KNOBS.setdefault(_path, (_knob, _i))

RunKind = Literal["bridge-yaml", "overrides", "megatron-lm"]


@dataclass
class ParsedRun:
    """Settings read from a run file, keyed by Megatron-Core field name."""

    settings: dict[str, object]
    unknown: list[tuple[str, int]]  # keys moeplan does not know, with their line
    kind: RunKind
    lines: dict[str, int]  # line of each settings key
    origin: str
    ignored: list[tuple[str, int]] = field(default_factory=list)  # recognised keys moeplan does not use
    architecture: dict[str, object] = field(default_factory=dict)  # model architecture fields found
    conflicts: list[str] = field(default_factory=list)  # one line each: two paths of a field disagree


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _fail(origin: str, line: int | None, reason: str) -> MoeplanError:
    where = f"{origin}:{line}" if line is not None else origin
    return MoeplanError(f"{where}: {_one_line(reason)}")


# ---- value coercion

_INT = re.compile(r"[+-]?\d+")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"null", "none", "~", ""}


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
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
    return _DTYPE_FROM_MLM.get(text, text)


def _coerce(kind: Kind, value: object) -> object:
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


_KIND_WORDS = {"int": "an integer", "opt_int": "an integer or null", "float": "a number", "opt_float": "a number or null",
               "bool": "true or false", "str": "a string", "opt_str": "a string or null", "list": "a list",
               "int_list": "a list of integers", "str_or_list": "a string or list", "scope": "a list",
               "dtype": "a dtype name"}


class _Collector:
    """Gathers (path -> value, line) hits and resolves them into a ParsedRun."""

    def __init__(self, origin: str, kind: RunKind) -> None:
        self.origin, self.kind = origin, kind
        self.hits: dict[str, tuple[Knob, int, object, int]] = {}  # path -> (knob, priority, value, line)
        self.unknown: list[tuple[str, int]] = []
        self.ignored: list[tuple[str, int]] = []
        self.architecture: dict[str, object] = {}

    def knob(self, path: str, knob: Knob, priority: int, raw: object, line: int) -> None:
        try:
            value = _coerce(knob.kind, raw)
        except ValueError:
            shown = _one_line(raw)[:60]
            raise _fail(self.origin, line, f"{path}: expected {_KIND_WORDS[knob.kind]}, got '{shown}'") from None
        self.hits[path] = (knob, priority, value, line)

    def drop(self, path: str) -> None:
        self.hits.pop(path, None)

    def result(self) -> ParsedRun:
        by_field: dict[str, list[tuple[int, str, object, int]]] = {}
        for path, (knob, prio, value, line) in self.hits.items():
            by_field.setdefault(knob.field, []).append((prio, path, value, line))
        settings: dict[str, object] = {}
        lines: dict[str, int] = {}
        conflicts: list[str] = []
        for name, hits in by_field.items():
            hits.sort(key=lambda h: h[0])
            _, path, value, line = hits[0]
            if KNOB_BY_FIELD[name].merge_any and any(h[2] is True for h in hits):
                path, value, line = next((h[1], h[2], h[3]) for h in hits if h[2] is True)
            for _, other, other_value, other_line in hits[1:]:
                if other_value != value and not KNOB_BY_FIELD[name].merge_any:
                    conflicts.append(f"{self.origin}:{other_line}: {other}={other_value!r} disagrees with "
                                     f"{path}={value!r} (line {line}); {path} wins")
            settings[name], lines[name] = value, line
        return ParsedRun(settings, self.unknown, self.kind, lines, self.origin, self.ignored, self.architecture,
                         conflicts)


def _classify_bridge(col: _Collector, path: str, value: object, line: int) -> None:
    """Route one Bridge path (section.field[.sub...]) to a knob, the recognised lists or unknown."""
    hit = _BRIDGE_KNOBS.get(path)
    if hit is not None:
        col.knob(path, hit[0], hit[1], value, line)
        return
    section, _, rest = path.partition(".")
    name = rest.split(".", 1)[0]
    if path == "mixed_precision" and isinstance(value, str) and value.replace("-", "_") in _BRIDGE_RECIPES:
        fp8, recipe = _BRIDGE_RECIPES[value.replace("-", "_")]
        col.knob("mixed_precision.fp8", KNOB_BY_FIELD["fp8"], 2, fp8, line)
        if recipe is not None:
            col.knob("mixed_precision.fp8_recipe", KNOB_BY_FIELD["fp8_recipe"], 2, recipe, line)
        return
    if section in BRIDGE_SECTIONS and section not in _USED_SECTIONS:
        col.ignored.append((path, line))
    elif section == "model" and name in ARCHITECTURE_FIELDS:
        if name == rest:
            col.architecture[name] = value
        col.ignored.append((path, line))
    elif section in _RECOGNISED and name in _RECOGNISED[section]:
        col.ignored.append((path, line))
    else:
        col.unknown.append((path, line))


# ---- Bridge YAML


def _yaml_root(text: str, origin: str) -> yaml.MappingNode:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise _fail(origin, mark.line + 1 if mark else None, f"YAML error: {exc.problem or exc.context}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise _fail(origin, None, f"YAML error: {exc}") from None
    if not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node is not None else 1
        raise _fail(origin, line, "not a Megatron Bridge YAML mapping, a list of overrides or Megatron-LM arguments")
    return node


def _construct(node: yaml.Node, origin: str) -> object:
    try:
        return SafeConstructor().construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or node.start_mark
        raise _fail(origin, mark.line + 1, f"YAML error: {exc.problem}") from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise _fail(origin, node.start_mark.line + 1, f"YAML error: {exc}") from None


def _yaml_key(node: yaml.Node, origin: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise _fail(origin, node.start_mark.line + 1, "YAML error: mapping keys must be plain names")
    return str(node.value)


def _parse_bridge_yaml(text: str, origin: str) -> ParsedRun:
    root = _yaml_root(text, origin)
    col = _Collector(origin, "bridge-yaml")
    for key_node, value_node in root.value:
        section, line = _yaml_key(key_node, origin), key_node.start_mark.line + 1
        if section == "_target_":
            col.ignored.append((section, line))
        elif isinstance(value_node, yaml.MappingNode) and section in BRIDGE_SECTIONS:
            for sub_key, sub_value in value_node.value:
                path = f"{section}.{_yaml_key(sub_key, origin)}"
                _classify_bridge(col, path, _construct(sub_value, origin), sub_key.start_mark.line + 1)
        elif section in BRIDGE_SECTIONS:
            _classify_bridge_scalar(col, section, _construct(value_node, origin), line)
        else:
            col.unknown.append((section, line))
    return col.result()


def _classify_bridge_scalar(col: _Collector, section: str, value: object, line: int) -> None:
    """A section given as a scalar: a mixed-precision recipe name, or null (section off)."""
    if section == "mixed_precision" and isinstance(value, str):
        _classify_bridge(col, section, value, line)
    elif value is None:
        col.ignored.append((section, line))
    else:
        col.unknown.append((section, line))


# ---- Hydra overrides

_OVERRIDE = re.compile(r"(\+\+|\+|~)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(.*))?", re.DOTALL)
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def _split_tokens(line: str) -> tuple[list[str], str | None]:
    """Whitespace-separated tokens outside quotes and brackets, '#' comments dropped.
    Returns (tokens, error)."""
    tokens: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    depth = 0
    for i, ch in enumerate(line):
        if quote:
            buf.append(ch)
            if ch == quote and line[i - 1] != "\\":
                quote = None
            continue
        if ch == "#" and not buf and depth == 0:
            break
        if ch.isspace() and depth == 0:
            if buf:
                tokens.append("".join(buf))
                buf = []
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                return tokens, "unbalanced brackets"
        buf.append(ch)
    if quote:
        return tokens, "unclosed quote"
    if depth:
        return tokens, "unbalanced brackets (lists must fit on one line)"
    if buf:
        tokens.append("".join(buf))
    return tokens, None


def _unquote(text: str) -> str | None:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return None


def _split_list(inner: str) -> list[str]:
    parts: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    depth = 0
    for i, ch in enumerate(inner):
        if quote:
            quote = None if ch == quote and inner[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(buf).strip())
            buf = []
            continue
        buf.append(ch)
    last = "".join(buf).strip()
    if last or parts:
        parts.append(last)
    return parts


def parse_override_value(text: str) -> object:
    """A Hydra override value: null, true/false, int, float, quoted or bare string, [list] (raw text for {dict})."""
    text = text.strip()
    quoted = _unquote(text)
    if quoted is not None:
        return quoted
    if text.startswith("[") and text.endswith("]"):
        return [parse_override_value(p) for p in _split_list(text[1:-1])]
    low = text.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    try:
        if _INT.fullmatch(text):
            return int(text)
        if _FLOAT.fullmatch(text):
            return float(text)
    except ValueError:  # more digits than int() accepts
        pass
    return text


def _override_tokens(text: str, origin: str) -> Iterable[tuple[str, int]]:
    for number, raw in enumerate(text.splitlines(), start=1):
        tokens, error = _split_tokens(raw)
        if error:
            raise _fail(origin, number, f"bad override line: {error}")
        for token in tokens:
            if token == "\\":
                continue
            yield _shell_word(token), number


def _shell_word(token: str) -> str:
    """A token written for a shell ('key=value', 'key='"'"'a|b'"'"'') as the word the shell passes on."""
    if token[0] not in "'\"":
        return token
    try:
        words = shlex.split(token)
    except ValueError:
        return token
    return words[0] if len(words) == 1 else token


def _parse_overrides(text: str, origin: str) -> ParsedRun:
    col = _Collector(origin, "overrides")
    for token, line in _override_tokens(text, origin):
        m = _OVERRIDE.fullmatch(token)
        if token.startswith("-"):
            col.unknown.append((token, line))
            continue
        if m is None or (m.group(3) is None and m.group(1) != "~"):
            raise _fail(origin, line, f"bad override '{_one_line(token)[:80]}': expected key=value, +key=value or ~key")
        prefix, path, raw = m.groups()
        if prefix == "~":
            col.drop(path)
            col.ignored.append((token, line))
            continue
        _classify_bridge(col, path, parse_override_value(raw), line)
    return col.result()


# ---- Megatron-LM arguments


def _mlm_tokens_with_lines(text: str, origin: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip().removesuffix("\\")
        lexer = shlex.shlex(line, posix=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            out += [(tok, number) for tok in lexer]
        except ValueError as exc:
            raise _fail(origin, number, f"bad argument line: {exc}") from None
    return out


def _is_flag(token: str) -> bool:
    return token.startswith("--") and len(token) > 2


def _take_values(tokens: list[tuple[str, int]], i: int) -> list[str]:
    """Tokens after position i up to the next --flag."""
    out: list[str] = []
    while i + 1 + len(out) < len(tokens) and not _is_flag(tokens[i + 1 + len(out)][0]):
        out.append(tokens[i + 1 + len(out)][0])
    return out


_MLM_MULTI = ("list", "int_list", "str_or_list", "scope")


def _mlm_value(knob: Knob, flag: str, sets: bool, inline: str | None, following: list[str],
               origin: str, line: int) -> tuple[object, int]:
    """(raw value, tokens consumed after the flag) of a known flag."""
    if knob.kind == "bool":
        if inline is not None:
            raise _fail(origin, line, f"{flag} takes no value")
        return sets, 0
    if inline is not None:
        return ([inline] if knob.kind in _MLM_MULTI and knob.kind != "str_or_list" else inline), 0
    if not following:
        raise _fail(origin, line, f"{flag} is missing its value")
    if knob.kind in _MLM_MULTI:
        single = knob.kind == "str_or_list" and len(following) == 1
        return (following[0] if single else following), len(following)
    return following[0], 1


def _parse_megatron_lm(text: str, origin: str) -> ParsedRun:
    col = _Collector(origin, "megatron-lm")
    tokens = _mlm_tokens_with_lines(text, origin)
    i = 0
    while i < len(tokens):
        token, line = tokens[i]
        if not _is_flag(token):
            (col.unknown if token.startswith("-") else col.ignored).append((token, line))
            i += 1
            continue
        flag, eq, inline_text = token.partition("=")
        inline = inline_text if eq else None
        following = [] if eq else _take_values(tokens, i)
        if flag in _MLM_KNOBS:
            knob, sets = _MLM_KNOBS[flag]
            raw, used = _mlm_value(knob, flag, sets, inline, following, origin, line)
            if knob.kind == "dtype":
                raw = _DTYPE_FROM_MLM.get(str(raw), raw)
            col.knob(flag, knob, 0, raw, line)
            i += 1 + used
            continue
        if flag == _MLM_RECOMPUTE_ACTIVATIONS:
            col.knob(flag, KNOB_BY_FIELD["recompute_granularity"], 1, "selective", line)
        elif flag in _MLM_RECOGNISED:
            arch = _MLM_RECOGNISED[flag]
            if arch is not None:
                value = inline if eq else following[0] if following else None
                col.architecture[arch] = True if value is None else parse_override_value(value)
            col.ignored.append((flag, line))
        else:
            col.unknown.append((flag, line))
        i += 1 + len(following)
    return col.result()


# ---- detection and entry points

_OVERRIDE_START = re.compile(r"['\"]?((\+\+|\+)?[A-Za-z_][\w\-.]*=|~[A-Za-z_])")


def _detect(text: str) -> RunKind:
    """YAML when the first meaningful line is a YAML key or document marker; Megatron-LM when the text has
    --flags; overrides when the first line starts with key=value (or ~key); otherwise YAML."""
    lines = [raw.strip() for raw in text.splitlines()]
    first = next((line for line in lines if line and not line.startswith("#")), "")
    if first.startswith(("---", "%")) or re.match(r"[\w.\-]+\s*:(\s|$)", first):
        return "bridge-yaml"
    if any(re.search(r"(^|\s)--[A-Za-z]", line) for line in lines if not line.startswith("#")):
        return "megatron-lm"
    if not first or _OVERRIDE_START.match(first):
        return "overrides"
    return "bridge-yaml"


def parse_run_text(text: str, origin: str = "<text>") -> ParsedRun:
    """Read a Bridge YAML, a list of Bridge overrides or Megatron-LM arguments (detected from the text)."""
    kind = _detect(text)
    if kind == "megatron-lm":
        run = _parse_megatron_lm(text, origin)
    elif kind == "overrides":
        run = _parse_overrides(text, origin)
    else:
        run = _parse_bridge_yaml(text, origin)
    if not (run.settings or run.unknown or run.ignored or run.architecture):
        raise _fail(origin, None, "no settings found (expected a Megatron Bridge YAML, overrides or Megatron-LM arguments)")
    return run


def read_run_file(path: str | Path) -> ParsedRun:
    """:func:`parse_run_text` on a file; unreadable files raise MoeplanError naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise _fail(str(p), None, f"cannot read run file: {reason}") from None
    return parse_run_text(text, str(p))


# ------------------------------------------------------------------------------------------ checks


def check_settings(settings: Mapping[str, object], version: str) -> list[str]:
    """One line per setting the target Megatron-Core version lacks or whose value it does not accept."""
    f = fields_for(version)
    problems = [f"{k} is not a Megatron-Core {f.version} field (since {KNOB_BY_FIELD[k].since})"
                for k in settings if k in KNOB_BY_FIELD and k not in f.knobs]

    def check(key: str, allowed: tuple[str, ...]) -> None:
        value = settings.get(key)
        values = value if isinstance(value, list) else [] if value is None else [value]
        bad = [str(v) for v in values if v not in allowed]
        if bad and key in f.knobs:
            problems.append(f"{key}: {', '.join(bad)} not accepted by Megatron-Core {f.version} "
                            f"(allowed: {', '.join(allowed)})")

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


def dp_assertions(settings: Mapping[str, object], version: str) -> list[tuple[str, str]]:
    """(field, one line) per Megatron-FSDP / Muon combination Megatron-LM or Megatron Bridge rejects:
    megatron/training/arguments.py validate_args (core_v0.16.1 .. core_v0.19.0) and Bridge config.py
    (v0.3.0 .. v0.6.0)."""
    f = fields_for(version)
    out: list[tuple[str, str]] = []
    fsdp = settings.get("use_megatron_fsdp") is True
    opt = settings.get("optimizer")
    muon = isinstance(opt, str) and "muon" in opt
    if fsdp and settings.get("ckpt_format", "torch_dist") != "fsdp_dtensor":
        out.append(("ckpt_format", "Megatron-FSDP only supports the fsdp_dtensor checkpoint format (Megatron-LM "
                    f"asserts it; Bridge when saving or loading), got {settings.get('ckpt_format', 'torch_dist')}"))
    if muon and fsdp:
        out.append(("use_megatron_fsdp", "Muon optimizer does not support Megatron-FSDP (Megatron-LM arguments.py)"))
    if muon and settings.get("use_distributed_optimizer") is True and _vkey(f.version) < (0, 18):
        out.append(("use_distributed_optimizer", f"Muon does not support the distributed optimizer in Megatron-Core "
                    f"{f.version}; use optimizer dist_muon (the layer-wise distributed optimizer)"))
    plain = opt == "muon" and not settings.get("use_layer_wise_distributed_optimizer")
    if muon and (plain and _vkey(f.version) < (0, 18) or not f.muon_dp_overlap):
        for key in ("overlap_grad_reduce", "overlap_param_gather"):
            if settings.get(key) is True:
                out.append((key, f"{opt} in Megatron-Core {f.version} does not support {key} (Megatron-LM asserts "
                            "it off" + ("; dist_muon allows it from 0.17)" if f.muon_dp_overlap is False else ")")))
    return out


# ------------------------------------------------------------------------------------------ settings -> plan


def _value(settings: Mapping[str, object], key: str) -> object:
    """A setting coerced to its knob's type (MoeplanError naming the field when it has the wrong type)."""
    raw = settings.get(key)
    if raw is None:
        return None
    try:
        return _coerce(KNOB_BY_FIELD[key].kind, raw)
    except ValueError:
        raise MoeplanError(f"{key}: expected {_KIND_WORDS[KNOB_BY_FIELD[key].kind]}, got {raw!r}") from None


def _int(settings: Mapping[str, object], key: str) -> int | None:
    value = _value(settings, key)
    return value if isinstance(value, int) else None


def _float(settings: Mapping[str, object], key: str) -> float | None:
    value = _value(settings, key)
    return value if isinstance(value, float) else None


def _str(settings: Mapping[str, object], key: str, default: str) -> str:
    value = _value(settings, key)
    return value if isinstance(value, str) else default


def _bool(settings: Mapping[str, object], key: str, default: bool = False) -> bool:
    value = _value(settings, key)
    return value if isinstance(value, bool) else default


def _strings(settings: Mapping[str, object], key: str) -> list[str] | None:
    value = _value(settings, key)
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else None


def _require(settings: Mapping[str, object], key: str, where: str) -> int:
    value = _int(settings, key)
    if value is None:
        raise MoeplanError(f"run settings lack {key} ({where}); moeplan needs it to plan the run")
    return value


def _layout_stages(layout: str) -> int:
    """Stage count of a layout string ('|' separated after expanding (...)*n)."""
    from moeplan.parallel import unroll_layout

    return len(unroll_layout(layout).rstrip("|").split("|"))


_SIZE_FIELDS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
                "num_layers_per_virtual_pipeline_stage", "seq_length", "global_batch_size", "micro_batch_size")


def _check_sizes(settings: Mapping[str, object]) -> None:
    for key in _SIZE_FIELDS:
        value = _int(settings, key)
        if value is not None and value < 1:
            raise MoeplanError(f"{key} must be a positive integer, got {value}")


def _parallel_from(settings: Mapping[str, object], model: ModelSpec, gpus: int) -> Parallel:
    tp = _int(settings, "tensor_model_parallel_size") or 1
    pp = _int(settings, "pipeline_model_parallel_size") or 1
    layout = _value(settings, "pipeline_model_parallel_layout")
    vpp = _int(settings, "virtual_pipeline_model_parallel_size")
    per_stage = _int(settings, "num_layers_per_virtual_pipeline_stage")
    if vpp is None and isinstance(layout, str) and layout:
        vpp = max(1, _layout_stages(layout) // pp)  # Megatron-Core derives VPP from the layout
    elif vpp is None and per_stage:
        vpp = max(1, model.num_layers // (pp * per_stage))
    etp = _int(settings, "expert_tensor_parallel_size")
    return Parallel(gpus, tp=tp, pp=pp, vpp=vpp or 1, cp=_int(settings, "context_parallel_size") or 1,
                    ep=_int(settings, "expert_model_parallel_size") or 1,
                    etp=tp if etp is None else etp,  # ModelParallelConfig: None -> TP
                    pipeline_layout=layout if isinstance(layout, str) and layout else None)


def _recompute_from(settings: Mapping[str, object]) -> Recompute:
    granularity = _str(settings, "recompute_granularity", "none")
    if granularity == "none":
        return Recompute()
    if granularity == "full":
        method = _str(settings, "recompute_method", "")
        if method not in ("uniform", "block"):
            raise MoeplanError(f"full recompute needs recompute_method uniform or block, got {method or None!r}")
        return Recompute("full", frozenset(), "uniform" if method == "uniform" else "block",
                         _int(settings, "recompute_num_layers") or 1)
    if granularity != "selective":
        raise MoeplanError(f"recompute_granularity {granularity!r} unknown; Megatron-Core accepts full or selective")
    modules = _strings(settings, "recompute_modules")
    modules = ["core_attn"] if modules is None else modules  # Megatron-Core default
    bad = [m for m in modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise MoeplanError(f"recompute module(s) {', '.join(bad)} unknown; Megatron-Core labels: {', '.join(RECOMPUTE_MODULES)}")
    return Recompute("selective", frozenset(modules)) if modules else Recompute()


def _precision_from(settings: Mapping[str, object]) -> str:
    if settings.get("fp8") is None:
        return "bf16"
    recipe = _str(settings, "fp8_recipe", "delayed")  # Megatron-Core default recipe
    if recipe not in FP8_RECIPE_TO_PRECISION:
        raise MoeplanError(f"fp8_recipe '{recipe}' is not modelled; moeplan knows {', '.join(FP8_RECIPE_TO_PRECISION)}")
    return FP8_RECIPE_TO_PRECISION[recipe]


def _dispatcher_from(settings: Mapping[str, object]) -> str:
    kind = _str(settings, "moe_token_dispatcher_type", "allgather")  # Megatron-Core default
    deepep = _bool(settings, "moe_enable_deepep")
    if kind in ("alltoall", "allgather"):
        if deepep:
            raise MoeplanError("moe_enable_deepep needs moe_token_dispatcher_type flex")
        return kind
    if kind != "flex":
        raise MoeplanError(f"moe_token_dispatcher_type '{kind}' unknown; Megatron-Core accepts allgather, alltoall, flex")
    backend = "deepep" if deepep else _str(settings, "moe_flex_dispatcher_backend", "deepep")
    if backend not in ("deepep", "hybridep"):
        raise MoeplanError(f"moe_flex_dispatcher_backend '{backend}' is not modelled; moeplan knows deepep, hybridep")
    return backend


def _scopes_from(settings: Mapping[str, object]) -> frozenset[str]:
    legacy = ("local" if _bool(settings, "enable_cuda_graph") else
              "transformer_engine" if _bool(settings, "external_cuda_graph") else "none")
    impl = _str(settings, "cuda_graph_impl", legacy)
    if impl == "none":
        return frozenset()
    if impl == "full_iteration":
        return frozenset({"full_iteration"})
    scopes = frozenset(_strings(settings, "cuda_graph_modules") or _strings(settings, "cuda_graph_scope") or [])
    if not scopes or "full" in scopes:
        raise MoeplanError("whole-layer CUDA graphs (scope 'full' / empty) are not modelled; list the scopes "
                           f"({', '.join(CUDA_GRAPH_SCOPES)})")
    bad = sorted(s for s in scopes if s not in CUDA_GRAPH_SCOPES)
    if bad:
        raise MoeplanError(f"CUDA graph scope(s) {', '.join(bad)} unknown; choose from {', '.join(CUDA_GRAPH_SCOPES)}")
    return scopes


def _cp_comm_from(settings: Mapping[str, object]) -> str:
    kinds = set(_strings(settings, "cp_comm_type") or ["p2p"])
    if len(kinds) != 1:
        raise MoeplanError(f"per-layer cp_comm_type {sorted(kinds)} is not modelled; use one type for all layers")
    kind = kinds.pop()
    if kind not in _CP_FROM_MCORE:
        raise MoeplanError(f"cp_comm_type '{kind}' unknown; Megatron-Core accepts {', '.join(_CP_COMM)}")
    return _CP_FROM_MCORE[kind]


def _model_with_mtp(model: ModelSpec, settings: Mapping[str, object]) -> ModelSpec:
    if "mtp_num_layers" not in settings:
        return model
    n = _int(settings, "mtp_num_layers") or 0
    if n == model.mtp_layers:
        return model
    if n and model.mtp_layer is None:
        raise MoeplanError(f"mtp_num_layers {n}: model {model.name} has no multi-token prediction module")
    return replace(model, mtp_layers=n, mtp_layer=model.mtp_layer if n else None)


def run_config_from_settings(settings: Mapping[str, object], model: ModelSpec, gpus: int, gpu: str,
                             *, mcore_version: str = DEFAULT_VERSION) -> RunConfig:
    """A :class:`RunConfig` from Megatron settings (missing fields take Megatron-Core's defaults)."""
    _check_sizes(settings)
    seq = _require(settings, "seq_length", "model.seq_length / --seq-length")
    gbs = _require(settings, "global_batch_size", "train.global_batch_size / --global-batch-size")
    optimizer, layer_wise = _optimizer_from(settings)
    fsdp = _fsdp_from(settings)
    if optimizer == "adam" and fsdp is None and not _bool(settings, "use_distributed_optimizer", True):
        raise MoeplanError("use_distributed_optimizer is false; moeplan models Adam with the distributed optimizer "
                           "or Megatron-FSDP, and Muon")
    model = _model_with_mtp(model, settings)
    offload = _bool(settings, "optimizer_cpu_offload")
    fraction = _float(settings, "optimizer_offload_fraction")
    modules = _strings(settings, "offload_modules") if _bool(settings, "fine_grained_activation_offloading") else None
    return RunConfig(
        model=model,
        parallel=_parallel_from(settings, model, gpus),
        batch=Batch(seq, gbs, _int(settings, "micro_batch_size") or 1),
        gpu=gpu,
        recompute=_recompute_from(settings),
        precision=_precision_from(settings),
        dispatcher=_dispatcher_from(settings) if model.first_moe is not None else "alltoall",
        cuda_graph_scopes=_scopes_from(settings),
        optimizer_offload=(1.0 if fraction is None else fraction) if offload else 0.0,  # Megatron-LM default 1.0
        offload_modules=frozenset(modules or ()),
        capacity_factor=_float(settings, "moe_expert_capacity_factor"),
        rank_capacity_factor=_float(settings, "moe_expert_rank_capacity_factor"),
        grad_fp32=_bool(settings, "grad_reduce_in_fp32", True),
        bf16_moments=_str(settings, "exp_avg_dtype", "") == _str(settings, "exp_avg_sq_dtype", "") == "bfloat16",
        ep_overlap=_bool(settings, "overlap_moe_expert_parallel_comm"),
        # irrelevant at TP 1 (moeplan's default then, so exports round-trip)
        tp_comm_overlap=_bool(settings, "tp_comm_overlap") if (_int(settings, "tensor_model_parallel_size") or 1) > 1 else True,
        dp_overlap=_bool(settings, "overlap_grad_reduce"),
        cp_comm_type=_cp_comm_from(settings),
        mcore_version=normalize_version(mcore_version),
        fsdp=fsdp,
        fsdp_double_buffer=_bool(settings, "fsdp_double_buffer") if fsdp is not None else False,
        optimizer=optimizer,
        muon_ns_steps=_int(settings, "muon_num_ns_steps") or 5,  # OptimizerConfig default
        muon_tp_mode=_str(settings, "muon_tp_mode", "blockwise"),
        muon_layer_wise=layer_wise,
    )


def _optimizer_from(settings: Mapping[str, object]) -> tuple[str, bool]:
    """(moeplan optimizer, Muon with the layer-wise distributed optimizer) from Megatron's optimizer name
    ('dist_muon' = muon + use_layer_wise_distributed_optimizer; core_v0.18+ arguments.py also turns
    use_distributed_optimizer into it for Muon)."""
    name = _str(settings, "optimizer", "adam")
    if name == "adam":
        return "adam", True
    if name in ("muon", "dist_muon"):
        layer_wise = (name == "dist_muon" or _bool(settings, "use_layer_wise_distributed_optimizer")
                      or _bool(settings, "use_distributed_optimizer"))
        return "muon", layer_wise
    raise MoeplanError(f"optimizer '{name}' is not modelled; moeplan knows adam, muon and dist_muon")


def _fsdp_from(settings: Mapping[str, object]) -> str | None:
    if not _bool(settings, "use_megatron_fsdp"):
        return None
    strategy = _str(settings, "data_parallel_sharding_strategy", "no_shard")  # DDP config default
    if strategy not in FSDP_STRATEGIES:
        raise MoeplanError(f"data_parallel_sharding_strategy '{strategy}' unknown; Megatron-Core accepts "
                           f"{', '.join(FSDP_STRATEGIES)}")
    return strategy


# ------------------------------------------------------------------------------------------ Megatron-Core objects

_MCORE_OWNERS = ("TransformerConfig", "ModelParallelConfig")


def _attention_kwargs(attn: Attention, f: MegatronFields) -> dict[str, object]:
    kw: dict[str, object] = {"num_attention_heads": attn.num_heads}
    if attn.is_mla:
        # MLATransformerConfig (transformer_config.py, all versions)
        kw.update(q_lora_rank=attn.q_lora_rank, kv_lora_rank=attn.kv_lora_rank, qk_head_dim=attn.qk_nope_head_dim,
                  qk_pos_emb_head_dim=attn.qk_rope_head_dim, v_head_dim=attn.v_head_dim)
        return kw
    kw.update(num_query_groups=attn.num_kv_heads, kv_channels=attn.head_dim, qk_layernorm=attn.qk_norm,
              add_qkv_bias=attn.qkv_bias)
    if attn.output_gate:
        if _vkey(f.version) < (0, 16):
            raise MoeplanError(f"gated attention (attention_output_gate) needs Megatron-Core >= 0.16, target is {f.version}")
        kw["attention_output_gate"] = True
    return kw


def _gdn_kwargs(spec: ModelSpec, f: MegatronFields) -> dict[str, object]:
    """Gated DeltaNet fields (transformer_config.py core_v0.16+: experimental_attention_variant, linear_*)."""
    gdn = next((layer.mixer for layer in spec.layers if isinstance(layer.mixer, GatedDeltaNet)), None)
    if gdn is None:
        return {}
    if _vkey(f.version) < (0, 16):
        raise MoeplanError(f"Gated DeltaNet layers need Megatron-Core >= 0.16, target is {f.version}")
    return {"experimental_attention_variant": "gated_delta_net",
            "linear_attention_freq": [1 if layer.is_linear_attention else 0 for layer in spec.layers],
            "linear_conv_kernel_dim": gdn.conv_kernel, "linear_key_head_dim": gdn.key_head_dim,
            "linear_value_head_dim": gdn.value_head_dim, "linear_num_key_heads": gdn.num_key_heads,
            "linear_num_value_heads": gdn.num_value_heads}


def _moe_kwargs(spec: ModelSpec, moe: MoE, f: MegatronFields) -> dict[str, object]:
    kw: dict[str, object] = {
        "num_moe_experts": moe.num_experts, "moe_router_topk": moe.top_k, "moe_ffn_hidden_size": moe.expert_ffn_hidden,
        "moe_layer_freq": [1 if layer.is_moe else 0 for layer in spec.layers],
        "moe_grouped_gemm": True,
        "moe_permute_fusion": False,  # True imports Transformer Engine kernels inside __post_init__
    }
    if moe.has_shared:
        kw["moe_shared_expert_intermediate_size"] = moe.shared_ffn_hidden
        if moe.shared_gate and _vkey(f.version) >= (0, 16):
            kw["moe_shared_expert_gate"] = True
    return kw


def architecture_kwargs(spec: ModelSpec, version: str = DEFAULT_VERSION) -> dict[str, object]:
    """TransformerConfig architecture fields of a model (no torch needed)."""
    f = fields_for(version)
    attn, moe = spec.first_attention, spec.first_moe
    if attn is None:
        raise MoeplanError(f"model {spec.name} has no softmax attention layer; TransformerConfig needs one")
    dense = next((layer.mlp for layer in spec.layers if isinstance(layer.mlp, DenseMLP)), None)
    ffn = dense.ffn_hidden if dense else moe.expert_ffn_hidden if moe else 4 * spec.hidden
    mlp = dense or moe
    gated = mlp.gated if mlp is not None else True
    kw: dict[str, object] = {"num_layers": spec.num_layers, "hidden_size": spec.hidden, "ffn_hidden_size": ffn,
                             "add_bias_linear": False, "gated_linear_unit": gated}
    kw.update(_attention_kwargs(attn, f))
    kw.update(_gdn_kwargs(spec, f))
    if moe is not None:
        kw.update(_moe_kwargs(spec, moe, f))
    return kw


def mcore_config_class(cfg: RunConfig) -> str:
    """'MLATransformerConfig' for MLA models, else 'TransformerConfig'."""
    attn = cfg.model.first_attention
    return "MLATransformerConfig" if attn is not None and attn.is_mla else "TransformerConfig"


def mcore_kwargs(cfg: RunConfig, version: str | None = None) -> dict[str, object]:
    """Keyword arguments for Megatron-Core's (MLA)TransformerConfig: architecture + run settings.
    Needs torch (dtypes)."""
    try:
        import torch
    except ImportError:
        raise MoeplanError("mcore_kwargs needs torch (pip install torch) for the dtype fields") from None
    f = fields_for(version or cfg.mcore_version)
    kw = architecture_kwargs(cfg.model, f.version)
    kw.update(bf16=True, params_dtype=torch.bfloat16)
    if cfg.parallel.pp > 1:
        kw["pipeline_dtype"] = torch.bfloat16
    for key, value in to_settings(cfg, f.version).items():
        knob = f.knobs[key]
        if knob.owner in _MCORE_OWNERS:
            kw[key] = _bridge_value(knob, value, f)  # version-native type (scope string before 0.16)
    return kw


def installed_mcore_version() -> str:
    """major.minor of the installed megatron-core (MoeplanError when it is not installed)."""
    try:
        from megatron.core import package_info
    except ImportError as exc:
        raise MoeplanError(f"megatron-core is not installed ({_one_line(exc)}); pip install 'moeplan[mcore]'") from None
    return normalize_version(package_info.__version__)


def build_mcore_config(cfg: RunConfig) -> object:
    """Construct the installed Megatron-Core's (MLA)TransformerConfig for the plan, so its __post_init__ checks
    run; any rejection becomes a one-line MoeplanError."""
    version = installed_mcore_version()
    from megatron.core.transformer import transformer_config as tc

    cls = getattr(tc, mcore_config_class(cfg))
    kwargs = mcore_kwargs(cfg, version)
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Megatron-Core rejects with ValueError, AssertionError, TypeError, ...
        raise MoeplanError(f"Megatron-Core {version} {cls.__name__} rejects the plan: "
                           f"{type(exc).__name__}: {_one_line(exc)[:300]}{_te_note()}") from None


def _te_note() -> str:
    """Some checks (FP8 with moe_act/layernorm recompute, fused permutation) probe Transformer Engine."""
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        return " (Transformer Engine is not installed: checks that probe its version cannot pass here)"
    return ""
