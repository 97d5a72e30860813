"""What a run file says about its model and layout beyond the settings: which catalog model its architecture
fields name, where they contradict the model given, and the pipeline layout of Megatron-Core's uneven-split
options. Used by the linter (``moeplan check``) and by the calibration from training logs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from moeplan.base.errors import MoeplanError
from moeplan.models import ModelSpec, catalog_names, load_model
from moeplan.run.config import RunConfig
from moeplan.run.parallel import layout_from_split_options

# Megatron-Core architecture fields and how to read them off a ModelSpec (for matching a model).
_ARCH_KEYS = {
    "num_layers": lambda s: s.num_layers,
    "hidden_size": lambda s: s.hidden,
    "num_attention_heads": lambda s: s.first_attention.num_heads if s.first_attention else None,
    "num_moe_experts": lambda s: s.num_experts,
    "moe_router_topk": lambda s: s.first_moe.top_k if s.first_moe else None,
    "moe_ffn_hidden_size": lambda s: s.first_moe.expert_ffn_hidden if s.first_moe else None,
}


def architecture_mismatch(architecture: dict[str, Any], spec: ModelSpec) -> dict[str, tuple[Any, Any]]:
    """The architecture fields a file gives that ``spec`` (the model estimated) contradicts: name -> (file, model)."""
    out = {}
    for key, read in _ARCH_KEYS.items():
        if key in architecture and read(spec) is not None and architecture[key] != read(spec):
            out[key] = (architecture[key], read(spec))
    return out


def infer_model(architecture: dict[str, Any], origin: str) -> ModelSpec:
    """The catalog model whose architecture matches every field the file gives."""
    given = {k: architecture[k] for k in _ARCH_KEYS if k in architecture}
    if len(given) < 2:
        raise MoeplanError(f"{origin}: the file does not say which model it trains; pass --model NAME or a config.json")
    matches = [n for n in catalog_names() if all(_ARCH_KEYS[k](load_model(n)) == v for k, v in given.items())]
    if len(matches) != 1:
        found = ", ".join(f"{k}={v}" for k, v in given.items())
        raise MoeplanError(f"{origin}: architecture ({found}) matches {len(matches)} catalog models "
                           f"({', '.join(matches) or 'none'}); pass --model")
    return load_model(matches[0])


def with_split_layout(cfg: RunConfig, arch: dict[str, Any]) -> RunConfig:
    """The run with the pipeline layout of Megatron-Core's uneven-split options, when the file gives them."""
    if cfg.parallel.pipeline_layout is not None:
        return cfg
    layout = layout_from_split_options(
        cfg.model, cfg.parallel.pp, cfg.parallel.vpp,
        account_for_embedding=bool(arch.get("account_for_embedding_in_pipeline_split")),
        account_for_loss=bool(arch.get("account_for_loss_in_pipeline_split")),
        first=arch.get("num_layers_in_first_pipeline_stage"), last=arch.get("num_layers_in_last_pipeline_stage"))
    return cfg.with_(parallel=replace(cfg.parallel, pipeline_layout=layout)) if layout else cfg
