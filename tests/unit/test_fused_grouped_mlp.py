"""TE's CuTe DSL fused grouped MLP (moeplan.base.te_release.FusedGroupedMLP; NVTE_CUTEDSL_FUSED_GROUPED_MLP=1): the
op fuser's fc1 GEMM + scaled SwiGLU + MXFP8 quantize and fc2 dgrad + dSwiGLU + quantize run as GEMM epilogues on
compute capability 10.x, so the activation's own passes, the BF16 reads of the two quantizes and fc2's dgrad output
never touch HBM (moeplan.engine.timing.moe.fused_grouped_mlp_removed_bytes). Only op-fused MXFP8 SwiGLU experts of
a release that has it, on sm100 / sm103, with widths its kernels take, are charged so; the paged-stash recipes of
N01 / N03 are such runs."""

from __future__ import annotations

import dataclasses

import pytest

from moeplan import api
from moeplan.base.te_release import (FUSED_GROUPED_MLP_ENV, TE_RELEASES, fused_grouped_mlp)
from moeplan.engine.activations import BF16_BYTES
from moeplan.engine.timing.calibration import DEFAULT_CALIBRATION
from moeplan.engine.timing.moe import fused_grouped_mlp_removed_bytes
from moeplan.engine.timing.step import estimate_time
from moeplan.megatron.export import env_settings, to_settings
from moeplan.megatron.to_run import run_config_from_settings
from moeplan.models import load_model
from moeplan.models.spec import MoE
from moeplan.run.config import RunConfig

HOPPER, B200, GB300, THOR, RTX = 90, 100, 103, 110, 120
QWEN30_DIMS = (2048, 1536, 768)  # fc1 in, fc1 out (2F), fc2 in (F)


def _n01(full: bool = True, **over):
    """N01's MXFP8 recipe (tests/measured_variants.py): paged stash + full-iteration graphs, or TE-scoped graphs."""
    kw = dict(gpu="gb200", gpus=16, seq_len=4096, gbs=512, mbs=4, ep=16, precision="mxfp8", dispatcher="hybridep",
              cuda_graphs="full_iteration" if full else "attn,moe_router,moe_preprocess", mcore_version="0.19",
              rank_capacity_factor=1.5 if full else None)
    kw.update(over)
    cfg, _ = api.build_config("qwen3-30b-a3b", **kw)
    return cfg


def _moe(cfg) -> MoE:
    return next(lay.mlp for lay in cfg.model.layers if isinstance(lay.mlp, MoE))


def test_table_release_arch_precision_and_widths():
    assert fused_grouped_mlp("2.14", B200, "mxfp8", "swiglu", QWEN30_DIMS)
    assert fused_grouped_mlp("2.14", GB300, "mxfp8", "swiglu", QWEN30_DIMS)
    # compute capability 10.x only (get_device_compute_capability()[0] != 10 refuses the rest), unknown: no
    for arch in (HOPPER, THOR, RTX, None):
        assert not fused_grouped_mlp("2.14", arch, "mxfp8", "swiglu", QWEN30_DIMS)
    # recipe.mxfp8() only: BF16 and the FP8 recipes never; NVFP4 (2.17+) is not modelled
    for prec in ("bf16", "fp8", "fp8-cs", "fp8-ds", "nvfp4"):
        assert not fused_grouped_mlp("2.19", B200, prec, "swiglu", QWEN30_DIMS)
    assert not fused_grouped_mlp("2.14", B200, "mxfp8", "clamped_glu", QWEN30_DIMS)
    # v2.14 wants every width a multiple of 256, v2.15+ of 64
    assert not fused_grouped_mlp("2.14", B200, "mxfp8", "swiglu", (2048, 1408, 704))
    assert fused_grouped_mlp("2.15", B200, "mxfp8", "swiglu", (2048, 1408, 704))
    assert not fused_grouped_mlp("2.15", B200, "mxfp8", "swiglu", (2048, 1400, 700))
    # TE 1.x has no op fuser grouped MLP
    assert [v for v, r in TE_RELEASES.items() if r.fused_grouped_mlp is None] == ["1.3", "1.11"]


def test_removed_bytes_swiglu():
    moe = _moe(_n01())
    f = moe.expert_ffn_hidden
    removed = fused_grouped_mlp_removed_bytes(moe)
    fwd = sum(v[0] for v in removed.values())
    bwd = sum(v[1] for v in removed.values())
    # forward: the activation's read of fc1's output (2F) and write (F), the quantize's read of it (F)
    assert fwd == pytest.approx((2 * f + f + f) * BF16_BYTES)
    # backward: fc2 dgrad's output write (F), the activation's read of it (F) and write (2F), the quantize's read (2F)
    assert bwd == pytest.approx((f + f + 2 * f + 2 * f) * BF16_BYTES)
    assert removed["gemm"] == (0.0, f * BF16_BYTES)


def test_which_runs_take_it():
    assert _n01().experts_fused_mlp(_moe(_n01()))
    te_scoped = _n01(full=False)
    assert not te_scoped.experts_op_fused and not te_scoped.experts_fused_mlp(_moe(te_scoped))
    bf16 = _n01(precision="bf16")
    assert not bf16.experts_fused_mlp(_moe(bf16))
    assert not _n01(te_version="1.11").experts_fused_mlp(_moe(_n01()))  # no op-fuser grouped MLP in TE 1.x
    gpt_oss = dataclasses.replace(_moe(_n01()), act_clamp=7.0, expert_bias=True)
    assert not _n01().experts_fused_mlp(gpt_oss)
    nemotron = load_model("nemotron-3-super-120b")  # squared ReLU experts (not gated): ScaledSReLU, not modelled
    assert not any(_n01().experts_fused_mlp(lay.mlp) for lay in nemotron.layers if isinstance(lay.mlp, MoE))


def test_layer_charges_exactly_the_removed_passes(monkeypatch):
    cfg = _n01()
    cal = DEFAULT_CALIBRATION
    fused = estimate_time(cfg, cfg.gpu, cal)
    monkeypatch.setattr(RunConfig, "experts_fused_mlp", lambda self, m: False)
    unfused = estimate_time(cfg, cfg.gpu, cal)
    moe = _moe(cfg)
    removed = fused_grouped_mlp_removed_bytes(moe)
    hbm = cfg.gpu.hbm_bw_bytes_per_s * cal.hbm_eff
    tokens = cfg.batch.mbs * cfg.batch.seq_len  # TP1 CP1
    rows = tokens * moe.top_k * cfg.rows_factor
    moe_layers = sum(isinstance(lay.mlp, MoE) for lay in cfg.model.layers)
    micro = cfg.batch.gbs // (cfg.batch.mbs * cfg.parallel.dp)
    per_step = rows * moe_layers * micro / hbm
    d_elem = unfused.breakdown_s["elementwise"] - fused.breakdown_s["elementwise"]
    d_gemm = unfused.breakdown_s["grouped_gemm"] - fused.breakdown_s["grouped_gemm"]
    assert d_elem == pytest.approx((sum(removed["activation"]) + sum(removed["cast"])) * per_step, rel=1e-6)
    # fc2's dgrad output (removed["gemm"]) is epilogue traffic, hidden behind that GEMM's compute: nothing to remove
    assert removed["gemm"] and d_gemm == 0.0
    assert fused.step_time_s < unfused.step_time_s


def test_export_sets_the_variable_where_moeplan_charges_the_fused_path():
    assert env_settings(_n01()).get(FUSED_GROUPED_MLP_ENV) == "1"
    assert FUSED_GROUPED_MLP_ENV not in env_settings(_n01(full=False))
    assert FUSED_GROUPED_MLP_ENV not in env_settings(_n01(precision="bf16"))


def test_export_sets_the_glu_interleave_the_kernels_need_and_reads_back():
    cfg = _n01()
    s = to_settings(cfg, "0.19")
    assert s["use_transformer_engine_op_fuser"] and s["moe_mlp_glu_interleave_size"] == 32
    assert "moe_mlp_glu_interleave_size" not in to_settings(_n01(precision="bf16"), "0.19")
    back = run_config_from_settings(s, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version="0.19")
    assert back.experts_fused_mlp(_moe(cfg))
