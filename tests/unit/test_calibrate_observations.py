"""benchmarks/calibrate.py: every observation the fit uses predicts its OWN measured quantity. A closure over
loop variables (Python binds them late) made G09's prediction the MB01 pair's until 2026-12-03, so the fit
saw MB01 twice and never G09; these tests fail on any such mix-up."""

from __future__ import annotations


import pytest

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION


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
    from tests.measured_variants import n_variants, reference_row, source_tokens

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
    n40 = [v for v in n_variants() if v.group == "N40"]  # tokens/s within the sweep, to its shortest point
    assert reference_row("N40").label == n40[0].label == "8K TP1 PP1 CP1" and n40[0].kwargs["seq_len"] == 8192
    o = by[("N40", f"{n40[-1].label} / {n40[0].label}")]
    assert o.measured == pytest.approx(n40[-1].tflops / n40[-1].extra["fpt"] / (n40[0].tflops / n40[0].extra["fpt"]))
    # worked by hand: NeMo's llama3 count at 8K, 32 x 4096^2 x (12 + 12 x 8 / 32 + 18 x 14336 / 4096 + 12 x 8192 / 4096
    # + 6 x 128256 / (32 x 4096)) = 57,912,852,480 FLOPs per token; the source's 1,671 TFLOP/s over it, 28,854 tokens/s
    assert n40[0].tflops == 1671.0 and n40[0].extra["fpt"] == 57_912_852_480
    assert source_tokens(n40[0]) == pytest.approx(28_854, abs=1)
    est = [api.estimate(x.model, **x.kwargs)["tokens_per_s_per_gpu"] for x in (n40[0], n40[-1])]
    assert o.predict(DEFAULT_CALIBRATION) == pytest.approx(est[1] / est[0])
    fitted = calibrate_script.n_observations()
    assert not [o for o in fitted if o.why]  # a row with a reason to be out (Obs.why) is not fitted
    assert {(o.group, o.label) for o in obs if not o.why} == {(o.group, o.label) for o in fitted}


def test_ratio_levels_are_free(calibrate_script):
    """A sub-group's ratio observations enter with its level free (level_contrasts): n rows (the reference and n - 1
    ratios) give n - 1 residuals whose squares sum to the rows' spread about their mean, the same whichever row is
    the reference; a pair's ratio counts half its square (two runs' errors); absolute observations pass through."""
    import math

    import numpy as np

    Obs = calibrate_script.Obs

    def obs(level):
        return Obs("g", "row", 1.0, lambda c: 1.0, "m", level)

    rows = [obs("a"), obs(None), obs("a"), obs("a"), obs("b")]
    r = np.array([0.3, 0.5, -0.1, 0.2, 0.4])  # sub-group a: rows 0 (reference), 0.3, -0.1, 0.2
    h = calibrate_script.level_contrasts(rows, r)
    a = np.array([0.0, 0.3, -0.1, 0.2])
    assert sum(h[[0, 2, 3]] ** 2) == pytest.approx(float(np.sum((a - a.mean()) ** 2)))
    # the same sub-group measured against its second row as the reference: the same spread
    b = a - a[1]
    hb = calibrate_script.level_contrasts([obs("a")] * 3, np.array([b[0], b[2], b[3]]))
    assert sum(hb ** 2) == pytest.approx(sum(h[[0, 2, 3]] ** 2))
    assert h[1] == 0.5 and h[4] == pytest.approx(0.4 / math.sqrt(2))
    assert np.allclose(calibrate_script.level_ratios(rows, h), r)
    # the report shows each ratio row against its sub-group's mean
    shown = calibrate_script.level_centered(rows, r)
    assert shown[[0, 2, 3]] == pytest.approx(a[1:] - a.mean()) and shown[1] == 0.5


def test_every_ratio_observation_names_its_sub_group(calibrate_script):
    """Observations over a reference row carry their sub-group (level); absolute ones do not; a level never spans
    groups (a group held out takes its levels with it)."""
    obs = calibrate_script.observations()
    for o in obs:
        assert (o.level is not None) == (" / " in o.label or o.group in ("G05", "G09", "MB01")), o.label
    spans = {}
    for o in obs:
        if o.level is not None:
            spans.setdefault(o.level, set()).add(o.group)
    assert all(len(g) == 1 for g in spans.values())


def test_ratio_rows_read_their_sub_groups_first_row_from_one_build(calibrate_script, count_builds):
    """n_observations builds the N rows once (not once more per ratio row through reference_row), and each ratio is
    over its sub-group's first row (tests/measured_variants.reference_row)."""
    from tests import measured_variants
    from tests.measured_variants import n_variants, reference_row

    calls = count_builds("n_variants", calibrate_script, measured_variants)  # and reference_row's build
    obs = calibrate_script.n_observations(include_out_of_fit=True)
    assert len(calls) == 1
    subs = {v.extra["sub"] for v in n_variants() if v.extra["obs"] == "ratio"}
    refs = {o.level.split(":", 1)[1]: o.label.split(" / ")[1] for o in obs
            if o.level and " / " in o.label and o.level.split(":", 1)[1] in subs}
    assert len(refs) == len(subs)
    assert all(refs[sub] == reference_row(sub).label for sub in refs)


def test_fit_targets(calibrate_script):
    """Issue 31's target: CV RMS <= 0.10 over >= 120 observations (a strict xfail at CV 0.104 until the host
    timeline, engine.timing.host: max(host, GPU) per MoE layer and micro-batch, brought it to 0.093 over 127; 0.091 over 129 with the GEMM epilogue overlap, timing.gemm.gemm_call_s)."""
    n = len(calibrate_script.observations())
    print(f"\n{n} observations, CV {DEFAULT_CALIBRATION.error_band_log:.3f}")
    assert n >= 120 and DEFAULT_CALIBRATION.error_band_log <= 0.10
