"""Megatron-Core's own start-up checks that a run file can trip, as data: one row per assertion (or
ValueError / RuntimeError / UserWarning) in

* ``parallel_state.initialize_model_parallel`` (megatron/core/parallel_state.py),
* ``ModelParallelConfig.__post_init__`` (megatron/core/model_parallel_config.py),
* ``TransformerConfig.__post_init__`` / ``MLATransformerConfig.__post_init__`` (megatron/core/transformer/
  transformer_config.py),
* ``OptimizerConfig.__post_init__`` (megatron/core/optimizer/optimizer_config.py),

read from Megatron-LM tags core_v0.16.1 .. core_v0.19.0 (facts only, no code). Each row checks the values
the file sets (``ParsedRun.settings`` and ``ParsedRun.architecture``), not moeplan's normalised run, so a
value that moeplan would read past (a hierarchical CP split whose product is not CP) is still reported.

Checks that :func:`moeplan.run.parallel.check_layout` already makes from the layout are not repeated here:
world size divisible by TP x PP x CP and by ETP x EP x PP (initialize_model_parallel), attention heads and
query groups by TP, Gated DeltaNet heads by TP and no Gated DeltaNet CP before 0.18 (TransformerConfig),
VPP > 1 with PP 1, num_moe_experts with EP > 1, experts divisible by EP, the pipeline layout grammar.
Checks on fields moeplan does not read (fp8_param, moe_pad_expert_input_to_capacity, cpu_offloading, ...)
are Megatron-Core's own, run by ``moeplan check --mcore``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from moeplan.base.fields import check_settings, ep_overlap_mtp_needs_pp, version_tuple
from moeplan.models.spec import ModelSpec
from moeplan.run.config import DELAY_WGRAD_GRAPH_BIAS, EP_OVERLAP_ASSERTED, RunConfig
from moeplan.run.dsa_rules import CP_COMM_TYPE as DSA_CP_COMM_TYPE
from moeplan.run.offload_rules import fused_group_mlp_problem
from moeplan.run.parallel import unroll_layout

_UNSET = object()


@dataclass(frozen=True)
class FileView:
    """What one assertion may look at: the file's settings and architecture fields, the model, the
    GPU count and the targeted Megatron-Core version."""

    settings: Mapping[str, object]
    architecture: Mapping[str, object]
    model: ModelSpec
    gpus: int
    version: str
    kind: str = ""  # the file's kind (moeplan.megatron.read RunKind): "megatron-lm" runs Megatron-LM's validate_args

    def get(self, key: str, default: object = None) -> object:
        if key in self.settings:
            return self.settings[key]
        return self.architecture.get(key, default)

    def int_(self, key: str, default: int) -> int:
        v = self.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    def flag(self, key: str) -> bool:
        return self.get(key) is True

    @property
    def tp(self) -> int:
        return self.int_("tensor_model_parallel_size", 1)

    @property
    def pp(self) -> int:
        return self.int_("pipeline_model_parallel_size", 1)

    @property
    def cp(self) -> int:
        return self.int_("context_parallel_size", 1)

    @property
    def ep(self) -> int:
        return self.int_("expert_model_parallel_size", 1)

    def modules(self, key: str) -> list[str]:
        v = self.get(key)
        return [str(m) for m in v] if isinstance(v, (list, tuple)) else [str(v)] if isinstance(v, str) else []

    def scopes(self) -> set[str]:
        return set(self.modules("cuda_graph_scope")) | set(self.modules("cuda_graph_modules"))


@dataclass(frozen=True)
class McoreAssert:
    """One Megatron-Core check: where it is, the field to point at, and the message when it trips."""

    id: str
    source: str  # file and function in megatron/core
    field: str  # settings key whose line the finding cites
    check: Callable[[FileView], str | None]
    severity: str = "error"  # "warning" for a UserWarning
    since: str = "0.13"
    until: str | None = None  # last release that has the check (inclusive)
    by: str = "Megatron-Core"  # who rejects it: Megatron-Core's config classes, or Megatron-LM's argument checks
    shares_knob: Callable[[RunConfig], bool] | None = None
    """Set where moeplan.engine.knobs makes the same check on the run (knob-layout): whether, for this run, the knob fails
    for no cause but those this assertion tests. Where it says so, moeplan.lint.checker reports one finding per cause:
    this rule's, with the knob's fix, and none from knob-layout for ``field``; else both."""

    def applies(self, version: str) -> bool:
        v = version_tuple(version)
        return v >= version_tuple(self.since) and (self.until is None or v <= version_tuple(self.until))


def _same_cause(cfg: RunConfig) -> bool:
    """The knob checks exactly what the assertion does."""
    return True


def _ep_overlap_asserted_only(cfg: RunConfig) -> bool:
    """Whether EP A2A overlap is off-limits here only for causes (RunConfig.ep_overlap_blockers) that Megatron-Core's
    overlap_moe_expert_parallel_comm assertion, as this module reads a file (rule ep-a2a-overlap), tests
    (run.EP_OVERLAP_ASSERTED says which). Those it does not: several micro-batches, no moe in recompute_modules (rule
    ep-a2a-overlap-moe-recompute), GatedDeltaNet.backward_dw, the release. (The assertion also tests what the knob
    does not: the dispatcher, recompute_method / recompute_num_layers, moe_shared_expert_overlap; a file that sets
    VPP 1 with PP > 1 passes it where the knob fails.)"""
    return all(b in EP_OVERLAP_ASSERTED for b in cfg.ep_overlap_blockers)


PS = "parallel_state.py initialize_model_parallel"
MPC = "model_parallel_config.py ModelParallelConfig.__post_init__"
TC = "transformer/transformer_config.py TransformerConfig.__post_init__"
MLA = "transformer/transformer_config.py MLATransformerConfig.__post_init__"
OPT = "optimizer/optimizer_config.py OptimizerConfig.__post_init__"


def _hier_cp(v: FileView) -> str | None:
    sizes = v.get("hierarchical_context_parallel_sizes")
    if not isinstance(sizes, (list, tuple)) or not sizes:
        return None
    prod = math.prod(int(s) for s in sizes)
    if prod != v.cp:
        return (f"hierarchical_context_parallel_sizes {list(sizes)} multiply to {prod}, not context_parallel_size "
                f"{v.cp}")
    return None


def _hier_cp_without_a2a_p2p(v: FileView) -> str | None:
    kinds = set(v.modules("cp_comm_type"))
    if v.cp > 1 and "a2a+p2p" in kinds and not v.get("hierarchical_context_parallel_sizes"):
        return ("cp_comm_type a2a+p2p needs hierarchical_context_parallel_sizes (the a2a group inside a node, then "
                "the p2p ring); without it initialize_model_parallel creates no hierarchical CP groups and Transformer "
                "Engine's attention gets none")
    return None


def _vpp_without_pp(v: FileView) -> str | None:
    vpp = v.get("virtual_pipeline_model_parallel_size")
    if isinstance(vpp, int) and v.pp == 1:
        return (f"virtual_pipeline_model_parallel_size {vpp} with pipeline_model_parallel_size 1: the interleaved "
                "schedule needs PP > 1 (leave VPP unset/null)")
    return None


def _sp_without_tp(v: FileView) -> str | None:
    if v.flag("sequence_parallel") and v.tp <= 1:
        return "sequence_parallel needs tensor_model_parallel_size > 1"
    return None


def _ep_tp_without_sp(v: FileView) -> str | None:
    if v.ep > 1 and v.tp > 1 and v.get("sequence_parallel") is False:
        return "expert and tensor parallelism without sequence_parallel: Megatron-Core requires sequence parallelism here"
    return None


def _deepep_flag(v: FileView) -> str | None:
    if not v.flag("moe_enable_deepep"):
        return None
    if v.get("moe_token_dispatcher_type", "allgather") != "flex":
        return "moe_enable_deepep needs moe_token_dispatcher_type flex (DeepEP is a flex-dispatcher backend)"
    if v.get("moe_flex_dispatcher_backend") == "hybridep":
        return "moe_enable_deepep with moe_flex_dispatcher_backend hybridep: only one flex backend can be chosen"
    return None


def _recompute_method(v: FileView) -> str | None:
    gran, method = v.get("recompute_granularity"), v.get("recompute_method")
    if gran is None:
        return None
    if method is not None and method not in ("block", "uniform"):
        return f"recompute_method {method!r} must be block or uniform"
    if method is None and gran != "selective":
        return f"recompute_granularity {gran} needs recompute_method block or uniform"
    return None


def _recompute_layers(v: FileView) -> str | None:
    gran, n = v.get("recompute_granularity"), v.get("recompute_num_layers")
    if gran == "full" and n is None:
        return (f"recompute_granularity full needs recompute_num_layers (1 .. {v.model.num_layers // max(v.pp, 1)} "
                "layers per pipeline rank)")
    if gran == "selective" and n is not None:
        return "recompute_granularity selective needs recompute_num_layers null"
    return None


def _selective_method_mlm(v: FileView) -> str | None:
    """Megatron-LM stops before TransformerConfig sees it (Megatron-Core itself accepts a method with selective)."""
    if v.kind == "megatron-lm" and v.get("recompute_granularity") == "selective" and v.get("recompute_method") is not None:
        return ("recompute method is not yet supported for selective recomputing granularity (Megatron-LM sets "
                "selective for --recompute-activations): drop --recompute-method")
    return None


def recompute_module_problem(model: ModelSpec, modules: Iterable[str]) -> str | None:
    """Why Megatron-Core rejects a selective recompute module for this model, or None: the one owner of the
    rule behind ``moeplan check``'s recompute-mla-up-proj and plan's / estimate's refusal of ``--recompute``."""
    attn = model.first_attention
    if "mla_up_proj" in modules and not (attn is not None and attn.is_mla):
        return f"recompute module mla_up_proj needs multi-latent attention; {model.name} does not use it"
    return None


def selective_recompute_problem(model: ModelSpec, modules: Iterable[str], version: str) -> str | None:
    """Why Megatron-Core ``version`` rejects these selective recompute modules for this model (a module the
    release lacks, as ``moeplan check`` reports it: fields.check_settings; one the model lacks), or None."""
    mods = sorted(modules)
    for problem in check_settings({"recompute_granularity": "selective", "recompute_modules": mods}, version):
        return problem.message
    return recompute_module_problem(model, mods)


def _mla_up_proj(v: FileView) -> str | None:
    if v.get("recompute_granularity") == "selective":
        return recompute_module_problem(v.model, v.modules("recompute_modules"))
    return None


def _offload_modules(v: FileView) -> str | None:
    if not v.flag("fine_grained_activation_offloading"):
        return None
    mods = v.modules("offload_modules")
    if not mods:
        return "fine_grained_activation_offloading needs a non-empty offload_modules list"
    if v.flag("cpu_offloading"):
        return "fine_grained_activation_offloading cannot be enabled with cpu_offloading (layer-wise offloading)"
    if "attn_proj" in mods and "core_attn" not in mods:
        return "offload module attn_proj needs core_attn too (attn_proj's input is core_attn's output)"
    if "fused_group_mlp" in mods:  # core_v0.19.0 (the label is 0.19's: check_settings refuses it before)
        return fused_group_mlp_problem(mods, v.flag("use_transformer_engine_op_fuser"))
    return None


# Offloaded activations inside the MoE block (core_v0.19.0 TransformerConfig: "moe_act", "expert_fc1",
# "fused_group_mlp"); the paged stash covers the same ones.
_MOE_OFFLOADS = ("expert_fc1", "fused_group_mlp", "moe_act")


def _offload_moe_recompute(v: FileView) -> str | None:
    """core_v0.19.0 (Megatron-LM #3697): 'moe' in recompute_modules checkpoints the whole MoE forward, so nothing
    inside it may be offloaded."""
    if not v.flag("fine_grained_activation_offloading") or v.get("recompute_granularity") != "selective":
        return None
    inside = sorted(set(_MOE_OFFLOADS) & set(v.modules("offload_modules")))
    if "moe" in v.modules("recompute_modules") and inside:
        return (f"cannot offload {', '.join(inside)} while recomputing the whole MoE layer ('moe' in "
                "recompute_modules): remove one or the other")
    return None


def _paged_stash(v: FileView) -> str | None:
    """core_v0.18.0 / core_v0.19.0 TransformerConfig: the paged stash needs the per-rank expert capacity, and
    excludes layer-wise CPU offloading and offloading the MoE activations it already keeps."""
    if not v.flag("moe_paged_stash"):
        return None
    if v.flag("cpu_offloading"):
        return "moe_paged_stash cannot be enabled with cpu_offloading"
    if v.get("moe_expert_rank_capacity_factor") is None:
        return "moe_paged_stash needs moe_expert_rank_capacity_factor (sync-free dropless MoE's per-rank buffers)"
    inside = sorted(set(_MOE_OFFLOADS) & set(v.modules("offload_modules"))) \
        if v.flag("fine_grained_activation_offloading") else []
    if inside:
        return f"moe_paged_stash keeps the MoE activations itself: remove {', '.join(inside)} from offload_modules"
    return None


def _rank_capacity(v: FileView) -> str | None:
    """moe_expert_rank_capacity_factor (what the paged stash needs) with HybridEP needs the TE op fuser
    (core_v0.18.0 / core_v0.19.0 TransformerConfig). Its dispatcher requirement (HybridEP) is moeplan's own settings
    check (mcore-settings), so it is not repeated here."""
    if v.get("moe_expert_rank_capacity_factor") is None or v.get("moe_flex_dispatcher_backend") != "hybridep":
        return None
    if v.get("moe_token_dispatcher_type") == "flex" and not v.flag("use_transformer_engine_op_fuser"):
        return "moe_expert_rank_capacity_factor with HybridEP needs use_transformer_engine_op_fuser"
    return None


def _layout_conflict(v: FileView) -> str | None:
    first_last = [k for k in ("num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
                  if v.get(k) is not None]
    account = [k for k in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
               if v.flag(k)]
    if v.get("pipeline_model_parallel_layout") and (first_last or account):
        return f"pipeline_model_parallel_layout cannot be set with {', '.join(first_last + account)}"
    if first_last and account:
        return f"{', '.join(first_last)} cannot be set with {', '.join(account)}"
    return None


def _layout_vpp(v: FileView) -> str | None:
    layout, vpp = v.get("pipeline_model_parallel_layout"), v.get("virtual_pipeline_model_parallel_size")
    if not isinstance(layout, str) or not layout or not isinstance(vpp, int):
        return None
    try:
        stages = len(unroll_layout(layout).rstrip("|").split("|"))
    except Exception:  # noqa: BLE001 - a malformed layout is check_layout's finding
        return None
    if stages % max(v.pp, 1):
        return None  # the grammar check (check_layout) reports it
    if stages // v.pp != vpp:
        return (f"virtual_pipeline_model_parallel_size {vpp} conflicts with pipeline_model_parallel_layout "
                f"({stages} stages over PP {v.pp} = VPP {stages // v.pp})")
    return None


def _a2a_overlap(v: FileView) -> str | None:
    if not v.flag("overlap_moe_expert_parallel_comm"):
        return None
    if v.pp > 1 and v.get("virtual_pipeline_model_parallel_size") is None and not v.get("pipeline_model_parallel_layout"):
        return "overlap_moe_expert_parallel_comm with PP > 1 needs virtual_pipeline_model_parallel_size"
    if v.ep <= 1:
        return "overlap_moe_expert_parallel_comm needs expert_model_parallel_size > 1"
    if v.get("moe_token_dispatcher_type", "allgather") not in ("alltoall", "flex"):
        return "overlap_moe_expert_parallel_comm needs moe_token_dispatcher_type alltoall or flex"
    if v.get("recompute_granularity") == "full":
        return "overlap_moe_expert_parallel_comm cannot run with full recompute"
    if v.get("recompute_method") is not None or v.get("recompute_num_layers") is not None:
        return "overlap_moe_expert_parallel_comm needs recompute_method and recompute_num_layers null"
    if v.flag("moe_shared_expert_overlap"):
        return "overlap_moe_expert_parallel_comm cannot run with moe_shared_expert_overlap"
    # "MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm", every release; core_v0.16/0.17
    # also assert PP > 1 with the MTP layer (lifted in 0.18): RunConfig.ep_overlap_blockers, the knob's side
    mtp = v.int_("mtp_num_layers", 0)
    if mtp > 1:
        return f"overlap_moe_expert_parallel_comm supports at most one MTP layer, the file sets mtp_num_layers {mtp}"
    if mtp == 1 and v.pp == 1 and ep_overlap_mtp_needs_pp(v.version):
        return (f"overlap_moe_expert_parallel_comm with an MTP layer needs pipeline_model_parallel_size > 1 in "
                f"Megatron-Core {v.version} (0.18+ lifts it)")
    return None


def _a2a_overlap_moe_recompute(v: FileView) -> str | None:
    if v.flag("overlap_moe_expert_parallel_comm") and v.get("recompute_granularity") == "selective" \
            and "moe" in v.modules("recompute_modules"):
        return "overlap_moe_expert_parallel_comm cannot run with moe in recompute_modules (Megatron-Core 0.17+)"
    return None


def _a2a_overlap_moe_recompute_unsupported(v: FileView) -> str | None:
    if _a2a_overlap_moe_recompute(v):
        return ("overlap_moe_expert_parallel_comm with moe in recompute_modules is accepted before Megatron-Core 0.17 "
                "but not supported: the merged schedule splits the MoE layer that the checkpoint would wrap "
                "(Megatron-LM #3917 adds the missing assertion); drop moe from recompute_modules")
    return None


def _delay_wgrad_overlap(v: FileView) -> str | None:
    if v.flag("delay_wgrad_compute") and not v.flag("overlap_moe_expert_parallel_comm"):
        return ("delay_wgrad_compute needs overlap_moe_expert_parallel_comm: only the merged EP-overlap schedule runs "
                "the delayed weight-gradient GEMMs (backward_dw)")
    return None


def _delay_wgrad_graph_bias(v: FileView) -> str | None:
    if not (v.flag("delay_wgrad_compute") and "attn" in v.scopes()):
        return None
    if v.flag("add_qkv_bias") or v.flag("add_bias_linear") or v.model.attention_bias:
        return f"{DELAY_WGRAD_GRAPH_BIAS}; drop attn from the graph scopes or turn delay_wgrad_compute off"
    return None


def _graph_flags(v: FileView) -> str | None:
    legacy = [k for k in ("enable_cuda_graph", "external_cuda_graph") if v.flag(k)]
    if len(legacy) == 2:
        return "enable_cuda_graph and external_cuda_graph cannot both be true"
    impl = v.get("cuda_graph_impl")
    if legacy and impl not in (None, "none"):
        return f"{legacy[0]} with cuda_graph_impl {impl}: use one of the two ways to turn graphs on"
    return None


def _graph_scopes(v: FileView) -> str | None:
    scopes = v.scopes()
    if "moe" in scopes and "moe_router" in scopes:
        return "cuda graph scopes moe and moe_router cannot be combined"
    if "moe_preprocess" in scopes and "moe_router" not in scopes:
        return "cuda graph scope moe_preprocess needs moe_router"
    if scopes & {"moe", "moe_router"} and v.model.first_moe is None:
        return f"cuda graph scopes moe / moe_router need an MoE model; {v.model.name} has no experts"
    return None


def _cp_comm_list(v: FileView) -> str | None:
    kinds = v.get("cp_comm_type")
    if v.cp > 1 and isinstance(kinds, (list, tuple)) and len(kinds) not in (1, v.model.num_layers):
        return f"cp_comm_type lists {len(kinds)} values; a per-layer list needs one per layer ({v.model.num_layers})"
    return None


def _dsa_cp_allgather(v: FileView) -> str | None:
    # unset: the recipe's (not in the file), not judged here; DSAttention normalises the name (dsa_layout.py
    # normalize_cp_comm_type: no underscores, lower case), so TE's all_gather is its allgather
    kinds = {k.replace("_", "").lower() for k in v.modules("cp_comm_type")}
    dsa = any(getattr(m, "sparse", None) is not None for m in v.model.distinct_mixers)
    if dsa and v.cp > 1 and kinds and kinds != {DSA_CP_COMM_TYPE}:
        return (f"DeepSeek sparse attention runs context parallelism with cp_comm_type {DSA_CP_COMM_TYPE} only "
                f"(got {', '.join(sorted(kinds))})")
    return None


def _precision_aware(v: FileView) -> str | None:
    if v.flag("use_precision_aware_optimizer") and v.get("use_distributed_optimizer") is False:
        return "use_precision_aware_optimizer needs use_distributed_optimizer"
    low = [k for k in ("exp_avg_dtype", "exp_avg_sq_dtype") if v.get(k) not in (None, "float32")]
    if low and not v.flag("use_precision_aware_optimizer"):
        return f"{', '.join(low)} other than float32 need use_precision_aware_optimizer"
    return None


ASSERTS: tuple[McoreAssert, ...] = (
    McoreAssert("hierarchical-cp-product", PS, "hierarchical_context_parallel_sizes", _hier_cp),
    McoreAssert("hierarchical-cp-missing", "extensions/transformer_engine.py TEDotProductAttention (a2a+p2p passes "
                "get_hierarchical_context_parallel_groups() to TE)", "cp_comm_type", _hier_cp_without_a2a_p2p, severity="warning"),
    McoreAssert("vpp-without-pp", PS, "virtual_pipeline_model_parallel_size", _vpp_without_pp),
    McoreAssert("sequence-parallel-tp", MPC, "sequence_parallel", _sp_without_tp),
    McoreAssert("ep-tp-sequence-parallel", MPC, "sequence_parallel", _ep_tp_without_sp, severity="warning"),
    McoreAssert("deepep-flag", TC, "moe_enable_deepep", _deepep_flag),
    McoreAssert("recompute-method", TC, "recompute_method", _recompute_method),
    McoreAssert("recompute-num-layers", TC, "recompute_num_layers", _recompute_layers),
    McoreAssert("recompute-method-selective", "megatron/training/arguments.py validate_args (Megatron-LM)",
                "recompute_method", _selective_method_mlm, by="Megatron-LM"),
    McoreAssert("recompute-mla-up-proj", TC, "recompute_modules", _mla_up_proj),
    McoreAssert("offload-modules", TC, "offload_modules", _offload_modules, since="0.16"),
    McoreAssert("offload-moe-recompute", TC + " (Megatron-LM #3697)", "offload_modules", _offload_moe_recompute,
                since="0.19"),
    McoreAssert("paged-stash", TC, "moe_paged_stash", _paged_stash, since="0.18"),
    McoreAssert("rank-capacity-op-fuser", TC, "use_transformer_engine_op_fuser", _rank_capacity, since="0.18"),
    McoreAssert("pipeline-layout-conflict", TC, "pipeline_model_parallel_layout", _layout_conflict),
    McoreAssert("pipeline-layout-vpp", TC, "virtual_pipeline_model_parallel_size", _layout_vpp),
    McoreAssert("ep-a2a-overlap", TC, "overlap_moe_expert_parallel_comm", _a2a_overlap, since="0.14",
                shares_knob=_ep_overlap_asserted_only),
    McoreAssert("ep-a2a-overlap-moe-recompute", TC, "recompute_modules", _a2a_overlap_moe_recompute, since="0.17"),
    McoreAssert("ep-a2a-overlap-moe-recompute-unsupported", "Megatron-LM #3917 (the assertion core_r0.17.0 adds)",
                "recompute_modules", _a2a_overlap_moe_recompute_unsupported, severity="warning", since="0.14",
                until="0.16"),
    McoreAssert("delay-wgrad-a2a-overlap", TC, "delay_wgrad_compute", _delay_wgrad_overlap, since="0.14",
                shares_knob=_same_cause),
    McoreAssert("delay-wgrad-graph-attn-bias", "training/arguments.py validate_args (Megatron-LM, with "
                "overlap_grad_reduce) and Bridge training/comm_overlap.py (v0.4.0+)", "delay_wgrad_compute",
                _delay_wgrad_graph_bias, since="0.17", shares_knob=_same_cause, by="Megatron-LM and Megatron Bridge"),
    McoreAssert("cuda-graph-flags", TC, "cuda_graph_impl", _graph_flags, since="0.15"),
    McoreAssert("cuda-graph-scopes", TC, "cuda_graph_scope", _graph_scopes, since="0.16"),
    McoreAssert("cp-comm-type-list", TC, "cp_comm_type", _cp_comm_list),
    McoreAssert("dsa-cp-allgather", "transformer/experimental_attention_variant/dsa.py DSAttention.forward", "cp_comm_type",
                _dsa_cp_allgather, since="0.16"),
    McoreAssert("precision-aware-optimizer", OPT, "use_precision_aware_optimizer", _precision_aware),
)


def tripped(view: FileView) -> list[tuple[McoreAssert, str]]:
    """(assertion, message) for every Megatron-Core check this file trips at its target version."""
    out = []
    for a in ASSERTS:
        if not a.applies(view.version):
            continue
        msg = a.check(view)
        if msg:
            out.append((a, msg))
    return out


__all__ = ["ASSERTS", "FileView", "McoreAssert", "recompute_module_problem", "selective_recompute_problem",
           "tripped"]
