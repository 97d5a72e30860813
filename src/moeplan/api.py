"""Python API: the functions the CLI calls, returning plain JSON-ready dicts.

Each function takes a MODEL as a catalog name, a config.json path or a :class:`ModelSpec`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from moeplan.flops import flops_per_token
from moeplan.models import ModelSpec, catalog_names, load_model
from moeplan.params import count_params


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def list_models() -> list[dict[str, Any]]:
    rows = []
    for name in catalog_names():
        spec = load_model(name)
        moe = spec.first_moe
        rows.append(
            {
                "name": name,
                "model_type": spec.model_type,
                "architecture": spec.architecture,
                "layers": spec.num_layers,
                "mtp_layers": spec.mtp_layers,
                "experts": moe.num_experts if moe else 0,
                "top_k": moe.top_k if moe else 0,
                "total_params": count_params(spec).main_total,
                "active_params": count_params(spec, active=True).main_total,
            }
        )
    return rows


def params_report(model: str | ModelSpec, seq_len: int = 4096, tp: int = 1) -> dict[str, Any]:
    """Parameters (total, active, by component) and training FLOPs per token at ``seq_len``.

    ``total_params`` includes MTP modules (as the checkpoints hold them); ``main_params`` excludes
    them; ``active_params`` is the main model's per-token parameters with embedding and output head.
    """
    spec = resolve_model(model)
    total = count_params(spec)
    active = count_params(spec, active=True)
    f = flops_per_token(spec, seq_len, tp)
    return {
        "model": spec.name,
        "model_type": spec.model_type,
        "architecture": spec.architecture,
        "seq_len": seq_len,
        "total_params": total.total,
        "main_params": total.main_total,
        "mtp_params": total.mtp,
        "active_params": active.main_total,
        "breakdown": total.as_dict(),
        "active_breakdown": active.as_dict(),
        "flops_per_token": f.total_flops,
        "flops": {
            "gemm_flops": f.gemm_flops,
            "attention_flops": f.attention_flops,
            "linear_attention_flops": f.linear_attention_flops,
            "logits_flops": f.logits_flops,
            "attention_share": f.attention_share,
        },
        "flops_convention": "Megatron-Core num_floating_point_operations: 3x forward GEMM FLOPs "
        "(fwd+dgrad+wgrad), causal attention counted as half of s^2, router and element-wise ops excluded",
        "source": spec.source,
    }


__all__ = ["asdict", "list_models", "params_report", "resolve_model"]
