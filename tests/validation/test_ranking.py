"""The planner is judged by how it orders choices: measured variant groups, the guidance's curves, the
seed's tuned long-context layouts, and the error band with its ties (issue: rank layouts and knobs the
way measurements do)."""

from __future__ import annotations

import math
import pytest

from moeplan import api
from moeplan.plan.advice import recipe_distance
from moeplan.hardware import load_gpu
from moeplan.plan.ranking import rank_candidates
from moeplan.plan.space import Candidate
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION

from ..measured_variants import G14_RECOMPUTE, G15_GBS_TOKENS, G15_PLAN_KWARGS, g15_points, ranked_pairs, variants
from ..reference_runs import estimate_kwargs, out_of_fit_runs

VARIANTS = variants()


def _est(v):
    return api.estimate(v.model, **v.kwargs)


def test_measured_pairs_are_ordered_the_measured_way():
    """Pairs inside a measured group that differ in a knob or layout moeplan models and whose measured
    throughput differs by >= 10% (tests/measured_variants.py ranked_pairs): >= 85% in the measured order."""
    pairs = ranked_pairs(VARIANTS)
    assert len(pairs) >= 15  # offload curve, graphs, dispatchers, EP overlap, G05 knob steps, MB layouts
    cache: dict[int, dict] = {}
    wrong = []
    for lo, hi in pairs:
        a = cache.setdefault(id(lo), _est(lo))
        b = cache.setdefault(id(hi), _est(hi))
        if not b["tokens_per_s_per_gpu"] > a["tokens_per_s_per_gpu"]:
            wrong.append(f"{lo.group}: {lo.label} ({lo.measured():.4g}) < {hi.label} ({hi.measured():.4g}) measured; "
                         f"moeplan {a['tflops_per_gpu']:.0f} vs {b['tflops_per_gpu']:.0f} TFLOP/s")
    print("\n".join(["pairs moeplan orders against the measurement:"] + wrong))
    assert 1 - len(wrong) / len(pairs) >= 0.85, wrong


G14 = [v for v in VARIANTS if v.group == "G14" and v.kwargs["gpus"] == 256]


def test_deepseek_cp_curve_is_flat_like_the_measurement():
    """G14: DeepSeek-V3 on 256 H100 (TP1 PP8 VPP4 EP32, DeepEP, FP8, offload), 4K to 128K: each point
    within 25% of its measured ~300-320 TFLOP/s and no steeper than measured (max / min <= 1.3)."""
    assert [v.kwargs["seq_len"] for v in G14] == [4096, 16384, 32768, 65536, 131072]
    got = [_est(v)["tflops_per_gpu"] for v in G14]
    for v, t in zip(G14, got):
        assert t == pytest.approx(v.measured(), rel=0.25), v.label
    assert max(got) / min(got) <= 1.3


@pytest.mark.parametrize("seq", [32768, 65536, 131072])
def test_seed_knobs_are_at_least_as_fast_as_full_recompute(seq):
    """At 32K and beyond, selective mla_up_proj, layernorm, moe, mlp with optimizer offload estimates at
    least as fast as full recompute (same offload) on the DeepSeek-V3 layout."""
    v = next(v for v in G14 if v.kwargs["seq_len"] == seq)
    assert v.kwargs["recompute"] == G14_RECOMPUTE
    seed = _est(v)["tokens_per_s_per_gpu"]
    full = api.estimate(v.model, **(v.kwargs | {"recompute": "full:uniform:1"}))["tokens_per_s_per_gpu"]
    assert seed >= full


# The seed's tuned long-context layouts. GBS: 480 at 128K is published for DeepSeek-V3 (issue); the 256K
# and Qwen3-235B GBS are not, so they hold the same tokens per step per GPU as the 128K run.
TUNED = {
    "deepseek-v3 128K, 256 H100": ("deepseek-v3", dict(gpu="h100", gpus=256, seq_len=131072, gbs=480, precision="fp8",
                                                       grad_fp32=False, bf16_moments=True),
                                   dict(tp=1, pp=8, vpp=4, cp=32, ep=32)),
    "deepseek-v3 256K, 512 H100": ("deepseek-v3", dict(gpu="h100", gpus=512, seq_len=262144, gbs=480, precision="fp8",
                                                       grad_fp32=False, bf16_moments=True),
                                   dict(tp=1, pp=8, vpp=4, cp=64, ep=32)),
    "qwen3-235b-a22b 128K, 128 GB200": ("qwen3-235b-a22b", dict(gpu="gb200", gpus=128, seq_len=131072, gbs=240,
                                                                precision="mxfp8", grad_fp32=False),
                                        dict(tp=4, pp=4, vpp=12, cp=4, ep=32)),
}


# DeepSeek-V3 at 128K: ring CP's off-diagonal steps run cuDNN's MLA backward without the causal mask, at 0.56 of its
# causal rate (attn_noncausal_bwd_share, tests/data/mla_attention_h200.csv), so the published layout's best CP
# type moves from a2a+p2p (a 4-node ring) to a2a (Ulysses over 4 nodes, ~100 s of 995 exposed), and the planner's
# TP2 PP16 CP8 EP16 (a2a over 2 nodes, EP16) estimates 7% faster (pinned / fastest 0.953 -> 0.933); no run measured
# that layout, and the G14 row of the published one reads +7% at the fitted constants (+10% before).
TUNED_GAP = ("DeepSeek-V3 128K: with the non-causal ring steps costed, the published TP1 PP8 VPP4 CP32 EP32 layout "
             "(a2a across 4 nodes) estimates 0.933 of the planner's unmeasured TP2 PP16 CP8 EP16 (was 0.953)")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=TUNED_GAP))
                                  if n == "deepseek-v3 128K, 256 H100" else n for n in TUNED])
def test_tuned_long_context_layouts_are_within_5_percent_of_the_fastest_plan(name):
    """With the planner's best knobs, each tuned layout estimates within 5% of the FASTEST plan the
    planner finds (not plan 1, which the tie-breaker may have chosen for its closeness to a recipe)."""
    model, kw, lay = TUNED[name]
    plans = api.plan(model, top=5, **kw)["plans"]
    pinned = api.plan(model, top=1, fixed=lay, **kw)["plans"]
    assert plans and pinned
    fastest = max(p["tokens_per_s_per_gpu"] for p in plans)
    assert pinned[0]["tokens_per_s_per_gpu"] >= 0.95 * fastest


def test_every_estimate_carries_the_cross_validated_band():
    est = _est(G14[0])
    b = DEFAULT_CALIBRATION.error_band_log
    assert 0.02 < b < 0.5  # written by benchmarks/calibrate.py from the CV residuals
    lo, hi = est["tflops_range"]
    assert lo == pytest.approx(est["tflops_per_gpu"] * math.exp(-b))
    assert hi == pytest.approx(est["tflops_per_gpu"] * math.exp(b))
    lo, hi = est["tokens_per_s_range"]
    assert lo < est["tokens_per_s_per_gpu"] < hi


def _cands(model: str, gpu_name: str, kw: dict, layouts: list[tuple[dict, float]]) -> list[Candidate]:
    out = []
    for lay, tps in layouts:
        cfg, _ = api.build_config(model, gpu=gpu_name, **kw, **lay)
        out.append(Candidate(cfg, None, 0.0, tps))  # type: ignore[arg-type]
    return out


def test_ties_prefer_the_measured_recipe_but_only_inside_the_band():
    """DeepSeek-V3 on 256 H100 at 128K: the guidance's measured layout (TP1 PP8 VPP4 CP32 EP32) is
    ordered first when its estimate is within the band of a faster one, and is NOT promoted when it is
    outside the band (a tie-breaker, not a rule that forces a layout)."""
    gpu = load_gpu("h100")
    kw = dict(gpus=256, seq_len=131072, gbs=480, precision="fp8", dispatcher="deepep")
    recipe = dict(tp=1, pp=8, vpp=4, cp=32, ep=32)
    other = dict(tp=2, pp=8, vpp=4, cp=16, ep=32)
    b = DEFAULT_CALIBRATION.error_band_log
    inside = _cands("deepseek-v3", "h100", kw, [(other, 100.0), (recipe, 100.0 * math.exp(-1.5 * b))])
    order, why = rank_candidates(inside, gpu, b)
    assert order[0].cfg.parallel.cp == 32 and "matches the measured recipe" in why[id(order[0])]
    assert id(order[1]) in why  # the faster one is a tie too
    outside = _cands("deepseek-v3", "h100", kw, [(other, 100.0), (recipe, 100.0 * math.exp(-2.5 * b))])
    order, why = rank_candidates(outside, gpu, b)
    assert order[0].cfg.parallel.cp == 16 and not why


def test_ties_without_a_recipe_follow_the_guidance_defaults():
    """No measured layout for DeepSeek-V3 on H200 at 64K: among ties the guidance's CP (seq / 4096 = 16)
    comes first, then the faster."""
    gpu = load_gpu("h200")
    kw = dict(gpus=256, seq_len=65536, gbs=64, precision="fp8", dispatcher="deepep")
    b = DEFAULT_CALIBRATION.error_band_log
    cands = _cands("deepseek-v3", "h200", kw, [(dict(tp=1, pp=8, vpp=4, cp=8, ep=32), 100.0),
                                                 (dict(tp=1, pp=8, vpp=4, cp=16, ep=32), 95.0)])
    assert all(recipe_distance(c.cfg, gpu) is None for c in cands)
    order, why = rank_candidates(cands, gpu, b)
    assert order[0].cfg.parallel.cp == 16 and "guidance" in why[id(order[0])]


def test_tie_text_states_the_rule_it_applies():
    """The tie text gives the real rule (bands exp(+-band) overlap: up to exp(-2 x band) apart, not within the
    one band it quoted as "+-15%") and both bands in numbers: a plan further below the fastest than one band
    is a tie and says so truthfully (it said "within the model's error (+-15%) ... (643, -18%)")."""
    gpu = load_gpu("h200")
    kw = dict(gpus=256, seq_len=65536, gbs=64, precision="fp8", dispatcher="deepep")
    b = DEFAULT_CALIBRATION.error_band_log
    lead, tps = 643.0, 643.0 * math.exp(-1.4 * b)  # outside one band of the fastest, inside the overlap rule
    cands = _cands("deepseek-v3", "h200", kw, [(dict(tp=1, pp=8, vpp=4, cp=8, ep=32), lead),
                                                 (dict(tp=1, pp=8, vpp=4, cp=16, ep=32), tps)])
    order, why = rank_candidates(cands, gpu, b)
    fast, slow = why[id(cands[0])], why[id(cands[1])]
    lo, hi = math.exp(-b), math.exp(b)
    assert f"+-{math.expm1(b):.0%}" not in slow and f"({lead:,.0f}, {tps / lead - 1:+.0%})" in slow
    assert (f"its band ({tps * lo:,.0f}-{tps * hi:,.0f}) overlaps the fastest estimate's band "
            f"({lead * lo:,.0f}-{lead * hi:,.0f})") in slow
    assert tps * hi >= lead * lo  # what the text claims is what the rule checks
    floor = lead * math.exp(-2 * b)
    assert f"{floor:,.0f} tokens/s/GPU, {1 - floor / lead:.0%} below it" in slow
    assert "is the fastest estimate" in fast and f"its band ({lead * lo:,.0f}-{lead * hi:,.0f})" in fast


def test_plan_rationale_says_why_a_tie_is_first():
    r = api.plan("deepseek-v3", top=3, **TUNED["deepseek-v3 128K, 256 H100"][1])
    best = r["plans"][0]
    if best["tie"]:
        assert best["rationale"][0]["topic"] == "rank"
        assert "within the model's error" in best["rationale"][0]["text"]
    assert all(p["tokens_per_s_range"][0] < p["tokens_per_s_per_gpu"] for p in r["plans"])


QWEN3_NEXT_BRIDGE_LAYOUT = "Et*4|(t*7|)*5t*8|tmL"  # Bridge PR #3168: embedding, 4 + 5 x 7 + 8 + 1 layers, MTP, loss
QWEN3_NEXT_GAP = ("Qwen3-Next-80B-A3B on GB200/GB300 is estimated 1.65-1.9x the measured throughput at 4K-32K "
                  "(and 3.3x at 64K, see the drop), also at 4K without CP on Bridge's own recipe with its MTP layer "
                  "and layout (test_qwen3_next_bridge_4k_recipe), so the level gap is not the Gated DeltaNet chunk "
                  "kernels (fla's GB200 benchmark and an H200 measurement pin them, tests/data/fla_gdn_*.csv), CP, MTP, HybridEP's "
                  "routing-map all-gather, the router / permute / element-wise traffic, the 16 local experts' TE "
                  "GroupedLinear launches, the head-dim-256 attention (FlashAttention-2 on sm100, unfused on sm103: "
                  "TE 71bbefb has no cuDNN d=256 training kernel on Blackwell) or the GDN layer's copies and "
                  "element-wise ops (all costed, the last-dimension transposes at their measured H200 rate; 2.0x -> 1.65x on the 4K recipe); GB200 MBS 2 vs "
                  "GB300 MBS 4 split it into ~4 ms per layer and micro-batch that does not scale with tokens and more "
                  "GPU work per token only if both systems run a token equally fast, which no shared row checks "
                  "(docs/calibration.md, known gaps)")
QWEN3_NEXT_DROP = ("the measured 32K -> 64K drop (~230 -> ~100 TFLOP/s, -57%) is not reproduced: moeplan's best plans "
                   "fall ~16% (FlashAttention-2's head-dim-256 attention grows with length; the host-time part of the "
                   "level gap does not depend on length; the measured CP 16 layout's other sizes are not published; "
                   "moeplan costs the CP 16 layouts at 84-135 GB or 182 GB (EP 2 PP 2), none near its ~160 GB, and the card's SKILL.md ties "
                   "the drop to memory: allocator effects near the limit, which a layout cost cannot hold; the fla "
                   "backward recurrence, HybridEP's fixed call cost and TE's CP bookkeeping are each <= 10%: "
                   "docs/calibration.md known gaps (k)-(o))")


def _qwen3_next_best(seq: int) -> float:
    """The planner's fastest plan for G15's run at ``seq`` (what the card does not give: G15_PLAN_KWARGS)."""
    p = api.plan("qwen3-next-80b-a3b", seq_len=seq, gbs=G15_GBS_TOKENS // seq, top=3, **G15_PLAN_KWARGS)["plans"]
    return max(q["tflops_per_gpu"] for q in p)


@pytest.mark.xfail(strict=True, reason=QWEN3_NEXT_GAP)
@pytest.mark.parametrize("point", g15_points(), ids=lambda p: str(p.seq_len))
def test_qwen3_next_curve_on_32_gb200(point):
    """G15 (layouts not published): the planner's best plan within 35% at 8K, 32K and 64K."""
    assert _qwen3_next_best(point.seq_len) == pytest.approx(point.tflops, rel=0.35)


def test_g15_is_read_as_the_card_gives_it():
    """The three points the xfails above compare with (tests/measured_variants.g15_points)."""
    assert [(p.seq_len, p.cp, p.tflops, p.memory_gb) for p in g15_points()] == [
        (8192, 1, 270.0, 150.0), (32768, 4, 230.0, 135.0), (65536, 16, 100.0, 160.0)]


@pytest.mark.xfail(strict=True, reason=QWEN3_NEXT_DROP)
def test_qwen3_next_drops_from_32k_to_64k():
    """G15: a drop of at least 40% from 32K to 64K, as measured (checked on its own, not behind the level)."""
    assert _qwen3_next_best(65536) <= 0.6 * _qwen3_next_best(32768)


PR_3168 = [r for r in out_of_fit_runs() if r["release"] == "PR 3168"]


# GB200's MBS 2 step comes within 35% since the refit on groups N01-N41 (gemm_epilogue_s ~3x: small GEMMs slower on
# Blackwell); GB300's MBS 4 step since HybridEP's host sync follows its dispatch (timing.moe.dispatch_before_host_sync:
# the 16 local experts' MXFP8 launches no longer hide behind the dispatch; 1.55x -> 1.45x its estimate, GB200's
# 1.54x -> 1.46x)
# GB200's MBS 2 step leaves 35% again since the routed experts' MXFP8 split quantizes cost a kernel launch each (TE
# split_quantize bulk-allocates them and loops in C++: timing.context.SPLIT_QUANTIZE_PATH "bulk"), not a host round trip as
# their GEMMs: the per-quantize round trips had covered part of QWEN3_NEXT_GAP's per-layer host time
# PR #3168's GB200 step (MBS 2) is 1.35-1.54x its estimate since the 16 local experts' MXFP8 split quantizes are costed as
# the kernel launches TE's bulk split_quantize issues (6.68 s against 4.43 s); within 35% since the GEMM epilogue's
# traffic overlaps the main loop (timing.gemm.gemm_call_s) and the refit took gemm_epilogue_s 2.27e-10 -> 3.32e-10 (its
# 16 local experts' shallow GEMMs on Blackwell slower; not the host timeline: 2026-12-05): a strict xfail until then


@pytest.mark.parametrize("run", PR_3168, ids=lambda r: r["system"])
def test_qwen3_next_bridge_4k_recipe(run):
    """Qwen3-Next runs with a known layout: Megatron Bridge PR #3168 (2026-04-07, "Qwen3-Next 80B
    GB200/GB300 parallel mappings", test plan: "GB200 MXFP8: 20 iterations, 6.68s/iter", "GB300 MXFP8:
    20 iterations, 5.80s/iter") with the recipe of that commit (tests/data/out_of_fit_runs.csv: 64 GPUs, seq
    4096, GBS 1024, MBS 2 on GB200 and 4 on GB300, PP2 VP4 EP32, HybridEP, CUDA graphs attn / moe_router /
    moe_preprocess, bf16 grads, no recompute, MTP 1 from the base recipe and its MTP-aware pp_layout
    "Et*4|(t*7|)*5t*8|tmL"). Each within 35% of its measured seconds per step."""
    assert [r["system"] for r in PR_3168] == ["gb200", "gb300"]
    assert run["pipeline_layout"] == QWEN3_NEXT_BRIDGE_LAYOUT
    e = api.estimate(run["model"], **estimate_kwargs(run))
    assert e["step_time_s"] == pytest.approx(float(run["measured_step_time_s"]), rel=0.35)


def test_pr_3168_gb200_gap_is_what_the_round_trips_covered(every_split_round_trip):
    """The GB200 step's gap (above) holds: it misses by less than 1.6x, and with every expert's split quantize a host
    round trip (as FP8 current scaling's) it came within 35%."""
    run = next(r for r in PR_3168 if r["system"] == "gb200")
    measured = float(run["measured_step_time_s"])
    bulk = api.estimate(run["model"], **estimate_kwargs(run))["step_time_s"]
    assert 1.35 < measured / bulk < 1.6
    every_split_round_trip()  # every split a host round trip, as current scaling's
    assert api.estimate(run["model"], **estimate_kwargs(run))["step_time_s"] == pytest.approx(measured, rel=0.35)
