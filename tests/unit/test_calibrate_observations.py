"""benchmarks/calibrate.py: every observation the fit uses predicts its OWN measured quantity. A closure over
loop variables (Python binds them late) made G09's prediction the MB01 pair's until 2026-12-03, so the fit
saw MB01 twice and never G09; these tests fail on any such mix-up."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def calibrate_script():
    spec = importlib.util.spec_from_file_location("moeplan_calibrate_script", ROOT / "benchmarks" / "calibrate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script is executed
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_graphs_pair_predicts_the_graphs_pair(calibrate_script):
    from tests.measured_variants import variants

    obs = {o.group: o for o in calibrate_script.observations() if o.group in ("G09", "MB01")}
    a, b = [v for v in variants() if v.group == "G09"]
    own = (calibrate_script._built(b.model, b.kwargs)(DEFAULT_CALIBRATION).tflops_per_gpu
           / calibrate_script._built(a.model, a.kwargs)(DEFAULT_CALIBRATION).tflops_per_gpu)
    assert obs["G09"].measured == pytest.approx(b.measured() / a.measured())
    assert obs["G09"].predict(DEFAULT_CALIBRATION) == pytest.approx(own, rel=1e-12)
    assert obs["G09"].predict(DEFAULT_CALIBRATION) != pytest.approx(obs["MB01"].predict(DEFAULT_CALIBRATION), rel=1e-6)


def test_ratio_observations_do_not_share_a_prediction(calibrate_script):
    """The ratio observations (G05 knob steps, G09, MB01) compare distinct pairs of runs; two equal predictions
    mean two closures read the same pair. (Absolute ones may repeat: a G11 row is a published run.)"""
    obs = [o for o in calibrate_script.observations() if o.group in ("G05", "G09", "MB01")]
    assert {o.group for o in obs} == {"G05", "G09", "MB01"}
    seen: dict[float, str] = {}
    for o in obs:
        p = round(o.predict(DEFAULT_CALIBRATION), 9)
        assert p not in seen, f"{o.group} {o.label} predicts what {seen[p]} does ({p})"
        seen[p] = f"{o.group} {o.label}"


def test_shared_group_observations_predict_their_own_rows(calibrate_script):
    """The N-group observations (n_observations): each predicts its own row (no late-bound closure), ratios over
    their sub-group's first row, tokens/s rows with the source's FLOP count."""
    from moeplan import api
    from tests.measured_variants import n_variants

    obs = [o for o in calibrate_script.n_observations(include_out_of_fit=True)]
    by = {(o.group, o.label): o for o in obs}
    assert len(by) == len(obs)  # one observation per row
    v = next(v for v in n_variants() if v.group == "N37" and v.label == "FP8 blockwise, forced")
    assert by[("N37", v.label)].predict(DEFAULT_CALIBRATION) == pytest.approx(
        api.estimate(v.model, **v.kwargs)["tflops_per_gpu"])
    n27 = [v for v in n_variants() if v.group == "N27" and v.extra["sub"] == "after"]
    ratio = by[("N27", f"{n27[1].label} / {n27[0].label}")]
    est = [api.estimate(x.model, **x.kwargs)["tflops_per_gpu"] for x in n27]
    assert ratio.predict(DEFAULT_CALIBRATION) == pytest.approx(est[1] / est[0])
    assert ratio.measured == pytest.approx(n27[1].tflops / n27[0].tflops)
    n40 = next(v for v in n_variants() if v.group == "N40")
    o = by[("N40", n40.label)]
    assert o.measured == pytest.approx(n40.tflops * 1e12 / n40.extra["fpt"])
    fitted = {o.group for o in calibrate_script.n_observations()}
    assert not fitted & set(calibrate_script.N_OUT_OF_FIT)


@pytest.mark.xfail(strict=True, reason="issue 31's target: CV RMS <= 0.10 over >= 120 observations; the fit has 42 "
                   "observations at CV 0.151; the EFA campaigns (N31-N33), the one-layer benchmarks (N38 / N39) and "
                   "the 2024 H100 sweep (N41) would each move global constants to absorb a cost the model lacks "
                   "(docs/calibration.md, 'Shared groups outside the fit'), and so would the catalogued models' 9 tuned "
                   "rows (tests/measured_variants.CATALOG_ROWS_IN_FIT: 51 observations at CV 0.124, but gemm_epilogue_s "
                   "past its physical range; known gaps); their other rows are functional runs or miss by a named effect")
def test_fit_targets(calibrate_script):
    n = len(calibrate_script.observations())
    print(f"\n{n} observations, CV {DEFAULT_CALIBRATION.error_band_log:.3f}")
    assert n >= 120 and DEFAULT_CALIBRATION.error_band_log <= 0.10
