"""The model catalog as rows (``moeplan models``, :func:`moeplan.api.list_models`).

Kept apart from :mod:`moeplan.api` so that listing the catalog imports only the model data and the
parameter counts, not the engine, the planner or YAML (start-up time of ``moeplan models``)."""

from __future__ import annotations

from typing import Any

from moeplan.engine.params import count_params
from moeplan.models import catalog_names, load_model


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
                "total_params": count_params(spec).main_total,  # without MTP modules, as `moeplan params`
                "total_params_with_mtp": count_params(spec).total,
                "active_params": count_params(spec, active=True).main_total,
            }
        )
    return rows


__all__ = ["list_models"]
