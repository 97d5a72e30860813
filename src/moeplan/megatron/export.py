"""Export a run as Megatron settings: Megatron-Core field -> value (:func:`to_settings`), Megatron Bridge Hydra
overrides (:func:`to_overrides`), a Bridge ``ConfigContainer`` YAML fragment (:func:`to_yaml`) and Megatron-LM
flags (:func:`to_megatron_lm_args`), for the Megatron-Core release the run targets.

Conventions: ``cuda_graph_scope`` / ``cuda_graph_modules`` are lists in settings; Bridge files for Megatron-Core
< 0.16 (where the field is a single string) get the single element. Megatron-LM flags cannot express ``None``,
``False`` (plain ``store_true`` flags) or empty lists: those settings are left out of the argument list.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

import yaml

from moeplan.base.errors import MoeplanError
from moeplan.base.fields import (CP_TO_MCORE, DTYPE_TO_MLM, PRECISION_TO_FP8_RECIPE, Knob, MegatronFields, TorchDtype,
                                 fields_for, sync_free_moe, version_tuple)
from moeplan.base.te_release import (CPU_OFFLOAD_V1_ENV, CPU_OFFLOAD_V1_SINCE, DEFAULT_TE_VERSION, FUSED_GROUPED_MLP_ENV,
                                     FUSED_GROUPED_MLP_GLU_INTERLEAVE, GROUPED_TENSOR_ENV, te_version_tuple)
from moeplan.base.vocab import DEFAULT_RESERVE_GIB
from moeplan.megatron.read.overrides import parse_override_value
from moeplan.run.dsv4_rules import dsv4_fields
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.hybrid import hybrid_fields, hybrid_pattern_value
from moeplan.run.parallel import build_pipeline, hierarchical_cp_inner


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
        # moeplan's split is the layout or the even one: none of the split options (see fields.KNOBS)
        "account_for_embedding_in_pipeline_split": False,
        "account_for_loss_in_pipeline_split": False,
        "num_layers_in_first_pipeline_stage": None,
        "num_layers_in_last_pipeline_stage": None,
    }
    if cfg.cp_comm_type == "a2a+p2p":
        inner = _a2a_group(cfg)
        out["hierarchical_context_parallel_sizes"] = [inner, par.cp // inner]
    return out


def _hybrid_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    """A hybrid model's architecture fields and its pattern: hybrid_override_pattern before Megatron-Core 0.17,
    else hybrid_layer_pattern with the pipeline stages as '|' segments and the MTP depths as '/' patterns; a
    hybrid model takes no pipeline_model_parallel_layout (moeplan.run.hybrid)."""
    pipe = build_pipeline(cfg.model, cfg.parallel)
    version = version_tuple(f.version)
    stages = [len(s.layers) for s in pipe.stages] if pipe.explicit else None
    out: dict[str, object] = {k: v for k, v in hybrid_fields(cfg.model).items() if k in f.knobs}
    field = "hybrid_layer_pattern" if "hybrid_layer_pattern" in f.knobs else "hybrid_override_pattern"
    out[field] = hybrid_pattern_value(cfg.model, stages, version)
    out["pipeline_model_parallel_layout"] = None
    return out


def _a2a_group(cfg: RunConfig) -> int:
    """a2a group of hierarchical CP: the CP ranks inside one NVLink domain (as moeplan.engine.timing assumes)."""
    return hierarchical_cp_inner(cfg.parallel.tp, cfg.parallel.cp, cfg.gpu.nvlink_domain)


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



def _moe_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    out: dict[str, object] = {}
    if cfg.dispatcher in ("alltoall", "allgather"):
        out["moe_token_dispatcher_type"] = cfg.dispatcher
    elif cfg.dispatcher in f.flex_backends:
        out["moe_token_dispatcher_type"] = "flex"
        out["moe_flex_dispatcher_backend"] = cfg.dispatcher
    elif cfg.dispatcher == "deepep":
        out["moe_token_dispatcher_type"] = "flex"
    elif cfg.dispatcher == "ncclep":  # the field table: a 0.19 flex backend
        raise MoeplanError(f"dispatcher ncclep (NCCL EP) needs Megatron-Core >= 0.19, target is {f.version}")
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
        if cfg.dispatcher not in ("hybridep", "ncclep"):
            raise MoeplanError("moe_expert_rank_capacity_factor needs the HybridEP dispatcher "
                               f"(moe_flex_dispatcher_backend=hybridep), not {cfg.dispatcher}")
        out["moe_expert_rank_capacity_factor"] = cfg.rank_capacity_factor
        if cfg.dispatcher == "hybridep":  # paged stash: HybridEP's sync-free bundle (NCCL EP: its receive budget only)
            out["moe_paged_stash"] = True
        out["use_transformer_engine_op_fuser"] = True
        if cfg.fused_mlp_env:  # the interleave TE's fused grouped MLP needs (with env_settings' variable)
            out["moe_mlp_glu_interleave_size"] = FUSED_GROUPED_MLP_GLU_INTERLEAVE
    if "overlap_moe_expert_parallel_comm" in f.knobs:
        out["overlap_moe_expert_parallel_comm"] = cfg.ep_overlap
        out["delay_wgrad_compute"] = cfg.delay_wgrad_on
    elif cfg.ep_overlap:
        raise MoeplanError(f"EP communication overlap (overlap_moe_expert_parallel_comm) needs Megatron-Core >= 0.14, "
                           f"target is {f.version}")
    return out


def _router_dtype_settings(cfg: RunConfig) -> dict[str, object]:
    """``moe_router_dtype`` where the run sets it (by default where the model's Bridge provider does,
    moeplan.base.router_dtype); unset it is Megatron-Core's default None and not written."""
    dtype = cfg.mcore_router_dtype
    return {} if dtype is None else {"moe_router_dtype": dtype}


def _cuda_graph_settings(scopes: frozenset[str], f: MegatronFields) -> dict[str, object]:
    """CUDA graph fields per version: 0.13/0.14 enable_cuda_graph (local) / external_cuda_graph (TE) with a
    single scope; 0.15 cuda_graph_impl with a single scope; 0.16/0.17 cuda_graph_scope list (full_iteration
    only with the local impl); 0.18+ cuda_graph_modules, full iteration is cuda_graph_impl='full_iteration'."""
    if "full_iteration" in scopes and len(scopes) > 1:
        raise MoeplanError("CUDA graph scope full_iteration captures the whole iteration and must be used alone")
    allowed = set(f.cuda_graph_scopes) | ({"full_iteration"} & set(f.cuda_graph_impls))
    bad = sorted(scopes - allowed)
    single = version_tuple(f.version) < (0, 16)
    if bad or (single and len(scopes) > 1):
        raise MoeplanError(f"CUDA graph scope(s) {', '.join(sorted(scopes))} not supported by Megatron-Core {f.version} "
                           f"({f.cuda_graph_field}: {', '.join(f.cuda_graph_scopes)}"
                           f"{', one at a time' if single else ''})")
    full_iter = scopes == {"full_iteration"}
    if not f.cuda_graph_impls:
        if not scopes:
            return {"enable_cuda_graph": False, "external_cuda_graph": False}
        return {"enable_cuda_graph": full_iter, "external_cuda_graph": not full_iter,
                "cuda_graph_scope": sorted(scopes), "use_te_rng_tracker": True,
                **({"check_for_nan_in_loss": False} if full_iter else {})}
    if not scopes:
        return {"cuda_graph_impl": "none"}
    # A full-iteration graph captures the loss: Bridge asserts rerun_state_machine.check_for_nan_in_loss off with it
    # (training/config.py v0.3.0 .. v0.6.0). From 0.18 the captured parts are cuda_graph_modules and the deprecated
    # cuda_graph_scope (a recipe's "full") is moved into it by TransformerConfig.__post_init__: Megatron-Core 0.19
    # asserts "cuda_graph_scope and cuda_graph_modules cannot be set together" and "cuda_graph_modules must be empty
    # when cuda_graph_impl=full_iteration", so the export clears the one it does not use.
    nan_check = {"check_for_nan_in_loss": False} if full_iter else {}
    cleared = {"cuda_graph_scope": None} if f.cuda_graph_field != "cuda_graph_scope" else {}
    if full_iter and "full_iteration" in f.cuda_graph_impls:
        return {"cuda_graph_impl": "full_iteration", f.cuda_graph_field: [], **cleared, "use_te_rng_tracker": True,
                **nan_check}
    impl = "local" if full_iter else "transformer_engine"
    return {"cuda_graph_impl": impl, f.cuda_graph_field: sorted(scopes), **cleared, "use_te_rng_tracker": True,
            **nan_check}


def _offload_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    if not f.offload_modules:
        if cfg.offload_modules:
            raise MoeplanError(f"fine-grained activation offloading needs Megatron-Core >= 0.16, target is {f.version}")
        return {}
    bad = sorted(m for m in cfg.offload_modules if m not in f.offload_modules)
    if bad:
        raise MoeplanError(f"offload module(s) {', '.join(bad)} not available in Megatron-Core {f.version}")
    out: dict[str, object] = {"fine_grained_activation_offloading": bool(cfg.offload_modules),
                              "offload_modules": sorted(cfg.offload_modules)}
    return out | _activation_offload_fraction(cfg, f)


def _activation_offload_fraction(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    """``activation_offload_fraction`` where it is not the default 1.0 (the field table: Megatron-Core 0.19+)."""
    if cfg.activation_offload_fraction == 1.0:
        return {}
    if "activation_offload_fraction" not in f.knobs:
        raise MoeplanError(f"activation_offload_fraction needs Megatron-Core >= 0.19, target is {f.version}")
    return {"activation_offload_fraction": cfg.activation_offload_fraction}


def _precision_settings(cfg: RunConfig, f: MegatronFields) -> dict[str, object]:
    if cfg.precision == "bf16":
        return {"fp8": None}
    if cfg.precision == "nvfp4":
        return _nvfp4_settings(f) | _bf16_layer_settings(cfg)
    out: dict[str, object] = {"fp8": "e4m3", "fp8_recipe": PRECISION_TO_FP8_RECIPE[cfg.precision]}
    if cfg.fp8_attention:  # TransformerConfig fp8_dot_product_attention (Bridge: mixed_precision)
        out["fp8_dot_product_attention"] = True
    return out | _bf16_layer_settings(cfg)


def _bf16_layer_settings(cfg: RunConfig) -> dict[str, object]:
    """The BF16 start and end layers (``bf16_start_layers`` / ``bf16_end_layers``), both counts written (Megatron-Core
    defaults each to 1 once ``first_last_layers_bf16`` is on)."""
    if not (cfg.bf16_start_layers or cfg.bf16_end_layers):
        return {}
    return {"first_last_layers_bf16": True, "num_layers_at_start_in_bf16": cfg.bf16_start_layers or 0,
            "num_layers_at_end_in_bf16": cfg.bf16_end_layers or 0}


def _nvfp4_settings(f: MegatronFields) -> dict[str, object]:
    """NVFP4 training: fp4 e2m1 with fp4_recipe nvfp4 and no fp8 (the field table: Megatron-Core 0.16+)."""
    if "fp4" not in f.knobs:
        raise MoeplanError(f"NVFP4 training (fp4, fp4_recipe) needs Megatron-Core >= 0.16, target is {f.version}")
    return {"fp8": None, "fp4": "e2m1", "fp4_recipe": "nvfp4"}


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
        out["overlap_cpu_optimizer_d2h_h2d"] = cfg.offload_overlap
    out["use_precision_aware_optimizer"] = cfg.precision_aware
    # the dtypes moeplan's optimizer memory assumes, always stated: OptimizerConfig asserts them float32 without the
    # precision-aware optimizer, and a recipe may set bf16 ones (Bridge's DeepSeek-V3 recipes)
    moments = "bfloat16" if cfg.bf16_moments else "float32"
    out["exp_avg_dtype"] = moments
    out["exp_avg_sq_dtype"] = moments
    out["main_grads_dtype"] = "float32"
    overlap = cfg.dp_overlap
    if cfg.optimizer == "muon":
        if "muon" not in f.optimizers:
            raise MoeplanError(f"the Muon optimizer needs Megatron-Core >= 0.16 (optimizer 'muon'/'dist_muon', "
                               f"muon_* fields), target is {f.version}")
        out["optimizer"] = "dist_muon" if cfg.muon_layer_wise else "muon"
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
    if cfg.model.hybrid_pattern:  # a hybrid (Mamba) stack: its pattern carries the pipeline split (moeplan.run.hybrid)
        out.update(_hybrid_settings(cfg, f))
    out["global_batch_size"] = cfg.batch.gbs
    out["micro_batch_size"] = cfg.batch.mbs
    out["seq_length"] = cfg.batch.seq_len
    if cfg.model.mtp_layers:
        out["mtp_num_layers"] = cfg.model.mtp_layers
    # DeepSeek-V4's attention and mHC fields (moeplan.run.dsv4_rules), where the version has them
    out.update({k: v for k, v in dsv4_fields(cfg.model).items() if k in f.knobs})
    out.update(_recompute_settings(cfg.recompute, f))
    if cfg.model.first_moe is not None:
        out.update(_moe_settings(cfg, f))
        out.update(_router_dtype_settings(cfg))
    out.update(_cuda_graph_settings(cfg.cuda_graph_scopes, f))
    out["cp_comm_type"] = CP_TO_MCORE[cfg.cp_comm_type]
    # off at TP 1 (nothing to overlap; moeplan.megatron.to_run reads it only at TP > 1), stated so a recipe's
    # CommOverlapConfig(tp_comm_overlap=True) is not left on
    out["tp_comm_overlap"] = cfg.tp_comm_overlap and cfg.parallel.tp > 1
    out.update(_offload_settings(cfg, f))
    out.update(_precision_settings(cfg, f))
    out.update(_optimizer_settings(cfg, f))
    return out


def bridge_value(knob: Knob, value: object, f: MegatronFields) -> object:
    """A setting as the Bridge config holds it (a single scope string before 0.16)."""
    if knob.kind == "scope" and isinstance(value, list) and version_tuple(f.version) < (0, 16):
        return value[0] if len(value) == 1 else ",".join(value)
    return value


def bridge_items(cfg: RunConfig, version: str | None) -> list[tuple[str, object]]:
    """(path, value) per Bridge field, a section a recipe may hold as None or a name
    (MegatronFields.bridge_instance_sections) led by its class and the fields the class needs."""
    f = fields_for(version or cfg.mcore_version)
    items: list[tuple[str, object]] = []
    for key, value in to_settings(cfg, f.version).items():
        knob = f.knobs[key]
        for path in f.bridge_paths(knob):
            items.append((path, bridge_value(knob, value, f)))
    set_paths = {path for path, _ in items}
    head: list[tuple[str, object]] = []
    for section, (target, base) in f.bridge_instance_sections.items():
        if any(p.startswith(section + ".") for p in set_paths):
            head.append((f"{section}._target_", target))
            head += [(f"{section}.{name}", v) for name, v in base if f"{section}.{name}" not in set_paths]
    return _by_section(head, items)


def _by_section(head: list[tuple[str, object]], items: list[tuple[str, object]]) -> list[tuple[str, object]]:
    """``head`` and ``items`` grouped by section in the order each section first appears in ``items``, a section's
    ``head`` (its _target_ and base fields) first."""
    order: dict[str, int] = {}
    for path, _ in items:
        order.setdefault(path.split(".", 1)[0], len(order))
    return sorted(head + items, key=lambda item: order[item[0].split(".", 1)[0]])  # stable: head stays first


def _instance_path(path: str, f: MegatronFields) -> bool:
    return path.split(".", 1)[0] in f.bridge_instance_sections


_BARE_STRING = re.compile(r"[A-Za-z_][A-Za-z0-9_.+\-/]*")
_HYDRA_WORDS = {"null", "true", "false", "nan", "inf"}


def _hydra_scalar(value: object) -> str:
    if isinstance(value, TorchDtype):
        return "{_target_:torch." + value.name + ",_call_:false}"
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
    """Megatron Bridge Hydra overrides, e.g. ``model.context_parallel_size=8``; a section written as an instance
    takes Hydra's force-add prefix: ``++comm_overlap.overlap_moe_expert_parallel_comm=true``."""
    f = fields_for(version or cfg.mcore_version)
    return [f"{'++' if _instance_path(path, f) else ''}{path}={format_override_value(value)}"
            for path, value in bridge_items(cfg, f.version)]


PROVENANCE_PREFIX = "# moeplan:"  # read back by moeplan.megatron.read (model, gpu, hardware, gpus, mcore-version, te-version)


def env_settings(cfg: RunConfig) -> dict[str, str]:
    """Environment variables the training job must set for what the run models and no Megatron-Core field
    selects: ``NVTE_GROUPED_LINEAR_USE_FUSED_GROUPED_GEMM=1`` for ``te_grouped_tensor`` (TE GroupedLinear reads it,
    v2.17 .. release_v2.19; no released Megatron-Core has an option for the path: moeplan.base.te_release), and
    ``NVTE_CPU_OFFLOAD_V1=1`` for fine-grained activation offloading on TE >= 2.10 (Bridge's validate refuses the
    run without it: TE's newer offload path would offload weights too)."""
    env = {GROUPED_TENSOR_ENV: "1"} if cfg.te_grouped_tensor else {}
    if cfg.fused_mlp_env:  # the fused grouped MLP moeplan charges these experts as (RunConfig.experts_fused_mlp)
        env[FUSED_GROUPED_MLP_ENV] = "1"
    if cfg.offload_modules and te_version_tuple(cfg.te_version) >= CPU_OFFLOAD_V1_SINCE:
        env[CPU_OFFLOAD_V1_ENV] = "1"
    return env


def provenance_comment(cfg: RunConfig, version: str | None = None) -> str:
    """The comment line every export starts with, naming what the file does not carry itself:
    ``# moeplan: model=deepseek-v3 gpu=h100 gpus=1024 mcore-version=0.16`` (``moeplan check`` reads it), with
    ``te-version=2.19`` after it where the run's Transformer Engine is not the default (the recipes'), and the
    job's :func:`env_settings` as ``NAME=VALUE``. A model read from a config.json is named by the file's absolute
    path, a GPU from a user hardware file is followed by ``hardware=PATH`` (shell-quoted where needed, e.g. spaces)."""
    v = version or cfg.mcore_version
    model = shlex.quote(cfg.model.path) if cfg.model.path else cfg.model.name
    hw = f" hardware={shlex.quote(cfg.gpu.hardware_file)}" if cfg.gpu.hardware_file else ""
    te = "" if cfg.te_version == DEFAULT_TE_VERSION else f" te-version={cfg.te_version}"
    # what no Megatron field says but the plan assumed (the routing skew, the memory kept free): check reads it back
    imbalance = "" if cfg.moe_imbalance == 1.0 else f" moe-imbalance={cfg.moe_imbalance:g}"
    reserve = "" if cfg.reserve_gib == DEFAULT_RESERVE_GIB else f" reserve-gib={cfg.reserve_gib:g}"
    env = "".join(f" {k}={val}" for k, val in env_settings(cfg).items())
    return (f"{PROVENANCE_PREFIX} model={model} gpu={cfg.gpu.name}{hw} gpus={cfg.parallel.gpus} "
            f"mcore-version={v}{te}{imbalance}{reserve}{env}")


def to_yaml(cfg: RunConfig, version: str | None = None) -> str:
    """The same fields nested as a Bridge ``ConfigContainer`` YAML fragment (model:, train:, ...), after
    the :func:`provenance_comment`."""
    tree: dict[str, dict[str, object]] = {}
    for path, value in bridge_items(cfg, version):
        section, name = path.split(".", 1)
        if isinstance(value, TorchDtype):
            value = {"_target_": f"torch.{value.name}", "_call_": False}
        tree.setdefault(section, {})[name] = value
    return provenance_comment(cfg, version) + "\n" + str(yaml.safe_dump(tree, sort_keys=False, default_flow_style=False))


def _mlm_tokens(knob: Knob, value: object) -> list[str]:
    assert knob.mlm is not None or knob.mlm_false is not None
    if value is None:
        return []
    if isinstance(value, bool):
        if value:
            return [knob.mlm] if knob.mlm else []  # a store_false flag's field is on without it
        return [knob.mlm_false] if knob.mlm_false else []
    assert knob.mlm is not None
    if isinstance(value, list):
        return [knob.mlm, *map(str, value)] if value else []
    if knob.kind == "dtype":
        return [knob.mlm, DTYPE_TO_MLM.get(str(value), str(value))]
    return [knob.mlm, repr(value) if isinstance(value, float) else str(value)]


def to_megatron_lm_args(cfg: RunConfig, version: str | None = None) -> list[str]:
    """Megatron-LM flags (argv tokens: join them with :func:`shlex.join` for a shell)."""
    f = fields_for(version or cfg.mcore_version)
    args: list[str] = []
    for key, value in to_settings(cfg, f.version).items():
        args += _mlm_tokens(f.knobs[key], value)
    return args + ["--bf16"]


def overrides_to_megatron_lm(overrides: Sequence[str], version: str,
                             file_paths: Mapping[str, str] | None = None) -> list[str]:
    """Megatron Bridge overrides (``path=value``, as :func:`to_overrides` writes them) as Megatron-LM arguments, one
    shell fragment per override through the field table's flags: ``--optimizer-cpu-offload`` for
    ``optimizer.optimizer_cpu_offload=true``. ``file_paths`` (field -> the flag that set it in the file,
    moeplan.megatron.read ParsedRun.paths): a field the file set with another flag gets that flag removed first
    (``--recompute-activations`` would make a granularity selective again: Megatron-LM's validate_args); a value
    that is off or unset removes the field's flag only where the file has it. Without ``file_paths`` every removal
    is said."""
    f = fields_for(version)
    by_path = {path: knob for knob in f.knobs.values() for path in (*f.bridge_paths(knob), *knob.bridge_read)}
    out = []
    for override in overrides:
        path, _, text = override.partition("=")
        path = path.lstrip("+")
        knob = by_path.get(path)
        if knob is None and _instance_path(path, f):
            continue  # a section's class and BF16 base fields (bridge_items): Bridge plumbing, --bf16 in Megatron-LM
        if knob is None or (knob.mlm is None and knob.mlm_false is None):
            out.append(f"# {override}  (no Megatron-LM flag in moeplan's field table: set it by hand)")
            continue
        tokens = _mlm_tokens(knob, parse_override_value(text))
        had = None if file_paths is None else file_paths.get(knob.field)
        if had is not None and had.startswith("--") and tokens and had != tokens[0]:  # another flag, or the opposite one
            out.append(f"# remove {had}")
        if tokens:
            out.append(shlex.join(tokens))
        elif file_paths is None or had is not None:
            out.append(f"# remove {had if had and had.startswith('--') else knob.mlm}")
    return out


__all__ = ["bridge_items", "env_settings", "format_override_value", "overrides_to_megatron_lm", "to_megatron_lm_args", "to_overrides",
           "to_settings", "to_yaml"]
