"""benchmarks/calibrate.py: N38 / N39 enter the fit as each MoE layer's speed over its proxy's alltoall BF16 row, each
observation predicting its own row's ratio (moe_layer_s), the reference rows not counted as observations."""

from __future__ import annotations


import pytest

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from tests.measured_variants import layer_variants, moe_layer_s


def test_layer_rows_are_ratios_to_alltoall_bf16(calibrate_script):
    assert not [o for o in calibrate_script.n_observations(include_out_of_fit=True) if o.group in ("N38", "N39") and o.why]
    obs = {(o.group, o.label): o for o in calibrate_script.n_observations() if o.group in ("N38", "N39")}
    rows = layer_variants()
    assert len(obs) == len(rows) - 2  # every row but each proxy's reference
    for v in rows:
        d, p = v.kwargs["dispatcher"], v.kwargs["precision"]
        if (d, p) == calibrate_script.LAYER_REF:
            assert not any(g == v.group and lab.startswith(f"MoE layer {v.label} /") for g, lab in obs)
            continue
        ref = next(r for r in rows if r.group == v.group
                   and (r.kwargs["dispatcher"], r.kwargs["precision"]) == calibrate_script.LAYER_REF)
        o = obs[(v.group, f"MoE layer {v.label} / {ref.label}")]
        assert o.measured == pytest.approx(ref.step_s / v.step_s)
        assert o.predict(DEFAULT_CALIBRATION) == pytest.approx(
            moe_layer_s(v.group, "alltoall", "bf16") / moe_layer_s(v.group, d, p), rel=1e-12)
