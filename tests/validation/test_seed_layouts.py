"""The search misses nothing a user finds by pinning, and ties follow the guidance (issue #31, items 6 and 7):
the seed's published long-context layouts pinned with their knobs are never faster than the free search's plan 1;
among ties a measured recipe counts only within 2x of the length, then DP >= 2, CP nearest seq/4096, the
dispatcher order; check's DP findings agree with the planner's own plan 1."""

from __future__ import annotations

import json
import math

import pytest

from moeplan import api
from moeplan.cli import main
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.hardware import load_gpu
from moeplan.plan.advice import recipe_distance
from moeplan.plan.ranking import rank_candidates
from moeplan.plan.space import Candidate

from ..reference_runs import bridge_runs, label, layout, plan_kwargs

# (model, run, published layout, published knobs): guidance.md's published long-context layouts and the issue's
# question (Qwen3-235B-A22B on 128 GB200 at 128K, GBS 1024, BF16). GBS 480 at 128K is published for DeepSeek-V3;
# its 256K run and the MXFP8 Qwen3 run hold the same tokens per step per GPU (tests/validation/test_ranking.py TUNED).
SEEDS = {
    "deepseek-v3 128K, 256 H100": (
        "deepseek-v3", dict(gpu="h100", gpus=256, seq_len=131072, gbs=480, precision="fp8", grad_fp32=False,
                            bf16_moments=True),
        dict(tp=1, pp=8, vpp=4, cp=32, ep=32), dict(dispatcher="deepep", recompute="selective:mla_up_proj,layernorm,moe")),
    "deepseek-v3 256K, 512 H100": (
        "deepseek-v3", dict(gpu="h100", gpus=512, seq_len=262144, gbs=480, precision="fp8", grad_fp32=False,
                            bf16_moments=True),
        dict(tp=1, pp=8, vpp=4, cp=64, ep=32), dict(dispatcher="deepep", recompute="selective:mla_up_proj,layernorm,moe")),
    "qwen3-235b-a22b 128K, 128 GB200, MXFP8": (
        "qwen3-235b-a22b", dict(gpu="gb200", gpus=128, seq_len=131072, gbs=240, precision="mxfp8", grad_fp32=False),
        dict(tp=4, pp=4, vpp=12, cp=4, ep=32), dict(dispatcher="hybridep", recompute="selective:moe_act,layernorm")),
    "qwen3-235b-a22b 128K, 128 GB200, the issue's question": (
        "qwen3-235b-a22b", dict(gpu="gb200", gpus=128, seq_len=131072, gbs=1024),
        dict(tp=4, pp=4, vpp=12, cp=4, ep=32), dict(dispatcher="hybridep", recompute="selective:moe_act,layernorm")),
}
ISSUE = SEEDS["qwen3-235b-a22b 128K, 128 GB200, the issue's question"]


@pytest.mark.parametrize("name", list(SEEDS))
def test_pinned_published_layout_is_never_faster_than_plan_1(name):
    model, run, layout, knobs = SEEDS[name]
    plan1 = api.plan(model, top=1, **run)["plans"][0]
    pinned = api.plan(model, top=1, fixed=layout | knobs, **run)["plans"][0]
    print(f"{name}: plan 1 {plan1['tokens_per_s_per_gpu']:.1f}, pinned {pinned['tokens_per_s_per_gpu']:.1f} tokens/s/GPU")
    assert pinned["tokens_per_s_per_gpu"] <= plan1["tokens_per_s_per_gpu"] * (1 + 1e-9)


def test_the_tie_rule_sees_every_dispatcher_of_a_layout():
    """DeepSeek-V3 on 256 B200 at 4K (Bridge's DeepEP EP32 recipe): the refinement kept one dispatcher per layout, so
    the recipe layout's HybridEP winner (1.7% over its DeepEP twin, above RESOLVED_GAIN) hid the DeepEP run that
    matches the recipe, and rule 1 lifted another layout's DeepEP plan (TP2 EP32, 3,300 tokens/s/GPU), below the
    published layout pinned with its dispatcher (3,331). Each layout's twins now reach the tie rule: plan 1 is the
    recipe, with its dispatcher, and never below it pinned."""
    run = next(r for r in bridge_runs() if label(r) == "deepseek-v3-b200-256-4096")
    kw = plan_kwargs(run)
    published = layout(run) | {"dispatcher": run["dispatcher"]}
    plans = api.plan(run["model"], top=5, **kw)["plans"]
    pinned = api.plan(run["model"], top=1, fixed=published, **kw)["plans"][0]
    plan1 = plans[0]
    print(f"plan 1 {plan1['tokens_per_s_per_gpu']:.1f}, pinned {pinned['tokens_per_s_per_gpu']:.1f} tokens/s/GPU")
    assert pinned["tokens_per_s_per_gpu"] <= plan1["tokens_per_s_per_gpu"] * (1 + 1e-9)
    assert {k: plan1["parallel"][k] for k in ("tp", "pp", "vpp", "cp", "ep")} == {
        k: published[k] for k in ("tp", "pp", "vpp", "cp", "ep")}
    assert plan1["dispatcher"] == run["dispatcher"]
    assert plan1["rationale"][0]["text"].startswith("Plan 1 because it matches the measured recipe")
    # the list still shows one run per layout: plan 1's faster HybridEP twin is named in its dispatcher reason,
    # not listed as a plan of its own
    shapes = [(tuple(p["parallel"][k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp")), p["mbs"], p["fsdp"])
              for p in plans]
    assert len(shapes) == len(set(shapes)), shapes


def test_free_recompute_finds_offload_with_a_lighter_set():
    """The layout pinned alone finds what the layout pinned with its published recompute finds: offload that lets a
    lighter selective set fit (it stopped at the first set that fits without offload: moe, 1,222 vs 1,362)."""
    model, run, layout, knobs = ISSUE
    free = api.plan(model, top=1, fixed=layout | {"dispatcher": "hybridep"}, **run)["plans"][0]
    pinned = api.plan(model, top=1, fixed=layout | knobs, **run)["plans"][0]
    assert free["tokens_per_s_per_gpu"] >= pinned["tokens_per_s_per_gpu"] * (1 - 1e-9)


def test_published_vpp_and_cp_are_searched():
    """The free search reaches the published PP4 VPP12 CP4 layout (VPP 12 and CP 4, outside 1/2/4/8 and
    seq/4096 / 4 .. x 4, come from the measured recipes) and ranks it first among ties (rule 1)."""
    model, run, layout, _ = ISSUE
    p = api.plan(model, top=1, **run)["plans"][0]
    assert {k: p["parallel"][k] for k in layout} == layout
    assert p["rationale"][0]["text"].startswith("Plan 1 because it matches the measured recipe")


def test_issue_question_plan_1_keeps_dp_2():
    """`moeplan plan qwen3-235b-a22b --gpu gb200 --gpus 128 --seq-len 128k --gbs 1024`: plan 1 keeps DP >= 2 (it was
    TP2 PP4 VPP4 CP16 EP32 DP1, by closeness to a 4K recipe)."""
    model, run, _, _ = ISSUE
    assert api.plan(model, top=1, **run)["plans"][0]["parallel"]["dp"] >= 2


def test_a_recipe_speaks_only_within_2x_of_its_length():
    gpu = load_gpu("gb200")
    cfg128, _ = api.build_config("qwen3-235b-a22b", gpu="gb200", gpus=128, seq_len=131072, gbs=1024, tp=2, pp=4, vpp=4,
                                 cp=16, ep=32)
    assert recipe_distance(cfg128, gpu)[1]["seq_len"] == 131072  # not the 4K recipe
    cfg32, _ = api.build_config("qwen3-235b-a22b", gpu="gb200", gpus=128, seq_len=32768, gbs=1024, tp=2, pp=4, vpp=4,
                                cp=8, ep=32)
    assert recipe_distance(cfg32, gpu) is None  # 4K and 128K are both more than 2x away


def _cands(model: str, gpu: str, kw: dict, layouts: list[tuple[dict, float]]) -> list[Candidate]:
    out = []
    for lay, tps in layouts:
        cfg, _ = api.build_config(model, gpu=gpu, **kw, **lay)
        out.append(Candidate(cfg, None, 0.0, tps))  # type: ignore[arg-type]
    return out


def test_ties_put_dp_2_before_dp_1_and_say_so_first():
    """No recipe within 2x (DeepSeek-V3 on 256 H200 at 64K): a DP 2 tie comes before a faster DP 1 one, and the
    reason's first sentence names the rule; the band arithmetic follows."""
    b = DEFAULT_CALIBRATION.error_band_log
    kw = dict(gpus=256, seq_len=65536, gbs=64, precision="fp8", dispatcher="deepep")
    cands = _cands("deepseek-v3", "h200", kw, [(dict(tp=2, pp=8, vpp=4, cp=16, ep=32), 100.0),
                                                 (dict(tp=1, pp=8, vpp=4, cp=16, ep=32), 100.0 * math.exp(-b))])
    assert [c.cfg.parallel.dp for c in cands] == [1, 2]
    order, why = rank_candidates(cands, load_gpu("h200"), b)
    assert order[0].cfg.parallel.dp == 2
    text = why[id(order[0])]
    assert text.startswith("Plan 1 because it keeps DP 2") and "rule 2" in text.split(". ")[0]
    assert "Tie:" in text and "overlap" in text


def test_check_agrees_with_plan_1_on_dp(tmp_path, capsys):
    """An export of the issue question's plan 1 gets no DP warning or error from check (dp-collapsed, dp-sharding)."""
    out = tmp_path / "plan1.yaml"
    assert main(["plan", "qwen3-235b-a22b", "--gpu", "gb200", "--gpus", "128", "--seq-len", "128k", "--gbs", "1024",
                 "--top", "1", "--format", "yaml"]) == 0
    out.write_text(capsys.readouterr().out)
    code = main(["check", str(out), "--json"])
    found = json.loads(capsys.readouterr().out)["findings"]
    assert code == 0
    assert not [f for f in found if f["rule"] in ("dp-collapsed", "dp-sharding") and f["severity"] != "info"], found


class _Est:
    def __init__(self, tps: float) -> None:
        self.time = type("T", (), {"tokens_per_s_per_gpu": tps})()
        self.memory = type("M", (), {"total_bytes": 60 * 2**30})()


class _Ev:
    """An evaluator whose every alternative fits at ``alt_tps`` (the rule's inputs, without a search)."""

    def __init__(self, gpu, alt_tps: float) -> None:
        self.gpu, self.cal, self.alt_tps = gpu, DEFAULT_CALIBRATION, alt_tps

    def __call__(self, cfg):
        return _Est(self.alt_tps)

    def fits(self, est) -> bool:
        return True


@pytest.mark.parametrize("recipe, ratio, severity", [
    (True, math.exp(-0.5 * DEFAULT_CALIBRATION.error_band_log), "info"),   # a tie, and the run is the recipe
    (False, math.exp(-0.5 * DEFAULT_CALIBRATION.error_band_log), "warning"),  # a tie: the guidance prefers DP >= 2
    (False, math.exp(-3 * DEFAULT_CALIBRATION.error_band_log), "info"),   # below the band: the estimates order it
    (False, math.exp(3 * DEFAULT_CALIBRATION.error_band_log), "warning"),  # above the band
])
def test_dp_collapsed_follows_the_planners_ranking(recipe, ratio, severity):
    from moeplan.lint.rules import _dp_budget

    gpu = load_gpu("h100")
    lay = dict(tp=1, pp=8, vpp=4, cp=32, ep=32) if recipe else dict(tp=2, pp=8, vpp=4, cp=16, ep=32)
    cfg, _ = api.build_config("deepseek-v3", gpu="h100", gpus=256, seq_len=131072, gbs=480, precision="fp8",
                              dispatcher="deepep", **lay)
    assert (recipe_distance(cfg, gpu)[0] <= 1e-9) == recipe
    found = _dp_budget(cfg, _Est(100.0), _Ev(gpu, 100.0 * ratio), {})
    assert [(f.rule, f.severity) for f in found] == [("dp-collapsed", severity)]
