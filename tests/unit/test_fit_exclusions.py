"""One mechanism keeps a row out of the fit: its reason in one field (``extra["why"]`` of every row, Obs.why of every
observation), the reasons written by hand in one table (tests/fit_exclusions.OUT_OF_FIT)."""

from __future__ import annotations

from tests.fit_exclusions import (DSV3_H100_OVERLAP, G06_HOST_BOUND, G11_TUNED, N06_DRIFT, OUT_OF_FIT, PIPELINE_ONLY,
                                  RECOMPUTED, why_out_of_fit)
from tests.conftest import REFERENCE_DIR
from tests.reference_runs import label, published_runs
from tests.measured_variants import catalog_variants, layer_variants, n_variants, variants
from tests.nocp_rows import nocp_rows

_UCCL = ["EP16 PP4 MBS4 UCCL", "EP16 PP4 MBS1 UCCL", "EP16 PP4 MBS4 overlap VPP2 UCCL", "EP32 PP2 MBS4 UCCL",
         "EP32 PP2 MBS1 UCCL"]
_G06 = ["recompute none", "recompute core_attn", "recompute mla_up_proj", "recompute mla_up_proj,mlp", "recompute moe_act",
        "recompute layernorm,moe_act"]
_N06 = "dsv4-flash-gb200-128 (pytorch 26.04)"
# the rows kept out by a reason written by hand (tests/fit_exclusions.py), written out here
HAND_OUT: dict[tuple[str, str], str] = {
    **{("N33", lab): OUT_OF_FIT[("N33", "UCCL")] for lab in _UCCL},
    ("N06", _N06): N06_DRIFT,
    **{("G06", lab): G06_HOST_BOUND for lab in _G06},
    ("N40", "256K without CP"): RECOMPUTED, ("N41", "128K without CP"): RECOMPUTED,
    **{("N41", f"{k}K without CP"): PIPELINE_ONLY for k in (256, 512, 1024)},
    ("G11", "hybridep overlap=yes tuned"): G11_TUNED,
    ("published", "deepseek-v3-H100-1024-4096"): DSV3_H100_OVERLAP,
}
# the rows kept out by their own data (tests/data/out_of_fit_runs.csv's gap); the GB200 BF16 TP 2 and B200 NVFP4
# TP 2 rows are in the fit since they came within the 25% check (2026-12-05)
DATA_OUT = [("N20", "nemotron-3-super-120b gb200 64 mxfp8 TP2 EP64 (NeMo 26.08)")]
# the observations each maker keeps out, in order (a ratio row's label is over its reference row's)
OBS_OUT: dict[str, list[tuple[str, str]]] = {
    "n_observations": [("N33", f"{u} / {n}") for u, n in zip(_UCCL, [
        "EP16 PP4 MBS4 NCCL", "EP16 PP4 MBS4 NCCL", "EP16 PP4 MBS4 overlap VPP2 NCCL", "EP32 PP2 MBS4 NCCL",
        "EP32 PP2 MBS4 NCCL"])],  # each over its sub-group's NCCL MBS 4 row
    "nocp_observations": [("N40", "256K without CP / 8K TP1 PP1 CP1")] + [
        ("N41", f"{k}K without CP") for k in (128, 256, 512, 1024)],
    "catalog_observations": DATA_OUT + [("N06", _N06)] + [("G06", f"{lab} / recompute none") for lab in _G06[1:]],
    "published_observations": [("published", "deepseek-v3-H100-1024-4096")],
}


def test_the_calibration_script_has_no_other_exclusion_table(calibrate_script):
    """The group table, the row-fragment table and the without-CP table are gone: the field is the one mechanism."""
    for name in ("N_OUT_OF_FIT", "ROWS_OUT_OF_FIT", "NOCP_OUT_OF_FIT", "row_out_of_fit"):
        assert not hasattr(calibrate_script, name), name
    assert all("fit" not in v.extra for v in catalog_variants())  # no second flag beside ``why``


def test_every_row_carries_its_reason_and_every_table_entry_names_a_row():
    rows = [(v.group, v.label, v.extra["why"]) for v in n_variants() + layer_variants() + catalog_variants()]
    rows += [(r.group, r.label, r.extra["why"]) for r in nocp_rows()]
    rows += [(v.group, v.label, v.extra["why"]) for v in variants()]
    rows += [("published", label(r), why_out_of_fit("published", label(r))) for r in published_runs(REFERENCE_DIR)]
    for (g, frag), why in OUT_OF_FIT.items():
        hit = [lab for grp, lab, _ in rows if grp == g and frag in lab]
        assert hit, f"{g} '{frag}' names no row"
        assert all(w == why for grp, lab, w in rows if grp == g and frag in lab)
    assert all(isinstance(why, str) for _, _, why in rows)
    out = {(g, lab): why for g, lab, why in rows if why}
    assert out == {**HAND_OUT, **{k: out.get(k) for k in DATA_OUT}}
    assert all(out[k] and out[k] not in OUT_OF_FIT.values() for k in DATA_OUT)  # from the row's data or a rule


def test_observations_are_out_exactly_where_their_row_has_a_reason(calibrate_script):
    for make in (calibrate_script.n_observations, calibrate_script.nocp_observations,
                 calibrate_script.catalog_observations, calibrate_script.published_observations):
        every, fitted = make(include_out_of_fit=True), make()
        out = [(o.group, o.label) for o in every if o.why]
        assert out == OBS_OUT[make.__name__], make.__name__
        assert [(o.group, o.label) for o in fitted] == [(o.group, o.label) for o in every if (o.group, o.label) not in out]
    fitted = calibrate_script.observations()
    assert not [o for o in fitted if o.why]
    labels = {(o.group, o.label) for o in fitted}
    assert not labels & {k for ks in OBS_OUT.values() for k in ks}
    g11 = [lab for g, lab in labels if g == "G11"]
    assert g11 and not [lab for lab in g11 if "tuned" in lab]  # G11's tuned row is out; its other runs are in
