"""Knobs of Megatron-Core 0.17-0.19 that change memory or time (issue #36 item 2), each with its version rule in the
field table (moeplan.base.fields), its export and its cost. Sources: the NVIDIA/Megatron-LM tags core_v0.17.1,
core_v0.18.2, core_v0.19.0 (transformer_config.py, fine_grained_activation_offload.py)."""

from __future__ import annotations

import pytest

from moeplan import api
from moeplan.base.errors import MoeplanError
from moeplan.base.fields import fields_for
from moeplan.cli import main
from moeplan.megatron import export, read
from moeplan.megatron.to_run import run_config_from_settings

OFFLOADED = dict(gpu="h100", gpus=64, seq_len=32768, gbs=64, pp=4, cp=2, ep=16, offload_modules="core_attn,expert_fc1")
GIB = 2**30


# ---- activation_offload_fraction (core_v0.19.0 TransformerConfig)

def test_activation_offload_fraction_is_a_019_field():
    assert "activation_offload_fraction" in fields_for("0.19").knobs
    assert "activation_offload_fraction" not in fields_for("0.18").knobs  # absent from core_v0.18.2


def test_activation_offload_fraction_scales_the_offloaded_bytes_linearly():
    full, half, none = (api.estimate_run("qwen3-30b-a3b", mcore_version="0.19", activation_offload_fraction=f,
                                         **OFFLOADED) for f in (1.0, 0.5, 0.0))
    assert full.memory.host_peak_bytes > 0
    assert half.memory.host_peak_bytes == pytest.approx(full.memory.host_peak_bytes / 2)
    assert none.memory.host_peak_bytes == 0
    moved = full.memory.host_peak_bytes
    # what is not offloaded stays on the GPU (the peak rank offloads most here: PP rank 0)
    assert half.memory.total_bytes - full.memory.total_bytes == pytest.approx(moved / 2, rel=1e-6)
    assert none.memory.total_bytes - full.memory.total_bytes == pytest.approx(moved, rel=1e-6)


def test_activation_offload_fraction_refused_before_019(capsys):
    with pytest.raises(MoeplanError, match="activation_offload_fraction needs Megatron-Core >= 0.19"):
        api.estimate_run("qwen3-30b-a3b", mcore_version="0.18", activation_offload_fraction=0.5, **OFFLOADED)
    code = main(["estimate", "qwen3-30b-a3b", "--gpus", "64", "--seq-len", "32768", "--gbs", "64", "--pp", "4",
                 "--cp", "2", "--ep", "16", "--offload-modules", "core_attn", "--activation-offload-fraction", "0.5",
                 "--mcore-version", "0.17"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "0.19" in err


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_activation_offload_fraction_out_of_range_is_one_line(bad):
    with pytest.raises(MoeplanError, match="activation.offload.fraction must be"):
        api.estimate_run("qwen3-30b-a3b", mcore_version="0.19", activation_offload_fraction=bad, **OFFLOADED)


def test_activation_offload_fraction_exported_and_read_back():
    cfg, _ = api.build_config("qwen3-30b-a3b", mcore_version="0.19", activation_offload_fraction=0.25, **OFFLOADED)
    settings = export.to_settings(cfg, "0.19")
    assert settings["activation_offload_fraction"] == 0.25
    assert "model.activation_offload_fraction=0.25" in export.to_overrides(cfg, "0.19")
    back = read.parse_run_text("\n".join(export.to_overrides(cfg, "0.19")), "o.txt")
    assert back.settings["activation_offload_fraction"] == 0.25
    default, _ = api.build_config("qwen3-30b-a3b", mcore_version="0.19", **OFFLOADED)
    assert "activation_offload_fraction" not in export.to_settings(default, "0.19")  # 1.0: Megatron's default
    with pytest.raises(MoeplanError, match=">= 0.19"):
        cfg18, _ = api.build_config("qwen3-30b-a3b", mcore_version="0.19", activation_offload_fraction=0.25,
                                    **OFFLOADED)
        export.to_settings(cfg18, "0.18")


def test_activation_offload_fraction_read_from_a_run_file():
    cfg, _ = api.build_config("qwen3-30b-a3b", mcore_version="0.19", activation_offload_fraction=0.25, **OFFLOADED)
    back = run_config_from_settings(export.to_settings(cfg, "0.19"), cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version="0.19")
    assert back.activation_offload_fraction == 0.25


# ---- fused_group_mlp offload label (core_v0.19.0 transformer_config.py / moe/experts.py)

FUSED = dict(gpu="h100", gpus=64, seq_len=32768, gbs=64, pp=4, cp=2, ep=16, mcore_version="0.19",
             dispatcher="hybridep", rank_capacity_factor=1.5)  # the sync-free bundle: the experts on TE's op fuser


def test_fused_group_mlp_is_a_019_label():
    assert "fused_group_mlp" in fields_for("0.19").offload_modules
    assert "fused_group_mlp" not in fields_for("0.18").offload_modules


def test_fused_group_mlp_moves_the_grouped_mlps_saved_tensors():
    """The offload hooks are on around the whole fused grouped MLP: fc1's input, the activation's input and fc2's
    input leave the GPU, more than expert_fc1 alone moves."""
    none = api.estimate_run("qwen3-30b-a3b", **FUSED)
    fc1 = api.estimate_run("qwen3-30b-a3b", offload_modules="expert_fc1", **FUSED)
    fused = api.estimate_run("qwen3-30b-a3b", offload_modules="fused_group_mlp", **FUSED)
    assert none.memory.host_peak_bytes == 0
    assert fused.memory.host_peak_bytes > 2 * fc1.memory.host_peak_bytes > 0
    assert fused.memory.total_bytes + fused.memory.host_peak_bytes == pytest.approx(none.memory.total_bytes, rel=1e-6)


@pytest.mark.parametrize("extra,needle", [
    (dict(rank_capacity_factor=None, dispatcher="deepep"), "needs use_transformer_engine_op_fuser"),
    (dict(offload_modules="fused_group_mlp,moe_act"), "not with moe_act"),
    (dict(offload_modules="fused_group_mlp,expert_fc1"), "not with expert_fc1"),
    (dict(mcore_version="0.18"), "not available in Megatron-Core 0.18")])
def test_fused_group_mlp_exclusions_are_refused(extra, needle):
    kw = {**FUSED, "offload_modules": "fused_group_mlp", **extra}
    with pytest.raises(MoeplanError, match=needle):
        api.estimate_run("qwen3-30b-a3b", **kw)


@pytest.mark.parametrize("settings,needle", [
    ({"offload_modules": ["fused_group_mlp"]}, "needs use_transformer_engine_op_fuser"),
    ({"offload_modules": ["fused_group_mlp", "expert_fc1"], "use_transformer_engine_op_fuser": True},
     "not with expert_fc1")])
def test_fused_group_mlp_exclusions_are_lint_findings(settings, needle):
    from moeplan.megatron.asserts import FileView, tripped
    from moeplan.models import load_model
    base = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4, "expert_model_parallel_size": 16,
            "context_parallel_size": 2, "global_batch_size": 64, "micro_batch_size": 1, "seq_length": 32768,
            "fine_grained_activation_offloading": True}
    view = FileView({**base, **settings}, {}, load_model("qwen3-30b-a3b"), 64, "0.19", "megatron-lm")
    hits = [m for a, m in tripped(view) if a.id == "offload-modules"]
    assert hits and needle in hits[0]
    ok = FileView({**base, "offload_modules": ["fused_group_mlp"], "use_transformer_engine_op_fuser": True}, {},
                  load_model("qwen3-30b-a3b"), 64, "0.19", "megatron-lm")
    assert not [a for a, _ in tripped(ok) if a.id == "offload-modules"]


# ---- moe_router_dtype (every release; Megatron Bridge v0.6.0 model providers)

ROUTER = dict(gpu="h100", gpus=64, seq_len=8192, gbs=64, pp=4, ep=8)


@pytest.mark.parametrize("model,expected", [
    ("deepseek-v3", "fp32"), ("deepseek-v2-lite", "fp32"), ("kimi-k2", "fp32"), ("glm-4.5", "fp32"),
    ("glm-5", "fp32"), ("qwen3-next-80b-a3b", "fp32"), ("qwen3.5-397b-a17b", "fp32"),
    ("nemotron-3-nano-30b-a3b", "fp32"),
    ("qwen3-30b-a3b", None), ("qwen3-235b-a22b", None), ("gpt-oss-120b", None), ("mixtral-8x7b", None)])
def test_router_dtype_exported_as_the_models_bridge_provider_sets_it(model, expected):
    """Bridge's model bridges set fp32 by architecture, not by expert count (Qwen3 MoE has 128 experts and none)."""
    cfg, _ = api.build_config(model, **{**ROUTER, "pp": 1, "gpus": 8})
    settings = export.to_settings(cfg, "0.19")
    assert settings.get("moe_router_dtype") == expected
    if expected:
        assert "model.moe_router_dtype=fp32" in export.to_overrides(cfg, "0.19")
        assert "--moe-router-dtype fp32" in " ".join(export.to_megatron_lm_args(cfg, "0.19"))


def test_router_dtype_choices_and_round_trip():
    cfg, _ = api.build_config("qwen3-30b-a3b", moe_router_dtype="fp32", **ROUTER)
    assert export.to_settings(cfg, "0.16")["moe_router_dtype"] == "fp32"
    back = run_config_from_settings(export.to_settings(cfg, "0.16"), cfg.model, cfg.parallel.gpus, cfg.gpu)
    assert back.mcore_router_dtype == "fp32" and back.moe_router_dtype == "fp32"
    none, _ = api.build_config("deepseek-v3", moe_router_dtype="none", **ROUTER)
    assert "moe_router_dtype" not in export.to_settings(none, "0.16")
    with pytest.raises(MoeplanError, match="moe_router_dtype"):
        api.build_config("qwen3-30b-a3b", moe_router_dtype="bf17", **ROUTER)


def test_fp32_router_logits_cost_little_memory():
    """The cost of an fp32 router: the logits (one value per expert per token and MoE layer) at 4 bytes instead of
    2, kept for backward: on DeepSeek-V3 at 8K tokens well under 1% of a GPU's memory, but not zero."""
    fp32 = api.estimate_run("deepseek-v3", moe_router_dtype="fp32", **ROUTER)
    bf16 = api.estimate_run("deepseek-v3", moe_router_dtype="none", **ROUTER)
    extra = fp32.memory.total_bytes - bf16.memory.total_bytes
    assert 0 < extra < 0.01 * fp32.memory.total_bytes


# ---- the ncclep flex backend (core_v0.19.0 transformer_config.py / token_dispatcher.py _NCCLEPManager)

NCCLEP = dict(gpu="h100", gpus=64, seq_len=8192, gbs=64, pp=4, ep=16, mcore_version="0.19", dispatcher="ncclep",
              rank_capacity_factor=1.5)


def test_ncclep_is_a_019_flex_backend():
    assert "ncclep" in fields_for("0.19").flex_backends
    assert "ncclep" not in fields_for("0.18").flex_backends


def test_ncclep_costed_with_deepeps_kernels_and_buffers():
    """No published NCCL EP rate or buffer size: DeepEP's normal-kernel constants and buffers stand in."""
    nccl = api.estimate_run("qwen3-30b-a3b", **NCCLEP)
    deep = api.estimate_run("qwen3-30b-a3b", **{**NCCLEP, "dispatcher": "deepep", "rank_capacity_factor": None})
    assert nccl.time.breakdown_s["ep_comm"] > 0
    assert nccl.time.breakdown_s["ep_comm"] == pytest.approx(deep.time.breakdown_s["ep_comm"])
    assert nccl.memory.peak.items["dispatcher_buffers"] == deep.memory.peak.items["dispatcher_buffers"] > 0


def test_ncclep_exported_with_its_receive_budget():
    cfg, _ = api.build_config("qwen3-30b-a3b", **NCCLEP)
    s = export.to_settings(cfg, "0.19")
    assert (s["moe_token_dispatcher_type"], s["moe_flex_dispatcher_backend"]) == ("flex", "ncclep")
    assert s["moe_expert_rank_capacity_factor"] == 1.5 and "moe_paged_stash" not in s  # paged stash is HybridEP's
    back = run_config_from_settings(s, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version="0.19")
    assert back.dispatcher == "ncclep"
    with pytest.raises(MoeplanError, match="ncclep .*needs Megatron-Core >= 0.19"):
        export.to_settings(cfg, "0.18")


@pytest.mark.parametrize("extra,needle", [
    (dict(mcore_version="0.18"), "needs Megatron-Core >= 0.19"),
    (dict(rank_capacity_factor=None), "needs moe_expert_rank_capacity_factor"),
    (dict(rank_capacity_factor=1.2, moe_imbalance=1.3), "NCCL EP traps")])
def test_ncclep_refused_in_one_line(extra, needle):
    with pytest.raises(MoeplanError, match=needle):
        api.estimate_run("qwen3-30b-a3b", **{**NCCLEP, **extra})


# ---- NVFP4 training precision (TransformerConfig fp4 / fp4_recipe, core_v0.16.1 .. core_v0.19.0)

FP4 = dict(gpus=64, seq_len=8192, gbs=64, pp=4, ep=8, mcore_version="0.19")


def test_nvfp4_fields_in_the_table_from_016():
    assert {"fp4", "fp4_recipe"} <= set(fields_for("0.16").knobs)
    assert "fp4" not in fields_for("0.15").knobs


def test_nvfp4_runs_its_gemms_at_the_fp4_peak_and_keeps_mfu_against_bf16():
    from moeplan.engine.timing.context import gemm_rate
    from moeplan.hardware import load_gpu
    b200 = load_gpu("b200")
    assert gemm_rate(b200, "nvfp4") == pytest.approx(gemm_rate(b200, "mxfp8") * b200.peak("fp4") / b200.peak("fp8"))
    fp4 = api.estimate_run("deepseek-v3", gpu="gb200", precision="nvfp4", **{**FP4, "gpus": 256, "ep": 32, "pp": 8})
    fp8 = api.estimate_run("deepseek-v3", gpu="gb200", precision="mxfp8", **{**FP4, "gpus": 256, "ep": 32, "pp": 8})
    assert fp4.time.tokens_per_s_per_gpu > fp8.time.tokens_per_s_per_gpu
    assert fp4.time.peak_flops == fp8.time.peak_flops == load_gpu("gb200").peak("bf16")  # MFU vs the BF16 peak
    assert fp4.memory.total_bytes < fp8.memory.total_bytes  # GEMM inputs kept in 4.5 bits, not 8.25


def test_nvfp4_exported_as_bridge_writes_it_and_read_back():
    cfg, _ = api.build_config("qwen3-30b-a3b", gpu="b200", precision="nvfp4", **FP4)
    s = export.to_settings(cfg, "0.19")
    assert (s["fp8"], s["fp4"], s["fp4_recipe"]) == (None, "e2m1", "nvfp4")
    assert {"++mixed_precision.fp4=e2m1", "++mixed_precision.fp4_recipe=nvfp4"} <= set(export.to_overrides(cfg, "0.19"))
    assert "--fp4-format e2m1" in " ".join(export.to_megatron_lm_args(cfg, "0.19"))
    back = run_config_from_settings(s, cfg.model, cfg.parallel.gpus, cfg.gpu, mcore_version="0.19")
    assert back.precision == "nvfp4"
    alltoall, _ = api.build_config("qwen3-30b-a3b", gpu="b200", precision="nvfp4", dispatcher="alltoall", **FP4)
    with pytest.raises(MoeplanError, match="NVFP4 .*needs Megatron-Core >= 0.16"):
        export.to_settings(alltoall, "0.15")


def test_nvfp4_refused_on_hopper_in_one_line(capsys):
    with pytest.raises(MoeplanError, match="no fp4 tensor cores"):
        api.estimate_run("qwen3-30b-a3b", gpu="h100", precision="nvfp4", **FP4)
    code = main(["estimate", "qwen3-30b-a3b", "--gpu", "h200", "--gpus", "64", "--seq-len", "8192", "--gbs", "64",
                 "--ep", "8", "--precision", "nvfp4"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "fp4" in err
