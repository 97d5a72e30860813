"""docs/calibration.md tables each measured row once: the Nemotron-3 rows in the catalogued models' table (the Nemotron
section keeps its check's prose and the peak memory), not in a second table of their own."""

from __future__ import annotations

from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.models import load_model
from tests.reference_runs import out_of_fit_runs


def test_nemotron_rows_are_tabled_once(calibrate_script):
    nemotron = calibrate_script._nemotron(DEFAULT_CALIBRATION)
    assert not [line for line in nemotron if line.startswith("|")]
    catalog = "\n".join(calibrate_script._catalog(DEFAULT_CALIBRATION))
    runs = [r for r in out_of_fit_runs() if "mamba2" in load_model(r["model"]).features]
    assert runs
    for r in runs:
        assert f"| {r['model']} {r['system']} {r['gpus']} {r['precision']} TP{r['tp']} EP{r['ep']} ({r['release']}) |" \
            in catalog, r["model"]


def test_n06_rows_read_one_recipe_in_both_sections(calibrate_script):
    """DeepSeek-V4's N06 rows (the Pro row's VPP 4 layout and core_attn offload included) take their recipe from
    tests/data/new_model_rows.csv alone: "New models" and "Catalogued models' rows" give each row one ratio."""
    from tests import measured_variants
    from tests.new_model_rows import estimate_kwargs, ratio, rows

    assert not hasattr(measured_variants, "V4_PRO_LAYOUT")
    cat = {o.label: o for o in calibrate_script.catalog_observations(include_out_of_fit=True) if o.group == "N06"}
    n06 = [r for r in rows() if r["group"] == "N06" and r["model"]]
    assert len(n06) == len(cat) == 3
    for r in n06:
        o = cat[r["label"]]
        assert o.predict(DEFAULT_CALIBRATION) / o.measured == ratio(r)
    pro = next(r for r in n06 if r["model"] == "deepseek-v4-pro")
    kw = estimate_kwargs(pro)
    assert (kw["vpp"], kw["pipeline_layout"], kw["offload_modules"]) == (4, "Et*4|(tttt|)*14tmL", "core_attn")


def test_catalog_table_gives_each_row_its_own_reason_from_one_build(calibrate_script, count_builds):
    """The catalogued rows' table reads each observation's reason (Obs.why) and builds the rows once (the G06 note
    reads the same build)."""
    calls = count_builds("catalog_variants", calibrate_script)
    text = "\n".join(calibrate_script._catalog(DEFAULT_CALIBRATION))
    assert len(calls) == 1
    obs = calibrate_script.catalog_observations(include_out_of_fit=True)
    assert any(o.why for o in obs) and any(not o.why for o in obs)
    for o in obs:
        assert f"| {o.group} | {o.label} |" in text
        row = next(line for line in text.splitlines() if line.startswith(f"| {o.group} | {o.label} |"))
        assert row.endswith(f"| no: {o.why} |" if o.why else "| yes |"), row
