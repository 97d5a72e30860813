"""The 'without CP' rows' candidate layouts (tests/nocp_rows.py) are pruned at the fit's source values (benchmarks/
calibrate.py PRIOR), not at the shipped constants the fit itself wrote: the fit's inputs do not depend on its output."""

from __future__ import annotations

import pytest

from moeplan import api
from tests import nocp_rows as module


def test_candidates_are_searched_at_the_prior(monkeypatch, calibrate_script):
    prior = module.prior_calibration()
    assert prior.as_dict() == calibrate_script.PRIOR.as_dict()
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
    prior = module.prior_calibration()
    for row in module.nocp_rows():
        tokens = [api.estimate(row.model, cal=prior, **kw)["tokens_per_s_per_gpu"] for kw in row.candidates]
        assert tokens == sorted(tokens, reverse=True)
        assert tokens == pytest.approx(list(row.extra["tokens_prior"]), rel=1e-9)
