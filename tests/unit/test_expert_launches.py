"""Host launches of the routed experts (timing.expert_host_s / expert_launch_exposed_s): Transformer Engine's
GroupedLinear issues one cuBLASLt GEMM and, quantized, one split quantize kernel per LOCAL expert, so the host time
grows with the experts per GPU and shows only where it outlasts the GPU work it can run ahead of."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.context import EXPERT_LAUNCHES, SPLIT_QUANTIZE_LAUNCH_S, SPLIT_QUANTIZE_PATH
from moeplan.engine.timing.moe import expert_host_s, expert_launch_exposed_s, split_quantize_host_s

CAL = DEFAULT_CALIBRATION
C = CAL.expert_launch_host_s
NO_GRAPHS: frozenset[str] = frozenset()


def test_launches_per_local_expert_by_pass_and_precision():
    # FP8 current scaling: forward fc1 + fc2 GEMMs and their input quantizes (4), backward dgrad + wgrad of both and
    # the two output-gradient quantizes (6), each a host round trip (split_quantize allocates every split on its own)
    assert expert_host_s(16, 1e5, "fp8-cs", NO_GRAPHS, CAL) == pytest.approx((16 * 4 * C, 16 * 6 * C))
    assert sum(sum(v.values()) for v in EXPERT_LAUNCHES.values()) == 10
    # MXFP8 and FP8 block scaling: split_quantize bulk-allocates the splits and quantizes them in a C++ loop, so
    # each split's quantize costs one kernel launch; the GEMMs stay round trips
    for prec in ("mxfp8", "fp8"):
        assert expert_host_s(16, 1e5, prec, NO_GRAPHS, CAL) == pytest.approx(
            (16 * (2 * C + 2 * SPLIT_QUANTIZE_LAUNCH_S), 16 * (4 * C + 2 * SPLIT_QUANTIZE_LAUNCH_S)))
    # FP8 delayed scaling and NVFP4 cast all splits in one fused kernel: the per-expert GEMMs remain
    for prec in ("fp8-ds", "nvfp4"):
        assert expert_host_s(16, 1e5, prec, NO_GRAPHS, CAL) == pytest.approx((16 * 2 * C, 16 * 4 * C))
    # BF16 experts pass plain tensor views: their launches stay in the per-layer constant
    assert expert_host_s(16, 1e5, "bf16", NO_GRAPHS, CAL) == (0.0, 0.0)


def test_split_quantize_host_time_follows_tes_allocation_path():
    """tex.split_quantize (TE pytorch/csrc/extensions/cast.cpp): BULK_MXFP8 / BULK_FP8_BLOCKWISE allocate once and
    launch one kernel per split; current scaling's UNFUSED path allocates and quantizes each split on its own."""
    assert {p for p, path in SPLIT_QUANTIZE_PATH.items() if path == "bulk"} == {"mxfp8", "fp8"}
    assert split_quantize_host_s("fp8-ds", CAL) == split_quantize_host_s("nvfp4", CAL) == 0.0
    assert split_quantize_host_s("mxfp8", CAL) == split_quantize_host_s("fp8", CAL) == SPLIT_QUANTIZE_LAUNCH_S
    assert split_quantize_host_s("fp8-cs", CAL) == C
    assert SPLIT_QUANTIZE_LAUNCH_S < 0.25 * C  # a launch from C++ against a pybind / allocation round trip


def test_host_time_scales_with_local_experts_and_stops_at_the_rows():
    f8, b8 = expert_host_s(8, 1e5, "mxfp8", NO_GRAPHS, CAL)
    f32, b32 = expert_host_s(32, 1e5, "mxfp8", NO_GRAPHS, CAL)
    assert f32 == pytest.approx(4 * f8) and b32 == pytest.approx(4 * b8)
    # empty splits launch nothing (te_general_grouped_gemm skips them): 32 experts and 5 rows launch for 5
    assert expert_host_s(32, 5, "mxfp8", NO_GRAPHS, CAL) == expert_host_s(5, 1e5, "mxfp8", NO_GRAPHS, CAL)


def test_graphed_experts_launch_nothing():
    for scopes in ({"moe"}, {"full_iteration"}):
        assert expert_host_s(32, 1e5, "mxfp8", frozenset(scopes), CAL) == (0.0, 0.0)
    # the dropless recipes' scopes do not capture the routed experts
    partial = frozenset({"attn", "moe_router", "moe_preprocess"})
    assert expert_host_s(32, 1e5, "mxfp8", partial, CAL) == expert_host_s(32, 1e5, "mxfp8", NO_GRAPHS, CAL)


def test_exposed_only_beyond_the_gpu_work_it_runs_ahead_of():
    assert expert_launch_exposed_s(1e-3, 2e-3, 1e-3, 2e-3) == 0.0  # hidden exactly
    assert expert_launch_exposed_s(1e-3, 2e-3, 5e-3, 9e-3) == 0.0  # enough GPU work
    assert expert_launch_exposed_s(3e-3, 2e-3, 1e-3, 5e-3) == pytest.approx(2e-3)  # forward short
    assert expert_launch_exposed_s(3e-3, 6e-3, 1e-3, 5e-3) == pytest.approx(3e-3)  # both short


def _super_b300(ep: int, mbs: int, precision: str = "mxfp8", recompute: str = "none") -> dict:
    # Bridge's Nemotron-3 Super recipe on 64 B300 (measured_variants.csv N20; the 26.06 perf config: HybridEP, graphs
    # attn / mamba / moe_router / moe_preprocess, which capture no routed expert): EP8 puts 64 of the 512 experts on
    # each GPU with ~350 rows each at MBS 1, EP64 8 with the same rows each
    return api.estimate("nemotron-3-super-120b", gpu="b300", gpus=64, seq_len=8192, gbs=512, mbs=mbs, ep=ep,
                        precision=precision, dispatcher="hybridep", cuda_graphs="attn,mamba,moe_router,moe_preprocess",
                        recompute=recompute, mcore_version="0.18", mtp_layers=2)


def _dsv3_b200(ep: int, mbs: int, precision: str = "mxfp8") -> dict:
    # Bridge's DeepSeek-V3 B200 layouts (measured_variants.csv MB01): PP16 EP8 and PP8 VPP2 EP32
    pp, vpp = (16, 1) if ep == 8 else (8, 2)
    return api.estimate("deepseek-v3", gpu="b200", gpus=256, seq_len=4096, gbs=2048, mbs=mbs, pp=pp, vpp=vpp, ep=ep,
                        precision=precision, dispatcher="deepep", cuda_graphs="attn,moe_router,moe_preprocess")


def _launch_per_microbatch(e: dict) -> float:
    return e["time_breakdown_s"]["launch_overhead"] / e["microbatches"]


def test_narrow_ep_pays_for_its_local_experts():
    """Nemotron-3 Super (512 experts of latent width 1,024) on B300: EP8's 64 local experts launch more host work
    than their small GEMMs run; EP64's 8 hide behind them."""
    ep8, ep64 = _super_b300(8, 1), _super_b300(64, 1)
    base8, base64 = _super_b300(8, 1, "bf16"), _super_b300(64, 1, "bf16")  # the per-layer constant alone
    extra8 = _launch_per_microbatch(ep8) - _launch_per_microbatch(base8)
    extra64 = _launch_per_microbatch(ep64) - _launch_per_microbatch(base64)
    assert extra8 > 0.2 * ep8["step_time_s"] / ep8["microbatches"]  # measured: 8.33 s a step of 8 micro-batches
    assert extra64 < 0.25 * extra8


def test_bulk_split_quantize_lets_wider_experts_hide_their_launches():
    """DeepSeek-V3 on B200 at EP8 (MB01's PP16 layout: 32 local experts of ~1,000 rows): with MXFP8's split
    quantizes a kernel launch each, the GEMMs' round trips hide behind the experts' GPU work; FP8 current scaling,
    whose splits are round trips too, still shows them."""
    mx, cs = _dsv3_b200(8, 1), _dsv3_b200(8, 1, "fp8-cs")
    base = _launch_per_microbatch(_dsv3_b200(8, 1, "bf16"))
    assert _launch_per_microbatch(mx) - base < 0.01 * mx["step_time_s"] / mx["microbatches"]
    assert _launch_per_microbatch(cs) - base > 0.03 * cs["step_time_s"] / cs["microbatches"]


def test_more_rows_per_expert_hide_the_launches():
    """The host time per micro-batch is fixed by the local experts; MBS 4 gives each expert 4x the GPU work
    to run ahead of, so less of it shows per micro-batch than at MBS 1."""
    one, four = _super_b300(8, 1), _super_b300(8, 4)
    base1, base4 = _super_b300(8, 1, "bf16"), _super_b300(8, 4, "bf16")
    extra1 = _launch_per_microbatch(one) - _launch_per_microbatch(base1)
    extra4 = _launch_per_microbatch(four) - _launch_per_microbatch(base4)
    assert extra1 > 0 and 0.0 <= extra4 < 0.5 * extra1


def test_recomputed_experts_launch_again():
    """moe or full recompute re-runs the MoE block's forward in backward, its dispatch sync included
    (megatron/core/transformer/moe/moe_layer.py checkpoints the whole block): the experts' forward
    launches show a second time, and the recompute is not GPU work the backward launches run ahead of.
    moe_act recomputes only the activation (no GEMM launches); layernorm nothing of the experts."""
    from moeplan.run.config import Recompute
    from moeplan.engine.timing.moe import experts_recomputed

    assert experts_recomputed(Recompute("full")) and experts_recomputed(Recompute("selective", frozenset({"moe"})))
    for mods in ({"moe_act"}, {"layernorm", "mla_up_proj"}):
        assert not experts_recomputed(Recompute("selective", frozenset(mods)))
    assert not experts_recomputed(Recompute())

    def launch(recompute: str) -> float:
        return _launch_per_microbatch(_super_b300(8, 1, recompute=recompute))

    def bf16(recompute: str) -> float:  # the per-layer constant alone
        return _launch_per_microbatch(_super_b300(8, 1, "bf16", recompute))

    none, moe, act = (launch(r) - bf16(r) for r in ("none", "selective:moe", "selective:moe_act"))
    # moe_act launches no expert GEMM again; its recomputed activation is more GPU work for the backward to hide in
    assert 0 < act <= none
    # 64 local experts at EP8: the forward's launches outlast their window, so they show twice
    assert moe > 1.3 * none


def test_every_quantized_precision_has_one_split_quantize_path():
    """One table (timing.context.SPLIT_QUANTIZE_PATH) says how TE's split_quantize treats each quantized precision:
    every quantized precision has a path, BF16 none (its experts quantize nothing), and the grouped-tensor flow's
    fused cast reads the same table as the per-split costs."""
    from moeplan.base.vocab import PRECISIONS

    assert set(SPLIT_QUANTIZE_PATH) == set(PRECISIONS) - {"bf16"}
    assert set(SPLIT_QUANTIZE_PATH.values()) == {"fused", "bulk", "per_split"}
    for prec, path in SPLIT_QUANTIZE_PATH.items():
        grouped_fwd = expert_host_s(16, 1e5, prec, NO_GRAPHS, CAL, grouped=True)[0]
        launches = EXPERT_LAUNCHES["fwd"]["gemm"] + (0 if path == "fused" else EXPERT_LAUNCHES["fwd"]["quantize"])
        assert grouped_fwd == pytest.approx(launches * C)
        assert (split_quantize_host_s(prec, CAL) == 0.0) == (path == "fused")
