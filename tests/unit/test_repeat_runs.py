"""Repeats of one measured configuration are handled one way (tests/measured_variants.add_run): one row whose measured
value is its runs' geometric mean (ranking, reports), each run kept in extra["runs"] and entering the fit once
(benchmarks/calibrate.py _runs), in G11 as in the N groups."""

from __future__ import annotations

import math

import pytest

from tests.measured_variants import n_variants, variants


def test_g11_validation_repeat_is_a_second_run_of_its_row():
    on = [v for v in variants() if v.group == "G11" and v.label == "hybridep overlap=yes"]
    assert len(on) == 1
    (v,) = on
    assert v.extra["repeats"] == 2 and v.extra["runs"] == (("run 1", 286.208), ("run 2", 287.305))
    assert v.tflops == pytest.approx(math.sqrt(286.208 * 287.305))
    assert v.step_s == pytest.approx(math.sqrt(21.0725 * 20.992))


def test_n_group_repeats_keep_their_tags():
    (v,) = [v for v in n_variants() if v.group == "N25" and v.label == "full recompute"]
    assert [t for t, _ in v.extra["runs"]] == ["N25", "N26"]


def test_each_run_enters_the_fit_once(calibrate_script):
    obs = [o for o in calibrate_script.observations() if o.group == "G11"]
    labels = [o.label for o in obs]
    assert "hybridep overlap=yes [run 1]" in labels and "hybridep overlap=yes [run 2]" in labels
    assert not [lab for lab in labels if "tuned" in lab]  # its reason to be out: tests/fit_exclusions.py
    assert len(labels) == len(set(labels)) == 4
