"""The search tries the micro-batch sizes published recipes run (issue #31, item 6: the search misses nothing a user
finds by pinning). Megatron Bridge's Qwen3-30B-A3B recipes on 8 GB300 / B300 at 4K run MBS 8; the search tried
MBS 1/2/4 only below 16K, so each layout pinned with its MBS 8 estimated ~2% over the free search's plan 1
(43,494 vs 42,695 and 41,680 vs 40,942 tokens/s/GPU). It now tries each power of two up to MAX_MBS and up to
MICRO_BATCH_TOKENS per micro-batch (moeplan.plan.advice.candidate_mbss)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.plan.advice import LONG_CONTEXT_TOKENS, MAX_MBS, MICRO_BATCH_TOKENS, candidate_mbss

from ..reference_runs import bridge_runs, label, layout, plan_kwargs, published_runs, shared_dir

MBS8 = ["qwen3-30b-a3b-gb300-8-4096", "qwen3-30b-a3b-b300-8-4096"]


@pytest.mark.parametrize("name", MBS8)
def test_pinned_mbs_8_recipe_is_never_faster_than_plan_1(name):
    run = next(r for r in bridge_runs() if label(r) == name)
    assert int(run["mbs"]) == 8, "the row this test is about runs MBS 8"
    kw = plan_kwargs(run)
    plan1 = api.plan(run["model"], top=1, **kw)["plans"][0]
    pinned = api.plan(run["model"], top=1, fixed=layout(run) | {"dispatcher": run["dispatcher"]}, **kw)["plans"][0]
    print(f"{name}: plan 1 MBS {plan1['mbs']} {plan1['tokens_per_s_per_gpu']:.1f}, "
          f"pinned MBS 8 {pinned['tokens_per_s_per_gpu']:.1f} tokens/s/GPU")
    assert pinned["tokens_per_s_per_gpu"] <= plan1["tokens_per_s_per_gpu"] * (1 + 1e-9)


def test_every_published_micro_batch_is_searched():
    """Each published run's MBS is one the free search tries at its length (the shared reference and the Bridge
    perf rows): a recipe's MBS is never reachable by pinning alone."""
    runs = published_runs(shared_dir() / "reference") + bridge_runs()
    missed = [f"{label(r)} MBS {r['mbs']}" for r in runs if int(r["mbs"]) not in candidate_mbss(int(r["seq_len"]))]
    assert not missed, missed


@pytest.mark.parametrize("seq_len, expected", [
    (1024, [1, 2, 4, 8]), (2048, [1, 2, 4, 8]), (4096, [1, 2, 4, 8]), (8192, [1, 2, 4]),
    (12288, [1, 2, 4]), (LONG_CONTEXT_TOKENS, [1]), (131072, [1])])
def test_candidate_mbss(seq_len, expected):
    got = candidate_mbss(seq_len)
    assert got == expected
    # every size beyond the old 1/2/4 is within the published range: MBS and tokens per micro-batch
    assert all(m <= MAX_MBS and m * seq_len <= MICRO_BATCH_TOKENS for m in got if m > 4)
