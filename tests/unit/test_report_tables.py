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
