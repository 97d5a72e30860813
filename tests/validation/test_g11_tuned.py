"""G11's tuned row (Qwen3-30B-A3B on 16 H100, HybridEP EP16 with EP overlap, plus HybridEP kernel tuning: 32 SMs,
combine chunks of 64 tokens, permute fusion) is kept out of the fit for that tuning (tests/fit_exclusions.G11_TUNED).
Its reason states what the tuning is worth measured; here that figure is pinned: the measured rows give it, moeplan
estimates the tuned row exactly as its untuned twin (the tuning is no knob of moeplan), and so the row reads off
against measured by the stated figure beyond the twin's own residual, which the shipped calibration's error band
holds (the twin is in the fit). Rows are printed."""

from __future__ import annotations

import re

import pytest

from moeplan import api
from tests.fit_exclusions import G11_TUNED, why_out_of_fit
from tests.measured_variants import variants

# The reason's figure is given to a tenth of a percent: it holds the measured gain to half of that
ROUNDING = 0.0005


def _stated_gain() -> float:
    """The tuning's measured gain as the reason states it ('measured 4.4% faster than the same run untuned')."""
    m = re.search(r"measured (\d+(?:\.\d+)?)% faster than the same run untuned", G11_TUNED)
    assert m, "G11's out-of-fit reason states no figure"
    return float(m.group(1)) / 100


def _rows():
    g11 = {v.label: v for v in variants() if v.group == "G11"}
    return g11["hybridep overlap=yes tuned"], g11["hybridep overlap=yes"]


def test_the_tuned_row_is_out_for_its_stated_reason_and_its_twin_is_in():
    tuned, twin = _rows()
    assert tuned.extra["why"] == G11_TUNED == why_out_of_fit("G11", tuned.label)
    assert not twin.extra["why"] and twin.extra["repeats"] == 2


def test_the_tuned_row_reads_off_by_the_stated_gain():
    """The tuning's measured gain (tuned over untuned TFLOP/s, the twin the mean of its two runs) is the figure the
    reason states, and moeplan gives both rows one estimate: they share every keyword (no knob says the tuning), so
    one estimate answers both and comparing the two rows' estimates would test nothing. What the estimate is held to
    is the shipped calibration's own figure: its error band (``tflops_range``, the fit's cross-validated error)
    holds the twin's measured TFLOP/s; with the gain checked, the tuned row then reads off by the stated gain beyond
    the twin's own residual (printed; asserting it again would only restate the two checks). A model change that
    moves G11's estimate by more than the band's margin over the twin's residual fails here."""
    stated = _stated_gain()
    tuned, twin = _rows()
    gain = tuned.tflops / twin.tflops - 1
    assert gain == pytest.approx(stated, abs=ROUNDING)
    assert tuned.kwargs == twin.kwargs
    est = api.estimate(twin.model, **twin.kwargs)
    tflops, (low, high) = est["tflops_per_gpu"], est["tflops_range"]
    off_tuned, off_twin = tflops / tuned.tflops, tflops / twin.tflops
    print(f"G11 tuned: measured {tuned.tflops:.1f}, untuned {twin.tflops:.1f} TFLOP/s/GPU (+{gain:.1%}, stated "
          f"+{stated:.1%}); moeplan {tflops:.1f} (band {low:.1f} .. {high:.1f}): {off_tuned - 1:+.1%} against "
          f"{off_twin - 1:+.1%}")
    assert low <= twin.tflops <= high
