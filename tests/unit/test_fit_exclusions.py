"""One mechanism keeps a row out of the fit: its reason in one field (``extra["why"]`` of every row, Obs.why of every
observation), the reasons written by hand in one table (tests/fit_exclusions.OUT_OF_FIT)."""

from __future__ import annotations

from tests.fit_exclusions import OUT_OF_FIT, why_out_of_fit
from tests.measured_variants import catalog_variants, layer_variants, n_variants, variants
from tests.nocp_rows import nocp_rows


def test_the_calibration_script_has_no_other_exclusion_table(calibrate_script):
    """The group table, the row-fragment table and the without-CP table are gone: the field is the one mechanism."""
    for name in ("N_OUT_OF_FIT", "ROWS_OUT_OF_FIT", "NOCP_OUT_OF_FIT", "row_out_of_fit"):
        assert not hasattr(calibrate_script, name), name
    assert all("fit" not in v.extra for v in catalog_variants())  # no second flag beside ``why``


def test_every_row_carries_its_reason_and_every_table_entry_names_a_row():
    rows = [(v.group, v.label, v.extra["why"]) for v in n_variants() + layer_variants() + catalog_variants()]
    rows += [(r.group, r.label, r.extra["why"]) for r in nocp_rows()]
    rows += [(v.group, v.label, v.extra["why"]) for v in variants()]
    for (g, frag), why in OUT_OF_FIT.items():
        hit = [lab for grp, lab, _ in rows if grp == g and frag in lab]
        assert hit, f"{g} '{frag}' names no row"
        assert all(w == why for grp, lab, w in rows if grp == g and frag in lab)
    for g, lab, why in rows:
        assert isinstance(why, str)
        if why_out_of_fit(g, lab):
            assert why == why_out_of_fit(g, lab), (g, lab)


def test_observations_are_out_exactly_where_their_row_has_a_reason(calibrate_script):
    for make in (calibrate_script.n_observations, calibrate_script.nocp_observations,
                 calibrate_script.catalog_observations):
        every, fitted = make(include_out_of_fit=True), make()
        assert [o.label for o in fitted] == [o.label for o in every if not o.why]
        assert any(o.why for o in every)
    fitted = calibrate_script.observations()
    assert not [o for o in fitted if o.why]
