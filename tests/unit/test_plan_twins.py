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
    # one run per layout: plan 1's layout is not listed again with its HybridEP winner
    assert order == [dist[1], fsdp[0]]


def test_without_a_tie_the_winners_stand():
    """Where no run is inside plan 1's band the list is each layout's winner, fastest first, twins left out."""
    gpu = load_gpu("b200")
    a = [_run(4000.0, dispatcher="hybridep"), _run(3000.0, dispatcher="deepep")]  # below the band
    b = [_run(1000.0, dispatcher="deepep", fsdp="optim_grads_params")]
    order, why = _rank_with_twins([b, a], gpu, DEFAULT_CALIBRATION.error_band_log, False)
    assert order == [a[0], b[0]] and not why
