"""The planner's dispatcher advice reads the expert-TP x EP group, not EP alone: at EP 1 x expert TP > 1 every
dispatcher moves tokens (the alltoall dispatcher's expert-TP all-gather, the allgather dispatcher's tp_ep gather,
the flex backends' tp_ep group: moeplan.engine.timing.moe.ep_kernels), so the candidates, the estimate's hint, the
plan's dispatcher reason, the check's dispatcher finding and the recipe distance compare dispatchers there too.
docs/commands/check.md lists the `dispatcher-nvl72` warning, which reads the same group."""

from __future__ import annotations

from pathlib import Path

import pytest

from moeplan import api
from moeplan.engine.estimate import evaluate
from moeplan.lint.rules import lint
from moeplan.plan import advice
from moeplan.plan.advice import dispatcher_candidates, explain_plan, recipe_distance
from moeplan.plan.hints import HINT_GAIN, knob_hints

GIB = 2**30
MODEL = "qwen3-30b-a3b"


def _cfg(etp: int, dispatcher: str = "alltoall", gpu: str = "h100"):
    # EP 1 x expert TP (and TP) 8 on 16 GPUs: alltoall all-gathers 7 x top-8 rows per token, HybridEP sends 8
    return api.build_config(MODEL, gpu=gpu, gpus=16, seq_len=8192, gbs=128, tp=etp, ep=1, etp=etp,
                            dispatcher=dispatcher)


def test_candidates_read_the_group():
    cfg, gpu = _cfg(8)
    assert dispatcher_candidates(cfg, gpu) == ["deepep", "hybridep", "alltoall"]
    cfg, gpu = _cfg(8, gpu="gb200")
    assert dispatcher_candidates(cfg, gpu) == ["hybridep", "alltoall"]
    cfg, gpu = _cfg(1)
    assert dispatcher_candidates(cfg, gpu) == ["alltoall"]


def test_estimate_hints_a_dispatcher_at_ep1_with_expert_tp():
    cfg, gpu = _cfg(8)
    (hint,) = [h for h in knob_hints(evaluate(cfg, gpu), ["dispatcher", "ep_overlap"]) if h.field == "dispatcher"]
    assert hint.value in ("deepep", "hybridep") and hint.gain >= HINT_GAIN
    # the EP A2A overlap needs EP > 1 (transformer_config.py): not tried at EP 1
    assert all(h.field != "ep_overlap" for h in knob_hints(evaluate(cfg, gpu), ["ep_overlap"]))


def test_plan_reason_compares_dispatchers_at_ep1_with_expert_tp():
    cfg, gpu = _cfg(8)
    est = evaluate(cfg, gpu)
    reasons = {r.topic: r for r in explain_plan(cfg, gpu, est, 200 * GIB, cfg.batch.gbs)}
    reason = reasons["dispatcher"]
    assert reason.text.startswith("alltoall: EP 1 x expert TP 8 spans 1 NVLink domain(s) of 8;")
    assert set(reason.numbers["alternatives"]) == {"deepep", "hybridep"}
    cfg1, gpu = _cfg(1)
    assert "dispatcher" not in {r.topic for r in explain_plan(cfg1, gpu, evaluate(cfg1, gpu), 200 * GIB, 128)}


def test_check_warns_of_a_slower_dispatcher_at_ep1_with_expert_tp():
    cfg, gpu = _cfg(8)
    (finding,) = [f for f in lint(cfg, gpu) if f.rule == "dispatcher"]
    assert finding.message.startswith("alltoall with EP 1 x expert TP 8 over 1 NVLink domain(s): ")
    assert finding.numbers["best"] in ("deepep", "hybridep") and finding.numbers["gain"] > 0.1


@pytest.mark.parametrize("etp, want", [(8, 1.0), (1, 0.0)])
def test_recipe_distance_counts_another_dispatcher_where_tokens_move(monkeypatch, etp, want):
    cfg, gpu = _cfg(etp)
    par = cfg.parallel
    row = {"model": cfg.model.name, "gpu": gpu.name, "seq_len": 8192, "tp": par.tp, "pp": par.pp, "vpp": par.vpp,
           "ep": par.ep, "etp": par.etp, "mbs": 1, "cp": par.cp, "gpus": par.gpus, "dispatcher": "deepep"}
    monkeypatch.setattr(advice, "measured_layouts", lambda: (row,))
    d, _ = recipe_distance(cfg, gpu)
    assert d == pytest.approx(want)


def test_check_page_lists_the_nvl72_dispatcher_warning():
    """docs/commands/check.md's rule table has a row for `dispatcher-nvl72` with the severity lint gives it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "commands" / "check.md").read_text(encoding="utf-8")
    rows = [ln.split("|") for ln in page.splitlines() if ln.startswith("| `dispatcher-nvl72` |")]
    assert len(rows) == 1
    cfg, gpu = _cfg(8, dispatcher="deepep", gpu="gb200")
    (finding,) = [f for f in lint(cfg, gpu) if f.rule == "dispatcher-nvl72"]
    assert rows[0][2].strip() == finding.severity == "warning"
