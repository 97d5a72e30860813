"""The dispatcher reason: each alternative is costed as the planner would run it (knobs that need the plan's
dispatcher dropped, and said so), and where one is ahead of the plan's dispatcher the reason says why it is not
used (a tie within the resolution, over the memory budget, or by how much it is faster when fixed)."""

from __future__ import annotations

import re

from moeplan import api
from moeplan.plan.advice import with_dispatcher, explain_plan
from moeplan.engine.estimate import evaluate
from moeplan.engine.knobs import knob_problem

GIB = 2**30


def _reason(model: str = "qwen3-30b-a3b", *, budget_gib: float = 72, **kw):
    cfg, gpu = api.build_config(model, **kw)
    est = evaluate(cfg, gpu)
    return est, {r.topic: r for r in explain_plan(cfg, gpu, est, budget_gib * GIB, cfg.batch.gbs)}["dispatcher"]


def _ahead(est, reason) -> list[str]:
    ahead = [d for d, v in reason.numbers["alternatives"].items() if v > round(est.time.tokens_per_s_per_gpu)]
    for d in ahead:
        assert re.search(rf"; {d} (is [\d.]+% (ahead|faster)|needs [\d.]+ GiB)", reason.text), (d, reason.text)
    return ahead


def test_a_faster_alternative_is_explained():
    est, reason = _reason(gpu="h100", gpus=16, seq_len=4096, gbs=256, ep=16, dispatcher="alltoall")  # fixed
    assert _ahead(est, reason) and re.search(r"; deepep is [\d.]+% faster", reason.text)


def test_an_alternative_within_the_resolution_is_a_tie():
    # H100 EP8, full recompute: DeepEP ~0.8% ahead of a fixed HybridEP
    est, reason = _reason(gpu="h100", gpus=8, seq_len=4096, gbs=1024, ep=8, dispatcher="hybridep", recompute="full",
                          budget_gib=79)
    assert _ahead(est, reason) == ["deepep"]
    assert re.search(r"; deepep is 0\.\d% ahead, within the 1% the estimates resolve", reason.text)


def test_alternatives_run_without_the_knobs_only_hybridep_has():
    """A Megatron-Core 0.18 full-iteration plan runs sync-free HybridEP (moe_expert_rank_capacity_factor): its
    alltoall alternative is costed with partial graphs and no rank buffers (a run Megatron-Core accepts), not
    with a full-iteration graph alltoall cannot have."""
    kw = dict(gpu="gb200", gpus=32, seq_len=32768, gbs=64, cp=4, ep=16, mcore_version="0.18", dispatcher="hybridep",
              ep_overlap=True, cuda_graphs="full_iteration", rank_capacity_factor=1.5)
    cfg, gpu = api.build_config("qwen3-next-80b-a3b", **kw)
    assert knob_problem(cfg) is None and knob_problem(cfg.with_(dispatcher="alltoall")) is not None
    alt, note = with_dispatcher(cfg, "alltoall")
    assert knob_problem(alt) is None and alt.rank_capacity_factor is None
    assert alt.cuda_graph_scopes == {"attn", "moe_router", "moe_preprocess"} and "sync-free" in note
    est, reason = _reason("qwen3-next-80b-a3b", budget_gib=167, **kw)
    assert reason.numbers["alternatives"]["alltoall"] == round(evaluate(alt, gpu).time.tokens_per_s_per_gpu)
    assert "alltoall" in reason.text and "the full-iteration graph needs HybridEP" in reason.text


_SYNC_FREE = dict(gpu="gb200", gpus=32, seq_len=32768, gbs=64, cp=4, ep=16, mcore_version="0.18", ep_overlap=True,
                  cuda_graphs="full_iteration", rank_capacity_factor=1.5)


def test_auto_dispatcher_keeps_what_the_runs_knobs_need():
    """moe_expert_rank_capacity_factor is HybridEP's: with the dispatcher left to auto the estimate picks
    HybridEP, not a faster-looking alltoall that then fails with 'needs the HybridEP dispatcher'."""
    est = api.estimate("qwen3-next-80b-a3b", **_SYNC_FREE)
    assert est["dispatcher"] == "hybridep" and est["cuda_graphs"] == ["full_iteration"]


def test_linter_costs_dispatchers_as_they_can_run():
    """The linter's dispatcher rule compares runs Megatron-Core accepts (its fix must be a working config)."""
    from moeplan.lint import rules
    from moeplan.engine.estimate import Evaluator

    cfg, gpu = api.build_config("qwen3-next-80b-a3b", dispatcher="hybridep", **_SYNC_FREE)
    seen = []

    class Recording(Evaluator):
        def __call__(self, c):
            seen.append(c)
            return super().__call__(c)

    ev = Recording(gpu, 167 * GIB)
    rules._dispatcher(cfg, evaluate(cfg, gpu), ev, {})
    assert {c.dispatcher for c in seen} == {"hybridep", "alltoall"}
    assert all(knob_problem(c) is None for c in seen), [(c.dispatcher, knob_problem(c)) for c in seen]
