"""The 'without CP' rows' candidate layouts (tests/nocp_rows.py) are pruned at the fit's source values (tests/fit_prior.py,
benchmarks/calibrate.py PRIOR), not at the shipped constants the fit itself wrote: the fit's inputs do not depend on its
output."""

from __future__ import annotations

import math

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from tests import nocp_rows as module
from tests.fit_prior import PRIOR_OVERRIDES, prior_calibration


def test_every_fitted_constant_has_a_source_value(calibrate_script):
    """Each constant the fit moves (calibrate.FITTED) starts at a value from its source (PRIOR_OVERRIDES), not at the
    shipped value the previous fit wrote; and the table names nothing the fit does not move."""
    missing = [(name, key) for name, key in calibrate_script.FITTED
               if name not in PRIOR_OVERRIDES or (key is not None and key not in PRIOR_OVERRIDES[name])]
    assert not missing, missing
    assert set(PRIOR_OVERRIDES) == {name for name, _ in calibrate_script.FITTED}
    prior = prior_calibration()
    for name, key in calibrate_script.FITTED:
        value = getattr(prior, name)
        value = value[key] if key else value
        assert math.isfinite(value) and value > 0, (name, key)
        assert value == (PRIOR_OVERRIDES[name][key] if key else PRIOR_OVERRIDES[name])
    assert calibrate_script.PRIOR.as_dict() == prior.as_dict()
    assert prior.as_dict() != DEFAULT_CALIBRATION.as_dict()  # the source values are not the fitted ones


def test_candidates_are_searched_at_the_prior(monkeypatch):
    prior = prior_calibration()
    seen = []
    real = module.search_cp1

    def spy(v, recompute, gpus=None, cal=None):
        seen.append(cal)
        return real(v, recompute, gpus, cal)

    monkeypatch.setattr(module, "search_cp1", spy)
    row = next(r for r in module.nocp_rows() if r.group == "N40" and r.seq_len == 262144)
    assert module.candidates(row.cp_row)
    assert seen and all(c is prior for c in seen)


def test_candidates_order_and_tokens_are_the_priors():
    prior = prior_calibration()
    for row in module.nocp_rows():
        tokens = [api.estimate(row.model, cal=prior, **kw)["tokens_per_s_per_gpu"] for kw in row.candidates]
        assert tokens == sorted(tokens, reverse=True)
        assert tokens == pytest.approx(list(row.extra["tokens_prior"]), rel=1e-9)


def test_candidates_build_the_planners_own_runs(monkeypatch):
    """Each candidate's keywords (run_kwargs: the plan's strategy) build exactly the run the planner found, every knob
    included, so a default of api.build_config that differs from the search's (Megatron-FSDP, optimizer offload, CUDA
    graphs, the TE release ...) cannot slip in; its estimate at the prior is the planner's own, time and memory."""
    prior = prior_calibration()
    found = []
    real = api.search_plans

    def spy(*args, **kwargs):
        rep = real(*args, **kwargs)
        found.extend(rep.plans)
        return rep

    monkeypatch.setattr(api, "search_plans", spy)
    checked = 0
    for row in module.nocp_rows():
        for rc in module.NOCP_RECOMPUTE:
            found.clear()
            cands = module.search_cp1(row.cp_row, rc, cal=prior)
            assert len(cands) == len(found)
            for kw, tokens, peak_bytes in cands:
                cfg, gpu = api.build_config(row.model, **kw)
                plan = next((p for p in found if p.config == cfg), None)
                assert plan is not None, f"{row.group} {row.label}: {module.layout_text(kw)}: not a run the planner found"
                assert gpu == plan.gpu
                est = api.estimate_run(row.model, cal=prior, **kw)
                assert est.time.tokens_per_s_per_gpu == pytest.approx(tokens, rel=1e-9)
                assert est.memory.total_bytes == pytest.approx(peak_bytes, rel=1e-9)
                assert tokens == plan.estimate.time.tokens_per_s_per_gpu
                assert peak_bytes == plan.estimate.memory.total_bytes
                checked += 1
    assert checked >= sum(len(r.candidates) for r in module.nocp_rows())
