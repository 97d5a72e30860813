"""Result figures are generated, not frozen in prose: the reasons that keep the 'without CP' rows and G06 out of the fit
quote no moeplan result (a ratio or share that moves with the constants), and the known gaps' figures for them are
computed from the rows at the constants the report is written with."""

from __future__ import annotations

import re

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from tests.fit_exclusions import G06_HOST_BOUND, PIPELINE_ONLY, RECOMPUTED

# a percentage or a factor ("91-93%", "1.4-1.6x", "about a quarter")
FIGURE = re.compile(r"\d+(\.\d+)?(-\d+(\.\d+)?)?\s?(%|x\b)|a quarter|\d+(\.\d+)? s where")


def test_reasons_quote_no_result_figure():
    for why in (PIPELINE_ONLY, RECOMPUTED, G06_HOST_BOUND):
        assert not FIGURE.search(why), FIGURE.search(why)


def test_known_gaps_figures_are_generated(calibrate_script):
    figures = calibrate_script._nocp_figures(DEFAULT_CALIBRATION)
    for name, text in figures.items():
        assert "{" + name + "}" in calibrate_script.KNOWN_GAPS
        assert text and text != "-", name
    share = [float(x) for x in figures["nocp_recomputed_share"].rstrip("%").split("-")]
    assert all(85 <= x <= 98 for x in share)  # tests/validation/test_nocp_rows.py bounds the same rows
    times = [float(x) for x in figures["nocp_pipeline_x"].rstrip("x").split("-")]
    assert all(1.3 <= x <= 1.7 for x in times)
    note = calibrate_script._g06_note(DEFAULT_CALIBRATION)
    assert note.startswith("G06 (recompute none): measured 0.457 s per step, moeplan ")
