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
