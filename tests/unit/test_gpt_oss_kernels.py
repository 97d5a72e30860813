"""What gpt-oss has and the other catalog MoEs lack, costed from the code that runs (each from its config):
- the clamped GLU (``swiglu_limit``) and expert biases: Megatron-Core's unfused TEGroupedMLP clamps and
  concatenates the fc1 output in eager torch and adds fc2's bias per expert (TEGroupedMLP._apply_bias), unless
  TE's op fuser runs the experts (timing.expert_glue_bytes / experts_op_fused);
- attention sinks (softmax_type learnable): TE disables FlashAttention for them and, under CP, every backend but
  FusedAttention with cp_comm_type a2a (attention_backend.softmax_type / sink_cp_comm_ok); the unfused path
  cat's the sink column to the scores (s + 1 keys: the fp32 torch softmax) and, like any sliding window on that
  path, computes the full score square."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

import pytest

from moeplan import api
from moeplan.engine.activations import BF16_BYTES, unfused_attention_bytes, unfused_softmax_is_fused, unfused_softmax_keys
from moeplan.run.attention_backend import sink_cp_comm_ok, softmax_type
from moeplan.base.errors import MoeplanError
from moeplan.hardware import load_gpu
from moeplan.models import load_model
from moeplan.models.hf import spec_from_dict
from moeplan.engine.activations import expert_probs_bytes
from moeplan.run.attention_backend import attention_kernel_mixer
from moeplan.models.spec import Attention, Layer, ModelSpec, MoE
from moeplan.engine.timing.attention import UNFUSED_SINK_SCORE_BYTES, attention_efficiency, cp_comm_allowed
from moeplan.engine.timing.moe import expert_glue_bytes, expert_glue_clamp_fwd_bytes
from moeplan.run.attention_backend import attention_kernel

OSS = load_model("gpt-oss-120b")
OSS_MOE = OSS.layers[0].mlp
SLIDING = next(l.mixer for l in OSS.layers if isinstance(l.mixer, Attention) and l.mixer.sliding_window)
FULL = next(l.mixer for l in OSS.layers if isinstance(l.mixer, Attention) and not l.mixer.sliding_window)
# The B300 row of tests/data/bridge_perf_runs.csv (26.06, unfused experts: no op fuser in that recipe)
B300_ROW = dict(gpu="b300", gpus=64, seq_len=4096, gbs=1280, precision="mxfp8", grad_fp32=False, mcore_version="0.18",
                tp=1, pp=1, vpp=1, cp=1, ep=8, etp=1, mbs=4, dispatcher="hybridep",
                cuda_graphs="attn,moe_router,moe_preprocess")


def _plain(spec: ModelSpec) -> ModelSpec:
    """The same model with its experts' clamp and biases taken away (everything else equal)."""
    layers = tuple(Layer(l.mixer, dataclasses.replace(l.mlp, act_clamp=None, expert_bias=False)) for l in spec.layers)
    return dataclasses.replace(spec, layers=layers)


def _oss_config(**over: object) -> dict[str, object]:
    text = resources.files("moeplan.models.data").joinpath("gpt-oss-120b.json").read_text(encoding="utf-8")
    return {k: v for k, v in json.loads(text).items() if not k.startswith("_")} | over


def test_config_reads_the_clamp() -> None:
    assert OSS_MOE.act_clamp == 7.0  # config.json swiglu_limit
    assert spec_from_dict(_oss_config(swiglu_limit=None), "x", "t").layers[0].mlp.act_clamp is None
    with pytest.raises(MoeplanError, match="swiglu_limit"):
        spec_from_dict(_oss_config(swiglu_limit="7"), "x", "t")


def test_glue_bytes_op_by_op() -> None:
    """Each eager op of experts.py / fused_bias_geglu.py, counted here from the op list, not the formula."""
    f, h = OSS_MOE.expert_ffn_hidden, 2880
    clamp_fwd = [("gate clamp", f, f), ("linear clamp", f, f), ("cat", 2 * f, 2 * f)]  # (op, read, written) elems
    bias_fwd = [("b * p", 0, h), ("t + bp", 2 * h, h), ("cat", h, h)]
    fwd = sum(r + w for _, r, w in clamp_fwd + bias_fwd) * BF16_BYTES
    # backward: gate where(self <= max): compare (read 2, write 1) + where (read 1 + 2, write 2) = 8 B per element;
    # linear where((self >= min) & (self <= max)): 2 compares (3 each) + and_ (3) + where (5) = 14; chunk grad cat 8F
    bwd = f * (8 + 14) + 4 * f * BF16_BYTES + 2 * (3 * h) * BF16_BYTES
    assert expert_glue_bytes(OSS_MOE, h) == pytest.approx((fwd, bwd))
    # fp32 probabilities (DeepEP / HybridEP): b * p, the add and the cat in fp32, then the cast back to bf16
    bias_fwd32 = [("b * p", 0, 2 * h), ("t + bp", h + 2 * h, 2 * h), ("cat", 2 * h, 2 * h), ("to bf16", 2 * h, h)]
    fwd32 = sum(r + w for _, r, w in clamp_fwd) * BF16_BYTES + sum(r + w for _, r, w in bias_fwd32) * BF16_BYTES
    bwd32 = f * (8 + 14) + 4 * f * BF16_BYTES + (2 * 3 * 4 * h + 2 * (4 + 2) * h)
    assert expert_glue_bytes(OSS_MOE, h, probs_bytes=4) == pytest.approx((fwd32, bwd32))
    assert expert_probs_bytes("hybridep") == expert_probs_bytes("deepep") == 4 and expert_probs_bytes("alltoall") == 2
    assert expert_glue_clamp_fwd_bytes(OSS_MOE) == pytest.approx(16 * f)
    # half the FFN per ETP rank for the clamp; nothing without a clamp or biases
    assert expert_glue_bytes(OSS_MOE, h, etp=2)[0] == pytest.approx(fwd - 8 * f)
    assert expert_glue_bytes(dataclasses.replace(OSS_MOE, act_clamp=None, expert_bias=False), h) == (0.0, 0.0)
    assert expert_glue_bytes(load_model("qwen3-30b-a3b").layers[0].mlp, 2048) == (0.0, 0.0)


def test_unfused_experts_pay_the_glue_op_fuser_does_not() -> None:
    gpu = load_gpu("b300")
    rows = 4 * 4096 * OSS_MOE.top_k  # per layer and micro-batch on one GPU (balanced routing)
    micro = 1280 // (4 * 64)
    glue = sum(expert_glue_bytes(OSS_MOE, OSS.hidden, probs_bytes=4)) * rows * len(OSS.layers) * micro  # HybridEP
    hbm = gpu.hbm_bw_bytes_per_s * 0.7
    ew = api.estimate_run(OSS, **B300_ROW).time.breakdown_s["elementwise"]
    ew_plain = api.estimate_run(_plain(OSS), **B300_ROW).time.breakdown_s["elementwise"]
    assert ew - ew_plain == pytest.approx(glue / hbm, rel=0.02)
    # the full-iteration bundle exports use_transformer_engine_op_fuser: TE's grouped MLP ops, no eager glue
    fused = B300_ROW | dict(rank_capacity_factor=1.5, cuda_graphs="full_iteration", ep_overlap=True)
    assert (api.estimate_run(OSS, **fused).time.breakdown_s["elementwise"]
            == pytest.approx(api.estimate_run(_plain(OSS), **fused).time.breakdown_s["elementwise"]))


def test_moe_act_recompute_reruns_the_clamp() -> None:
    row = B300_ROW | dict(recompute="selective:moe_act")
    d = (api.estimate_run(OSS, **row).time.breakdown_s["recompute"]
         - api.estimate_run(_plain(OSS), **row).time.breakdown_s["recompute"])
    rows = 4 * 4096 * OSS_MOE.top_k * len(OSS.layers) * 5
    assert d == pytest.approx(16 * OSS_MOE.expert_ffn_hidden * rows / (load_gpu("b300").hbm_bw_bytes_per_s * 0.7), rel=0.02)


def test_sinks_rule_out_flash_attention() -> None:
    assert softmax_type(FULL) == "learnable" and softmax_type(load_model("qwen3-30b-a3b").layers[0].mixer) == "vanilla"
    b200, b300, h100 = load_gpu("b200"), load_gpu("b300"), load_gpu("h100")
    # gpt-oss's head dim 64 stays on cuDNN (sinks and window inside the kernel) on every GPU
    assert {attention_kernel(m, g) for m in (FULL, SLIDING) for g in (b200, b300, h100)} == {"flash"}
    wide = dataclasses.replace(FULL, head_dim=256, v_head_dim=256)
    no_sink = dataclasses.replace(wide, sink_logits=0)
    assert attention_kernel(no_sink, b200) == "flash2" and attention_kernel(wide, b200) == "unfused"
    assert attention_kernel(no_sink, b200, "2.19") == "flash"  # PR #3056's kernel: vanilla softmax only
    assert attention_kernel(wide, b200, "2.19") == "unfused"
    assert attention_kernel(wide, h100) == "flash"


def test_sinks_need_a2a_under_cp() -> None:
    assert sink_cp_comm_ok(FULL, 1, "p2p") and sink_cp_comm_ok(FULL, 4, "a2a")
    assert not sink_cp_comm_ok(FULL, 4, "p2p") and not sink_cp_comm_ok(FULL, 2, "a2a+p2p")
    assert not cp_comm_allowed(FULL, 1, 4, "p2p", 8) and cp_comm_allowed(FULL, 1, 4, "a2a", 8)
    kw = dict(gpu="b200", gpus=64, seq_len=32768, gbs=64, tp=1, pp=1, cp=4, ep=8, mbs=1)
    with pytest.raises(MoeplanError, match="a2a"):
        api.estimate_run(OSS, cp_comm_type="p2p", **kw)
    assert api.estimate_run(OSS, cp_comm_type="a2a", **kw).time.tflops_per_gpu > 0
    assert api.estimate_run(OSS, cp_comm_type="auto", **kw).config.cp_comm_type == "a2a"


def test_unfused_sinks_and_window_cost_the_full_square() -> None:
    b300 = load_gpu("b300")
    wide = dataclasses.replace(SLIDING, head_dim=256, v_head_dim=256)  # unfused on sm103 (sinks: no FA2)
    assert attention_kernel(wide, b300) == "unfused"
    assert attention_kernel_mixer(wide, b300).sliding_window is None  # TE: window -> arbitrary s x s mask
    assert attention_kernel_mixer(SLIDING, b300) is SLIDING  # cuDNN bounds its key loop by the window
    # the sink column: s + 1 keys, so not TE's fused softmax kernel (sk % 8), and its cat / slice bytes
    assert unfused_softmax_keys(wide, 4096) == 4097 and unfused_softmax_keys(dataclasses.replace(wide, sink_logits=0), 4096) == 4096
    assert unfused_softmax_is_fused(64, 4096, 4096) and not unfused_softmax_is_fused(64, 4096, 4097)
    assert not unfused_attention_bytes(wide, 1, 4096, 1).fused_softmax
    assert unfused_attention_bytes(dataclasses.replace(wide, sink_logits=0), 1, 4096, 1).fused_softmax
    no_sink = dataclasses.replace(wide, sink_logits=0)
    e_sink, e_none = attention_efficiency(wide, gpu=b300), attention_efficiency(no_sink, gpu=b300)
    assert e_sink[0] < e_none[0] and e_sink[1] < e_none[1]
    assert UNFUSED_SINK_SCORE_BYTES == {"fwd": 4, "bwd": 6}


def test_unfused_clamp_keeps_a_second_fc1_output() -> None:
    """clamp's autograd keeps the fc1 output beside the fused activation's clamped copy: +2F bf16 per routed row
    and layer for the micro-batch in flight (PP 1), unless moe_act is recomputed or the op fuser runs."""
    from moeplan.engine.activations import clamp_saved_row_bytes

    assert clamp_saved_row_bytes(OSS_MOE) == 2 * 2880 * BF16_BYTES
    assert clamp_saved_row_bytes(dataclasses.replace(OSS_MOE, act_clamp=None)) == 0.0

    def kept(spec: ModelSpec, **over: object) -> float:
        return api.estimate(spec, **(B300_ROW | over))["memory_gib"]["activations"] * 2**30

    no_clamp = dataclasses.replace(OSS, layers=tuple(
        Layer(l.mixer, dataclasses.replace(l.mlp, act_clamp=None)) for l in OSS.layers))
    rows = 4 * 4096 * OSS_MOE.top_k
    assert kept(OSS) - kept(no_clamp) == pytest.approx(clamp_saved_row_bytes(OSS_MOE) * rows * len(OSS.layers), rel=1e-6)
    for over in (dict(recompute="selective:moe_act"),
                 dict(rank_capacity_factor=1.5, cuda_graphs="full_iteration", ep_overlap=True)):
        assert kept(OSS, **over) == pytest.approx(kept(no_clamp, **over), rel=1e-9)


def test_yarn_concentration_factor_from_the_config() -> None:
    """transformers' _compute_yarn_parameters / Megatron-Core's _yarn_get_concentration_factor."""
    import math

    assert FULL.rope_mscale == pytest.approx(0.1 * math.log(32) + 1)  # gpt-oss: factor 32, no mscale keys
    assert load_model("qwen3-30b-a3b").layers[0].mixer.rope_mscale == 1.0  # no rope_scaling
    yarn = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    both = spec_from_dict(_oss_config(rope_scaling=yarn | {"mscale": 1.0, "mscale_all_dim": 1.0}), "x", "t")
    assert both.layers[0].mixer.rope_mscale == pytest.approx(1.0)  # DeepSeek / Kimi style: the ratio
    given = spec_from_dict(_oss_config(rope_scaling=yarn | {"attention_factor": 1.1}), "x", "t")
    assert given.layers[0].mixer.rope_mscale == pytest.approx(1.1)
    assert spec_from_dict(_oss_config(rope_scaling=None), "x", "t").layers[0].mixer.rope_mscale == 1.0


def test_eager_rope_under_yarn_mscale() -> None:
    """rope_utils.py falls back to _apply_rotary_pos_emb_bshd when mscale != 1: its ops counted one by one."""
    from moeplan.engine.timing.attention import rope_glue_bytes

    e = (64 + 8) * 64  # q and k elements per token
    fwd_ops = {"neg": (e / 2, e / 2), "rotate cat": (e, e), "x cos": (e, e), "x sin": (e, e), "add": (2 * e, e),
               "final cat": (e, e)}
    bwd_ops = {"x sin": (e, e), "neg": (e / 2, e / 2), "chunk cat": (e, e), "x cos": (e, e), "grad sum": (2 * e, e)}
    fused = (e, e)  # TE's fused RoPE, read and write, in the generic term
    fwd = (sum(r + w for r, w in fwd_ops.values()) - sum(fused)) * BF16_BYTES
    bwd = (sum(r + w for r, w in bwd_ops.values()) - sum(fused)) * BF16_BYTES
    assert rope_glue_bytes(FULL) == pytest.approx((fwd, bwd))
    assert rope_glue_bytes(dataclasses.replace(FULL, rope_mscale=1.0)) == (0.0, 0.0)
    assert rope_glue_bytes(load_model("deepseek-v3").layers[-1].mixer) == (0.0, 0.0)  # MLA: its own RoPE path
    # the B300 row: the element-wise term grows by exactly that traffic
    no_mscale = dataclasses.replace(OSS, layers=tuple(
        Layer(dataclasses.replace(l.mixer, rope_mscale=1.0), l.mlp) for l in OSS.layers))
    d = (api.estimate_run(OSS, **B300_ROW).time.breakdown_s["elementwise"]
         - api.estimate_run(no_mscale, **B300_ROW).time.breakdown_s["elementwise"])
    tokens = 4 * 4096 * len(OSS.layers) * 5
    assert d == pytest.approx((fwd + bwd) * tokens / (load_gpu("b300").hbm_bw_bytes_per_s * 0.7), rel=0.01)


def test_wide_heads_with_sinks_have_no_cp_backend() -> None:
    wide = dataclasses.replace(OSS, layers=tuple(
        Layer(dataclasses.replace(l.mixer, head_dim=256, v_head_dim=256), l.mlp) for l in OSS.layers))
    kw = dict(gpu="b200", gpus=64, seq_len=32768, gbs=64, tp=1, pp=1, cp=4, ep=8, mbs=1, cp_comm_type="a2a")
    with pytest.raises(MoeplanError, match="sinks rule FlashAttention out"):
        api.estimate_run(wide, **kw)
    with pytest.raises(MoeplanError, match="sinks rule FlashAttention out"):
        api.estimate_run(wide, te_version="2.19", **kw)  # PR #3056's kernel is vanilla only
