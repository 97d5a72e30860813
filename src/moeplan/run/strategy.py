"""The strategy as a file: every knob of a run, grouped by concern, that a user can save, edit and feed back
(``moeplan plan --save-strategy FILE.yaml``, ``moeplan estimate MODEL --gpus N --strategy FILE.yaml``).

The model and the cluster (GPU, GPU count, hardware file) stay on the command line, as calculon and SimuMax
keep model, system and strategy apart. Keys are the API's (and the CLI flags' with ``_`` for ``-``); a key
left out takes its default. Bad files raise :class:`~moeplan.base.errors.MoeplanError` naming the file and key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from moeplan.base import safeyaml
from moeplan.base.errors import MoeplanError, one_line, yaml_problem
from moeplan.run.config import RunConfig

FORMAT = "moeplan-strategy/1"

# Section -> keys (build_config keyword arguments), in the order written.
GROUPS: dict[str, tuple[str, ...]] = {
    "layout": ("tp", "pp", "vpp", "cp", "ep", "etp", "pipeline_layout"),
    "batch": ("seq_len", "gbs", "mbs"),
    "training": ("mtp_layers",),  # multi-token prediction depth trained (Megatron-Core mtp_num_layers)
    "numerics": ("precision", "grad_fp32", "bf16_moments", "precision_aware_optimizer"),
    "moe": ("dispatcher", "ep_overlap", "delay_wgrad", "moe_imbalance", "capacity_factor", "rank_capacity_factor"),
    "communication": ("cp_comm_type", "tp_comm_overlap", "dp_overlap"),
    "memory": ("recompute", "optimizer_offload", "offload_overlap", "offload_modules", "cuda_graphs", "reserve_gib"),
    "optimizer": ("optimizer", "fsdp", "fsdp_double_buffer", "muon_ns_steps", "muon_tp_mode", "muon_layer_wise"),
    "megatron": ("mcore_version", "te_version", "te_grouped_tensor"),
}
_INT = {"tp", "pp", "vpp", "cp", "ep", "etp", "seq_len", "gbs", "mbs", "muon_ns_steps", "mtp_layers"}
_FLOAT = {"moe_imbalance", "optimizer_offload", "reserve_gib"}
_OPT_FLOAT = {"capacity_factor", "rank_capacity_factor"}
_BOOL = {"grad_fp32", "bf16_moments", "ep_overlap", "tp_comm_overlap", "dp_overlap", "offload_overlap",
         "fsdp_double_buffer", "muon_layer_wise", "te_grouped_tensor"}
_OPT_BOOL = {"precision_aware_optimizer", "delay_wgrad"}
_LIST = {"offload_modules", "cuda_graphs"}
_OPT_STR = {"pipeline_layout", "fsdp"}


def strategy_of(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """The strategy of a run, grouped, as plain values."""
    par, batch = cfg.parallel, cfg.batch
    flat: dict[str, Any] = {
        "tp": par.tp, "pp": par.pp, "vpp": par.vpp, "cp": par.cp, "ep": par.ep, "etp": par.etp,
        "pipeline_layout": par.pipeline_layout,
        "seq_len": batch.seq_len, "gbs": batch.gbs, "mbs": batch.mbs, "mtp_layers": cfg.model.mtp_layers,
        "precision": cfg.precision, "grad_fp32": cfg.grad_fp32, "bf16_moments": cfg.bf16_moments,
        "precision_aware_optimizer": cfg.precision_aware_optimizer,
        "dispatcher": cfg.dispatcher, "ep_overlap": cfg.ep_overlap, "delay_wgrad": cfg.delay_wgrad,
        "moe_imbalance": cfg.moe_imbalance,
        "capacity_factor": cfg.capacity_factor, "rank_capacity_factor": cfg.rank_capacity_factor,
        "cp_comm_type": cfg.cp_comm_type, "tp_comm_overlap": cfg.tp_comm_overlap, "dp_overlap": cfg.dp_overlap,
        "recompute": cfg.recompute.label(), "optimizer_offload": cfg.optimizer_offload,
        "offload_overlap": cfg.offload_overlap,
        "offload_modules": sorted(cfg.offload_modules), "cuda_graphs": sorted(cfg.cuda_graph_scopes),
        "reserve_gib": cfg.reserve_gib, "mcore_version": cfg.mcore_version, "te_version": cfg.te_version,
        "te_grouped_tensor": cfg.te_grouped_tensor,
        "optimizer": cfg.optimizer, "fsdp": cfg.fsdp, "fsdp_double_buffer": cfg.fsdp_double_buffer,
        "muon_ns_steps": cfg.muon_ns_steps, "muon_tp_mode": cfg.muon_tp_mode, "muon_layer_wise": cfg.muon_layer_wise,
    }
    return {group: {k: flat[k] for k in keys} for group, keys in GROUPS.items()}


def strategy_text(cfg: RunConfig) -> str:
    """The strategy as YAML, with a header naming the run it came from."""
    head = (f"# {FORMAT}: {cfg.model.name} on {cfg.parallel.gpus} x {cfg.gpu.name}\n"
            f"# moeplan estimate MODEL --gpu {cfg.gpu.name} --gpus {cfg.parallel.gpus} --strategy THIS_FILE\n")
    return head + str(yaml.safe_dump(strategy_of(cfg), sort_keys=False, default_flow_style=False))


def _value(origin: str, group: str, key: str, value: Any) -> Any:
    def bad(what: str) -> MoeplanError:
        return MoeplanError(f"{origin}: {group}.{key}: expected {what}, got {one_line(repr(value))[:60]}")

    if key in _INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if key in _FLOAT or key in _OPT_FLOAT:
        if value is None and key in _OPT_FLOAT:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad("a number")
        return float(value)
    if key in _BOOL or key in _OPT_BOOL:
        if value is None and key in _OPT_BOOL:
            return None
        if not isinstance(value, bool):
            raise bad("true, false or null" if key in _OPT_BOOL else "true or false")
        return value
    if key in _LIST:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of names")
        return value
    if value is None and key in _OPT_STR:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise bad("a string")
    return str(value)


def parse_strategy(text: str, origin: str = "<strategy>") -> dict[str, Any]:
    """Keyword arguments for :func:`moeplan.api.build_config` from a strategy file's text."""
    try:
        tree = safeyaml.load(text)
    except yaml.YAMLError as exc:
        raise MoeplanError(f"{origin}: malformed YAML{yaml_problem(exc)}") from None
    if not isinstance(tree, dict):
        raise MoeplanError(f"{origin}: not a strategy (expected sections {', '.join(GROUPS)})")
    out: dict[str, Any] = {}
    for group, body in tree.items():
        if group not in GROUPS:
            raise MoeplanError(f"{origin}: unknown section '{group}'; sections: {', '.join(GROUPS)}")
        if body is None:
            continue
        if not isinstance(body, dict):
            raise MoeplanError(f"{origin}: section '{group}' must be a mapping of keys to values")
        for key, value in body.items():
            if key not in GROUPS[group]:
                raise MoeplanError(f"{origin}: unknown key '{group}.{key}'; {group} keys: {', '.join(GROUPS[group])}")
            out[key] = _value(origin, group, key, value)
    for key in ("seq_len", "gbs"):
        if key not in out:
            raise MoeplanError(f"{origin}: batch.{key} is missing")
    return out


def read_strategy(path: str | Path) -> dict[str, Any]:
    """:func:`parse_strategy` on a file (unreadable files raise MoeplanError naming it)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise MoeplanError(f"{p}: cannot read strategy file: {one_line(reason)}") from None
    return parse_strategy(text, str(p))


__all__ = ["FORMAT", "GROUPS", "parse_strategy", "read_strategy", "strategy_of", "strategy_text"]
