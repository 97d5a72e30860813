"""EP A2A overlap and interleaving against what was measured, and the overlap's window model against the
order in which Megatron-Core runs the merged forward / backward (docs/calibration.md, known gaps:
"Published layouts the planner does not reach").

The planner's fastest plans for four published runs lean on EP overlap (overlap_moe_expert_parallel_comm)
and on interleaving with wider EP. The measured pairs that toggle exactly those say whether moeplan values
them more than the runs did: G11 (Qwen3-30B-A3B on 16 H100, HybridEP EP16, overlap off / on) and MB01
(DeepSeek-V3 on 256 B200, PP16 VPP1 EP8 -> PP8 VPP2 EP32 with overlap)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing import moe as timing
from moeplan.run.parallel import Parallel
from moeplan.engine.timeline import rank_schedule
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import TRAIN, make_ctx
from moeplan.engine.timing.layer import layer_time
from moeplan.engine.timing.moe import EP_CHUNK_EDGE, ep_overlap_exposed_s, merged_layer_s
from moeplan.engine.timing.pipeline import bubble_microbatches
from moeplan.engine.timing.step import _ep_chunk_edges_s

from ..measured_variants import variants

VARIANTS = variants()


def _tflops(v) -> float:
    return api.estimate(v.model, **v.kwargs)["tflops_per_gpu"]


def test_g11_overlap_gain_is_the_measured_one():
    """G11: HybridEP EP16 with EP overlap off (244 TFLOP/s) and on (286.2 / 287.3, a repeat): the measured
    gain is 1.175; moeplan's is within 5% of it (the tuned row adds kernel tuning and is left out)."""
    g11 = [v for v in VARIANTS if v.group == "G11" and v.kwargs["dispatcher"] == "hybridep" and not v.extra["why"]]
    off = [v for v in g11 if not v.kwargs["ep_overlap"]]
    on = [v for v in g11 if v.kwargs["ep_overlap"]]
    assert len(off) == 1 and len(on) == 1 and on[0].extra["repeats"] == 2  # the repeat is a second run of the row
    measured = on[0].measured() / off[0].measured()
    assert measured == pytest.approx(1.175, abs=0.005)
    assert _tflops(on[0]) / _tflops(off[0]) == pytest.approx(measured, rel=0.05)


# Run-to-run spread of one configuration's throughput: G11's repeat of its tuned HybridEP overlap row reads 286.2 and
# 287.3 TFLOP/s (0.4%); the Bridge perf tables round to ~1%.
RUN_NOISE = 0.01


# A strict xfail until the bulk split-quantize refit (MB01 fitted at +1.6%, 1.199 against 1.180): with MXFP8's split
# quantizes a kernel launch each (timing.context.SPLIT_QUANTIZE_PATH "bulk") the PP16 EP8 layout's 32 local experts expose
# fewer launches and MB01 fits at -1%
MB01_GAP = ("MB01's EP32 layout reads +2.6% over its EP8 one beyond the measured +18% (1.21x against 1.18x) since a GEMM's "
            "output traffic overlaps its main loop (timing.gemm.gemm_call_s, 2026-12-05): EP8's 32 local experts keep "
            "shallow weight-gradient GEMMs whose main-grad read-modify-write stays exposed, EP32's 8 deeper ones hide "
            "theirs; the two rows also differ by release (26.04 -> 26.04.01), which the ratio does not separate")


@pytest.mark.xfail(strict=True, reason=MB01_GAP)
def test_mb01_interleaving_with_wider_ep_is_not_valued_above_the_measurement():
    """MB01, the layout change between adjacent releases (26.04 -> 26.04.01): PP16 VPP1 EP8 (732) to PP8 VPP2
    EP32 with EP overlap (864), +18% measured. moeplan orders it the measured way and does not gain more
    than measured beyond run-to-run noise (RUN_NOISE)."""
    mb = [v for v in VARIANTS if v.group == "MB01"]
    a, b = mb[-2], mb[-1]
    assert (a.kwargs["pp"], a.kwargs["vpp"], a.kwargs["ep"]) == (16, 1, 8)
    assert (b.kwargs["pp"], b.kwargs["vpp"], b.kwargs["ep"]) == (8, 2, 32)
    measured = b.measured() / a.measured()
    got = _tflops(b) / _tflops(a)
    assert 1.0 < got <= measured * (1 + RUN_NOISE)


# The merged schedule itself is timing.merged_layer_s; the tests below check it directly, by hand-computed
# node timelines and by invariants, rather than against a copy of it kept here.

# (dispatch, combine, attention block fwd + bwd, experts fwd + bwd) seconds per layer and micro-batch:
# the shapes of the planner's fastest plans for the four published rows below 0.9, the pinned Qwen3-235B
# H100 4K and DeepSeek-V3 B200 layouts, G11, and a grid around them
PUBLISHED = [(1.288e-3, 1.288e-3, 10.2e-3, 9.03e-3), (0.811e-3, 0.778e-3, 3.18e-3, 3.92e-3),
             (1.008e-3, 1.008e-3, 5.64e-3, 3.99e-3), (1.288e-3, 1.288e-3, 5.20e-3, 5.07e-3)]
SHAPES = PUBLISHED + [(1.008e-3, 1.008e-3, 1.91e-3, 2.35e-3), (3.079e-3, 3.079e-3, 5.25e-3, 4.48e-3),
                      (0.41e-3, 0.39e-3, 1.88e-3, 2.32e-3)]
SHAPES += [(x, x, a, e) for x in (0.5, 1.0, 2.0, 3.0) for a in (2.0, 4.0, 6.0) for e in (2.0, 4.0, 6.0)]


def _wgrad(attn_s: float, experts_s: float, delay: bool) -> tuple[float, float]:
    """delay_wgrad_compute's weight-gradient shares: a third of the experts, a quarter of the attention block
    (whose core attention has no weights)."""
    return (attn_s / 4, experts_s / TRAIN) if delay else (0.0, 0.0)


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("d,c,attn_s,experts_s", SHAPES)
def test_overlap_model_is_the_merged_schedule(d, c, attn_s, experts_s, delay):
    """timing.ep_overlap_exposed_s (no SM share, full efficiency) is timing.merged_layer_s less the compute, in
    the steady state and in a chunk's first layer, with and without delay_wgrad_compute; the layer lies
    between its busier stream's work and all of its work run one after the other; delaying the weight
    gradients never exposes more."""
    aw, ew = _wgrad(attn_s, experts_s, delay)
    for carry in (True, False):
        layer = merged_layer_s(d, c, attn_s, experts_s, aw, ew, carry)
        model = attn_s + experts_s + ep_overlap_exposed_s(d, c, 0.0, attn_s, experts_s, 0.0, 1.0, aw, ew, carry)
        assert model == pytest.approx(layer, rel=1e-6, abs=1e-9)
        assert max(attn_s + experts_s, 2 * (d + c)) - 1e-9 <= layer <= attn_s + experts_s + 2 * (d + c) + 1e-9
        # what the wrapper adds to the schedule: the permutes stay exposed (2 x perm), a kernel hidden behind
        # compute costs the SM share it holds (linear in it, never more than all traffic), and compute that hides
        # less (eff < 1) exposes at least as much
        base = ep_overlap_exposed_s(d, c, 0.0, attn_s, experts_s, 0.0, 1.0, aw, ew, carry)
        assert ep_overlap_exposed_s(d, c, 1e-4, attn_s, experts_s, 0.0, 1.0, aw, ew, carry) == pytest.approx(base + 2e-4)
        s1, s2 = (ep_overlap_exposed_s(d, c, 0.0, attn_s, experts_s, st, 1.0, aw, ew, carry) for st in (0.1, 0.2))
        assert s2 - s1 == pytest.approx(s1 - base, abs=1e-12) and base <= s1 <= base + 0.1 * 2 * (d + c) + 1e-12
        assert ep_overlap_exposed_s(d, c, 0.0, attn_s, experts_s, 0.0, 0.8, aw, ew, carry) >= base - 1e-12
        if delay:
            assert layer <= merged_layer_s(d, c, attn_s, experts_s, carry=carry) + 1e-9
            assert model <= attn_s + experts_s + ep_overlap_exposed_s(d, c, 0.0, attn_s, experts_s, 0.0, 1.0,
                                                                      carry=carry) + 1e-9


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("d,c,attn_s,experts_s", PUBLISHED)
def test_published_rows_hide_all_of_the_ep_traffic(d, c, attn_s, experts_s, delay):
    """On the four published rows' fastest plans the merged schedule hides all of the dispatch / combine,
    with and without delay_wgrad_compute, inside a chunk and in its first layer."""
    aw, ew = _wgrad(attn_s, experts_s, delay)
    for carry in (True, False):
        assert merged_layer_s(d, c, attn_s, experts_s, aw, ew, carry) == pytest.approx(attn_s + experts_s,
                                                                                       rel=1e-9)


@pytest.mark.parametrize("delay", [False, True])
@pytest.mark.parametrize("d,c,attn_s,experts_s", SHAPES)
def test_merged_layer_never_gets_faster_when_a_part_gets_slower(d, c, attn_s, experts_s, delay):
    """Every node starts when its stream and its chain are free, so no node starts earlier when another one
    runs longer: the layer is non-decreasing in the dispatch, the combine, the attention block and the
    experts (their wgrad shares scaling with them), in the steady state and from idle streams."""
    for carry in (True, False):
        base = merged_layer_s(d, c, attn_s, experts_s, *_wgrad(attn_s, experts_s, delay), carry=carry)
        for i in range(4):
            for f in (1.01, 1.1, 1.5, 2.0):
                parts = [d, c, attn_s, experts_s]
                parts[i] *= f
                slower = merged_layer_s(*parts, *_wgrad(parts[2], parts[3], delay), carry=carry)
                assert slower >= base - 1e-12 * base


@pytest.mark.parametrize("d,c,attn_s,experts_s", SHAPES)
def test_merged_layer_steady_state_has_settled(d, c, attn_s, experts_s, monkeypatch):
    """timing.MERGED_LAYERS layers are enough for the steady state: simulating eight times as many layers
    gives the same seconds per layer, with and without delay_wgrad_compute."""
    short = [merged_layer_s(d, c, attn_s, experts_s, *_wgrad(attn_s, experts_s, delay)) for delay in (False, True)]
    monkeypatch.setattr(timing, "MERGED_LAYERS", 8 * timing.MERGED_LAYERS)
    long = [merged_layer_s(d, c, attn_s, experts_s, *_wgrad(attn_s, experts_s, delay)) for delay in (False, True)]
    assert short == pytest.approx(long, rel=1e-9)


def test_delay_wgrad_hides_beside_dispatch_bwd_and_the_next_combine_bwd():
    """timing.merged_layer_s by hand (steady state). Where dispatch_bwd outlasts mlp_fwd, the experts' delayed
    wgrad hides the rest; where the backward combine outlasts attn_fwd, attention's delayed wgrad does (in
    the steady state of a chunk)."""
    # attention 6 ms (fwd 2, bwd 4), experts 2 ms (fwd 2/3, bwd 4/3), d = c = 1 ms. From t, when attn_bwd has
    # ended: combine_bwd t..t+1, attn_fwd t..t+2, mlp_bwd t+2..t+10/3, dispatch_fwd t+2..t+3, dispatch_bwd
    # t+10/3..t+13/3, mlp_fwd t+10/3..t+4, combine_fwd t+13/3..t+16/3, attn_bwd t+13/3..t+25/3: 1/3 ms exposed
    assert merged_layer_s(1e-3, 1e-3, 6e-3, 2e-3) == pytest.approx(25e-3 / 3)
    # the experts' wgrad (2/3 ms) out of mlp_bwd: mlp_bwd t+2..t+8/3, dispatch_fwd t+2..t+3, the wgrad
    # t+8/3..t+10/3, dispatch_bwd t+3..t+4 beside it and mlp_fwd t+10/3..t+4, combine_fwd t+4..t+5, attn_bwd
    # t+4..t+8: all hidden
    assert merged_layer_s(1e-3, 1e-3, 6e-3, 2e-3, experts_wgrad_s=2e-3 / 3) == pytest.approx(8e-3)
    # an over-large wgrad is capped at the backward (no node runs backwards): the whole of mlp_bwd delayed,
    # dispatch_bwd t+3..t+4 beside the wgrad t+2..t+10/3 and mlp_fwd t+10/3..t+4: all hidden
    assert merged_layer_s(1e-3, 1e-3, 6e-3, 2e-3, experts_wgrad_s=1.0) == pytest.approx(8e-3)
    # d = 3 ms, c = 0.5 ms, attention 6 ms (2 / 4), experts 12 ms (4 / 8): combine_bwd t..t+3 beside attn_fwd
    # t..t+2, mlp_bwd t+3..t+11, dispatch_fwd t+3..t+6, dispatch_bwd t+11..t+11.5, mlp_fwd t+11..t+15,
    # combine_fwd t+15..t+15.5, attn_bwd t+15..t+19: 1 ms exposed
    assert merged_layer_s(3e-3, 0.5e-3, 6e-3, 12e-3) == pytest.approx(19e-3)
    # attention's wgrad (1 ms) out of attn_bwd (t+15..t+18, then the wgrad t+18..t+19): the next combine_bwd
    # t+18..t+21 runs beside it, attn_fwd t+19..t+21, and the layer repeats every 18 ms
    assert merged_layer_s(3e-3, 0.5e-3, 6e-3, 12e-3, attn_wgrad_s=1e-3) == pytest.approx(18e-3)
    # ... but not in a chunk's first layer, whose combine_bwd starts with both streams idle
    assert merged_layer_s(3e-3, 0.5e-3, 6e-3, 12e-3, attn_wgrad_s=1e-3, carry=False) == pytest.approx(19e-3)


def test_merged_layer_from_idle_streams_by_hand():
    """timing.merged_layer_s for one layer from idle streams (carry=False), node by node; the backward moves
    the dispatch's bytes in combine_bwd and the combine's in dispatch_bwd."""
    # d = 3, c = 1, attention 6 (fwd 2, bwd 4), experts 12 (4 / 8): combine_bwd (d) 0..3, attn_fwd 0..2,
    # mlp_bwd 3..11, dispatch_fwd (d) 3..6, dispatch_bwd (c) 11..12, mlp_fwd 11..15, combine_fwd (c) 15..16,
    # attn_bwd 15..19
    assert merged_layer_s(3.0, 1.0, 6.0, 12.0, carry=False) == pytest.approx(19.0)
    # experts 3 (1 / 2): combine_bwd 0..3, attn_fwd 0..2, mlp_bwd 3..5, dispatch_fwd 3..6, dispatch_bwd 6..7,
    # mlp_fwd 6..7, combine_fwd 7..8, attn_bwd 7..11; the next layer starts as this one did (attn_bwd ends
    # last, on the backward chain), so the steady state is the same 11
    assert merged_layer_s(3.0, 1.0, 6.0, 3.0, carry=False) == pytest.approx(11.0)
    assert merged_layer_s(3.0, 1.0, 6.0, 3.0) == pytest.approx(11.0)
    # the swapped shape, d = 1, c = 3: combine_bwd 0..1, attn_fwd 0..2, mlp_bwd 2..4, dispatch_fwd 2..3,
    # dispatch_bwd 4..7, mlp_fwd 4..5, combine_fwd 7..10, attn_bwd 7..11
    assert merged_layer_s(1.0, 3.0, 6.0, 3.0, carry=False) == pytest.approx(11.0)
    # ... and with attention 9 (3 / 6): attn_fwd 0..3, mlp_bwd 3..5, dispatch_fwd 3..4, dispatch_bwd 5..8,
    # mlp_fwd 5..6, combine_fwd 8..11, attn_bwd 8..14
    assert merged_layer_s(1.0, 3.0, 9.0, 3.0, carry=False) == pytest.approx(14.0)
    # no compute: the comm stream runs the four transfers one after the other; no traffic: the compute alone
    assert merged_layer_s(1.0, 2.0, 0.0, 0.0) == pytest.approx(6.0)
    assert merged_layer_s(0.0, 0.0, 5.0, 7.0) == pytest.approx(12.0)


def test_delay_wgrad_changes_the_estimate_only_where_it_hides_more():
    """Qwen3-30B-A3B on 64 H100, DeepEP across nodes: at EP8 the dispatch hides either way; at EP16 / EP32
    delay_wgrad_compute (Bridge's default with overlap) is faster than the same overlap without it (G11's
    recipe), and overlap without it faster than none."""
    for ep, differs in ((8, False), (16, True), (32, True)):
        kw = dict(gpu="h100", gpus=64, seq_len=4096, gbs=1024, ep=ep, dispatcher="deepep")
        off, plain, delayed = (api.estimate("qwen3-30b-a3b", ep_overlap=o, delay_wgrad=w, **kw)["tflops_per_gpu"]
                               for o, w in ((False, None), (True, False), (True, None)))
        assert off < plain <= delayed * (1 + 1e-12)  # equal where it hides nothing more (to the last bit)
        assert (delayed > plain * 1.01) is differs


def merged_pipeline_s(pp: int, vpp: int, microbatches: int, chunk_fwd_s: float, chunk_bwd_s: float) -> float:
    """Seconds of one iteration of the interleaved schedule under EP overlap, chunk by chunk: Megatron-Core's
    order with its one extra warm-up micro-batch (schedules.py get_pp_rank_microbatches, as
    timeline.rank_schedule lays it out), each steady forward merged with the backward after it into one
    step that starts when both inputs are there (combined_1f1b.py: the pair runs layer by layer together)."""
    orders = [rank_schedule(pp, vpp, microbatches, r, extra_warmup=True) for r in range(pp)]
    steps = []
    for order in orders:
        rank_steps, i = [], 0
        while i < len(order):
            if order[i].phase == "steady" and order[i].kind == "F":
                rank_steps.append((order[i], order[i + 1]))
                i += 2
            else:
                rank_steps.append((order[i],))
                i += 1
        steps.append(rank_steps)
    stages = pp * vpp
    done: dict[tuple[str, int, int], float] = {}
    clock, pos = [0.0] * pp, [0] * pp
    while any(pos[r] < len(steps[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while pos[r] < len(steps[r]):
                group = steps[r][pos[r]]
                mine = {(s.kind, s.microbatch, s.chunk * pp + r) for s in group}
                deps = []
                for s in group:
                    stage = s.chunk * pp + r
                    dep = (("F", s.microbatch, stage - 1) if stage > 0 else None) if s.kind == "F" else \
                        (("B", s.microbatch, stage + 1) if stage < stages - 1 else None)
                    if dep is not None and dep not in mine:
                        deps.append(dep)
                if any(dep not in done for dep in deps):
                    break
                start = max([clock[r]] + [done[dep] for dep in deps])
                clock[r] = start + sum(chunk_fwd_s if s.kind == "F" else chunk_bwd_s for s in group)
                for key in mine:
                    done[key] = clock[r]
                pos[r] += 1
                moved = True
        assert moved, "the schedule deadlocks"
    return max(clock)


@pytest.mark.parametrize("pp,vpp,microbatches", [(4, 4, 32), (4, 8, 32), (8, 2, 64), (8, 2, 128), (8, 4, 32),
                                                 (8, 8, 64), (2, 8, 16)])
def test_merged_pipeline_keeps_the_interleaved_bubble(pp, vpp, microbatches):
    """The extra warm-up micro-batch and the merged forward + backward steps add no bubble with equal
    chunks: the iteration is microbatches + (PP - 1) / VPP micro-batch times, timing.bubble_microbatches,
    at the layouts of the four published rows' fastest plans, MB01 and the grid around them."""
    fwd, bwd = 1.0 / vpp, 2.0 / vpp  # one micro-batch through all of a rank's chunks: 3 s
    got = merged_pipeline_s(pp, vpp, microbatches, fwd, bwd) / (fwd + bwd) / vpp
    assert got == pytest.approx(microbatches + bubble_microbatches(Parallel(gpus=pp, pp=pp, vpp=vpp)), rel=1e-9)


def test_each_model_chunk_runs_its_first_layer_from_idle_streams():
    """A merged chunk run starts with both streams idle and ends by waiting on both events: per chunk, one layer
    loses what delay_wgrad_compute's attention wgrad hides beside the next combine_bwd (timing._ep_chunk_edges_s,
    one per VPP chunk on the rank)."""
    for vpp in (2, 4):
        cfg, gpu = api.build_config("qwen3-30b-a3b", gpu="h100", gpus=64, seq_len=4096, gbs=1024, ep=16, pp=2,
                                    vpp=vpp, dispatcher="deepep", ep_overlap=True)
        ctx = make_ctx(cfg, gpu, DEFAULT_CALIBRATION)
        layer = cfg.model.layers[0]
        layer_time(ctx, layer)
        edge = ctx.cache[(EP_CHUNK_EDGE, layer)]
        assert edge > 0
        assert _ep_chunk_edges_s(ctx, ((layer, 24),)) == pytest.approx(vpp * edge)
        no_delay = make_ctx(cfg.with_(delay_wgrad=False), gpu, DEFAULT_CALIBRATION)
        layer_time(no_delay, layer)
        assert no_delay.cache[(EP_CHUNK_EDGE, layer)] < edge
