"""NVFP4 against MXFP8 at the same layout (N20: Nemotron-3 Super on 64 GPUs, seq 8192, Megatron Bridge performance
summary): the ratio of their tokens/s, estimated with each recipe's settings (tests/measured_variants.catalog_variants:
the NVFP4 preset's BF16 end layers, Bridge's te_quant.cfg, B300's recompute) and the recipe's quantize passes
(moeplan.engine.timing.gemm QUANTIZE_BYTES_PER_ELEM["nvfp4"]), within 5% of the measured ratio. Before these were
modelled moeplan gave +16% on GB300 (measured +4%) and +7% on GB200 (measured +2%)."""

from __future__ import annotations

import pytest

from moeplan import api

from ..measured_variants import catalog_variants

VARIANTS = catalog_variants()
BY_LABEL = {v.label: v for v in VARIANTS}
PAIRS = {v.kwargs["gpu"]: (BY_LABEL[v.extra["ref"]], v) for v in VARIANTS if v.extra["obs"] == "pair"}


def _ratios(system: str) -> tuple[float, float]:
    """(estimated, measured) NVFP4 / MXFP8 tokens/s of ``system``'s pair."""
    mx, fp4 = PAIRS[system]
    est = api.estimate(fp4.model, **fp4.kwargs)["tokens_per_s_per_gpu"] / \
        api.estimate(mx.model, **mx.kwargs)["tokens_per_s_per_gpu"]
    return est, fp4.extra["tokens"] / mx.extra["tokens"]


def test_the_same_layout_pairs_are_ratio_observations(calibrate_script):
    """GB300 TP1 EP64, GB200 TP2 EP64 and B300 TP1 EP8 (B200's NVFP4 row runs TP 2 against TP 1: no pair) are
    observations, each its NVFP4 row's tokens/s over its MXFP8 row's, with one dispatcher on both sides (B300's since
    its MXFP8 row's split quantizes are costed as TE's bulk split_quantize runs them, and that row fits)."""
    assert set(PAIRS) == {"gb300", "gb200", "b300"}
    for mx, fp4 in PAIRS.values():
        assert (mx.kwargs["tp"], mx.kwargs["ep"]) == (fp4.kwargs["tp"], fp4.kwargs["ep"])
        assert fp4.kwargs["dispatcher"] == api.build_config(mx.model, **mx.kwargs)[0].dispatcher
    assert all(not fp4.extra["why"] for _, fp4 in PAIRS.values())
    obs = {o.label: o for o in calibrate_script.catalog_observations(include_out_of_fit=True)
           if o.label.count(" / ") == 1 and "nvfp4" in o.label}
    assert len(obs) == 3
    for o in obs.values():
        assert 1.0 < o.measured < 1.05  # +2% to +4% measured
    fitted = {o.label for o in calibrate_script.catalog_observations()}
    assert len(set(obs) & fitted) == 3


@pytest.mark.parametrize("system", ["gb300", "gb200"])
def test_nvfp4_over_mxfp8_within_5_percent(system):
    est, measured = _ratios(system)
    assert est / measured == pytest.approx(1.0, abs=0.05), (system, est, measured)


B300_PAIR_WHY = ("B300 EP8 (64 local experts): the MXFP8 step is host-bound (~30% of it in exposed per-expert launches), "
                 "so every launch the NVFP4 recipe drops shows in full: its fused split quantize (TE >= 2.12) drops the "
                 "MXFP8 splits' kernel launches (timing.context.SPLIT_QUANTIZE_LAUNCH_S, a source value, not fitted) and "
                 "its 14 BF16 end layers their experts' launches; +11% estimated against +3% measured")


@pytest.mark.xfail(strict=True, reason=B300_PAIR_WHY)
def test_nvfp4_over_mxfp8_within_5_percent_b300():
    est, measured = _ratios("b300")
    assert est / measured == pytest.approx(1.0, abs=0.05), (est, measured)


def test_b300_pair_misses_by_its_launches():
    """B300_PAIR_WHY holds: the NVFP4 step's launch term is > 5% of the MXFP8 step below the MXFP8 row's, and with the
    MXFP8 row's launch term the pair is within 5% of the measured ratio."""
    mx, fp4 = PAIRS["b300"]
    a, b = api.estimate(mx.model, **mx.kwargs), api.estimate(fp4.model, **fp4.kwargs)
    launch_a, launch_b = a["time_breakdown_s"]["launch_overhead"], b["time_breakdown_s"]["launch_overhead"]
    assert launch_a > 0.25 * a["step_time_s"] and launch_a - launch_b > 0.05 * a["step_time_s"]
    same_launches = a["step_time_s"] / (b["step_time_s"] + launch_a - launch_b)
    _, measured = _ratios("b300")
    assert same_launches / measured == pytest.approx(1.0, abs=0.05)


def test_without_the_recipe_settings_nvfp4_gains_far_more_than_measured():
    """The settings carry the result: the same NVFP4 row with every module in NVFP4 and no BF16 layers (TE's plain
    NVFP4BlockScaling) estimates +16% on GB300, 4x the measured gain."""
    mx, fp4 = PAIRS["gb300"]
    plain = {k: v for k, v in fp4.kwargs.items() if k not in ("te_quant_map", "bf16_end_layers")}
    est = api.estimate(fp4.model, **plain)["tokens_per_s_per_gpu"] / \
        api.estimate(mx.model, **mx.kwargs)["tokens_per_s_per_gpu"]
    assert est > 1.12
