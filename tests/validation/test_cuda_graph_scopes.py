"""Partial (TE-scoped) against full-iteration CUDA graphs on GB200 (N01, N03: Megatron-LM's MoE recipe index): what the
measurements locate and what moeplan does not reproduce yet (docs/calibration.md, 'Partial vs full-iteration CUDA
graphs')."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.layer import launch_share
from moeplan.engine.timing.moe import expert_host_s
from moeplan.engine.timing.step import estimate_time
from moeplan.models.spec import MoE
from tests.measured_variants import n_variants


def _pair(group: str):
    """(partial, full) rows of ``group``: measured TFLOP/s, the run and its estimate."""
    rows = {("full" if "full-iteration" in v.label else "partial"): v for v in n_variants()
            if v.group == group and v.label != "BF16"}
    out = []
    for kind in ("partial", "full"):
        v = rows[kind]
        cfg, gpu = api.build_config(v.model, **v.kwargs)
        out.append((v.measured(), cfg, gpu, estimate_time(cfg, gpu)))
    return out


def _gap_per_layer_mb_s(group: str) -> tuple[float, float, float]:
    """(measured step-time gap per MoE layer and micro-batch, routed rows x hidden per layer and micro-batch on one
    GPU, per-expert launch host seconds per layer and micro-batch) of the partial-graph row over the full one."""
    (mp, cfg, gpu, tp), (mf, _, _, tf) = _pair(group)
    flops_step = tp.tflops_per_gpu * tp.step_time_s  # the same FLOPs per GPU for both rows
    gap_s = flops_step / mp - flops_step / mf
    moe = cfg.model.first_moe
    layers = sum(1 for layer in cfg.model.layers if isinstance(layer.mlp, MoE))
    per = gap_s / (layers * tp.microbatches)
    tokens = cfg.batch.mbs * cfg.batch.seq_len / (cfg.parallel.tp * cfg.parallel.cp)
    elements = tokens * moe.top_k * cfg.model.hidden
    fwd, bwd = expert_host_s(moe.num_experts / cfg.parallel.ep, 1e9, cfg.precision, frozenset(), DEFAULT_CALIBRATION)
    return per, elements, fwd + bwd


def test_full_iteration_rows_run_their_recipes_sync_free_settings():
    """Both paged-stash recipes run sync-free dropless MoE (moe_expert_rank_capacity_factor 1.5 / 1.2, the TE op
    fuser): the rows carry it, the TE-scoped rows do not."""
    for group, factor in (("N01", 1.5), ("N03", 1.2)):
        (_, partial, _, _), (_, full, _, _) = _pair(group)
        assert full.rank_capacity_factor == factor and full.experts_op_fused
        assert partial.rank_capacity_factor is None and "full_iteration" not in partial.cuda_graph_scopes


def test_partial_graph_gap_follows_routed_elements_not_expert_launches():
    """The measured gap per MoE layer and micro-batch (N01 ~3.2 ms, N03 ~1.4 ms) is the same per routed hidden
    element in both groups (~10-12 ps) while the per-expert MXFP8 launches the model counts differ 4x (8 against 2
    local experts): the partial rows' loss is not the per-expert launch count alone."""
    n01, n03 = _gap_per_layer_mb_s("N01"), _gap_per_layer_mb_s("N03")
    assert 2.5e-3 < n01[0] < 4e-3 and 1e-3 < n03[0] < 2e-3
    per_elem = (n01[0] / n01[1], n03[0] / n03[1])
    assert 8e-12 < min(per_elem) and max(per_elem) < 14e-12
    assert max(per_elem) / min(per_elem) < 1.25
    assert n01[2] / n03[2] == pytest.approx(4.0)


# Host seconds a Grace CPU spends per second of the same PyTorch / TE host work on an x86 host: one torch.nn.Linear
# forward costs 37.08 us of CPU on GB200's Grace against 13.48 us on an H100 DGX's Xeon 8480C (NVIDIA/
# TransformerEngine issue #2053). Not in the model (tried, docs/calibration.md): the bound below only.
GRACE_OVER_X86_HOST = 37.08 / 13.48


def _forward_host_on_grace_s(group: str) -> float:
    """Forward host seconds per MoE layer and micro-batch of everything moeplan counts as eager on the TE-scoped row:
    the per-expert launches (expert_host_s) and the layer's uncaptured per-call launches (launch_overhead_per_layer_s x
    launch_share, all of it, though part of it is the backward's), x GRACE_OVER_X86_HOST."""
    (_, cfg, _, _), _ = _pair(group)
    layer = next(x for x in cfg.model.layers if isinstance(x.mlp, MoE))
    moe = layer.mlp
    fwd, _ = expert_host_s(moe.num_experts / cfg.parallel.ep, 1e9, cfg.precision, cfg.cuda_graph_scopes,
                           DEFAULT_CALIBRATION)
    calls = DEFAULT_CALIBRATION.launch_overhead_per_layer_s * launch_share(layer, cfg)
    return (fwd + calls) * GRACE_OVER_X86_HOST


def test_partial_graph_gap_exceeds_the_graces_forward_host_work():
    """Issue #31's host angle (the forward after the dropless host sync races its host launches against the GPU): even
    with Grace's 2.75x host time and NO GPU work to hide behind, the forward host work moeplan counts on the TE-scoped
    rows (N01: 8 local MXFP8 experts, ~2.4 ms; N03: 2, ~0.9 ms) stays below the measured gap per MoE layer and
    micro-batch (~3.1 / ~1.4 ms); the backward has no host sync and ~8 / ~4 ms of GPU work to run ahead of. A
    host/GPU max() over the post-sync segment cannot close the gap at the fitted launch costs: what is missing is not
    host launch time alone (docs/calibration.md, 'Partial vs full-iteration CUDA graphs')."""
    for group in ("N01", "N03"):
        gap_s = _gap_per_layer_mb_s(group)[0]
        host_s = _forward_host_on_grace_s(group)
        assert 0.0 < host_s < 0.85 * gap_s, (group, host_s, gap_s)


@pytest.mark.xfail(strict=True, reason="named gap (docs/calibration.md, 'Partial vs full-iteration CUDA graphs'): "
                   "measured 1.25x on both N01 and N03, moeplan 1.05x / 1.04x; the full-iteration recipes also change "
                   "the expert kernels (CuTe DSL fused grouped MLP) and drop the host sync, and no shared row "
                   "separates the three")
def test_full_iteration_gain_over_te_scoped_graphs():
    for group in ("N01", "N03"):
        (mp, _, _, tp), (mf, _, _, tf) = _pair(group)
        assert tf.tflops_per_gpu / tp.tflops_per_gpu == pytest.approx(mf / mp, rel=0.10)
