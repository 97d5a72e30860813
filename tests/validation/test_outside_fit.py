"""Estimates of models with features no fitted run has (models.spec.MODEL_FEATURES): they say so, and their band
below the estimate covers every measured run of such models (tests/data/out_of_fit_runs.csv and the gpt-oss rows
of tests/data/bridge_perf_runs.csv; docs/calibration.md, 'Outside the fit')."""

from __future__ import annotations

import math

import pytest

from moeplan import api
from moeplan.cli import main
from moeplan.models import load_model
from moeplan.models.spec import MODEL_FEATURES
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

from ..scripts import loaded_script
from ..measured_variants import tokens_per_gpu_per_step
from ..reference_runs import bridge_runs, estimate_kwargs, label, out_of_fit_runs

CAL = DEFAULT_CALIBRATION


def _outside(model: str) -> list[str]:
    return [f for f in MODEL_FEATURES if f in load_model(model).features and f in CAL.out_of_fit_shortfall_log]


EVIDENCE = [r for r in out_of_fit_runs() + bridge_runs() if _outside(r["model"])]  # runs with a known layout


def test_the_evidence_is_the_runs_it_names():
    """Three Qwen3-Next runs (PR #3168 on GB200 / GB300, ModelZoo on H100) and the four GLM-5.2 card runs. (The
    Nemotron-3 and DeepSeek-V4 tuned rows are in the fit since issue 31, so their features and gpt-oss's sliding
    window, sinks and clamped GLU, which DeepSeek-V4-Flash has too, are fitted features.)"""
    assert sorted(label(r) for r in EVIDENCE) == sorted(
        ["qwen3-next-80b-a3b-gb200-64-4096", "qwen3-next-80b-a3b-gb300-64-4096", "qwen3-next-80b-a3b-H100-128-4096",
         "glm-5.2-h100-608-200000", "glm-5.2-gb200-192-131072", "glm-5.2-h100-352-2048", "glm-5.2-gb200-192-4096"])


def _band_param(run):
    """A run whose named gap puts it above the fit's band (faster than the estimate's upper end) is a strict xfail."""
    above = (run.get("gap") or "").startswith("above the band")
    marks = [pytest.mark.xfail(strict=True, reason=f"named gap: {run['gap']}")] if above else []
    return pytest.param(run, marks=marks, id=label(run))


@pytest.mark.parametrize("run", [_band_param(r) for r in EVIDENCE])
def test_every_measured_run_outside_the_fit_is_inside_its_band(run):
    est = api.estimate(run["model"], **estimate_kwargs(run))
    tokens = float(run.get("tokens_per_s_per_gpu") or  # published tokens/s, else from the published step time
                   tokens_per_gpu_per_step(run) / float(run["measured_step_time_s"]))
    lo, hi = est["tokens_per_s_range"]
    assert lo <= tokens <= hi, (lo, tokens, hi)
    assert est["outside_fit"] == _outside(run["model"]) and est["outside_fit_note"].startswith("outside the fit")
    assert est["error_band_below"] == pytest.approx(1 - lo / est["tokens_per_s_per_gpu"])


# features whose measured runs all lie inside the fit's band: outside the fit, but their band stays the fit's (none
# since issue 31: DeepSeek-V4's compressed attention and mHC, which were, are fitted features now)
WITHIN_THE_FITS_BAND: set[str] = set()


def test_the_features_band_is_wider_than_the_fits_where_a_run_needs_it():
    """The evidence is why the band widens: for each feature some measured run lies below the fit's band; where
    none does, the band stays the fit's (timing.step: the wider of the two)."""
    for feature, shortfall in CAL.out_of_fit_shortfall_log.items():
        if feature in WITHIN_THE_FITS_BAND:
            assert shortfall <= CAL.error_band_log, feature
        else:
            assert shortfall > CAL.error_band_log, feature


def test_a_model_the_fit_covers_keeps_the_fits_band():
    est = api.estimate("deepseek-v3", gpus=256, seq_len=4096, gbs=1024, pp=8, ep=32)
    b = CAL.error_band_log
    assert est["outside_fit"] == [] and est["outside_fit_note"] is None
    assert est["tflops_range"] == pytest.approx([est["tflops_per_gpu"] * math.exp(-b), est["tflops_per_gpu"] * math.exp(b)])


def test_plans_and_the_cli_say_so(capsys):
    r = api.plan("qwen3-next-80b-a3b", gpu="gb200", gpus=32, seq_len=8192, gbs=256, top=2)
    assert all(p["outside_fit"] == ["gated_deltanet", "gated_attention"] for p in r["plans"])
    note = [n for n in r["notes"] if n.startswith("outside the fit")]
    lo, hi = r["plans"][0]["tflops_range"]
    assert len(note) == 1 and f"{lo:,.0f}-{hi:,.0f} TFLOP/s" in note[0] and "Gated DeltaNet" in note[0]
    assert hi / r["plans"][0]["tflops_per_gpu"] == pytest.approx(math.exp(CAL.error_band_log))
    assert main(["estimate", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "32", "--seq-len", "8k", "--gbs", "256",
                 "--ep", "32"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: outside the fit: no fitted run has Gated DeltaNet (linear attention) layers or an attention output gate" in out


def test_the_shipped_bands_are_the_evidence_at_the_shipped_constants():
    """calibration.yaml's out_of_fit_shortfall_log is what benchmarks/calibrate.py computes from the evidence at the
    shipped constants and from the fitted runs' features (none of the fitted models has any feature listed)."""
    with loaded_script("benchmarks/calibrate.py", "moeplan_calibrate_bands") as module:
        fitted = module.fit_features(module.observations())
        evidence = module.out_of_fit_evidence(CAL, fitted)
        bands = module.out_of_fit_bands(evidence)
        unmeasured = module.unmeasured_features(evidence, fitted)
    assert not fitted & set(CAL.out_of_fit_shortfall_log) and unmeasured == []
    assert bands == pytest.approx(CAL.out_of_fit_shortfall_log, abs=2e-4)
    # the G15 card's points count, against the planner's fastest plan at each CP size
    assert sum(e.unit == "TFLOP/s/GPU" for e in evidence) == 3


def test_a_profile_fitted_on_such_a_model_takes_it_inside_its_fit(tmp_path):
    """A `moeplan calibrate` profile records its logged models' features; its estimates of models with them carry
    no outside-the-fit band (old profiles without the key: none covered). Unknown names are refused."""
    from moeplan.calibrate.fit import load_profile
    from moeplan.base.errors import MoeplanError

    kw = dict(gpu="gb200", gpus=32, seq_len=8192, gbs=256, ep=32)
    for covered, outside in (([], ["gated_deltanet", "gated_attention"]), (["gated_deltanet"], ["gated_attention"]),
                             (["gated_deltanet", "gated_attention"], [])):
        path = tmp_path / "p.yaml"
        path.write_text(f"gpu: GB200\nconstants: {{}}\ncovered_features: {covered}\n")
        est = api.estimate("qwen3-next-80b-a3b", cal=load_profile(path).calibration, **kw)
        assert est["outside_fit"] == outside
    assert api.estimate("qwen3-next-80b-a3b", cal=load_profile(path).calibration, **kw)["outside_fit_note"] is None
    path.write_text("constants: {}\ncovered_features: [mamba]\n")
    with pytest.raises(MoeplanError, match="covered_features must be a list of gated_deltanet"):
        load_profile(path)


def test_a_users_calibration_fit_leaves_the_bands_alone():
    from moeplan.calibrate.fit import constant_names

    names = constant_names()
    assert not [n for n in names if n.split(".")[0] in ("error_band_log", "out_of_fit_shortfall_log")]


def test_the_html_report_shows_the_band_and_the_note(tmp_path, capsys):
    """`moeplan report` carries the search's notes (this one: outside the fit) and plan 1's band, as the CLI prints."""
    out = tmp_path / "r.html"
    assert main(["report", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "32", "--seq-len", "8k", "--gbs", "256",
                 "--top", "2", "--html", str(out), "--json"]) == 0
    capsys.readouterr()
    html = out.read_text()
    plan = api.plan("qwen3-next-80b-a3b", gpu="gb200", gpus=32, seq_len=8192, gbs=256, top=2)
    lo, hi = plan["plans"][0]["tflops_range"]
    assert f"({lo:,.0f}-{hi:,.0f})" in html
    assert '<ul id="notes" class="note">' in html and "<li>outside the fit: no fitted run has Gated DeltaNet" in html


def test_the_sweep_shows_each_lengths_band_and_the_note_once(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["sweep", "qwen3-next-80b-a3b", "--gpu", "gb200", "--gpus", "32", "--seq-len", "8k,32k",
                 "--gbs-tokens", "2m"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    rows = api.sweep("qwen3-next-80b-a3b", gpu="gb200", gpus=32, seq_lens=[8192, 32768], gbs_tokens=2 * 2**20)
    for r in rows:
        lo, hi = r["tflops_range"]
        assert f"{lo:,.0f}-{hi:,.0f}" in out
    assert out.count("outside the fit") == 1 and "seq 8,192: outside the fit" in out
