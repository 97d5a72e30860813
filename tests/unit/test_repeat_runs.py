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


def _merged(*runs: tuple[float, float | None]):
    from tests.measured_variants import Variant, add_run

    out: list = []
    seen: dict = {}
    for i, (tflops, step_s) in enumerate(runs):
        add_run(out, seen, Variant("X", "row", "qwen3-30b-a3b", {}, tflops, step_s), f"t{i}")
    assert len(out) == 1
    return out[0]


@pytest.mark.parametrize("runs, step_s", [
    (((300.0, 20.0), (310.0, None)), 20.0),  # the second run gives no step time: the first's
    (((300.0, None), (310.0, 21.0)), 21.0),  # the first gives none: the second's
    (((300.0, 20.0), (310.0, None), (305.0, 22.0)), math.sqrt(20.0 * 22.0)),  # the two that give one
    (((300.0, 20.0), (310.0, 22.0)), math.sqrt(20.0 * 22.0)),
    (((300.0, None), (310.0, None)), None),  # no run gives one
])
def test_a_repeat_step_time_is_the_mean_of_the_runs_that_give_one(runs, step_s):
    """A repeated row's step time is the geometric mean (as its TFLOP/s) of the runs that give one; a run without
    a step time does not blank the whole row's."""
    v = _merged(*runs)
    assert v.tflops == pytest.approx(math.prod(t for t, _ in runs) ** (1 / len(runs)))
    assert v.step_s == (None if step_s is None else pytest.approx(step_s))
    assert v.extra["steps"] == tuple(s for _, s in runs if s is not None)
