"""Megatron settings (what :mod:`moeplan.megatron.read` returns) -> a :class:`~moeplan.run.config.RunConfig`; fields a
file leaves out take Megatron-Core's defaults. An error about a value names the field(s) it comes from
(:class:`_SettingError`); where the settings are a file's (:class:`~moeplan.megatron.read.collect.FileSettings`),
:func:`run_config_from_settings` turns it into ``FILE:LINE: ...`` as the reader's type errors read."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from moeplan.base.errors import MoeplanError
from moeplan.base.fields import (CP_FROM_MCORE, FP8_RECIPE_TO_PRECISION, KIND_WORDS, KNOB_BY_FIELD, MCORE_CP_COMM_TYPES,
                                 PRECISION_TO_FP8_RECIPE, coerce, normalize_version)
from moeplan.base.router_dtype import bridge_router_dtype
from moeplan.base.vocab import (CUDA_GRAPH_SCOPES, DEFAULT_MCORE_VERSION, FLEX_DISPATCHERS, FSDP_STRATEGIES,
                                RECOMPUTE_MODULES)
from moeplan.hardware import GPUSpec
from moeplan.megatron.read.collect import FileSettings
from moeplan.models.spec import ModelSpec, with_mtp_layers
from moeplan.run.config import Recompute, RunConfig
from moeplan.run.parallel import Batch, Parallel, unroll_layout


class _SettingError(MoeplanError):
    """A bad value of these settings fields (the first: the one to point at)."""

    def __init__(self, reason: str, *fields: str) -> None:
        super().__init__(reason)
        self.reason, self.fields = reason, fields


def _located(settings: Mapping[str, object], fields: tuple[str, ...], reason: str) -> MoeplanError:
    """The error at the line of the first of ``fields`` a file's settings set (``FILE: reason`` where it sets
    none of them); unlocated for settings with no file behind them."""
    if isinstance(settings, FileSettings):
        return settings.error(fields, reason)
    return MoeplanError(reason)


def _value(settings: Mapping[str, object], key: str) -> object:
    """A setting coerced to its knob's type (an error naming the field when it has the wrong type)."""
    raw = settings.get(key)
    if raw is None:
        return None
    try:
        return coerce(KNOB_BY_FIELD[key].kind, raw)
    except ValueError:
        raise _SettingError(f"{key}: expected {KIND_WORDS[KNOB_BY_FIELD[key].kind]}, got {raw!r}", key) from None


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
        raise _SettingError(f"run settings lack {key} ({where}); moeplan needs it to plan the run", key)
    return value


def _layout_stages(layout: str) -> int:
    """Stage count of a layout string ('|' separated after expanding (...)*n)."""
    return len(unroll_layout(layout).rstrip("|").split("|"))


_SIZE_FIELDS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size",
                "num_layers_per_virtual_pipeline_stage", "seq_length", "global_batch_size", "micro_batch_size")


def _check_sizes(settings: Mapping[str, object]) -> None:
    for key in _SIZE_FIELDS:
        value = _int(settings, key)
        if value is not None and value < 1:
            raise _SettingError(f"{key} must be a positive integer, got {value}", key)


def _parallel_from(settings: Mapping[str, object], model: ModelSpec, gpus: int) -> Parallel:
    tp = _int(settings, "tensor_model_parallel_size") or 1
    pp = _int(settings, "pipeline_model_parallel_size") or 1
    layout = _value(settings, "pipeline_model_parallel_layout")
    vpp = _int(settings, "virtual_pipeline_model_parallel_size")
    per_stage = _int(settings, "num_layers_per_virtual_pipeline_stage")
    if vpp is None and isinstance(layout, str) and layout:
        try:
            vpp = max(1, _layout_stages(layout) // pp)  # Megatron-Core derives VPP from the layout
        except MoeplanError as exc:
            raise _SettingError(str(exc), "pipeline_model_parallel_layout") from None
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
            raise _SettingError(f"full recompute needs recompute_method uniform or block, got {method or None!r}",
                                "recompute_method", "recompute_granularity")
        return Recompute("full", frozenset(), "uniform" if method == "uniform" else "block",
                         _int(settings, "recompute_num_layers") or 1)
    if granularity != "selective":
        raise _SettingError(f"recompute_granularity {granularity!r} unknown; Megatron-Core accepts full or selective",
                            "recompute_granularity")
    modules = _strings(settings, "recompute_modules")
    modules = ["core_attn"] if modules is None else modules  # Megatron-Core default
    bad = [m for m in modules if m not in RECOMPUTE_MODULES]
    if bad:
        raise _SettingError(f"recompute module(s) {', '.join(bad)} unknown; Megatron-Core labels: "
                            f"{', '.join(RECOMPUTE_MODULES)}", "recompute_modules")
    return Recompute("selective", frozenset(modules)) if modules else Recompute()


def _precision_from(settings: Mapping[str, object]) -> str:
    if settings.get("fp8") is None:
        if settings.get("fp4") is not None:  # NVFP4 training (fp4 e2m1; fp4_recipe nvfp4 is its default)
            recipe = _str(settings, "fp4_recipe", "nvfp4")
            if recipe != "nvfp4":
                raise _SettingError(f"fp4_recipe '{recipe}' is not modelled; moeplan knows nvfp4", "fp4_recipe", "fp4")
            return "nvfp4"
        return "bf16"
    recipe = _str(settings, "fp8_recipe", "delayed")  # Megatron-Core default recipe
    if recipe not in FP8_RECIPE_TO_PRECISION:
        raise _SettingError(f"fp8_recipe '{recipe}' is not modelled; moeplan knows "
                            f"{', '.join(FP8_RECIPE_TO_PRECISION)}", "fp8_recipe", "fp8")
    return FP8_RECIPE_TO_PRECISION[recipe]


def _bf16_layers_from(settings: Mapping[str, object], where: str) -> int | None:
    """``bf16_start_layers`` / ``bf16_end_layers`` (``where``: start | end) of a quantized run's
    ``first_last_layers_bf16`` with ``num_layers_at_{where}_in_bf16`` (absent: Megatron-Core's default 1)."""
    if not _bool(settings, "first_last_layers_bf16") or _precision_from(settings) == "bf16":
        return None
    n = _int(settings, f"num_layers_at_{where}_in_bf16")
    return 1 if n is None else n or None


def _router_dtype_from(settings: Mapping[str, object], model: ModelSpec) -> str:
    """The moe_router_dtype knob of a file's ``moe_router_dtype`` (absent: Megatron-Core's None): 'auto' where it is what
    the model's Megatron Bridge provider sets (moeplan.base.router_dtype), so moeplan's exports read back as written."""
    value = _str(settings, "moe_router_dtype", "none")
    return "auto" if (None if value == "none" else value) == bridge_router_dtype(model.model_type) else value


def _dispatcher_from(settings: Mapping[str, object]) -> str:
    kind = _str(settings, "moe_token_dispatcher_type", "allgather")  # Megatron-Core default
    deepep = _bool(settings, "moe_enable_deepep")
    if kind in ("alltoall", "allgather"):
        if deepep:
            raise _SettingError("moe_enable_deepep needs moe_token_dispatcher_type flex", "moe_enable_deepep")
        return kind
    if kind != "flex":
        raise _SettingError(f"moe_token_dispatcher_type '{kind}' unknown; Megatron-Core accepts allgather, alltoall, "
                            "flex", "moe_token_dispatcher_type")
    backend = "deepep" if deepep else _str(settings, "moe_flex_dispatcher_backend", "deepep")
    if backend not in FLEX_DISPATCHERS:
        raise _SettingError(f"moe_flex_dispatcher_backend '{backend}' is not modelled; moeplan knows deepep, "
                            "hybridep", "moe_flex_dispatcher_backend")
    return backend


_GRAPH_SCOPE_FIELDS = ("cuda_graph_modules", "cuda_graph_scope")
_GRAPH_IMPL_FIELDS = ("cuda_graph_impl", "enable_cuda_graph", "external_cuda_graph")


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
        raise _SettingError("whole-layer CUDA graphs (scope 'full' / empty) are not modelled; list the scopes "
                            f"({', '.join(CUDA_GRAPH_SCOPES)})", *_GRAPH_SCOPE_FIELDS, *_GRAPH_IMPL_FIELDS)
    bad = sorted(s for s in scopes if s not in CUDA_GRAPH_SCOPES)
    if bad:
        raise _SettingError(f"CUDA graph scope(s) {', '.join(bad)} unknown; choose from "
                            f"{', '.join(CUDA_GRAPH_SCOPES)}", *_GRAPH_SCOPE_FIELDS)
    return scopes


def _cp_comm_from(settings: Mapping[str, object]) -> str:
    kinds = set(_strings(settings, "cp_comm_type") or ["p2p"])
    if len(kinds) != 1:
        raise _SettingError(f"per-layer cp_comm_type {sorted(kinds)} is not modelled; use one type for all layers",
                            "cp_comm_type")
    kind = kinds.pop()
    if kind not in CP_FROM_MCORE:
        raise _SettingError(f"cp_comm_type '{kind}' unknown; Megatron-Core accepts {', '.join(MCORE_CP_COMM_TYPES)}",
                            "cp_comm_type")
    return CP_FROM_MCORE[kind]


def _model_with_mtp(model: ModelSpec, settings: Mapping[str, object]) -> ModelSpec:
    if "mtp_num_layers" not in settings:
        return model
    try:
        return with_mtp_layers(model, _int(settings, "mtp_num_layers") or 0)
    except MoeplanError as exc:
        raise _SettingError(str(exc), "mtp_num_layers") from None


def run_config_from_settings(settings: Mapping[str, object], model: ModelSpec, gpus: int, gpu: GPUSpec | str,
                             *, mcore_version: str = DEFAULT_MCORE_VERSION) -> RunConfig:
    """A :class:`RunConfig` from Megatron settings (missing fields take Megatron-Core's defaults); ``gpu`` is a
    :class:`GPUSpec` or a catalog name. A bad value raises MoeplanError; for a file's settings
    (:class:`FileSettings`, what :mod:`moeplan.megatron.read` returns) it reads ``FILE:LINE: ...``, the line of
    the field it is about (RunConfig's own checks included, :func:`_run_config`)."""
    try:
        return _run_config(settings, model, gpus, gpu, mcore_version)
    except _SettingError as exc:
        raise _located(settings, exc.fields, exc.reason) from None


def _run_config(settings: Mapping[str, object], model: ModelSpec, gpus: int, gpu: GPUSpec | str,
                mcore_version: str) -> RunConfig:
    _check_sizes(settings)
    seq = _require(settings, "seq_length", "model.seq_length / --seq-length")
    gbs = _require(settings, "global_batch_size", "train.global_batch_size / --global-batch-size")
    optimizer, layer_wise = _optimizer_from(settings)
    fsdp = _fsdp_from(settings)
    if optimizer == "adam" and fsdp is None and not _bool(settings, "use_distributed_optimizer", True):
        raise _SettingError("use_distributed_optimizer is false; moeplan models Adam with the distributed optimizer "
                            "or Megatron-FSDP, and Muon", "use_distributed_optimizer")
    model = _model_with_mtp(model, settings)
    offload = _bool(settings, "optimizer_cpu_offload")
    fraction = _float(settings, "optimizer_offload_fraction")
    modules = _strings(settings, "offload_modules") if _bool(settings, "fine_grained_activation_offloading") else None
    act_fraction = _float(settings, "activation_offload_fraction")  # Megatron-Core 0.19+, default 1.0
    return _checked_run_config(settings, dict(
        model=model,
        parallel=_parallel_from(settings, model, gpus),
        batch=Batch(seq, gbs, _int(settings, "micro_batch_size") or 1),
        gpu=gpu,
        recompute=_recompute_from(settings),
        precision=_precision_from(settings),
        bf16_start_layers=_bf16_layers_from(settings, "start"),
        bf16_end_layers=_bf16_layers_from(settings, "end"),
        dispatcher=_dispatcher_from(settings) if model.first_moe is not None else "alltoall",
        moe_router_dtype=_router_dtype_from(settings, model),
        cuda_graph_scopes=_scopes_from(settings),
        optimizer_offload=(1.0 if fraction is None else fraction) if offload else 0.0,  # Megatron-LM default 1.0
        offload_modules=frozenset(modules or ()),
        activation_offload_fraction=1.0 if act_fraction is None or not modules else act_fraction,
        capacity_factor=_float(settings, "moe_expert_capacity_factor"),
        rank_capacity_factor=_float(settings, "moe_expert_rank_capacity_factor"),
        grad_fp32=_bool(settings, "grad_reduce_in_fp32", True),
        bf16_moments=_str(settings, "exp_avg_dtype", "") == _str(settings, "exp_avg_sq_dtype", "") == "bfloat16",
        ep_overlap=_bool(settings, "overlap_moe_expert_parallel_comm"),
        delay_wgrad=_delay_wgrad_from(settings),
        # irrelevant at TP 1 (moeplan's default then, so exports round-trip)
        tp_comm_overlap=_bool(settings, "tp_comm_overlap") if (_int(settings, "tensor_model_parallel_size") or 1) > 1 else True,
        dp_overlap=_bool(settings, "overlap_grad_reduce"),
        fp8_attention=_bool(settings, "fp8_dot_product_attention") and _precision_from(settings) in PRECISION_TO_FP8_RECIPE,
        cp_comm_type=_cp_comm_from(settings),
        mcore_version=normalize_version(mcore_version),
        fsdp=fsdp,
        fsdp_double_buffer=_bool(settings, "fsdp_double_buffer") if fsdp is not None else False,
        optimizer=optimizer,
        muon_ns_steps=_int(settings, "muon_num_ns_steps") or 5,  # OptimizerConfig default
        muon_tp_mode=_str(settings, "muon_tp_mode", "blockwise"),
        muon_layer_wise=layer_wise,
    ))


# The settings fields each RunConfig argument built from a file's settings comes from (first: the one to point
# at), for the line of an error RunConfig.__post_init__ raises (_checked_run_config).
_RUN_FIELDS: dict[str, tuple[str, ...]] = {
    "recompute": ("recompute_modules", "recompute_granularity", "recompute_method", "recompute_num_layers"),
    "precision": ("fp8_recipe", "fp8"),
    "bf16_start_layers": ("num_layers_at_start_in_bf16", "first_last_layers_bf16"),
    "bf16_end_layers": ("num_layers_at_end_in_bf16", "first_last_layers_bf16"),
    "dispatcher": ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_enable_deepep"),
    "cuda_graph_scopes": (*_GRAPH_SCOPE_FIELDS, *_GRAPH_IMPL_FIELDS),
    "optimizer_offload": ("optimizer_offload_fraction", "optimizer_cpu_offload"),
    "offload_modules": ("offload_modules", "fine_grained_activation_offloading"),
    "moe_router_dtype": ("moe_router_dtype",),
    "activation_offload_fraction": ("activation_offload_fraction",),
    "capacity_factor": ("moe_expert_capacity_factor",),
    "rank_capacity_factor": ("moe_expert_rank_capacity_factor",),
    "grad_fp32": ("grad_reduce_in_fp32",),
    "bf16_moments": ("exp_avg_dtype", "exp_avg_sq_dtype"),
    "ep_overlap": ("overlap_moe_expert_parallel_comm",),
    "delay_wgrad": ("delay_wgrad_compute", "overlap_moe_expert_parallel_comm"),
    "tp_comm_overlap": ("tp_comm_overlap",),
    "dp_overlap": ("overlap_grad_reduce",),
    "fp8_attention": ("fp8_dot_product_attention",),
    "cp_comm_type": ("cp_comm_type",),
    "fsdp": ("use_megatron_fsdp", "data_parallel_sharding_strategy"),
    "fsdp_double_buffer": ("fsdp_double_buffer",),
    "optimizer": ("optimizer",),
    "muon_ns_steps": ("muon_num_ns_steps",),
    "muon_tp_mode": ("muon_tp_mode",),
    "muon_layer_wise": ("optimizer", "use_layer_wise_distributed_optimizer", "use_distributed_optimizer"),
}
_RUN_DEFAULTS = {f.name: f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
                 for f in dataclasses.fields(RunConfig) if f.name in _RUN_FIELDS}


def _checked_run_config(settings: Mapping[str, object], kwargs: dict[str, object]) -> RunConfig:
    """RunConfig(**kwargs); where its own checks reject a value read from the file, a :class:`_SettingError`
    naming the fields of the arguments the rejection rests on: those whose RunConfig default (the run without that
    setting) takes the rejection away or changes it. The checks live in run.py (one owner); this finds which of the
    file's settings tripped them rather than repeating them. Errors no file setting causes (a GPU name) pass as
    they are."""
    try:
        return RunConfig(**kwargs)  # type: ignore[arg-type]
    except MoeplanError as exc:
        reason = str(exc)
        causes: list[str] = []
        for name, fields in _RUN_FIELDS.items():
            if name not in kwargs or not any(f in settings for f in fields):
                continue
            try:
                RunConfig(**{**kwargs, name: _RUN_DEFAULTS[name]})  # type: ignore[arg-type]
            except MoeplanError as other:
                if str(other) == reason:
                    continue
            causes += [f for f in fields if f in settings]
        if not causes:  # not about the file's settings (a GPU name, ...)
            raise
        raise _SettingError(reason, *causes) from None


def _delay_wgrad_from(settings: Mapping[str, object]) -> bool | None:
    """delay_wgrad_compute as RunConfig.delay_wgrad. With EP overlap on, the file's value (Megatron's default, off,
    where it leaves it out): an explicit true stays True, so where Megatron rejects it
    (RunConfig.delay_wgrad_blocked) the run is reported rather than read as Bridge's pairing, which turns it off
    there. Without EP overlap, True where the file sets it (Megatron rejects that, moeplan.engine.knobs), else None: off
    either way, and what an export of a run without overlap (delay_wgrad_compute false) reads back as."""
    value = _bool(settings, "delay_wgrad_compute")
    if _bool(settings, "overlap_moe_expert_parallel_comm"):
        return value
    return True if value else None


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
    raise _SettingError(f"optimizer '{name}' is not modelled; moeplan knows adam, muon and dist_muon", "optimizer")


def _fsdp_from(settings: Mapping[str, object]) -> str | None:
    if not _bool(settings, "use_megatron_fsdp"):
        return None
    strategy = _str(settings, "data_parallel_sharding_strategy", "no_shard")  # DDP config default
    if strategy not in FSDP_STRATEGIES:
        raise _SettingError(f"data_parallel_sharding_strategy '{strategy}' unknown; Megatron-Core accepts "
                            f"{', '.join(FSDP_STRATEGIES)}", "data_parallel_sharding_strategy", "use_megatron_fsdp")
    return strategy


__all__ = ["run_config_from_settings"]
