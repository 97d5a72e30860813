"""The tie rule chooses among every dispatcher of every refined layout (issue #31 items 6 and 7): the refinement
hands each layout's best run per dispatcher (its twins) to the ranking, and the plan list still shows one run
per layout."""

from __future__ import annotations

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.hardware import load_gpu
from moeplan.plan.planner import _rank_with_twins
from moeplan.plan.ranking import rank_candidates
from moeplan.plan.space import Candidate

# DeepSeek-V3 on 256 B200 at 4K: Bridge's recipe, TP1 PP8 VPP2 EP32 with DeepEP (hardware/measured_layouts.yaml)
KW = dict(gpu="b200", gpus=256, seq_len=4096, gbs=4096, precision="mxfp8", tp=1, pp=8, vpp=2, ep=32)


def _run(tps: float, **knobs) -> Candidate:
    cfg, _ = api.build_config("deepseek-v3", **KW, **knobs)
    return Candidate(cfg, None, 0.0, tps)  # type: ignore[arg-type]


def test_a_layouts_twin_beats_another_runs_winner_of_its_dispatcher():
    """The published layout pinned with a free dispatcher came out below both dispatchers pinned (3,092 against
    3,368 / 3,402 tokens/s/GPU at a candidate fit): the distributed-optimizer run's winner was HybridEP (1% over
    DeepEP), the Megatron-FSDP run's DeepEP, and rule 1 (the recipe's dispatcher) lifted the slower FSDP run, the
    distributed optimizer's DeepEP twin being dropped. With the twins ranked, plan 1 is that twin."""
    gpu = load_gpu("b200")
    dist = [_run(3402.0, dispatcher="hybridep"), _run(3368.0, dispatcher="deepep")]  # winner, then its twin
    fsdp = [_run(3092.0, dispatcher="deepep", fsdp="optim_grads_params")]
    band = DEFAULT_CALIBRATION.error_band_log
    winners_only, _ = rank_candidates([dist[0], fsdp[0]], gpu, band)
    assert winners_only[0] is fsdp[0]  # the gap: the winners alone put the slower FSDP run first
    order, why = _rank_with_twins([dist, fsdp], gpu, band, False)
    assert order[0] is dist[1]
    assert why[id(order[0])].startswith("Plan 1 because it matches the measured recipe")
    # plan 1 is a twin: its layout's faster winner is listed after it, then the other layout
    assert order == [dist[1], dist[0], fsdp[0]]


def test_a_twin_does_not_displace_its_winner_by_the_dispatcher_order_alone():
    """A twin enters the ranking only where it is nearer a measured recipe than its layout's winner: the
    refinement's dispatcher choice (the guidance's order unless another gains RESOLVED_GAIN) is not overridden
    by the tie rule's dispatcher order for a run up to the band's width slower (review: a DeepEP twin 15% slower
    became plan 1 by rule 2 and hid the faster run)."""
    from moeplan.plan.advice import recipe_distance

    gpu = load_gpu("b200")
    winner, twin = _run(4000.0, dispatcher="deepep"), _run(3400.0, dispatcher="hybridep")  # the recipe's is DeepEP
    assert recipe_distance(winner.cfg, gpu)[0] < recipe_distance(twin.cfg, gpu)[0]
    band = DEFAULT_CALIBRATION.error_band_log
    order, _ = _rank_with_twins([[winner, twin]], gpu, band, False)
    assert order == [winner]
    # no recipe near: the dispatcher order alone would put the slower twin first; the winner stands
    kw = {**KW, "seq_len": 65536, "gbs": 256, "cp": 8}
    fast = Candidate(api.build_config("deepseek-v3", **kw, dispatcher="alltoall")[0], None, 0.0, 4000.0)  # type: ignore[arg-type]
    slow = Candidate(api.build_config("deepseek-v3", **kw, dispatcher="deepep")[0], None, 0.0, 3400.0)  # type: ignore[arg-type]
    assert recipe_distance(fast.cfg, gpu) is None and recipe_distance(slow.cfg, gpu) is None
    assert rank_candidates([fast, slow], gpu, band)[0][0] is slow  # rule 2, the dispatcher order
    assert _rank_with_twins([[fast, slow]], gpu, band, False)[0] == [fast]


def test_without_a_tie_the_winners_stand():
    """Where no run is inside plan 1's band the list is each layout's winner, fastest first, twins left out."""
    gpu = load_gpu("b200")
    a = [_run(4000.0, dispatcher="hybridep"), _run(3000.0, dispatcher="deepep")]  # below the band
    b = [_run(1000.0, dispatcher="deepep", fsdp="optim_grads_params")]
    order, why = _rank_with_twins([b, a], gpu, DEFAULT_CALIBRATION.error_band_log, False)
    assert order == [a[0], b[0]] and not why


def test_a_tie_reason_names_an_unlisted_fastest_twin_as_its_plans_dispatcher_alternative():
    """The VPP 4 layout's own run is HybridEP (3,300) and its DeepEP twin (3,402, nearer the DeepEP recipe) the
    fastest estimate; plan 1 is the recipe's own layout, VPP 2 (3,092, rule 1). The list shows each layout once, so
    the twin is not a plan: the tie reasons name it as plan 2's layout with DeepEP (before: "the fastest estimate
    (3,402, ...)", a number no listed plan has)."""
    gpu = load_gpu("b200")

    def vpp4(tps: float, dispatcher: str) -> Candidate:
        cfg, _ = api.build_config("deepseek-v3", **(KW | {"vpp": 4}), dispatcher=dispatcher)
        return Candidate(cfg, None, 0.0, tps)  # type: ignore[arg-type]

    other = [vpp4(3300.0, "hybridep"), vpp4(3402.0, "deepep")]
    recipe = [_run(3092.0, dispatcher="deepep")]
    order, why = _rank_with_twins([other, recipe], gpu, DEFAULT_CALIBRATION.error_band_log, False)
    assert order == [recipe[0], other[0]]  # the twin is ranked, not listed
    layout = other[0].cfg.parallel.short()
    assert ("fastest estimate (3,402, -9%; not a listed plan: plan 2's layout "
            f"({layout}) with deepep for its hybridep, its dispatcher alternative)") in why[id(order[0])]
    assert ("fastest estimate (3,402, -3%; not a listed plan: this plan with deepep for its hybridep, its "
            "dispatcher alternative)") in why[id(order[1])]
    # a listed fastest estimate is named by its number alone, as before
    other[0] = vpp4(3500.0, "hybridep")
    _, why = _rank_with_twins([other, recipe], gpu, DEFAULT_CALIBRATION.error_band_log, False)
    assert "not a listed plan" not in " ".join(why.values()) and "fastest estimate (3,500, " in why[id(recipe[0])]
