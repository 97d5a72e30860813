"""The fitted timing constants (:class:`Calibration`): few and global, not per model or per run; their values
are data (moeplan/hardware/calibration.yaml), each with what it stands for and its source."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from moeplan.base.errors import MoeplanError


CALIBRATION_FILE = "calibration.yaml"  # package data beside the hardware catalog (moeplan/hardware)


@lru_cache(maxsize=1)
def _file_constants() -> dict[str, Any]:
    """The default constants, read once from ``moeplan/hardware/calibration.yaml``."""
    text = resources.files("moeplan.hardware").joinpath(CALIBRATION_FILE).read_text(encoding="utf-8")
    origin = f"moeplan/hardware/{CALIBRATION_FILE}"
    # YAML 1.1 reads "28.0e6" as a string: every leaf goes through the same positive-number check
    return {k: ({kk: _positive(origin, f"{k}.{kk}", vv) for kk, vv in v.items()} if isinstance(v, dict)
                else _positive(origin, k, v)) for k, v in yaml.load(  # noqa: S506 - safe loaders; libyaml's parser if present
                    text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))["constants"].items()}


def _from_file(name: str) -> Any:
    return field(default_factory=lambda: copy.deepcopy(_file_constants()[name]))


# Old names of renamed constants, still read from user profiles (--calibration FILE): old -> new.
RENAMED_CONSTANTS = {"ep_sm_bw": "ep_sm_bw_bytes_per_s"}  # renamed for its unit (moeplan 2026-12)


@dataclass(frozen=True, eq=False)
class Calibration:
    """Global efficiency constants of the timing model. The defaults are the values in
    ``moeplan/hardware/calibration.yaml`` (what each stands for and its source are documented there
    and in docs/calibration.md; benchmarks/calibrate.py writes the fitted ones)."""

    attn_fwd_eff: dict[str, float] = _from_file("attn_fwd_eff")
    attn_bwd_eff: dict[str, float] = _from_file("attn_bwd_eff")
    attn_wide_fwd_share: dict[str, float] = _from_file("attn_wide_fwd_share")
    attn_wide_bwd_share: dict[str, float] = _from_file("attn_wide_bwd_share")
    attn_noncausal_bwd_share: dict[str, float] = _from_file("attn_noncausal_bwd_share")
    attn_softmax_flops: float = _from_file("attn_softmax_flops")
    attn_half_tokens: float = _from_file("attn_half_tokens")
    attn_causal_half_tokens: float = _from_file("attn_causal_half_tokens")
    gdn_eff: dict[str, float] = _from_file("gdn_eff")
    gdn_chunk_step_s: float = _from_file("gdn_chunk_step_s")
    gdn_launch_s: dict[str, float] = _from_file("gdn_launch_s")
    grouped_gemm_eff: float = _from_file("grouped_gemm_eff")
    gemm_epilogue_s: float = _from_file("gemm_epilogue_s")
    elementwise_traffic: float = _from_file("elementwise_traffic")
    hbm_eff: float = _from_file("hbm_eff")
    transpose_copy_eff: float = _from_file("transpose_copy_eff")
    nvlink_eff: float = _from_file("nvlink_eff")
    scaleout_eff: float = _from_file("scaleout_eff")
    a2a_eff: dict[str, float] = _from_file("a2a_eff")
    ep_link_share: dict[str, float] = _from_file("ep_link_share")
    ep_sm_bw_bytes_per_s: dict[str, float] = _from_file("ep_sm_bw_bytes_per_s")
    ep_sms: dict[str, float] = _from_file("ep_sms")
    a2a_scaleout_eff: dict[str, float] = _from_file("a2a_scaleout_eff")
    ep_overlap_eff: float = _from_file("ep_overlap_eff")
    ep_overlap_layer_s: float = _from_file("ep_overlap_layer_s")
    ep_proxy_call_s: float = _from_file("ep_proxy_call_s")
    a2a_host_call_s: float = _from_file("a2a_host_call_s")
    ep_proxy_message_s: float = _from_file("ep_proxy_message_s")
    natural_routing_imbalance: float = _from_file("natural_routing_imbalance")
    tp_hidden: float = _from_file("tp_hidden")
    launch_overhead_per_layer_s: float = _from_file("launch_overhead_per_layer_s")
    expert_launch_host_s: float = _from_file("expert_launch_host_s")
    host_layer_pass_s: float = _from_file("host_layer_pass_s")
    pp_handoff_s: float = _from_file("pp_handoff_s")
    optimizer_bytes_per_param: float = _from_file("optimizer_bytes_per_param")
    cpu_adam_mem_eff: float = _from_file("cpu_adam_mem_eff")
    # Not a timing constant: the fit's leave-one-group-out error (RMS of held-out log residuals),
    # the band every estimate carries (benchmarks/calibrate.py writes it)
    error_band_log: float = _from_file("error_band_log")
    # Not a timing constant either: per architectural feature no fitted run has (models.spec.MODEL_FEATURES),
    # the largest shortfall (log of measured / estimated step time) of the measured runs of models with it, which
    # the band below their estimates covers (benchmarks/calibrate.py)
    out_of_fit_shortfall_log: dict[str, float] = _from_file("out_of_fit_shortfall_log")
    # Not a timing constant: the largest shortfall of the fitted AWS EFA campaigns' absolute level (fitted as ratios),
    # which the band below an estimate whose EP crosses EFA nodes covers (timing.moe.ep_host_proxied)
    proxied_ep_shortfall_log: float = _from_file("proxied_ep_shortfall_log")

    def as_dict(self) -> dict[str, Any]:
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}

    def with_overrides(self, overrides: Mapping[str, Any], origin: str = "calibration") -> Calibration:
        """A copy with some constants replaced (a user profile); dict constants merge key by key.
        Unknown names, non-positive values and shares (SHARE_CONSTANTS) above 1 raise MoeplanError naming
        ``origin``."""
        known = {f.name: f for f in fields(self)}
        values: dict[str, Any] = {}
        for key, value in overrides.items():
            key = RENAMED_CONSTANTS.get(key, key)
            if key in values:
                raise MoeplanError(f"{origin}: '{key}' is given twice (once under its old name)")
            if key not in known:
                raise MoeplanError(f"{origin}: unknown calibration constant '{key}' "
                                   f"(known: {', '.join(sorted(known))})")
            current = getattr(self, key)
            if isinstance(current, dict):
                if not isinstance(value, Mapping):
                    raise MoeplanError(f"{origin}: '{key}' must be a mapping like {current}")
                merged = dict(current)
                for k, v in value.items():
                    if k not in current:
                        raise MoeplanError(f"{origin}: '{key}.{k}' is not one of {', '.join(current)}")
                    merged[k] = _constant(origin, key, f"{key}.{k}", v)
                values[key] = merged
            else:
                values[key] = _constant(origin, key, key, value)
        return replace(self, **values)


# Constants that are shares of a peak rate, in (0, 1]: every ``*_eff`` and ``*_share`` field, and the hidden
# share of TP communication. Named by the fields themselves, so a new efficiency is covered without a list.
SHARE_CONSTANTS = tuple(f.name for f in fields(Calibration) if f.name.endswith(("_eff", "_share"))) + ("tp_hidden",)
# The Calibration fields that are not timing constants (no step time depends on them): the fit's error band
# and the bands outside it. A user's calibration fit leaves them alone (moeplan.calibrate.fit.constant_names).
NON_TIMING_CONSTANTS = ("error_band_log", "out_of_fit_shortfall_log", "proxied_ep_shortfall_log")


def _constant(origin: str, name: str, key: str, value: Any) -> float:
    """``value`` of constant ``name`` (entry ``key``): a positive number, in (0, 1] for a share."""
    v = _positive(origin, key, value)
    if name in SHARE_CONSTANTS and v > 1.0:
        raise MoeplanError(f"{origin}: constant '{key}' is a share of a peak rate and must be in (0, 1], got {v:g}")
    return v


def _positive(origin: str, key: str, value: Any) -> float:
    """``value`` as a finite positive float (MoeplanError naming ``origin`` and ``key`` otherwise)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise MoeplanError(f"{origin}: '{key}' must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise MoeplanError(f"{origin}: '{key}' must be a positive number, got {value!r}")
    return v


DEFAULT_CALIBRATION = Calibration()
